"""Reference test: the phases of gpuplan's training bill against PyTorch's own memory tracker.

A tiny Llama (transformers' LlamaForCausalLM, written here as a config: hidden 128, 3 layers,
vocabulary 1000) runs real training steps on the CPU under
`torch.distributed._tools.mem_tracker.MemTracker` — and, sharded with FSDP2 over a fake process
group of 4 ranks, under `fsdp2_mem_tracker.FSDPMemTracker`. Hooks cut the step into gpuplan's
phases: the forward (up to the final norm), the loss and its gradient, the backward of the last
and of the first decoder layer, the optimizer step. The tracker's peak within each phase must be
within 5 % of that phase's total in gpuplan's bill, for: plain AdamW (fp32 and bf16), full,
op-level selective (torchtitan's policy) and every-2nd-layer recompute, a chunked loss,
`zero_grad(set_to_none=False)` (kept gradients), and FSDP2 with and without
reshard-after-forward.

The training loop is a plain PyTorch one: torch.optim.AdamW(foreach=True) — the CUDA default —
and, for FSDP2, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), as gpuplan's `ddp`
and `fsdp2` framework profiles describe, less the cuBLAS workspace a CPU run does not have. The
one assumption: on the CPU, SDPA dispatches to `_scaled_dot_product_flash_attention_for_cpu`,
which stands in the op-level policy's save list for the CUDA flash kernel.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import gpuplan  # noqa: E402

pytestmark = pytest.mark.reference

TOLERANCE = 0.05
CPU = {"workspace_bytes": 0}  # no cuBLAS workspace on the CPU
PHASES = ("forward", "loss", "backward_last", "backward_first", "optimizer")
VOCAB, BATCH, SEQ, WORLD = 1000, 2, 128, 4
CONFIG = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 1024,
}


class Phases:
    """Peaks of a MemTracker between phase boundaries."""

    def __init__(self, tracker):
        self.tracker = tracker
        self.peaks: dict[str, int] = {}
        self.name: str | None = None

    def switch(self, name: str | None) -> None:
        t = self.tracker
        if self.name is not None:
            peak = sum(t._peak_mem.values())
            self.peaks[self.name] = max(self.peaks.get(self.name, 0), peak)
        current = t.get_tracker_snapshot("current")
        t._peak_mem = {d: snap["Total"] for d, snap in current.items()}
        t._peak_mem_snap = {d: dict(snap) for d, snap in current.items()}
        self.name = name


def _labels(ids):
    return torch.nn.functional.pad(ids, (0, 1), value=-100)[..., 1:].contiguous()


def standard_loss(model, ids):
    """transformers' ForCausalLMLoss: cross entropy over the fp32-upcast logits."""
    logits = model(input_ids=ids, use_cache=False).logits
    flat = logits.float().view(-1, logits.shape[-1])
    return torch.nn.functional.cross_entropy(flat, _labels(ids).view(-1))


def chunked_loss(chunks):
    """torchtune's CEWithChunkedOutputLoss: the LM head per chunk, each chunk upcast alone."""

    def loss(model, ids):
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        weight = model.lm_head.weight
        logits = [torch.nn.functional.linear(c, weight) for c in hidden.chunk(chunks, dim=1)]
        del hidden
        total = 0.0
        for part, labels in zip(logits, _labels(ids).chunk(chunks, dim=1), strict=True):
            flat = part.float().reshape(-1, part.shape[-1])
            total = total + torch.nn.functional.cross_entropy(
                flat, labels.reshape(-1), reduction="sum"
            )
        return total / ids.numel()

    return loss


def _step(model, opt, ids, loss_fn, set_to_none, phases=None):
    switch = phases.switch if phases else (lambda name: None)
    loss = loss_fn(model, ids)
    loss.backward()
    switch("backward_tail")
    del loss
    switch("optimizer")
    opt.step()
    opt.zero_grad(set_to_none=set_to_none)
    switch(None)


def _phase_hooks(model, phases):
    """Hooks that switch phases: after the final norm (the loss), and when the gradient reaches
    the output of the last and of the first decoder layer (their backward begins)."""
    layers = model.model.layers
    n = len(layers)
    hooks = [model.model.norm.register_forward_hook(lambda *a: phases.switch("loss"))]

    def at_layer(i):
        name = {n - 1: "backward_last", 0: "backward_first"}.get(i, "backward_mid")

        def hook(module, args, out):
            t = out[0] if isinstance(out, tuple) else out
            t.register_hook(lambda g: phases.switch(name))

        return hook

    return hooks + [layer.register_forward_hook(at_layer(i)) for i, layer in enumerate(layers)]


