"""Training activations of the state mixers: what one Mamba-1, Mamba-2, gated-DeltaNet or
short-convolution layer saves for backward, per micro-batch on one GPU.

Two paths, chosen by the activation spec's `kernel`:

* "flash" / "sdpa" — the fused CUDA kernels real training runs, each an autograd Function whose
  `save_for_backward` list is the whole story inside it:
    Mamba-1   mamba_ssm MambaInnerFn (mamba_ssm/ops/selective_scan_interface.py, checkpoint_lvl=1:
              conv1d_out and delta are recomputed in backward): xz, x_dbl, B and C (contiguous
              copies), the scan's chunk states (fp32, b·d·⌈S/2048⌉·2N; csrc/selective_scan/
              selective_scan.cpp) and its output; out_proj runs inside the Function.
    Mamba-2   mamba_ssm MambaSplitConv1dScanCombinedFn (mamba_ssm/ops/triton/ssd_combined.py):
              zxbcdt (the in_proj output), out_x (the scan output) and the gated norm's rstd;
              conv, scan states, norm output and out_proj are recomputed or run inside.
    gated Δ   flash-linear-attention ChunkGatedDeltaRuleFunction (fla/ops/gated_delta_rule/
              chunk.py): q and k after its L2 norm with their rstd, v, the chunk-cumulated gate g
              (fp32), beta and the WY matrix A (b·S·H_v·64); causal-conv1d's CausalConv1dFn
              (causal_conv1d/causal_conv1d_interface.py) keeps its input x; fla's gated RMSNorm
              (fla/modules/fused_norm_gate.py LayerNormGatedFunction) keeps x, the gate and rstd.
    short conv  CausalConv1dFn keeps its input (B·x); the gating products around it are eager.
  The ops around a kernel stay eager PyTorch as the transformers modules run them (in_proj, the
  q/k/v reordering, the gate's softplus, the C·conv product, out_proj's input).

* "eager" — the transformers torch fallbacks (what runs on a CPU, and what tests/
  test_mixer_activations.py measures with saved_tensors_hooks): MambaMixer's selective scan is a
  Python loop over tokens that saves every step's fp32 state (S + 1 of them, b·d·N each) beside the
  discretised A and B (fp32, b·S·d·N each); Mamba2Mixer's `torch_forward` chunk scan pads the
  sequence to a multiple of `chunk_size` and keeps fp32 chunk-local score matrices (b·S·H·l each),
  B and C repeated to every head and per-chunk states; Qwen3-Next's `torch_chunk_gated_delta_rule`
  keeps fp32 copies of q, k, v, chunk-local (64 × 64) decay and score matrices and one state per
  chunk; LFM2's short convolution keeps its products. Every list below names its source function.

Shapes are per tensor-parallel rank (heads and channels ÷ tp as engine/state_cache.py splits
them); T = micro-batch × sequence tokens, a = bytes per activation element. Context parallelism
is not modelled for these layers (engine/activations.py refuses it).
"""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError

FUSED_SCAN_CHUNK = 2048  # mamba_ssm selective_scan_fwd: one saved state per 2048 tokens
GDN_CHUNK = 64  # fla chunk_gated_delta_rule and transformers' torch fallback: chunk_size=64

Tensors = list[tuple[str, int]]


@record
class MixerRun:
    """What decides a mixer's saved tensors: batch, sequence, element bytes, TP degree, path."""

    batch: int
    seq: int
    act_bytes: int
    tp: int
    fused: bool  # the CUDA kernels (flash/sdpa) or the torch fallback (eager)

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


