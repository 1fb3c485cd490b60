"""The model-wide parts of a decoder, each read from a family's view of its config: attention,
rotary embedding, dense FFN, experts, state-space and linear-attention mixers, quantisation.

Every function takes the config view `v` (engine/config_schema.py) and the family's resolved
traits `t` (engine/families.py) and returns one record of engine/model_records.py; the module
each one mirrors is named in its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.frozen import replace
from gpuplan.engine.model_records import (
    AttentionSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    MLPSpec,
    MoESpec,
    RgLruSpec,
    RopeSpec,
    ShortConvSpec,
)
from gpuplan.engine.precision import Precision
from gpuplan.engine.quantization import ModuleRule, QuantizationSpec, quantization_from_config
from gpuplan.engine.schedules import MOE_LAYERS
from gpuplan.errors import GpuplanError

Traits = Mapping[str, Any]

# -- attention --------------------------------------------------------------------------------


def attention(v: ConfigView, t: Traits, hidden: int) -> AttentionSpec | None:
    """The attention layers' shape (LlamaAttention and its variants); None for a family with
    no attention (Mamba)."""
    if t["attention"] == "none":
        return None
    if t["compressed_attention"]:
        return compressed_attention(v)
    heads = v.require("num_attention_heads")
    qk_norm = t["qk_norm"]
    common: dict[str, Any] = {
        "qkv_bias": bool(t["qkv_bias"]),
        "o_bias": bool(t["o_bias"]),
        "qk_norm": qk_norm != "none",
        "qk_norm_scope": qk_norm if qk_norm != "none" else "head",
        "qk_norm_bias": bool(t["qk_norm_bias"]),
        "sinks": bool(t["sinks"]),
        "output_gate": bool(t["output_gate"]),
        "head_gate": bool(t["head_gate"]),
        "gate_bias": bool(t["output_gate_bias"]),
        "k_rope_norm": bool(t["k_rope_norm"]),
        "q_gate_fused": bool(t["q_gate_fused"]),
    }
    if t["attention"] == "mla" or v.get("kv_lora_rank") is not None:
        return _mla(v, t, heads, common)
    kv_heads = v.require("num_key_value_heads")
    if t["attention_experts"]:  # JetMoeConfig: num_attention_heads = KV heads x top-k
        heads = kv_heads * v.require("experts_per_token")
        common["attention_experts"] = v.require("num_experts")
    if heads % kv_heads:
        raise v.fail(
            "num_key_value_heads",
            f"({kv_heads}) must divide num_attention_heads ({heads})",
        )
    derived = not v.present("head_dim") and isinstance(v.defaults.get("head_dim"), str)
    if derived and hidden % heads and not t["head_dim_floor"]:  # a literal default is the class's
        raise v.fail(
            "num_attention_heads",
            f"({heads}) does not divide hidden_size ({hidden}) and there is no head_dim",
        )
    head_dim = v.require("head_dim")
    if t["shared_blocks"] and not v.present("head_dim"):
        head_dim = 2 * hidden // heads  # Zamba2Config.attention_head_dim: over the 2h input
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v.get("v_head_dim") if v.present("v_head_dim") else head_dim,
        **common,
    )


def _mla(v: ConfigView, t: Traits, heads: int, common: dict[str, Any]) -> AttentionSpec:
    """Multi-head latent attention (DeepseekV3Attention), with DeepSeek-V3.2's lightning
    indexer when the family has one."""
    nope = v.require("qk_nope_head_dim")
    rope = v.require("qk_rope_head_dim")
    if nope + rope == 0:
        raise v.fail("qk_nope_head_dim", "and qk_rope_head_dim are both 0")
    indexer = bool(t["indexer"])
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        v_head_dim=v.require("v_head_dim"),
        q_lora_rank=v.get("q_lora_rank") or None,
        kv_lora_rank=v.require("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        indexer_heads=v.require("index_n_heads") if indexer else 0,
        indexer_head_dim=v.require("index_head_dim") if indexer else 0,
        **common,
    )


def compressed_attention(v: ConfigView) -> AttentionSpec:
    """DeepSeek-V4's attention (DeepseekV4Attention): low-rank queries (q_a, q_a_norm, q_b),
    one K=V head of head_dim (kv_proj, kv_norm) read by every query head over a sliding window,
    per-head sinks, and the grouped low-rank output (o_a: o_groups groups of heads x head_dim /
    o_groups -> o_lora_rank; o_b: o_groups x o_lora_rank -> hidden). The layers' compressors are
    set per layer type (variation.compressed_layers)."""
    heads = v.require("num_attention_heads")
    if v.require("num_key_value_heads") != 1:
        raise v.fail("num_key_value_heads", "must be 1: DeepSeek-V4 attends over one K=V head")
    head_dim = v.require("head_dim")
    groups = v.require("o_groups")
    if (heads * head_dim) % groups:
        raise v.fail("o_groups", f"({groups}) must divide heads x head_dim ({heads * head_dim})")
    if not v.get("sliding_window"):
        raise v.fail("sliding_window", "must be set: every DeepSeek-V4 layer has a window")
    rope = v.require("qk_rope_head_dim")
    if v.present("partial_rotary_factor") and not v.present("qk_rope_head_dim"):
        rope = int(head_dim * float(v.get("partial_rotary_factor")))
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=1,
        head_dim=head_dim,
        v_head_dim=head_dim,
        sinks=True,
        q_lora_rank=v.require("q_lora_rank"),
        qk_rope_head_dim=rope,
        shared_kv_head=True,
        o_groups=groups,
        o_lora_rank=v.require("o_lora_rank"),
    )


def stand_in_attention(mamba: MambaSpec | None, channels: int | None = None) -> AttentionSpec:
    """Attention-free models (Mamba): a shape with no KV and the mixer's heads, so tensor
    parallelism checks divide what engines shard (Mamba-2 heads, Mamba-1 channels); without a
    Mamba mixer, `channels` (RWKV-4's attention_hidden_size, the width of its WKV state)."""
    heads = (mamba.n_heads or mamba.d_inner) if mamba else (channels or 1)
    return AttentionSpec(num_heads=heads, num_kv_heads=heads, head_dim=0, v_head_dim=0)


def rope(v: ConfigView) -> RopeSpec:
    """The rotary embedding, from `rope_scaling` (or `rope_parameters`)."""
    rs = v.get("rope_scaling") or {}
    partial = v.get("partial_rotary_factor") or 1.0
    try:
        factor = float(rs.get("factor") or 1.0)
        original = int(rs.get("original_max_position_embeddings") or 0)
    except (TypeError, ValueError, OverflowError):
        raise v.fail(
            "rope_scaling",
            "has a factor or original_max_position_embeddings that is not a number",
        ) from None
    if not (0 < factor < 1e6) or not 0 <= original < 1 << 34:
        raise v.fail(
            "rope_scaling", "has a factor or original_max_position_embeddings out of range"
        )
    kind = rs.get("rope_type") or rs.get("type") or "default"
    return RopeSpec(
        kind=str(kind)[:32],
        factor=factor,
        original_max_position=original,
        partial_rotary_factor=partial,
    )


# -- feed-forward -----------------------------------------------------------------------------


def mlp(v: ConfigView, t: Traits, model_type: str, layers: Sequence[LayerSpec]) -> MLPSpec:
    """The dense FFN: Llama 4's intermediate_size_mlp, Gemma 3n's first per-layer width,
    LFM2's adjusted width, else intermediate_size."""
    if model_type in ("llama4", "llama4_text") and v.present("intermediate_size_mlp"):
        width = v.require("intermediate_size_mlp")
    elif t["per_layer_embeddings"] and isinstance(v.raw.get("intermediate_size"), list):
        width = next(s.mlp_width for s in layers if s.mlp_width)  # Gemma 3n
    elif t["ffn_width"] == "lfm2":
        width = _lfm2_width(v)
    elif t["ffn_width"] == "half":  # RecurrentGemmaMlp: intermediate_size // 2
        width = v.require("intermediate_size") // 2
    else:
        width = v.require("intermediate_size")
    return MLPSpec(width, gated=t["mlp"] == "gated", bias=bool(t["mlp_bias"]))


def _lfm2_width(v: ConfigView) -> int:
    """Lfm2MLP: with block_auto_adjust_ff_dim, 2/3 of block_ff_dim, times the multiplier and
    rounded up to block_multiple_of when a multiplier is set."""
    width: int = v.require("intermediate_size")
    if v.get("block_auto_adjust_ff_dim"):
        width = int(2 * width / 3)
        multiplier = v.get("block_ffn_dim_multiplier")
        if multiplier is not None:
            multiple = v.get("block_multiple_of") or 256
            width = int(multiplier * width)
            width = multiple * ((width + multiple - 1) // multiple)
    if width < 1:
        raise v.fail("intermediate_size", "leaves an FFN of width 0")
    return width


def moe(
    v: ConfigView, t: Traits, n: int, kinds: list[tuple[str, int | None]]
) -> tuple[MoESpec | None, list[bool]]:
    """The experts block and which layers route to it (engine/schedules.py's MOE_LAYERS)."""
    rule = t["moe_layers"]
    experts = v.get("num_experts") or 0
    if rule == "pattern":
        flags = MOE_LAYERS[rule](v, n, kinds)
        if any(flags) and not experts:
            raise v.fail("num_experts", "must be at least 1 for the E blocks of the pattern")
    elif not experts or (rule == "jamba" and experts < 2):
        return None, [False] * n
    else:
        listed = _listed_moe_flags(v, n)
        flags = MOE_LAYERS[rule](v, n, kinds) if listed is None else listed
    if not any(flags):
        return None, flags
    top_k = v.require("experts_per_token")
    if top_k > experts:
        raise v.fail("experts_per_token", f"({top_k}) exceeds the {experts} experts")
    return _moe_spec(v, t, experts, top_k), flags


def _moe_spec(v: ConfigView, t: Traits, experts: int, top_k: int) -> MoESpec:
    width = v.require("moe_intermediate_size")
    shared_width = v.get("shared_expert_intermediate_size") or 0
    shared = v.get("num_shared_experts") or 0
    if not shared_width and shared:
        shared_width = shared * width
    return MoESpec(
        num_experts=experts,
        experts_per_token=top_k,
        expert_intermediate_size=width,
        num_shared_experts=shared or (1 if shared_width else 0),
        shared_intermediate_size=shared_width,
        shared_expert_gate=bool(t["shared_expert_gate"]) and bool(shared_width),
        router_bias=bool(t["router_bias"]),
        expert_bias=bool(t["expert_bias"]),
        expert_gated=t["expert_mlp"] == "gated",
        shared_gated=t["shared_mlp"] == "gated",
        router_score_bias=bool(t["router_score_bias"]),
        latent_size=v.get("moe_latent_size") or 0,
        output_bias=bool(t["moe_output_bias"]),
        output_norm=bool(t["moe_output_norm"]),
        zero_experts=v.get("zero_experts") or 0,
    )


def _listed_moe_flags(v: ConfigView, n: int) -> list[bool] | None:
    """A config that lists its expert layers: `mlp_layer_types` ("sparse" or "dense" per layer,
    transformers 5's Glm4MoeLiteConfig) or MiMo-V2-Flash's `moe_layer_pattern` (0/1 per layer);
    None when it lists neither."""
    listed = v.get("mlp_layer_types")
    if not listed:
        flags = v.get("moe_layer_pattern")
        if flags is None:
            return None
        listed = tuple("sparse" if f else "dense" for f in flags)
    unknown = sorted(set(listed) - {"sparse", "dense"})
    if unknown or len(listed) != n:
        raise GpuplanError(
            f"{v.name}: config field 'mlp_layer_types' must list 'dense' or 'sparse' for"
            f" each of the {n} layers"
            + (f" (got {unknown[0][:40]!r})" if unknown else f" (got {len(listed)} entries)")
        )
    return [kind == "sparse" for kind in listed]


# -- state-space and linear-attention mixers --------------------------------------------------


def mamba(v: ConfigView, t: Traits, hidden: int) -> MambaSpec:
    """Mamba-1 (MambaMixer, Jamba's with dt/B/C norms) or Mamba-2 (Mamba2Mixer, Zamba 2's)."""
    d_state, d_conv = v.require("mamba_d_state"), v.require("mamba_d_conv")
    common = {
        "d_state": d_state,
        "d_conv": d_conv,
        "conv_bias": bool(v.get("mamba_conv_bias")),
        "proj_bias": bool(v.get("mamba_proj_bias")),
    }
    if t["mamba"] == "mamba1":
        return MambaSpec(
            version=1,
            d_inner=v.get("mamba_d_inner") or v.require("mamba_expand") * hidden,
            dt_rank=v.require("mamba_dt_rank"),
            bcdt_norms=bool(t["mamba_bcdt_norms"]),
            gated_norm=False,
            **common,
        )
    heads, head_dim = v.require("mamba_n_heads"), v.require("mamba_head_dim")
    if t["shared_blocks"]:  # Zamba 2: d_inner = expand x h; Zyphra's config gives
        d_inner = v.require("mamba_expand") * hidden  # mamba_headdim, transformers' heads
        if not v.present("mamba_n_heads") and v.present("mamba_head_dim"):
            heads = max(1, d_inner // head_dim)
        head_dim = d_inner // heads
        if head_dim * heads != d_inner:
            raise v.fail("mamba_n_heads", f"({heads}) must divide the {d_inner} Mamba channels")
    groups = v.require("mamba_n_groups")
    if heads % groups:
        raise v.fail("mamba_n_groups", f"({groups}) must divide the {heads} Mamba heads")
    return MambaSpec(
        version=2,
        d_inner=heads * head_dim,
        n_heads=heads,
        head_dim=head_dim,
        n_groups=groups,
        gated_norm=bool(t["mamba_norm"]),
        chunk_size=v.get("mamba_chunk_size") or 256,
        **common,
    )


def linear_attention(
    v: ConfigView, t: Traits, attention: AttentionSpec | None
) -> LinearAttentionSpec:
    """Gated DeltaNet (Qwen3NextGatedDeltaNet), Kimi Delta Attention, or MiniMax's lightning
    attention (MiniMaxLightningAttention: the attention heads and head_dim)."""
    kind = t["linear_attention"]
    if kind == "lightning":
        assert attention is not None
        heads, dim = attention.num_heads, attention.head_dim
        return LinearAttentionSpec(kind, heads, heads, dim, dim)
    nk, nv = v.require("linear_num_key_heads"), v.require("linear_num_value_heads")
    if nv % nk:
        raise v.fail(
            "linear_num_value_heads",
            f"({nv}) must be a multiple of linear_num_key_heads ({nk})",
        )
    return LinearAttentionSpec(
        "gated_delta",
        nk,
        nv,
        v.require("linear_key_head_dim"),
        v.require("linear_value_head_dim"),
        v.require("linear_conv_kernel_dim"),
        per_channel_decay=kind in ("kda", "kda_full"),
        full_rank_gate=kind == "kda_full" or (kind == "kda" and bool(v.get("use_full_rank_gate"))),
        full_rank_forget=kind == "kda_full",
    )


def short_conv(v: ConfigView) -> ShortConvSpec:
    """LFM2's gated short convolution (Lfm2ShortConv): conv_L_cache taps."""
    return ShortConvSpec(v.require("conv_L_cache"), bool(v.get("conv_bias")))


def rglru(v: ConfigView) -> RgLruSpec:
    """RecurrentGemma's recurrent block: lru_width, the gates' blocks (num_attention_heads) and
    conv1d_width taps (RecurrentGemmaConfig)."""
    width, heads = v.require("rglru_width"), v.require("num_attention_heads")
    if width % heads:
        raise v.fail("rglru_width", f"({width}) is not a multiple of num_attention_heads ({heads})")
    return RgLruSpec(width, heads, v.require("rglru_conv_width"))


def mlstm(v: ConfigView) -> LinearAttentionSpec:
    """xLSTM's mLSTM memory per head (xLSTMConfig.qk_head_dim / v_head_dim: hidden x factor
    rounded up to a multiple of 64, over the heads)."""
    h, heads = v.require("hidden_size"), v.require("num_attention_heads")
    qk, dv = (_up(h * v.require(f), 64) for f in ("qk_dim_factor", "v_dim_factor"))
    if qk % heads or dv % heads:
        raise v.fail("num_heads", f"({heads}) does not divide the q/k ({qk}) and v ({dv}) widths")
    return LinearAttentionSpec("mlstm", heads, heads, qk // heads, dv // heads)


def _up(x: float, multiple: int) -> int:
    """transformers' round_up_to_next_multiple_of (xLSTM), float arithmetic kept."""
    return int(((x + multiple - 1) // multiple) * multiple)


def quantization(v: ConfigView, notes: list[str]) -> QuantizationSpec | None:
    """The checkpoint's quantisation (engine/quantization.py). A Paddle mix_quant block over
    unquantised weights is read as stored, with a note."""
    raw = v.raw.get("quantization_config")
    if not raw:
        return None
    spec = quantization_from_config(raw, v.name)
    if spec is None and isinstance(raw, Mapping) and raw.get("quantization") == "mix_quant":
        notes.append(
            "Paddle mix_quant block (dense_quant_type"
            f" {str(raw.get('dense_quant_type'))[:24]!r}, moe_quant_type"
            f" {str(raw.get('moe_quant_type'))[:24]!r}) without is_quantized: the weights are read"
            " as the checkpoint stores them (FastDeploy quantises them only as it loads)"
        )
    return spec


# DeepSeek-V4's routed experts stored as fp4 (`expert_dtype`): e2m1 values with one ue8m0 scale
# per 32 (the MXFP4 layout of DeepSeek's FP4 expert weights)
_V4_FP4_EXPERTS = Precision(
    "fp4-e2m1-32",
    4,
    group_size=32,
    scale_bits=8,
    scope="linear",
    source="DeepSeek-V4 expert_dtype fp4: e2m1 weights, one ue8m0 scale per 32",
)
# projections DeepSeek-V4 checkpoints keep in bf16 beside fp8 weights (DeepseekV4PreTrainedModel.
# _keep_in_fp32_modules: the compressor's and indexer's kv_proj / gate_proj, no scale_inv)
_V4_BF16_MODULES = ("compressor.kv_proj", "compressor.gate_proj")
_V4_BF16_INDEXER = ("indexer.kv_proj", "indexer.gate_proj")


def deepseek_v4_quantization(
    v: ConfigView, spec: QuantizationSpec | None, notes: list[str]
) -> QuantizationSpec | None:
    """A DeepSeek-V4 checkpoint's weights as stored: its quantization_config's layout for the
    linear weights, the routed experts in `expert_dtype` (top level, or folded into the
    quantization_config as DeepseekV4Config.__post_init__ does), the compressor and indexer
    kv/gate projections in bf16. An expert_dtype other than fp4 is refused naming it."""
    raw_qc = v.raw.get("quantization_config")
    qc = raw_qc if isinstance(raw_qc, Mapping) else {}
    expert_dtype = v.raw.get("expert_dtype") or qc.get("expert_dtype")
    if spec is None:
        if expert_dtype:
            notes.append(
                f"expert_dtype {str(expert_dtype)[:16]!r} without a quantization_config: read as the checkpoint dtype"
            )
        return None
    rules = list(spec.rules)
    rules.append(ModuleRule(_V4_BF16_MODULES + _V4_BF16_INDEXER, "name", "_keep_in_fp32_modules"))
    if expert_dtype not in (None, "fp4"):
        raise v.fail(
            "expert_dtype", f"({str(expert_dtype)[:16]!r}) is not modelled (gpuplan reads fp4)"
        )
    if expert_dtype == "fp4":
        rules.insert(
            0, ModuleRule(("experts",), "name", "expert_dtype", keep=False, layout=_V4_FP4_EXPERTS)
        )
        notes.append(
            "DeepSeek-V4: routed experts stored as fp4 (expert_dtype: e2m1, one ue8m0 scale per"
            " 32), the compressor and indexer kv/gate projections in bf16, the other linear"
            " weights as the quantization_config says"
        )
    return replace(spec, rules=tuple(rules))