def measure(model, tracker, opt, ids, loss_fn, set_to_none=True):
    """One warm-up step (the optimizer states exist), then the phase peaks of a tracked step."""
    _step(model, opt, ids, loss_fn, set_to_none)
    phases = Phases(tracker)
    hooks = _phase_hooks(model, phases)
    tracker.track_external(model, opt)
    with tracker:
        tracker.reset_mod_stats()
        phases.switch("forward")
        _step(model, opt, ids, loss_fn, set_to_none, phases)
    for h in hooks:
        h.remove()
    return phases.peaks


def _model(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LlamaForCausalLM(cfg).to(dtype)
    model.train()
    return model


def op_sac_policy():
    """torchtitan's per-op policy (distributed/activation_checkpoint.py): save matmuls except
    every second one, and attention; recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy

    save = {
        torch.ops.aten.mm.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
    }
    count: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            count[mode] += 1
        if func in save and not (func == torch.ops.aten.mm.default and count[mode] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _wrap(model, recompute):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    layers = model.model.layers
    for i in range(len(layers)):
        if recompute == "full" or (recompute == "every:2" and (i + 1) % 2 == 0):
            layers[i] = checkpoint_wrapper(layers[i], preserve_rng_state=False)
        elif recompute == "op":
            layers[i] = checkpoint_wrapper(
                layers[i],
                context_fn=lambda: create_selective_checkpoint_contexts(op_sac_policy()),
                preserve_rng_state=False,
            )


CASES = {
    # name: (dtype, recipe, recompute, loss, set_to_none)
    "adamw-fp32": ("float32", "adamw-fp32", "none", "standard", True),
    "adamw-bf16": ("bfloat16", "adamw-pure-bf16", "none", "standard", True),
    "full-recompute": ("bfloat16", "adamw-pure-bf16", "full", "standard", True),
    "op-selective": ("bfloat16", "adamw-pure-bf16", "op", "standard", True),
    "every-2nd-layer": ("bfloat16", "adamw-pure-bf16", "every:2", "standard", True),
    "chunked-loss": ("bfloat16", "adamw-pure-bf16", "none", "chunked:4", True),
    "kept-gradients": ("bfloat16", "adamw-pure-bf16", "none", "standard", False),
}


def _check(name, measured, plan):
    got = {p.name: p.total for p in plan.bill.phases}
    for phase in PHASES:
        error = (got[phase] - measured[phase]) / measured[phase]
        assert abs(error) <= TOLERANCE, (name, phase, measured[phase], got[phase], error)
    peak = max(PHASES, key=lambda p: measured[p])
    assert plan.bill.peak_phase == peak or abs(got[peak] - got[plan.bill.peak_phase]) <= (
        TOLERANCE * measured[peak]
    )


@pytest.mark.parametrize("name", list(CASES))
def test_phase_peaks_match_memtracker(name):
    from torch.distributed._tools.mem_tracker import MemTracker

    dtype, recipe, recompute, loss, set_to_none = CASES[name]
    model = _model(getattr(torch, dtype))
    _wrap(model, recompute)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    tracker = MemTracker()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    loss_fn = chunked_loss(int(loss.split(":")[1])) if loss.startswith("chunked") else standard_loss
    measured = measure(model, tracker, opt, ids, loss_fn, set_to_none)
    plan = gpuplan.train(
        CONFIG,
        gpus=1,
        framework="ddp",
        recipe=recipe,
        seq=SEQ,
        micro_batch=BATCH,
        checkpointing=recompute,
        loss=loss,
        grads="set_to_none" if set_to_none else "persistent",
        cuda_context=0,
        framework_overrides=CPU,
    )
    _check(name, measured, plan)


@pytest.fixture(scope="module")
def fake_world():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    yield WORLD
    dist.destroy_process_group()


@pytest.mark.parametrize("reshard", [True, False], ids=["reshard", "no-reshard"])
def test_fsdp2_phase_peaks_match_fsdp_memtracker(fake_world, reshard):
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = _model(torch.float32)
    mesh = init_device_mesh("cpu", (fake_world,))
    kw = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
        "reshard_after_forward": reshard,
    }
    for layer in model.model.layers:
        fully_shard(layer, **kw)
    fully_shard(model.model.embed_tokens, **kw)
    fully_shard([model.model.norm, model.lm_head], **kw)
    fully_shard(model, **kw)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    tracker = FSDPMemTracker(model, opt)
    tracker.track_inputs((ids,))
    measured = measure(model, tracker, opt, ids, standard_loss)
    plan = gpuplan.train(
        CONFIG,
        gpus=fake_world,
        framework="fsdp2",
        recipe="adamw-bf16",
        seq=SEQ,
        micro_batch=BATCH,
        reshard_after_forward=reshard,
        cuda_context=0,
        framework_overrides=CPU,
    )
    assert plan.layout.zero == 3  # FSDP2 shards parameters, gradients and states
    _check(f"fsdp2 reshard={reshard}", measured, plan)
