"""One architecture record for every decoder-only transformer gpuplan sizes.

`Architecture` holds only the shapes that decide memory: widths, head counts, layer kinds,
expert counts, quantisation. `architecture_from_config` reads a Hugging Face `config.json`
(already parsed into a dict: the engine does no I/O) into that record.

The key names and their defaults mirror the `configuration_*.py` files of `transformers`
(LlamaConfig, Qwen2Config, Qwen3MoeConfig, MixtralConfig, DeepseekV3Config, GptOssConfig,
Gemma2Config, Gemma3TextConfig, Phi3Config, GPT2Config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuplan.engine.vision import vision_encoder_params
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.engine.quantization import QuantizationSpec


@dataclass(frozen=True)
class AttentionSpec:
    """Shapes of one attention block (the same in every layer)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int  # query/key head dim; for MLA: qk_nope_head_dim + qk_rope_head_dim
    v_head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    sinks: bool = False  # one learned sink logit per head (gpt-oss)
    # Multi-head latent attention (DeepSeek V2/V3); kv_lora_rank is None for ordinary attention.
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kind(self) -> str:
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "GQA"


@dataclass(frozen=True)
class MLPSpec:
    """A dense feed-forward block: gated (SwiGLU/GeGLU: gate, up, down) or plain (up, down)."""

    intermediate_size: int
    gated: bool = True
    bias: bool = False


@dataclass(frozen=True)
class MoESpec:
    """A mixture-of-experts feed-forward block."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # width of the shared expert MLP (all shared experts fused)
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert
    router_bias: bool = False
    expert_bias: bool = False  # biases inside each expert (gpt-oss)


@dataclass(frozen=True)
class LayerSpec:
    """What differs between layers: attention window and whether the FFN is MoE."""

    sliding_window: int | None = None  # None = full attention
    moe: bool = False


@dataclass(frozen=True)
class RopeSpec:
    """Rotary position embedding as config.json declares it (`rope_scaling` / `rope_parameters`,
    `partial_rotary_factor`): engines size their cos/sin tables from it."""

    kind: str = "default"  # rope_type (or the older `type`): default, linear, llama3, yarn, ...
    factor: float = 1.0
    original_max_position: int = 0
    partial_rotary_factor: float = 1.0


@dataclass(frozen=True)
class Architecture:
    """Everything about a model that decides its memory, and nothing else."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    attention: AttentionSpec
    layers: tuple[LayerSpec, ...]
    mlp: MLPSpec | None = None  # dense FFN (used by every non-MoE layer)
    moe: MoESpec | None = None
    tie_word_embeddings: bool = False
    norm: str = "rms"  # "rms" (weight only) or "layernorm" (weight and bias)
    norms_per_layer: int = 2
    learned_positions: int = 0  # rows of a learned position table (GPT-2), 0 for RoPE
    max_position_embeddings: int = 0
    torch_dtype: str = "bfloat16"
    quantization: QuantizationSpec | None = None
    hidden_act: str = "silu"  # the MLP activation (decides what autograd saves in training)
    vision_params: int = (
        0  # image encoder + projector of a vision-language checkpoint (engine/vision.py)
    )
    notes: tuple[str, ...] = field(default=())
    rope: RopeSpec | None = None  # None: no rotary embedding (learned positions)

    def __hash__(self) -> int:
        """Hash once: bills are cached by architecture, and a deep hash of every layer is slow."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(
                (
                    self.name,
                    self.model_type,
                    self.hidden_size,
                    self.num_layers,
                    self.vocab_size,
                    self.attention,
                    self.layers,
                    self.mlp,
                    self.moe,
                    self.tie_word_embeddings,
                    self.learned_positions,
                    self.torch_dtype,
                    self.quantization,
                    self.vision_params,
                    self.hidden_act,
                )
            )
            self.__dict__["_hash"] = cached
        return cached

    def window_counts(self, layers: range | None = None) -> tuple[tuple[int | None, int], ...]:
        """(sliding window or None, number of layers) for the given layers (all by default)."""
        key = "_windows" if layers is None else f"_windows_{layers.start}_{layers.stop}"
        cached = self.__dict__.get(key)
        if cached is None:
            counts: dict[int | None, int] = {}
            for i in layers if layers is not None else range(self.num_layers):
                w = self.layers[i].sliding_window
                counts[w] = counts.get(w, 0) + 1
            cached = tuple(counts.items())
            self.__dict__[key] = cached
        return cached

    @property
    def num_moe_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.moe)

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.sliding_window is not None)


# --------------------------------------------------------------------------------------
# Reading a config.json
# --------------------------------------------------------------------------------------

_ALIASES = {
    # GPT-2 style names -> the standard ones
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "d_model": "hidden_size",
    "ffn_dim": "intermediate_size",
}

_MULTIMODAL_WRAPPERS = ("text_config", "llm_config", "language_config")


class _Config:
    """A config dict with the lookups and clear errors the parser needs."""

    def __init__(self, raw: Mapping[str, Any], name: str):
        self.raw = dict(raw)
        for old, new in _ALIASES.items():
            if old in self.raw and self.raw.get(new) is None:
                self.raw[new] = self.raw[old]
        self.name = name

    def get(self, key: str, default: Any = None) -> Any:
        value = self.raw.get(key)
        return default if value is None else value

    def whole(self, key: str, default: int | None = None) -> int:
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise GpuplanError(f"{self.name}: config.json has no {key!r}")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise GpuplanError(f"{self.name}: {key!r} must be a whole number, got {value!r}")
        if value < 0:
            raise GpuplanError(f"{self.name}: {key!r} must not be negative, got {value!r}")
        return int(value)

    def positive(self, key: str, default: int | None = None) -> int:
        value = self.whole(key, default)
        if value <= 0:
            raise GpuplanError(f"{self.name}: {key!r} must be positive, got {value}")
        return value


def _quantization(cfg: _Config) -> QuantizationSpec | None:
    """The checkpoint's quantisation (engine/quantization.py, imported only for a quantised one)."""
    raw = cfg.get("quantization_config")
    if raw is None:
        return None
    from gpuplan.engine.quantization import quantization_from_config

    return quantization_from_config(raw, cfg.name)


REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def architecture_from_config(config: Mapping[str, Any], name: str = "model") -> Architecture:
    """Build an `Architecture` from a Hugging Face `config.json` dict.

    Known families get their exact module layout; any other `model_type` with the standard
    keys (hidden_size, num_hidden_layers, num_attention_heads, vocab_size, intermediate_size)
    is read as a Llama-style decoder. A config missing those keys fails naming them.
    """
    if not isinstance(config, Mapping):
        raise GpuplanError(f"{name}: config.json must be a JSON object")
    raw = dict(config)
    for wrapper in _MULTIMODAL_WRAPPERS:
        inner = raw.get(wrapper)
        if isinstance(inner, Mapping) and "hidden_size" in inner:
            merged = {**inner}
            for key in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
                if key in raw and key not in merged:
                    merged[key] = raw[key]
            raw = merged
            break
    cfg = _Config(raw, name)
    missing = [k for k in REQUIRED_KEYS if cfg.raw.get(k) is None]
    if missing:
        raise GpuplanError(
            f"{name}: config.json is missing {', '.join(missing)}"
            f" (model_type {cfg.get('model_type', 'unknown')!r}); cannot size this model"
        )
    model_type = str(cfg.get("model_type", "unknown"))
    arch = _gpt2(cfg, model_type) if model_type == "gpt2" else _decoder(cfg, model_type)
    vision = vision_encoder_params(config)
    if vision:
        arch = replace(arch, vision_params=vision)
    return arch


def _torch_dtype(cfg: _Config) -> str:
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))
    return str(dtype).replace("torch.", "")


def _gpt2(cfg: _Config, model_type: str) -> Architecture:
    """GPT-2: learned positions, LayerNorm with bias, fused c_attn with bias, 4h GELU MLP."""
    hidden = cfg.positive("hidden_size")
    heads = cfg.positive("num_attention_heads")
    if hidden % heads:
        raise GpuplanError(f"{cfg.name}: n_embd {hidden} is not divisible by n_head {heads}")
    layers = cfg.positive("num_hidden_layers")
    return Architecture(
        name=cfg.name,
        model_type=model_type,
        hidden_size=hidden,
        num_layers=layers,
        vocab_size=cfg.positive("vocab_size"),
        attention=AttentionSpec(
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=hidden // heads,
            v_head_dim=hidden // heads,
            qkv_bias=True,
            o_bias=True,
        ),
        layers=tuple(LayerSpec() for _ in range(layers)),
        mlp=MLPSpec(cfg.positive("intermediate_size", 4 * hidden), gated=False, bias=True),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        norm="layernorm",
        norms_per_layer=2,
        learned_positions=cfg.positive("max_position_embeddings", 1024),
        max_position_embeddings=cfg.positive("max_position_embeddings", 1024),
        torch_dtype=_torch_dtype(cfg),
        quantization=_quantization(cfg),
        hidden_act=str(cfg.get("activation_function", "gelu_new")),
    )