def _split(n: int, tp: int) -> int:
    return -(-n // tp)


def _padded(seq: int, chunk: int) -> int:
    """The sequence padded to whole chunks (the torch chunk scans pad with zeros)."""
    return -(-seq // chunk) * chunk


def mixer_tensors(arch: Architecture, layer: LayerSpec, run: MixerRun) -> Tensors:
    """The tensors one layer's state mixer saves (attention beside it, in a hybrid, is not here)."""
    if layer.mixer in ("mamba", "hybrid"):
        m = arch.mamba
        assert m is not None
        if m.version == 1:
            return _mamba1_fused(arch, run) if run.fused else _mamba1_eager(arch, run)
        return _mamba2_fused(arch, run) if run.fused else _mamba2_eager(arch, run, layer)
    if layer.mixer == "gated_delta":
        return _gated_delta(arch, run)
    if layer.mixer == "short_conv":
        return _short_conv(arch, run)
    raise GpuplanError(
        f"{arch.name}: training activations of {layer.mixer} layers"
        f"{' (lightning attention)' if layer.mixer == 'lightning' else ''} are not modelled;"
        " gpuplan sizes serving for this model but not training"
    )


_KERNELS = {
    "mamba1": "mamba_ssm MambaInnerFn",
    "mamba2": "mamba_ssm MambaSplitConv1dScanCombinedFn",
    "gated_delta": "fla chunk_gated_delta_rule",
    "short_conv": "causal-conv1d CausalConv1dFn",
}


def state_kernel_note(arch: Architecture, kernel: str) -> str:
    """Which path the bill assumes for the model's state layers, named."""
    kinds: dict[str, int] = {}
    for layer, n in arch.layer_groups():
        if layer.has_state:
            name = layer.mixer
            if layer.mixer in ("mamba", "hybrid"):
                assert arch.mamba is not None
                name = f"mamba{arch.mamba.version}"
            kinds[name] = kinds.get(name, 0) + n
    listed = ", ".join(f"{n} {k}" for k, n in kinds.items())
    if kernel == "eager":
        return (
            f"state layers ({listed}): activations of the transformers torch fallbacks (fp32 scan"
            " intermediates); the fused CUDA kernels keep far less (--attention flash)"
        ) + _approximated(arch)
    used = ", ".join(sorted({_KERNELS[k] for k in kinds if k in _KERNELS}))
    text = (
        f"state layers ({listed}): activations of the fused kernels ({used});"
        " --attention eager bills the transformers torch fallback"
    )
    return text + _approximated(arch)


def _approximated(arch: Architecture) -> str:
    """What the state layers' activations only approximate, said in the note."""
    la = arch.linear_attention
    if la is not None and la.per_channel_decay:
        return (
            "; Kimi Delta Attention's activations are estimated as gated DeltaNet's (the same"
            " state shapes; its per-channel decay and low-rank gates are not modelled apart)"
        )
    return ""


def mixer_widths(arch: Architecture, layer: LayerSpec, tp: int) -> tuple[int, int]:
    """Channels on one rank of the mixer's in_proj output and of its out_proj input: its widest
    per-token activations (and gradients) outside the scan."""
    if layer.mixer in ("mamba", "hybrid"):
        m = arch.mamba
        assert m is not None
        d = _split(m.d_inner, tp)
        return (2 * d if m.version == 1 else _mamba2_in_width(arch, tp)), d
    if layer.mixer == "gated_delta":
        la = arch.linear_attention
        assert la is not None
        key, value = la.num_k_heads * la.k_head_dim, la.num_v_heads * la.v_head_dim
        return _split(2 * key + 2 * value + 2 * la.num_v_heads, tp), _split(value, tp)
    h = _split(arch.hidden_size, tp)
    return 3 * h, h


# -- Mamba-1 ------------------------------------------------------------------------------------


def _mamba1_fused(arch: Architecture, run: MixerRun) -> Tensors:
    """mamba_ssm MambaInnerFn.forward's save_for_backward (checkpoint_lvl=1): xz, x_dbl, B, C,
    scan_intermediates (fp32, two per state and 2048-token chunk) and out. Jamba's dt/B/C RMSNorms
    run inside the same Function (b_rms_weight, ...) and leave B and C the same size."""
    m = arch.mamba
    assert m is not None
    a, t, d, n = run.act_bytes, run.tokens, _split(m.d_inner, run.tp), m.d_state
    chunks = -(-run.seq // FUSED_SCAN_CHUNK)
    return [
        ("mixer.xz (in_proj output)", a * t * 2 * d),
        ("mixer.x_dbl (dt, B, C)", a * t * (m.dt_rank + 2 * n)),
        ("mixer.B, C (contiguous)", 2 * a * t * n),
        ("mixer.scan chunk states (fp32)", 4 * run.batch * d * chunks * 2 * n),
        ("mixer.scan output", a * t * d),
    ]


def _mamba1_eager(arch: Architecture, run: MixerRun) -> Tensors:
    """transformers MambaMixer / JambaMambaMixer without kernels: causal_conv1d_fn's F.conv1d
    (output padded by d_conv − 1), x_proj, dt_proj, and mamba_selective_scan's token loop: dt
    becomes fp32 when the fp32 dt bias is added, exp(A·dt) and dt·B are fp32 b·d·S·N tensors, and
    each step saves its state (fp32) for the next step's product and for its matmul with C (a
    copy in the activation dtype). Jamba adds RMSNorms on dt, B and C.
    (dt stays in the activation dtype: the scan casts the fp32 bias to it before adding.)"""
    m = arch.mamba
    assert m is not None
    a, b, s, t = run.act_bytes, run.batch, run.seq, run.tokens
    d, n, r, k = _split(m.d_inner, run.tp), m.d_state, m.dt_rank, m.d_conv
    state = b * d * n
    # fp32: the S + 1 states are the matmuls' inputs themselves; otherwise fp32 states 1..S-1,
    # the zero start and S copies in the activation dtype
    states = (s + 1) * 4 * state if a == 4 else (s - 1) * 4 * state + (s + 1) * a * state
    out: Tensors = [
        ("mixer.A (fp32, exp and its negation)", 2 * 4 * d * n),
        ("mixer.xz (in_proj output)", a * t * 2 * d),
        ("mixer.conv output (padded)", a * b * d * (s + k - 1)),
        ("mixer.silu(conv) and x_proj's copy of it", 2 * a * t * d),
        ("mixer.x_proj output (dt, B, C)", a * t * (r + 2 * n)),
        ("mixer.dt + bias and softplus(dt)", 2 * a * t * d),
        ("mixer.exp(A·dt) and dt·B (fp32)", 2 * 4 * t * d * n),
        ("mixer.scan states", states),
        ("mixer.y + D·x (fp32) and silu(z)", 4 * t * d + a * t * d),
        ("mixer.out_proj input", a * t * d),
    ]
    if a != 4:  # fp32 copies of x, B and D for the discretisation and the skip
        out.append(("mixer.x, B, D (fp32 copies)", 4 * t * (d + n) + 4 * d))
    if m.bcdt_norms:  # JambaRMSNorm on dt (rank r), B and C (N): x fp32, x̂, rsqrt, output
        width = r + 2 * n
        copies = 4 * t * width if a != 4 else 0
        out.append(("mixer.dt/B/C norms", copies + 2 * a * t * width + 3 * 4 * t))
    return out


# -- Mamba-2 ------------------------------------------------------------------------------------


def _mamba2_groups(arch: Architecture, tp: int) -> int:
    m = arch.mamba
    assert m is not None
    return m.n_groups // tp if m.n_groups % tp == 0 else 1


def _mamba2_in_width(arch: Architecture, tp: int) -> int:
    """in_proj's output on one rank: z and x (d_inner), B and C (groups × N), dt (heads)."""
    m = arch.mamba
    assert m is not None
    d, h = _split(m.d_inner, tp), _split(m.n_heads, tp)
    return 2 * d + 2 * _mamba2_groups(arch, tp) * m.d_state + h


def _mamba2_fused(arch: Architecture, run: MixerRun) -> Tensors:
    """mamba_ssm MambaSplitConv1dScanCombinedFn.forward's save_for_backward: zxbcdt, out_x and
    the gated RMSNorm's rstd (fp32, one per group and token); conv1d, the chunk states and
    out_proj are recomputed or run inside the Function."""
    m = arch.mamba
    assert m is not None
    a, t, d = run.act_bytes, run.tokens, _split(m.d_inner, run.tp)
    out: Tensors = [
        ("mixer.zxbcdt (in_proj output)", a * t * _mamba2_in_width(arch, run.tp)),
        ("mixer.scan output", a * t * d),
    ]
    if m.gated_norm:
        out.append(("mixer.gated norm rstd (fp32)", 4 * t * _mamba2_groups(arch, run.tp)))
    return out


def _mamba2_eager(arch: Architecture, run: MixerRun, layer: LayerSpec) -> Tensors:
    """transformers Mamba2Mixer.forward without kernels and its `mamba2_chunk_scan` (the torch
    SSD of Dao & Gu 2024 §6, the same in NemotronH, Bamba, GraniteMoeHybrid and FalconH1): the
    sequence is padded to a multiple of the chunk l, everything inside the scan is fp32; the
    intra-chunk matrices L = exp(segsum(A)), G = C·Bᵀ and M = G∘L are b·H·S·l each; B and C are
    repeated to every head and kept in several einsum layouts; one state per chunk boundary."""
    m = arch.mamba
    assert m is not None
    a, b, s, t = run.act_bytes, run.batch, run.seq, run.tokens
    d, h, n, p = _split(m.d_inner, run.tp), _split(m.n_heads, run.tp), m.d_state, m.head_dim
    g = _mamba2_groups(arch, run.tp)
    conv = d + 2 * g * n
    ell = m.chunk_size
    padded = b * _padded(s, ell)  # padded tokens
    chunks = _padded(s, ell) // ell
    states = 4 * b * h * p * n
    out: Tensors = [
        ("mixer.A (fp32)", 2 * 4 * h),
        ("mixer.zxbcdt (in_proj output)", a * t * _mamba2_in_width(arch, run.tp)),
        ("mixer.conv output (padded)", a * b * conv * (s + m.d_conv - 1)),
        ("mixer.dt + bias, softplus(dt)", 2 * a * t * h),
        ("mixer.dt (fp32)", 4 * t * h * (1 if a == 4 else 2)),
        # fp32: x·dt reads the silu output itself (x, B, C); else its fp32 copy of x
        ("mixer.x (fp32)", 4 * t * (conv if a == 4 else d)),
        ("mixer.D residual (padded x, fp32)", 4 * padded * d),
        ("mixer.L, G, M (fp32, per chunk l × l)", 3 * 4 * padded * h * ell),
        ("mixer.B, C per head (fp32, einsum layouts)", 5 * 4 * padded * h * n),
        ("mixer.x (fp32, einsum layouts) and C·states", 3 * 4 * padded * d),
        ("mixer.decays (fp32)", 2 * 4 * padded * h + 4 * b * h * (chunks + 1) ** 2),
        ("mixer.chunk states (fp32)", states * (2 * chunks + 1)),
        ("mixer.masks", 2 * ell * ell + 2 * (chunks + 1) ** 2),
    ]
    gate_copy = 4 * t * d if a != 4 else 0  # gate.to(float32) is a copy unless fp32 already
    if m.gated_norm:  # MambaRMSNormGated: y·silu(z), then a grouped RMSNorm, all fp32
        out += [
            ("mixer.norm: y (padded), silu(z), y·silu(z), x̂", 4 * padded * d + 3 * 4 * t * d),
            ("mixer.norm: rstd, z (fp32)", 4 * t * g + gate_copy),
        ]
    else:  # FalconH1Mixer without mamba_rms_norm: y · silu(z)
        out.append(("mixer.y (padded, fp32), silu(z)", 4 * padded * d + a * t * d))
    out.append(("mixer.out_proj input", a * t * d))
    return out


# -- gated DeltaNet -----------------------------------------------------------------------------


def _gated_delta(arch: Architecture, run: MixerRun) -> Tensors:
    """Qwen3NextGatedDeltaNet (transformers; Qwen3.5 the same): the ops around the delta rule,
    then the rule itself fused (fla) or in torch (`torch_chunk_gated_delta_rule`)."""
    la = arch.linear_attention
    assert la is not None
    a, b, s, t = run.act_bytes, run.batch, run.seq, run.tokens
    nk, nv = _split(la.num_k_heads, run.tp), _split(la.num_v_heads, run.tp)
    dk, dv = la.k_head_dim, la.v_head_dim
    key, value = nk * dk, nv * dv
    conv = 2 * key + value
    out: Tensors = [
        ("mixer.q, k, v (conv input)", a * t * conv),
        ("mixer.beta = sigmoid(b)", a * t * nv),
        ("mixer.a + dt_bias, softplus (fp32)", 2 * 4 * t * nv + 2 * 4 * nv),
    ]
    if run.fused:
        return out + [
            ("mixer.q, k (L2-normed) and their rstd", 2 * a * t * key + 2 * 4 * t * nk),
            ("mixer.v (contiguous)", a * t * value),
            ("mixer.g (chunk cumsum, fp32)", 4 * t * nv),
            ("mixer.A (WY, 64 per token and head)", a * t * nv * GDN_CHUNK),
            ("mixer.norm: x, gate, rstd", 2 * a * t * value + 4 * t * nv),
            ("mixer.out_proj input", a * t * value),
        ]
    padded = b * _padded(s, GDN_CHUNK)
    chunks = _padded(s, GDN_CHUNK) // GDN_CHUNK
    ell = GDN_CHUNK
    # the decayed q is saved by its matmul with the state only from the second chunk on (the
    # first chunk reads the zero start state, which needs no gradient)
    qk_copies = 5 if chunks > 1 else 4
    out += [
        ("mixer.conv output (padded)", a * b * conv * (s + la.conv_kernel - 1)),
        ("mixer.q, k (fp32) and their inverse norms", 2 * 4 * t * nv * dk + 2 * 4 * t * nv),
        ("mixer.q, k, k·β, decayed q and k (padded, fp32)", qk_copies * 4 * padded * nv * dk),
        ("mixer.v, β (padded, fp32)", 4 * padded * (value + nv)),
        ("mixer.decays (fp32)", 3 * 4 * padded * nv + 4 * b * nv * chunks),
        ("mixer.pairwise decay, kkᵀ·decay, qkᵀ·decay (fp32, 64 × 64)", 5 * 4 * padded * nv * ell),
        ("mixer.new values, k·cumdecay, v_new (fp32)", 4 * padded * nv * (2 * dv + dk)),
        ("mixer.chunk states (fp32)", 4 * b * nv * dk * dv * chunks),
        ("mixer.mask", ell * ell),
        ("mixer.norm: x, x̂ (fp32), rstd", 4 * t * value + a * t * value + 4 * t * nv),
        ("mixer.norm: gate (fp32), silu(gate), w·x̂", 2 * 4 * t * value + a * t * value),
        ("mixer.out_proj input", a * t * value),
    ]
    return out


# -- short convolution (LFM2) ---------------------------------------------------------------------


def _short_conv(arch: Architecture, run: MixerRun) -> Tensors:
    """Lfm2ShortConv: in_proj → B, C, x (3h); B·x; a depthwise causal conv; C·conv; out_proj.
    The torch conv keeps its output padded by L_cache − 1; CausalConv1dFn computes it exactly."""
    sc = arch.short_conv
    assert sc is not None
    a, b, s, t = run.act_bytes, run.batch, run.seq, run.tokens
    h = _split(arch.hidden_size, run.tp)
    conv_out = a * t * h if run.fused else a * b * h * (s + sc.kernel - 1)
    return [
        ("mixer.in_proj output (B, C, x)", a * t * 3 * h),
        ("mixer.B·x (conv input)", a * t * h),
        ("mixer.conv output", conv_out),
        ("mixer.out_proj input", a * t * h),
    ]
