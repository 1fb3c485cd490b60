"""Reference test: gpuplan's activation and optimizer-state bytes against real PyTorch training.

Activations: tiny Llama-, Qwen3-MoE-, GPT-2- and GPTBigCode-style (santacoder) models are built from configs written here
(hidden 128, 2 layers, vocab 1000) in float32 and bfloat16 on the CPU, with the SDPA kernel
(flash-style: no s² scores) and the eager one, with and without gradient checkpointing. One
forward + loss runs under `torch.autograd.graph.saved_tensors_hooks`; the bytes of the unique
storages it saves, parameters excluded, must be within 10 % of
`gpuplan.engine.activations.saved_activation_bytes` for the same configuration, at several
sequence lengths and batch sizes. (The per-tensor model is in fact within 0.2 % everywhere.)

Optimizer states: one `torch.optim.AdamW` step on a tiny model; its exp_avg and exp_avg_sq bytes
must equal the recipe's optimizer line exactly (fp32 AdamW and pure-bf16 AdamW).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    GPTBigCodeConfig,
    GPTBigCodeForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

import gpuplan  # noqa: E402
from gpuplan.engine.activations import ActivationSpec, saved_activation_bytes  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402

pytestmark = pytest.mark.reference

VOCAB = 1000
SHAPES = [(1, 32), (2, 64), (3, 100)]  # (batch, sequence)
TOLERANCE = 0.10


def _llama() -> tuple[object, type]:
    cfg = LlamaConfig(
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=4096,
    )
    return cfg, LlamaForCausalLM


def _qwen3_moe() -> tuple[object, type]:
    cfg = Qwen3MoeConfig(
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        vocab_size=VOCAB,
    )
    return cfg, Qwen3MoeForCausalLM


def _gpt2() -> tuple[object, type]:
    cfg = GPT2Config(
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_positions=1024,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return cfg, GPT2LMHeadModel


def _gpt_bigcode() -> tuple[object, type]:
    """santacoder's family: multi-query attention from one fused c_attn, learned positions."""
    cfg = GPTBigCodeConfig(
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_positions=1024,
        vocab_size=VOCAB,
        multi_query=True,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return cfg, GPTBigCodeForCausalLM


FAMILIES = {
    "llama": _llama,
    "qwen3_moe": _qwen3_moe,
    "gpt2": _gpt2,
    "gpt_bigcode": _gpt_bigcode,
}


def measure_saved_bytes(model: torch.nn.Module, batch: int, seq: int) -> int:
    """Bytes of the unique storages autograd saves in forward + loss, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params:
            seen.setdefault(ptr, storage.nbytes())
        return t

    gen = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=gen)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    return sum(seen.values())


RESULTS: list[tuple[str, float]] = []


@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-ckpt", "full-ckpt"])
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_saved_activations_match(family, dtype, kernel, checkpointing):
    torch.manual_seed(0)
    cfg, cls = FAMILIES[family]()
    cfg._attn_implementation = kernel
    torch_dtype = getattr(torch, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls(cfg).to(torch_dtype)
        model.train()
        if checkpointing:
            model.gradient_checkpointing_enable()
    arch = architecture_from_config(cfg.to_dict(), family)
    for batch, seq in SHAPES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured = measure_saved_bytes(model, batch, seq)
        spec = ActivationSpec(
            seq=seq,
            micro_batch=batch,
            act_bytes=torch_dtype.itemsize,
            kernel="flash" if kernel == "sdpa" else "eager",
            recompute="full" if checkpointing else "none",
        )
        estimate = saved_activation_bytes(arch, spec)
        error = (estimate - measured) / measured
        RESULTS.append((f"{family} {dtype} {kernel} ckpt={checkpointing} b={batch} s={seq}", error))
        assert abs(error) <= TOLERANCE, (family, dtype, kernel, batch, seq, measured, estimate)


def test_adamw_state_bytes_are_exact():
    torch.manual_seed(0)
    cfg, cls = _llama()
    config = cfg.to_dict()
    for dtype, recipe in ((torch.float32, "adamw-fp32"), (torch.bfloat16, "adamw-pure-bf16")):
        model = cls(cfg).to(dtype)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, VOCAB, (1, 16))
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        opt.step()
        moments = sum(
            t.numel() * t.element_size()
            for state in opt.state.values()
            for name, t in state.items()
            if name in ("exp_avg", "exp_avg_sq")
        )
        plan = gpuplan.train(config, "h100", gpus=1, recipe=recipe, seq=16)
        assert plan.item("optimizer").bytes == moments
        assert plan.item("master").bytes == 0
        n = sum(p.numel() for p in model.parameters())
        assert plan.params_total == n
        assert plan.item("gradients").bytes == sum(
            p.grad.numel() * p.grad.element_size() for p in model.parameters()
        )


def test_mixed_precision_master_is_fp32_copy():
    # bf16 weights with an fp32 master copy and fp32 moments: the master line is exactly the
    # fp32 copy torch keeps (torch.optim on fp32 params, as apex/DeepSpeed's master weights)
    torch.manual_seed(0)
    cfg, cls = _llama()
    master = cls(cfg)  # fp32 master parameters
    opt = torch.optim.AdamW(master.parameters(), lr=1e-3)
    for p in master.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    states = sum(
        t.numel() * t.element_size()
        for s in opt.state.values()
        for k, t in s.items()
        if k != "step"
    )
    plan = gpuplan.train(cfg.to_dict(), "h100", gpus=1, recipe="adamw-bf16", seq=16)
    assert plan.item("master").bytes == sum(p.numel() * 4 for p in master.parameters())
    assert plan.item("optimizer").bytes == states