def _attention(cfg: _Config, model_type: str) -> AttentionSpec:
    hidden = cfg.positive("hidden_size")
    heads = cfg.positive("num_attention_heads")
    kv_heads = cfg.positive("num_key_value_heads", heads)
    if heads % kv_heads:
        raise GpuplanError(
            f"{cfg.name}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    if cfg.raw.get("kv_lora_rank") is not None:  # DeepSeek V2/V3 multi-head latent attention
        nope = cfg.positive("qk_nope_head_dim")
        rope = cfg.positive("qk_rope_head_dim")
        bias = bool(cfg.get("attention_bias", False))
        return AttentionSpec(
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=nope + rope,
            v_head_dim=cfg.positive("v_head_dim"),
            qkv_bias=bias,
            o_bias=bias,
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=cfg.positive("kv_lora_rank"),
            qk_rope_head_dim=rope,
            qk_nope_head_dim=nope,
        )
    default_head_dim = hidden // heads if hidden % heads == 0 else None
    head_dim = cfg.whole("head_dim", default_head_dim)
    bias = bool(cfg.get("attention_bias", False))
    qkv_bias, o_bias = bias, bias
    if model_type in ("qwen2", "qwen2_5"):
        qkv_bias, o_bias = True, False  # Qwen2Attention: bias on q, k, v only
    elif model_type == "qwen2_moe":
        qkv_bias, o_bias = bool(cfg.get("qkv_bias", True)), False
    elif model_type in ("gpt_oss", "phi"):  # PhiAttention: q, k, v and dense all carry biases
        qkv_bias, o_bias = True, True
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"),
        sinks=model_type == "gpt_oss",
    )


def _layer_windows(cfg: _Config, model_type: str, num_layers: int) -> list[int | None]:
    """Per-layer sliding window (None = full attention), from `layer_types` or the family rule."""
    window = cfg.get("sliding_window")
    chunk = cfg.get("attention_chunk_size")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        local = {"sliding_attention": window, "chunked_attention": chunk}
        return [local.get(t) or None for t in layer_types]
    if model_type in ("llama4", "llama4_text") and chunk:
        # Llama4TextConfig: RoPE layers attend within chunks of attention_chunk_size (at most
        # that many tokens cached); every no_rope_layer_interval-th layer is global (NoPE)
        interval = cfg.whole("no_rope_layer_interval", 4)
        rope = cfg.get("no_rope_layers") or [
            int((i + 1) % interval != 0) for i in range(num_layers)
        ]
        return [chunk if rope[i] else None for i in range(num_layers)]
    if not window:
        return [None] * num_layers
    if model_type == "gemma2":  # Gemma2Config: even layers slide, odd layers are global
        return [window if i % 2 == 0 else None for i in range(num_layers)]
    if model_type in ("gemma3", "gemma3_text"):  # Gemma3TextConfig: every Nth layer is global
        pattern = cfg.whole("sliding_window_pattern", 6)
        return [None if (i + 1) % pattern == 0 else window for i in range(num_layers)]
    if model_type == "gpt_oss":  # GptOssConfig: sliding, full, sliding, full, ...
        return [window if i % 2 == 0 else None for i in range(num_layers)]
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not cfg.get("use_sliding_window", False):
            return [None] * num_layers
        max_window_layers = cfg.whole("max_window_layers", num_layers)
        return [window if i >= max_window_layers else None for i in range(num_layers)]
    return [window] * num_layers  # Mistral v0.1, Phi-3: every layer slides


