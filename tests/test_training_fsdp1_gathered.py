"""Reference test: what PyTorch FSDP1 (FullyShardedDataParallel, the HF Trainer's FSDP through
accelerate) holds gathered at each phase, against the gathered-weights line of gpuplan's
hf-trainer bill (engine/gathered.py, profile field fsdp_keeps_root).

A tiny Llama (transformers' LlamaForCausalLM: hidden 128, 3 layers, vocabulary 8,000, untied
head) with every weight frozen in bf16 — a LoRA base — is wrapped as accelerate wraps it
(TRANSFORMER_BASED_WRAP on the decoder layers, FULL_SHARD, use_orig_params, BACKWARD_PRE) over a
fake process group of 2 ranks on the CPU, and runs one forward and backward. At the final norm
(the loss), and when the backward reaches the MLP of the last and of the first decoder layer,
the test sums the bytes of every FSDP unit's allocated unsharded flat parameter
(`_full_param_padded`): FSDP1's own storage, not a model of it. They must equal gpuplan's
`gathered_weights` in the loss, backward-of-the-last-layer and backward-of-the-first-layer
phases within 1 % (the flat parameters are padded to a multiple of the world size).
"""

from __future__ import annotations

import functools
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gpuplan  # noqa: E402

pytestmark = pytest.mark.reference

WORLD = 2
CONFIG = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 8000,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}


@pytest.fixture
def fake_world():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    yield
    dist.destroy_process_group()


def _wrapped():
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"}))
    model = model.to(torch.bfloat16)
    for p in model.parameters():
        p.requires_grad_(False)
    # PEFT's enable_input_require_grads: the embedding's output requires grad (a frozen base)
    model.model.embed_tokens.register_forward_hook(lambda m, a, out: out.requires_grad_(True))
    policy = functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = FSDP(
            model,
            auto_wrap_policy=policy,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            use_orig_params=True,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            device_id=torch.device("cpu"),
        )
    return model, wrapped


def _gathered_bytes(wrapped) -> int:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    total = 0
    for unit in FSDP.fsdp_modules(wrapped):
        full = (
            getattr(unit._handle.flat_param, "_full_param_padded", None) if unit._handle else None
        )
        total += full.untyped_storage().nbytes() if full is not None else 0
    return total


def measure() -> dict[str, int]:
    model, wrapped = _wrapped()
    seen: dict[str, int] = {}

    def record(name: str) -> None:  # hooks return None: a value would replace the output
        seen.setdefault(name, _gathered_bytes(wrapped))

    model.model.norm.register_forward_hook(lambda *a: record("loss"))
    layers = model.model.layers
    for i, name in ((len(layers) - 1, "backward_last"), (0, "backward_first")):

        def hook(module, args, out, name=name):
            out.register_hook(lambda g: record(name))

        layers[i].mlp.down_proj.register_forward_hook(hook)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 16))
    wrapped(input_ids=ids, labels=ids).loss.backward()
    return seen


def test_fsdp1_gathered_units_match_the_bill(fake_world):
    measured = measure()
    plan = gpuplan.train(
        CONFIG,
        framework="hf-trainer",
        gpus=WORLD,
        gpu="h100",
        fsdp=True,
        seq=16,
        micro_batch=1,
        method="lora",
        lora_rank=4,
        lora_base="bf16",
    )
    billed = {
        p.name: sum(line.bytes for line in p.lines if line.key == "gathered_weights")
        for p in plan.bill.phases
    }
    for phase in ("loss", "backward_last", "backward_first"):
        assert abs(billed[phase] - measured[phase]) <= 0.01 * measured[phase], (
            phase,
            measured[phase],
            billed[phase],
        )
    # the root unit (embedding, final norm, LM head) is what stays gathered at the loss
    root = 2 * (CONFIG["vocab_size"] * CONFIG["hidden_size"] * 2 + CONFIG["hidden_size"])
    assert abs(measured["loss"] - root) <= 0.01 * root
