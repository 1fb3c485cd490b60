"""Recurrent-state caches of non-attention layers: fixed bytes per sequence, whatever the context.

A Mamba, gated-DeltaNet, lightning-attention or short-convolution layer does not cache a K and V per
token; it keeps, per sequence, the last few inputs of its causal convolution (the *conv state*) and,
for the state-space and linear-attention mixers, a recurrent state (the *SSM state*):

    Mamba-1     conv  d_inner × (d_conv − 1)        ssm  d_inner × d_state         (Gu & Dao 2023)
    Mamba-2     conv  (d_inner + 2·groups·d_state) × (d_conv − 1)
                                                    ssm  heads × head_dim × d_state (Dao & Gu 2024)
    gated Δ     conv  (2·n_k·d_k + n_v·d_v) × (kernel − 1)
                                                    ssm  n_v × d_k × d_v           (Yang et al. 2024)
    lightning   —                                   ssm  heads × d × d             (Qin et al. 2024)
    short conv  conv  hidden × (L_cache − 1)        —                              (LFM2)
    RWKV-4      shift 2 × hidden                    wkv  3 × attention_hidden      (Peng et al. 2023)
    RG-LRU      conv  lru_width × (conv_width − 1)  ssm  lru_width                 (De et al. 2024)
    mLSTM       —                                   ssm  heads × (d_qk·d_v + d_qk + 1)  (Beck 2024)

RWKV-4 keeps, per layer, the last input of its time mixing and of its channel mixing (the token
shift, in the model's dtype) and its WKV numerator, denominator and running maximum in float32
whatever the model's dtype (transformers RwkvModel.forward allocates the five states so).

These are the shapes vLLM allocates per request (model_executor/layers/mamba/mamba_utils.py,
MambaStateShapeCalculator: mamba1_state_shape, mamba2_state_shape, gated_delta_net_state_shape,
linear_attention_state_shape, short_conv_state_shape) — layout "engine". transformers keeps the
conv state with all d_conv taps (cache_utils.LinearAttentionLayer pads the prefill to the kernel
size) — layout "transformers", what tests/test_families.py measures on real forward passes.

Tensor parallelism splits every state by channels or heads (÷ tp); Mamba-2's B/C groups are
replicated up to tp when tp does not divide them (vLLM extra_groups_for_head_shards). A hybrid
model sums its state layers; attention layers in it keep an ordinary KV cache (engine/kv_cache.py).
Engines that page hybrid models (vLLM) give a state layer one page per sequence; the functions
below give the bytes per sequence per TP rank of each layer kind for that layout.
"""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.frozen import record
from gpuplan.engine.precision import Precision
from gpuplan.engine.weights import stage_layers

STATE_LAYOUTS = ("engine", "transformers")
FP32 = Precision(id="fp32", bits=32)


@record
class StateShape:
    """The state one layer keeps for one sequence on one TP rank: conv and recurrent tensors."""

    kind: str  # mamba1 | mamba2 | gated_delta | lightning | short_conv | rwkv | rglru | mlstm
    conv: tuple[int, ...]  # (channels, taps), () if none
    ssm: tuple[int, ...]  # recurrent state, () if none

    @property
    def conv_elements(self) -> int:
        return _prod(self.conv)

    @property
    def ssm_elements(self) -> int:
        return _prod(self.ssm)

    def bytes(self, conv: Precision, ssm: Precision | None = None) -> int:
        """Bytes of this state with the conv state in `conv` and the SSM state in `ssm`."""
        return conv.bytes_for(self.conv_elements) + (ssm or conv).bytes_for(self.ssm_elements)


def _prod(shape: tuple[int, ...]) -> int:
    n = 1 if shape else 0
    for d in shape:
        n *= d
    return n