def _moe(cfg: _Config, model_type: str) -> tuple[MoESpec | None, list[bool]]:
    """The MoE block and which layers use it, per family."""
    num_layers = cfg.positive("num_hidden_layers")
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if not experts:
        return None, [False] * num_layers
    experts = int(experts)
    top_k = cfg.positive("num_experts_per_tok", cfg.whole("experts_per_token", 2))
    if model_type in ("deepseek_v2", "deepseek_v3", "deepseek_v32"):
        first_dense = cfg.whole("first_k_dense_replace", 0)
        freq = cfg.positive("moe_layer_freq", 1)
        is_moe = [i >= first_dense and i % freq == 0 for i in range(num_layers)]
        width = cfg.positive("moe_intermediate_size")
        shared = cfg.whole("n_shared_experts", 0)
        spec = MoESpec(experts, top_k, width, shared, shared * width)
        return spec, is_moe
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = cfg.positive("decoder_sparse_step", 1)
        dense_only = set(cfg.get("mlp_only_layers", []) or [])
        is_moe = [i not in dense_only and (i + 1) % step == 0 for i in range(num_layers)]
        shared_width = cfg.whole("shared_expert_intermediate_size", 0)
        spec = MoESpec(
            experts,
            top_k,
            cfg.positive("moe_intermediate_size"),
            num_shared_experts=1 if shared_width else 0,
            shared_intermediate_size=shared_width,
            shared_expert_gate=bool(shared_width),
        )
        return spec, is_moe
    if model_type == "llama4_text":
        # Llama4TextConfig: every `interleave_moe_layer_step`-th layer is MoE, with one shared
        # expert of intermediate_size; the other layers use a dense MLP of intermediate_size_mlp
        step = cfg.positive("interleave_moe_layer_step", 1)
        is_moe = [(i + 1) % step == 0 for i in range(num_layers)]
        width = cfg.positive("intermediate_size")
        return MoESpec(experts, top_k, width, 1, width), is_moe
    if model_type == "gpt_oss":
        spec = MoESpec(
            experts,
            top_k,
            cfg.positive("intermediate_size"),
            router_bias=True,
            expert_bias=True,
        )
        return spec, [True] * num_layers
    # Mixtral and any Mixtral-like config: every layer is MoE with experts of intermediate_size
    width = cfg.positive("moe_intermediate_size", cfg.positive("intermediate_size"))
    return MoESpec(experts, top_k, width), [True] * num_layers


def _decoder(cfg: _Config, model_type: str) -> Architecture:
    """Llama-style decoders and their relatives (Mistral, Qwen, Mixtral, DeepSeek, gpt-oss, Gemma, Phi-3)."""
    num_layers = cfg.positive("num_hidden_layers")
    attention = _attention(cfg, model_type)
    moe, is_moe = _moe(cfg, model_type)
    windows = _layer_windows(cfg, model_type, num_layers)
    layers = tuple(LayerSpec(w, m) for w, m in zip(windows, is_moe, strict=True))
    needs_dense = any(not m for m in is_moe)
    mlp = None
    if needs_dense:
        if cfg.raw.get("intermediate_size") is None:
            raise GpuplanError(
                f"{cfg.name}: config.json is missing intermediate_size"
                f" (model_type {model_type!r}); cannot size its MLP"
            )
        if model_type == "phi":  # PhiConfig (phi-1/1.5/2): fc1 -> GELU -> fc2, with biases
            mlp = MLPSpec(cfg.positive("intermediate_size"), gated=False, bias=True)
        elif model_type == "llama4_text":
            mlp = MLPSpec(cfg.positive("intermediate_size_mlp", cfg.positive("intermediate_size")))
        else:
            mlp = MLPSpec(
                cfg.positive("intermediate_size"),
                gated=True,
                bias=bool(cfg.get("mlp_bias", False)),
            )
    gemma = model_type in ("gemma2", "gemma3", "gemma3_text")
    tie_default = model_type in ("gemma", "gemma2", "gemma3", "gemma3_text")
    notes: list[str] = []
    if cfg.get("num_nextn_predict_layers"):
        notes.append(
            f"{cfg.get('num_nextn_predict_layers')} multi-token-prediction layer(s) in the checkpoint"
            " are not counted (transformers does not build them; engines load them only for speculative decoding)"
        )
    return Architecture(
        name=cfg.name,
        model_type=model_type,
        hidden_size=cfg.positive("hidden_size"),
        num_layers=num_layers,
        vocab_size=cfg.positive("vocab_size"),
        attention=attention,
        layers=layers,
        mlp=mlp,
        moe=moe,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", tie_default)),
        norm="layernorm" if model_type == "phi" else "rms",
        norms_per_layer=4 if gemma else (1 if model_type == "phi" else 2),
        max_position_embeddings=cfg.whole("max_position_embeddings", 0),
        torch_dtype=_torch_dtype(cfg),
        quantization=_quantization(cfg),
        hidden_act=str(cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))),
        notes=tuple(notes),
        rope=_rope(cfg),
    )


def _rope(cfg: _Config) -> RopeSpec:
    """The rotary embedding of a RoPE decoder, from `rope_scaling` (or `rope_parameters`)."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rs = rs if isinstance(rs, Mapping) else {}
    partial = rs.get("partial_rotary_factor", cfg.get("partial_rotary_factor")) or 1.0
    return RopeSpec(
        kind=str(rs.get("rope_type") or rs.get("type") or "default"),
        factor=float(rs.get("factor") or 1.0),
        original_max_position=int(rs.get("original_max_position_embeddings") or 0),
        partial_rotary_factor=float(partial),
    )
