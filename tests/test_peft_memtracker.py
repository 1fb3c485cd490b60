"""Reference test: a PEFT LoRA model's model states against PyTorch's MemTracker on the CPU.

A tiny Llama (the config of test_training_memtracker.py) is wrapped by PEFT's get_peft_model
with a LoraConfig (rank, target_modules, modules_to_save), its frozen base in fp32 or bf16, and
trained one step with torch.optim.AdamW over the trainable parameters. At the optimizer step the
tracker's bytes per category — parameters (the frozen base, the adapters and PEFT's trainable
copies of modules_to_save), gradients and optimizer states — must match the lines of gpuplan's
bill for the same setup within 1 %: weights, gradients, optimizer. PEFT casts adapters to fp32
over a bf16 base (get_peft_model autocast_adapter_dtype=True), so the adapters' recipe is fp32
AdamW in every case.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import gpuplan  # noqa: E402
from test_training_memtracker import BATCH, CONFIG, CPU, SEQ, VOCAB, _model  # noqa: E402

pytestmark = pytest.mark.reference

TOLERANCE = 0.01
CASES = {
    # name: (base dtype, rank, targets, modules_to_save)
    "fp32-base-qv": ("float32", 8, ["q_proj", "v_proj"], []),
    "bf16-base-all-linear": ("bfloat16", 16, "all-linear", []),
    "fp32-base-lm-head-saved": (
        "float32",
        8,
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        ["lm_head"],
    ),
}


def _measure(dtype, rank, targets, saved) -> dict[str, int]:
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    base = _model(getattr(torch, dtype))
    config = peft.LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=targets, modules_to_save=saved or None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(base, config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, foreach=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))

    def step():
        logits = model(input_ids=ids, use_cache=False).logits
        loss = logits.float().mean()
        loss.backward()
        del loss, logits
        opt.step()

    step()  # the optimizer states exist
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        current = tracker.get_tracker_snapshot("current")
    snap = next(iter(current.values()))
    return {
        "weights": snap[_MemRefType.PARAM],
        "gradients": snap[_MemRefType.GRAD],
        "optimizer": snap[_MemRefType.OPT],
    }


@pytest.mark.parametrize("name", list(CASES))
def test_lora_model_states_match_memtracker(name):
    dtype, rank, targets, saved = CASES[name]
    measured = _measure(dtype, rank, targets, saved)
    plan = gpuplan.train(
        CONFIG,
        gpus=1,
        framework="hf-trainer",
        recipe="adamw-fp32",  # PEFT keeps adapters fp32 (autocast_adapter_dtype=True)
        seq=SEQ,
        micro_batch=BATCH,
        lora_rank=rank,
        lora_targets=targets,
        lora_base="fp32" if dtype == "float32" else "bf16",
        lora_modules_to_save=saved,
        cuda_context=0,
        framework_overrides=CPU,
    )
    lines = {line.key: line.bytes for line in plan.bill.phase("optimizer").lines}
    for key, value in measured.items():
        error = (lines[key] - value) / value
        assert abs(error) <= TOLERANCE, (name, key, value, lines[key], error)
