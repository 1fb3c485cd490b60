"""Training activations of state-mixer layers (engine/mixer_activations.py).

Reference part: tiny transformers models of ten hybrid and state-space families run one forward +
loss on the CPU, where transformers takes its torch fallbacks (the `kernel="eager"` path), under
`torch.autograd.graph.saved_tensors_hooks`. The bytes of the unique storages saved inside each
decoder layer, and in the whole model, must be within 10 % of gpuplan's `layer_tensors` /
`saved_activation_bytes`. Saved tensors are held until the end so that no storage address is
reused within one measurement.

Unit part (no torch): the fused-kernel path (`kernel="flash"`) against the save lists of the
kernels' autograd Functions, restated here from their sources, and the invariants both paths obey.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

from gpuplan.engine.activations import (
    ActivationSpec,
    edge_bytes,
    layer_bytes,
    layer_tensors,
    saved_activation_bytes,
    stage_bytes,
)
from gpuplan.engine.architecture import architecture_from_config
from gpuplan.errors import GpuplanError

TOLERANCE = 0.10  # the bar, whole model
LAYER_BAR = 0.02  # today's worst layer (Falcon-H1's first layer: RoPE tables built in it)

_GQA = {"num_attention_heads": 4, "num_key_value_heads": 2}
FAMILIES: dict[str, dict[str, Any]] = {
    "mamba": dict(hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, time_step_rank=6),
    "mamba2": dict(
        hidden_size=48,
        num_heads=4,
        head_dim=24,
        state_size=8,
        n_groups=2,
        num_hidden_layers=2,
        expand=2,
        chunk_size=20,
    ),
    "jamba": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        attn_layer_period=2,
        attn_layer_offset=1,
        expert_layer_period=2,
        expert_layer_offset=0,
        num_experts=4,
        num_experts_per_tok=2,
        mamba_d_state=8,
        mamba_expand=2,
        mamba_dt_rank=6,
        use_mamba_kernels=False,
        **_GQA,
    ),
    "nemotron_h": dict(
        hidden_size=64,
        intermediate_size=128,
        head_dim=16,
        mamba_num_heads=4,
        mamba_head_dim=24,
        ssm_state_size=8,
        n_groups=2,
        chunk_size=20,
        hybrid_override_pattern="M-*",
        num_hidden_layers=3,
        mlp_hidden_act="relu2",
        **_GQA,
    ),
    "falcon_h1": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        mamba_d_ssm=96,
        mamba_n_heads=4,
        mamba_d_head=24,
        mamba_d_state=8,
        mamba_n_groups=2,
        mamba_chunk_size=20,
        mamba_rms_norm=True,
        **_GQA,
    ),
    "granitemoehybrid": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        layer_types=["mamba", "attention"],
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=96,
        mamba_n_heads=4,
        mamba_d_head=32,
        mamba_d_state=8,
        mamba_n_groups=2,
        mamba_chunk_size=20,
        mamba_expand=2,
        **_GQA,
    ),
    "bamba": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        attn_layer_indices=[1],
        mamba_n_heads=4,
        mamba_d_head=32,
        mamba_d_state=8,
        mamba_n_groups=2,
        mamba_chunk_size=20,
        mamba_expand=2,
        **_GQA,
    ),
    "lfm2": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        layer_types=["conv", "full_attention"],
        block_auto_adjust_ff_dim=False,
        conv_L_cache=3,
        **_GQA,
    ),
    "qwen3_next": dict(
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        num_hidden_layers=2,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        layer_types=["linear_attention", "full_attention"],
        linear_key_head_dim=8,
        linear_value_head_dim=12,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_conv_kernel_dim=4,
        **_GQA,
    ),
    "qwen3_5_text": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        head_dim=16,
        layer_types=["linear_attention", "full_attention"],
        linear_key_head_dim=8,
        linear_value_head_dim=12,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_conv_kernel_dim=4,
        **_GQA,
    ),
}
# gated DeltaNet works in chunks of 64 tokens: two of them, so the state is read and written
SEQ = {"qwen3_next": 80, "qwen3_5_text": 80}
BATCH, VOCAB = 2, 64


def _config(family: str) -> Any:
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(family, vocab_size=VOCAB, **FAMILIES[family])
    config._attn_implementation = "eager"
    return config


def _measure(model: Any, seq: int) -> tuple[int, dict[int, int]]:
    """Saved bytes (unique storages, parameters excluded): the whole model and per layer."""
    torch = pytest.importorskip("torch")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    current: list[int] = []
    for name, module in model.named_modules():
        match = re.search(r"(?:^|\.)layers\.(\d+)$", name)
        if match:
            index = int(match.group(1))
            module.register_forward_pre_hook(lambda m, a, i=index: current.append(i))
            module.register_forward_hook(lambda m, a, o: (current.pop(), None)[1])
    seen: dict[int, tuple[int, int]] = {}
    held: list[Any] = []

    def pack(t: Any) -> Any:
        held.append(t)  # keep every saved tensor alive: no address is reused while we count
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), (storage.nbytes(), current[-1] if current else -1))
        return t

    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(7))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    per_layer: dict[int, int] = {}
    for size, layer in seen.values():
        per_layer[layer] = per_layer.get(layer, 0) + size
    return sum(size for size, _ in seen.values()), per_layer


def _cases() -> list[Any]:
    return [
        pytest.param(f, dtype, id=f"{f}-{dtype}", marks=pytest.mark.reference)
        for f in FAMILIES
        for dtype in ("float32", "bfloat16")
    ]


@pytest.mark.parametrize(("family", "dtype"), _cases())
def test_eager_mixers_match_saved_tensors_hooks(family: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = _config(family)
    seq = SEQ.get(family, 48)
    torch_dtype = getattr(torch, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).to(torch_dtype).train()
        total, per_layer = _measure(model, seq)
    arch = architecture_from_config({"model_type": family, **config.to_dict()}, family)
    assert any(layer.has_state for layer in arch.layers), family
    spec = ActivationSpec(
        seq=seq, micro_batch=BATCH, act_bytes=torch_dtype.itemsize, kernel="eager"
    )
    for i, layer in enumerate(arch.layers):
        estimate = layer_bytes(arch, layer, spec)
        error = (estimate - per_layer[i]) / per_layer[i]
        assert abs(error) <= LAYER_BAR, (family, dtype, i, layer.mixer, per_layer[i], estimate)
    estimate = saved_activation_bytes(arch, spec)
    error = (estimate - total) / total
    assert abs(error) <= TOLERANCE, (family, dtype, total, estimate, f"{error:+.1%}")


# --------------------------------------------------------------------------------------
# The fused kernels' save lists (no torch needed)
# --------------------------------------------------------------------------------------


def _arch(family: str) -> Any:
    """The tiny config read as config.json would be (the family table's defaults fill the rest)."""
    return architecture_from_config(
        {"model_type": family, "vocab_size": VOCAB, **FAMILIES[family]}, family
    )


def _mixer_bytes(arch: Any, layer: Any, spec: ActivationSpec) -> int:
    return sum(s.bytes for s in layer_tensors(arch, layer, spec) if "mixer." in s.name)


def _spec(seq: int = 4096, batch: int = 2, kernel: str = "flash", tp: int = 1) -> ActivationSpec:
    return ActivationSpec(seq=seq, micro_batch=batch, act_bytes=2, kernel=kernel, tp=tp)


def test_mamba2_fused_keeps_zxbcdt_out_x_and_rstd() -> None:
    """MambaSplitConv1dScanCombinedFn saves zxbcdt, out_x and rstd (mamba_ssm ssd_combined.py)."""
    arch = _arch("mamba2")
    m, spec = arch.mamba, _spec()
    t = spec.tokens
    zxbcdt = 2 * m.d_inner + 2 * m.n_groups * m.d_state + m.n_heads
    expected = 2 * t * zxbcdt + 2 * t * m.d_inner + 4 * t * m.n_groups
    assert _mixer_bytes(arch, arch.layers[0], spec) == expected


def test_mamba1_fused_keeps_one_state_per_2048_tokens() -> None:
    """MambaInnerFn (checkpoint_lvl=1) saves xz, x_dbl, B, C, out and the scan's fp32 chunk
    states: batch × d_inner × ⌈S/2048⌉ × 2·d_state (selective_scan.cpp)."""
    arch = _arch("mamba")
    m = arch.mamba
    for seq in (2048, 2049, 8192):
        spec = _spec(seq=seq)
        t = spec.tokens
        chunks = -(-seq // 2048)
        expected = 2 * t * (2 * m.d_inner + m.dt_rank + 2 * m.d_state + 2 * m.d_state + m.d_inner)
        expected += 4 * 2 * m.d_inner * chunks * 2 * m.d_state
        assert _mixer_bytes(arch, arch.layers[0], spec) == expected, seq


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fused_kernels_keep_less_than_the_torch_fallback(family: str) -> None:
    arch = _arch(family)
    for layer in {layer for layer in arch.layers if layer.has_state}:
        fused = layer_bytes(arch, layer, _spec(seq=1024))
        eager = layer_bytes(arch, layer, _spec(seq=1024, kernel="eager"))
        assert 0 < fused < eager, (family, layer.mixer)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_state_layers_scale_with_batch_and_split_over_tp(family: str) -> None:
    arch = _arch(family)
    layer = next(layer for layer in arch.layers if layer.has_state)
    one = _mixer_bytes(arch, layer, _spec(batch=1))
    assert _mixer_bytes(arch, layer, _spec(batch=3)) == pytest.approx(
        3 * one, rel=1e-4
    )  # a few per-layer constants
    halved = _mixer_bytes(arch, layer, _spec(tp=2))
    assert halved < _mixer_bytes(arch, layer, _spec()), family


def test_hybrid_model_sums_its_layer_kinds() -> None:
    arch = _arch("nemotron_h")
    spec = _spec(seq=2048)
    whole = stage_bytes(arch, spec, range(arch.num_layers), False, False)
    assert whole - edge_bytes(arch, spec, False, False) == sum(
        layer_bytes(arch, layer, spec) for layer in arch.layers
    )
    kinds = {layer.mixer for layer in arch.layers}
    assert kinds == {"mamba", "none", "attention"}


def test_context_parallel_state_layers_are_refused() -> None:
    arch = _arch("mamba2")
    spec = ActivationSpec(seq=4096, micro_batch=1, cp=2)
    with pytest.raises(GpuplanError, match="context parallelism over mamba layers"):
        layer_bytes(arch, arch.layers[0], spec)


def test_lightning_attention_training_is_refused_naming_it() -> None:
    from family_configs import BUILT

    arch = architecture_from_config(BUILT["minimax-text-01"], "minimax-text-01")
    with pytest.raises(GpuplanError, match="lightning"):
        saved_activation_bytes(arch, _spec())


def test_op_level_recompute_of_state_layers_is_refused() -> None:
    arch = _arch("mamba2")
    spec = ActivationSpec(seq=4096, micro_batch=1, recompute="op")
    with pytest.raises(GpuplanError, match="op-level selective recompute of mamba"):
        layer_bytes(arch, arch.layers[0], spec)


@pytest.mark.reference
def test_kimi_delta_attention_activations_say_they_are_estimated() -> None:
    transformers = pytest.importorskip("transformers")
    import gpuplan

    config = transformers.AutoConfig.for_model("kimi_linear").to_dict()
    notes = gpuplan.train(config, "h100", gpus=64, zero=3).bill.notes
    assert any("Kimi Delta Attention's activations are estimated" in n for n in notes)
    from family_configs import BUILT

    plain = gpuplan.train(BUILT["qwen3-next-80b-a3b"], "h100", gpus=64, zero=3).bill.notes
    assert any("gated_delta" in n for n in plain) and not any("Kimi" in n for n in plain)