def _split(n: int, tp: int) -> int:
    """n ÷ tp rounded up: engines require divisibility; an uneven split costs the larger share."""
    return -(-n // tp)


def layer_state_shape(
    arch: Architecture, layer: LayerSpec, tp: int = 1, layout: str = "engine"
) -> StateShape | None:
    """The per-sequence state of `layer` on one of `tp` ranks, or None for a layer without one."""
    if not layer.has_state:
        return None
    taps = 0 if layout == "engine" else 1  # vLLM keeps kernel − 1 inputs, transformers kernel
    if layer.mixer in ("mamba", "hybrid"):
        m = arch.mamba
        assert m is not None
        if m.version == 1:
            channels = _split(m.d_inner, tp)
            return StateShape("mamba1", (channels, m.d_conv - 1 + taps), (channels, m.d_state))
        groups = m.n_groups if m.n_groups % tp == 0 or layout != "engine" else tp
        conv_dim = m.d_inner + 2 * groups * m.d_state
        return StateShape(
            "mamba2",
            (_split(conv_dim, tp), m.d_conv - 1 + taps),
            (_split(m.n_heads, tp), m.head_dim, m.d_state),
        )
    if layer.mixer == "gated_delta":
        la = arch.linear_attention
        assert la is not None
        return StateShape(
            "gated_delta",
            (_split(la.conv_dim, tp), la.conv_kernel - 1 + taps),
            (_split(la.num_v_heads, tp), la.k_head_dim, la.v_head_dim),
        )
    if layer.mixer == "lightning":
        la = arch.linear_attention
        assert la is not None
        return StateShape(
            "lightning", (), (_split(la.num_v_heads, tp), la.k_head_dim, la.v_head_dim)
        )
    if layer.mixer == "rglru":  # the convolution's last taps (model dtype), the RG-LRU's h_t
        r = arch.rglru
        assert r is not None
        return StateShape("rglru", (_split(r.width, tp), r.conv_width - 1), (_split(r.width, tp),))
    if layer.mixer == "mlstm":  # xLSTMCache: C (d_qk x d_v), n (d_qk) and m (1) per head
        la = arch.linear_attention
        assert la is not None
        per_head = la.k_head_dim * la.v_head_dim + la.k_head_dim + 1
        return StateShape("mlstm", (), (_split(la.num_v_heads, tp), per_head))
    if layer.mixer == "rwkv":  # token-shift inputs of both mixings; WKV's num, den and max
        h, a = _split(arch.hidden_size, tp), _split(arch.attention.num_heads, tp)
        return StateShape("rwkv", (2, h), (3, a))
    sc = arch.short_conv
    assert sc is not None
    return StateShape("short_conv", (_split(arch.hidden_size, tp), sc.kernel - 1 + taps), ())


# families whose recurrent state is float32 whatever the model dtype: RWKV-4 (RwkvModel.forward
# allocates the WKV states so), RecurrentGemma (RecurrentGemmaRglru keeps h_t in float32)
_FP32_STATES = ("rwkv", "recurrent_gemma")


def ssm_precision(arch: Architecture, state: Precision) -> Precision:
    """The SSM state's format: the checkpoint's `mamba_ssm_cache_dtype` when it sets float32
    (Nemotron-H; vLLM honours it), else the conv state's; float32 for the families of _FP32_STATES."""
    if arch.ssm_state_dtype in ("float32", "fp32", "torch.float32") or arch.family in _FP32_STATES:
        return FP32
    return state


def state_bytes_per_layer(
    arch: Architecture,
    layer: LayerSpec,
    state: Precision,
    tp: int = 1,
    layout: str = "engine",
    ssm: Precision | None = None,
) -> int:
    """Bytes of one layer's state for one sequence on one TP rank (0 for attention layers)."""
    shape = layer_state_shape(arch, layer, tp, layout)
    if shape is None:
        return 0
    return shape.bytes(state, ssm or ssm_precision(arch, state))


def state_bytes_per_sequence(
    arch: Architecture, state: Precision, layout: str = "engine", ssm: Precision | None = None
) -> int:
    """Bytes of all state layers for one sequence (whole model, one GPU): constant in context."""
    return sum(
        n * state_bytes_per_layer(arch, spec, state, 1, layout, ssm)
        for spec, n in arch.layer_groups()
    )


def state_bytes_per_sequence_per_gpu(
    arch: Architecture,
    state: Precision,
    tp: int = 1,
    pp: int = 1,
    stage: int = 0,
    ssm: Precision | None = None,
) -> int:
    """State bytes one GPU holds for one sequence: its stage's state layers, ÷ tp."""
    layers = stage_layers(arch.num_layers, pp)[stage]
    return sum(
        n * state_bytes_per_layer(arch, spec, state, tp, "engine", ssm)
        for spec, n in arch.layer_groups(layers)
    )


@record
class StateKind:
    """One kind of state layer in a model: how many layers, and its shape on one TP rank."""

    kind: str
    layers: int
    shape: StateShape
    bytes_per_sequence: int  # one layer, one sequence, one rank


def state_kinds(
    arch: Architecture, state: Precision, tp: int = 1, ssm: Precision | None = None
) -> tuple[StateKind, ...]:
    """The model's state layers grouped by kind, with per-rank shapes and bytes (engine layout):
    what an engine needs to size one state page per sequence per layer (vLLM hybrid layout)."""
    out: dict[StateShape, int] = {}
    for spec, n in arch.layer_groups():
        shape = layer_state_shape(arch, spec, tp)
        if shape is not None:
            out[shape] = out.get(shape, 0) + n
    return tuple(
        StateKind(shape.kind, n, shape, shape.bytes(state, ssm or ssm_precision(arch, state)))
        for shape, n in out.items()
    )
