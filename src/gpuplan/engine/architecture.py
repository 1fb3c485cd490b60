"""One architecture record for every decoder gpuplan sizes, read from any config.json.

`Architecture` holds only the shapes that decide memory: widths, head counts, what each layer is
(attention, sliding or chunked attention, Mamba, gated-delta or lightning linear attention, a short
convolution, an FFN-only block), its FFN (dense or experts), norms, embeddings, quantisation.
`architecture_from_config` reads a Hugging Face `config.json` (already parsed into a dict: the
engine does no file I/O) through the family traits table (catalog/data/families.toml, loaded by
engine/families.py): the table says how the family spells its keys, transformers' defaults, and
its mechanisms; this module turns them into the record. Every value is read through
engine/config_schema.py, which types and bounds it and names the key in any error.

A `model_type` the table does not know is read with the standard keys as a Llama-style decoder and
says so in `notes`; if such a config declares a mechanism that reading would miss (a state-space
or linear-attention layer, an unknown nested sub-config, an unknown layer type) it is refused with
one line naming the key, instead of being sized as Llama.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpuplan.engine.added_params import AddedParams, added_params
from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.families import Family, base_family, family_for
from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.vision import multimodal_params
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:  # imported when a config has a quantization_config (cold start)
    from gpuplan.engine.encoder_decoder import EncoderSpec
    from gpuplan.engine.quantization import QuantizationSpec

# What a layer's token mixer is. "hybrid" = attention and a Mamba-2 mixer side by side (Falcon-H1).
MIXERS = (
    "attention",
    "mamba",
    "gated_delta",
    "lightning",
    "short_conv",
    "hybrid",
    "none",
    "cross_attention",  # attends to an encoder's (image's) states only: no cache per text token
)
STATE_MIXERS = ("mamba", "gated_delta", "lightning", "short_conv", "hybrid")


@record
class AttentionSpec:
    """Shapes of one attention block."""

    num_heads: int
    num_kv_heads: int
    head_dim: int  # query/key head dim; for MLA: qk_nope_head_dim + qk_rope_head_dim
    v_head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False  # RMS/LayerNorm on q and k (Qwen3, Gemma 3, OLMo 2, Cohere, ...)
    qk_norm_scope: str = "head"  # "head": one weight of head_dim; "proj": one per channel of q / k
    qk_norm_bias: bool = False
    sinks: bool = False  # one learned sink logit per head (gpt-oss)
    output_gate: bool = False  # q_proj also emits a sigmoid gate on the output (Qwen3-Next)
    head_gate: bool = False  # a g_proj of one sigmoid gate per head on the output (LFM3, Laguna)
    # Multi-head latent attention (DeepSeek V2/V3); kv_lora_rank is None for ordinary attention.
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    # DeepSeek-V3.2's lightning indexer (sparse attention): its heads and key width
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    # JetMoE's mixture of attention heads (JetMoeMoA): q and o are `attention_experts` experts
    # routed top-k (num_heads = KV heads x top-k); k and v are one shared kv_proj
    attention_experts: int = 0

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


@record
class MLPSpec:
    """A dense feed-forward block: gated (SwiGLU/GeGLU: gate, up, down) or plain (up, down)."""

    intermediate_size: int
    gated: bool = True
    bias: bool = False


@record
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
    expert_gated: bool = True  # experts are gated MLPs (False: up, down — Nemotron-H)
    shared_gated: bool = True
    router_score_bias: bool = False  # a learned per-expert routing bias parameter (ERNIE 4.5)
    latent_size: int = 0  # experts work in a latent width with projections in and out (Nemotron 3)
    output_bias: bool = False  # one bias on the block's output (JetMoeMoE.bias)


@record
class MambaSpec:
    """A selective state-space mixer: Mamba-1 (Gu & Dao 2023) or Mamba-2 (Dao & Gu 2024)."""

    version: int  # 1 or 2
    d_inner: int  # expand × hidden, or heads × head_dim (Mamba-2)
    d_state: int
    d_conv: int
    n_heads: int = 0  # Mamba-2
    head_dim: int = 0  # Mamba-2
    n_groups: int = 1  # Mamba-2: groups sharing B and C
    dt_rank: int = 0  # Mamba-1
    conv_bias: bool = True
    proj_bias: bool = False
    gated_norm: bool = True  # Mamba-2's RMSNorm over d_inner, gated by z
    bcdt_norms: bool = False  # Jamba's RMSNorms on dt, B and C
    chunk_size: int = 256  # Mamba-2: the chunk of its SSD scan (the torch scan pads to it)

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: x (Mamba-1), or x, B and C (Mamba-2)."""
        if self.version == 1:
            return self.d_inner
        return self.d_inner + 2 * self.n_groups * self.d_state


@record
class LinearAttentionSpec:
    """Linear attention with a recurrent state: gated DeltaNet (Yang et al. 2024; Qwen3-Next) or
    lightning attention (Qin et al. 2024; MiniMax-01)."""

    kind: str  # "gated_delta" | "lightning"
    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int = 0  # gated DeltaNet's causal convolution over q, k, v
    # Kimi Delta Attention (KimiLinearDeltaAttention): a gated DeltaNet whose decay is per channel,
    # with low-rank (through head_dim) forget and output gates; the same state shapes
    per_channel_decay: bool = False
    # Kimi-K3's KDA: the output gate is one full-rank g_proj (h x heads·d) instead of the
    # low-rank g_a / g_b pair (linear_attn_config.use_full_rank_gate)
    full_rank_gate: bool = False

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim


@record
class ShortConvSpec:
    """LFM2's gated short convolution: in_proj (3h), a depthwise conv of `kernel` taps, out_proj."""

    kernel: int
    bias: bool = False


@record(cache_hash=True)  # layers are grouped by kind: a dict key per layer, hashed once
class LayerSpec:
    """What one decoder layer is: its mixer, attention window, FFN, and per-layer overrides."""

    sliding_window: int | None = None  # None = full attention (or no attention)
    moe: bool = False
    mixer: str = "attention"  # one of MIXERS
    ffn: bool = True  # False: a mixer-only block (Nemotron-H's M and * blocks, Mamba)
    attention: AttentionSpec | None = None  # this layer's attention when not Architecture.attention
    kv_shared: bool = False  # reads an earlier layer's KV cache and keeps none (Gemma 3n)
    mlp_width: int | None = None  # this layer's dense FFN width when not the model's
    v_from_k: bool = False  # no v_proj: V is K (Gemma 4's attention_k_eq_v global layers)
    # Zamba 2: the shared transformer block whose weights this hybrid layer holds (the first
    # num_mem_blocks hybrid layers each hold one; later ones reuse them), -1 for none
    shared_block: int = -1

    def __post_init__(self) -> None:
        if self.mixer not in MIXERS:
            raise GpuplanError(f"layer mixer {self.mixer!r} is not modelled ({', '.join(MIXERS)})")

    @property
    def has_attention(self) -> bool:
        return self.mixer in ("attention", "hybrid")

    @property
    def has_state(self) -> bool:
        return self.mixer in STATE_MIXERS


@record
class SharedBlocksSpec:
    """Zamba 2's shared transformer blocks (Zamba2AttentionDecoderLayer): `count` blocks of
    attention over the concatenated [hidden, embedding] input (2h wide) and a gated MLP, reused
    in turn by the `uses` hybrid layers; each use has its own LoRA-style adapters of rank
    `adapter_rank` on the MLP's gate_up (always in transformers; Zyphra's use_shared_block_lora)
    and on q, k and v when `attention_adapters` (use_shared_attention_adapter)."""

    count: int
    uses: int
    adapter_rank: int
    attention_adapters: bool = False
    mlp_adapters: bool = True


@record
class RopeSpec:
    """Rotary position embedding as config.json declares it (`rope_scaling` / `rope_parameters`,
    `partial_rotary_factor`): engines size their cos/sin tables from it."""

    kind: str = "default"  # rope_type (or the older `type`): default, linear, llama3, yarn, ...
    factor: float = 1.0
    original_max_position: int = 0
    partial_rotary_factor: float = 1.0


@record(cache_hash=True)  # bills are cached by it: a deep hash of every field, once per object
class Architecture:
    """Everything about a model that decides its memory, and nothing else."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    attention: (
        AttentionSpec  # the attention layers' shape (heads of the mixer for attention-free models)
    )
    layers: tuple[LayerSpec, ...]
    mlp: MLPSpec | None = None  # dense FFN (used by every non-MoE layer)
    moe: MoESpec | None = None
    tie_word_embeddings: bool = False
    norm: str = "rms"  # "rms" or "layernorm"
    norms_per_layer: int = 2
    learned_positions: int = 0  # rows of a learned position table (GPT-2, OPT), 0 otherwise
    max_position_embeddings: int = 0
    torch_dtype: str = "bfloat16"
    quantization: QuantizationSpec | None = None
    hidden_act: str = "silu"  # the MLP activation (decides what autograd saves in training)
    vision_params: int = 0  # image encoder + projector of a vision-language checkpoint (vision.py)
    notes: tuple[str, ...] = field(default=())
    rope: RopeSpec | None = None  # None: no rotary embedding (learned positions, ALiBi)
    family: str = "base"  # the families.toml record that read the config
    norm_bias: bool = False  # LayerNorm with a bias
    norm_weight: bool = True  # False: non-parametric norms (OLMo 1)
    parallel_block: bool = False  # attention and FFN read the same normed input (GPT-J, Cohere)
    final_norm: bool = True
    embedding_norm: bool = False  # a norm right after the token embedding (BLOOM)
    lm_head_bias: bool = False
    embedding_dim: int = 0  # width of the token embedding when it is projected (OPT-350m)
    positions: str = "rope"  # rope | learned | alibi | none
    mamba: MambaSpec | None = None
    linear_attention: LinearAttentionSpec | None = None
    short_conv: ShortConvSpec | None = None
    ssm_state_dtype: str | None = (
        None  # the checkpoint's mamba_ssm_cache_dtype (Qwen3.5: mamba_ssm_dtype)
    )
    # Gemma 3n / Gemma 4: per-layer input embeddings (width per layer, their vocabulary), AltUp
    # streams and LAuReL rank (Gemma 3n), an MoE block beside the dense MLP (Gemma 4)
    # what training saves for backward (engine/activations.py): where the norms sit (pre, post or
    # both around each block), whether they scale in fp32 (Gemma, OLMo 2, Cohere), softcapping
    norm_placement: str = "pre"
    norm_fp32: bool = False
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    per_layer_input: int = 0
    per_layer_vocab: int = 0
    altup_inputs: int = 0
    laurel_rank: int = 0
    moe_beside_mlp: bool = False
    shared_blocks: SharedBlocksSpec | None = None  # Zamba 2 (params.shared_block_params)
    # BERT-style decoders: a token-type table, the LM head's dense + LayerNorm transform, a pooler
    token_types: int = 0
    head_transform: bool = False
    pooler: bool = False
    extra_vocab_rows: int = 0  # embedding rows beyond vocab_size (Mllama's 8 image tokens)
    # encoder-decoders (engine/encoder_decoder.py): the encoder, the embeddings, every weight by
    # part; `layers` are the decoder's, each with self- and cross-attention
    encoder: EncoderSpec | None = None
    # modules a family holds beyond these shapes (engine/added_params.py; params.py counts them)
    added: AddedParams | None = None

    def layer_groups(self, layers: range | None = None) -> tuple[tuple[LayerSpec, int], ...]:
        """(layer kind, how many) over the given layers (all by default): layers of one kind
        weigh and cache the same, so sums run over a handful of kinds, not every layer."""
        key = "_groups" if layers is None else f"_groups_{layers.start}_{layers.stop}"
        cached = self.__dict__.get(key)
        if cached is None:
            counts: dict[LayerSpec, int] = {}
            for i in layers if layers is not None else range(self.num_layers):
                spec = self.layers[i]
                counts[spec] = counts.get(spec, 0) + 1
            cached = tuple(counts.items())
            self.__dict__[key] = cached
        return cached

    def window_counts(self, layers: range | None = None) -> tuple[tuple[int | None, int], ...]:
        """(sliding window or None, number of attention layers) for the given layers."""
        counts: dict[int | None, int] = {}
        for spec, n in self.layer_groups(layers):
            if spec.has_attention:
                counts[spec.sliding_window] = counts.get(spec.sliding_window, 0) + n
        return tuple(counts.items())

    def attention_of(self, layer: LayerSpec) -> AttentionSpec:
        """The attention shape of `layer` (its own, or the model's)."""
        return layer.attention or self.attention

    @cached_property  # computed once per architecture: every bill asks
    def num_moe_layers(self) -> int:
        return sum(n for spec, n in self.layer_groups() if spec.moe)

    @cached_property  # computed once per architecture: every bill asks
    def num_sliding_layers(self) -> int:
        return sum(n for spec, n in self.layer_groups() if spec.sliding_window is not None)

    @cached_property  # computed once per architecture: every bill asks
    def num_attention_layers(self) -> int:
        return sum(n for spec, n in self.layer_groups() if spec.has_attention)

    @cached_property  # computed once per architecture: every bill asks
    def num_state_layers(self) -> int:
        return sum(n for spec, n in self.layer_groups() if spec.has_state)

    @property
    def norm_elements(self) -> int:
        """Parameters of one hidden-width norm: weight (and bias), none if non-parametric."""
        return self.hidden_size * (int(self.norm_weight) + int(self.norm_bias))


# --------------------------------------------------------------------------------------
# Reading a config.json
# --------------------------------------------------------------------------------------

_MULTIMODAL_WRAPPERS = ("text_config", "llm_config", "language_config")
_OUTER_KEYS = ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings")
# nested objects any family may carry without changing the decoder's shape
_NEUTRAL_OBJECTS = frozenset(
    {
        "quantization_config",
        "rope_scaling",
        "rope_parameters",
        "vision_config",
        "text_config",
        "auto_map",
        "id2label",
        "label2id",
        "task_specific_params",
        "generation_config",
        "compression_config",
        "sliding_window_config",
        "attention_config",
        "rope_config",
    }
)
# keys that declare a mechanism the Llama-style reading of an unknown family would miss
_MECHANISM_KEYS = (
    "layer_types",
    "layers_block_type",
    "hybrid_override_pattern",
    "attn_type_list",
    "full_attn_idxs",
    "block_configs",
    "ssm_state_size",
    "state_size",
    "mamba_d_state",
    "mamba_d_ssm",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "conv_L_cache",
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",
    "altup_num_inputs",
    "laurel_rank",
    "attn_layer_period",
    "expert_layer_period",
    "kv_lora_rank_per_layer",
    "use_parallel_residual",
    "parallel_attn",
    "alibi",
    "multi_query",
    "new_decoder_architecture",
    # seen on unknown families in transformers' own configs, each a mechanism Llama lacks:
    "kv_lora_rank",  # multi-head latent attention
    "q_lora_rank",
    "zero_expert_num",  # zero-computation experts (LongCat-Flash)
    "moe_num_experts",  # Aria's expert keys
    "is_moe",  # Doge's cross-domain MoE
    "keep_window_size",  # Doge's dynamic mask attention
    "kv_channels",  # mixture-of-attention heads (JetMoE)
    "block_types",  # RG-LRU recurrent blocks (RecurrentGemma)
    "lru_width",
    "H_cycles",  # recurrent stacks (HRM)
    "qk_layernorm",  # Persimmon's per-head LayerNorms
    "use_post_norm",  # extra post-norms (HyperCLOVA X)
    "type_vocab_size",  # BERT-style encoders (token types, learned positions, biases)
)
# activations that come with an MLP of no gate as often as with one: an unknown family's choice
# cannot be told from its config
_UNGATED_ACTIVATIONS = frozenset({"relu2", "relu", "gelu_new", "gelu"})


def architecture_from_config(config: Mapping[str, Any], name: str = "model") -> Architecture:
    """Build an `Architecture` from a Hugging Face `config.json` dict.

    Known families (engine/families.py) get their exact module layout. Any other `model_type`
    with the standard keys is read as a Llama-style decoder, with a note naming the assumptions;
    one declaring a mechanism that reading would miss is refused naming the key.
    """
    if not isinstance(config, Mapping):
        raise GpuplanError(f"{name}: config.json must be a JSON object")
    raw = _language_model(config)
    model_type = raw.get("model_type", config.get("model_type", "unknown"))
    if not isinstance(model_type, str) or len(model_type) > 128:
        raise GpuplanError(f"{name}: config field 'model_type' must be a short string")
    from gpuplan.engine.encoder_decoder import is_encoder_decoder

    if is_encoder_decoder(model_type):
        return _encoder_decoder(raw, name, model_type)
    if raw.get("is_encoder_decoder") is True:
        from gpuplan.engine.encoder_decoder import encoder_decoder_types

        raise GpuplanError(
            f"{name}: model_type {model_type!r} is an encoder-decoder (is_encoder_decoder) gpuplan"
            f" does not model (it reads {', '.join(encoder_decoder_types())}); cannot size it"
        )
    family = family_for(model_type)
    notes: list[str] = []
    if family is None:
        _refuse_unread_mechanisms(raw, name, model_type)
        family = base_family()
        notes.append(
            f"unknown model family {model_type!r}: read as a Llama-style decoder (gated MLP,"
            " RMSNorm, RoPE, no biases unless attention_bias/mlp_bias, every layer the same)"
        )
    family.refuse_unmodelled(raw, name)
    view, traits = family.resolve(raw, name)
    arch = _Reader(view, traits, family, model_type, notes).build()
    if arch.added is not None and arch.added.note:  # engine/added_params.py: said, not billed
        arch = replace(arch, notes=(*arch.notes, arch.added.note))
    vision, tower_notes = multimodal_params(config, name)
    if vision or tower_notes:
        arch = replace(arch, vision_params=vision, notes=arch.notes + tower_notes)
    return arch


def _encoder_decoder(raw: Mapping[str, Any], name: str, model_type: str) -> Architecture:
    """An encoder-decoder's decoder stack as layers, its encoder and embeddings in `encoder`
    (engine/encoder_decoder.py reads the record; nothing else of the family table applies)."""
    from gpuplan.engine.encoder_decoder import encoder_spec

    if raw.get("quantization_config"):
        raise GpuplanError(
            f"{name}: a quantization_config on an encoder-decoder ({model_type}) is not modelled;"
            " cannot size this checkpoint"
        )
    spec, shape = encoder_spec(raw, name)
    heads, head_dim, d = spec.cross_heads, spec.cross_head_dim, spec.width
    layer = LayerSpec()
    length = (
        f"its {spec.encoder_tokens} encoder positions"
        if spec.encoder_tokens
        else "the whole context (the prompt it encodes is at most that)"
    )
    view = ConfigView(
        raw, name, {"torch_dtype": ("torch_dtype", "dtype")}, {"torch_dtype": "float32"}
    )
    return Architecture(
        name=name,
        model_type=model_type,
        family=f"encoder-decoder:{spec.family}",
        hidden_size=d,
        num_layers=shape["decoder_layers"],
        vocab_size=_whole_field(raw, "vocab_size", name),
        attention=AttentionSpec(heads, heads, head_dim, head_dim),
        layers=(layer,) * shape["decoder_layers"],
        norm="layernorm",
        positions="learned",
        torch_dtype=str(view.get("torch_dtype")).replace("torch.", ""),
        hidden_act=str(raw.get("activation_function") or raw.get("dense_act_fn") or "gelu")[:32],
        encoder=spec,
        notes=(
            "encoder-decoder: each request also holds its encoder output and the cross-attention"
            f" K and V of every decoder layer, billed for {length}",
        ),
    )


def _whole_field(raw: Mapping[str, Any], key: str, name: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 1 << 32:
        raise GpuplanError(f"{name}: config field {key!r} must be a whole number of at least 1")
    return value


def _language_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a VLM's `text_config` (with the outer dtype, quantization
    and tying when the inner one lacks them), else the config itself."""
    raw = dict(config)
    for wrapper in _MULTIMODAL_WRAPPERS:
        inner = raw.get(wrapper)
        if isinstance(inner, Mapping) and any(
            k in inner for k in ("hidden_size", "n_embd", "d_model", "num_hidden_layers")
        ):
            merged = dict(inner)
            for key in _OUTER_KEYS:
                if key in raw and key not in merged:
                    merged[key] = raw[key]
            # transformers 5 ties a wrapper's head by the wrapper's own tie_word_embeddings
            # (PreTrainedModel.get_expanded_tied_weights_keys reads the top-level config)
            if isinstance(raw.get("tie_word_embeddings"), bool):
                merged["tie_word_embeddings"] = raw["tie_word_embeddings"]
            if "model_type" not in merged and "model_type" in raw:
                merged["model_type"] = raw["model_type"]
            return merged
    return raw


def _refuse_unread_mechanisms(raw: Mapping[str, Any], name: str, model_type: str) -> None:
    """An unknown family is read Llama-style only when nothing in it says that would be wrong."""
    for key in _MECHANISM_KEYS:
        if raw.get(key) not in (None, False, [], ""):
            raise GpuplanError(
                f"{name}: model_type {model_type!r} is not a known family and its config declares"
                f" {key!r}, a mechanism gpuplan cannot read for an unknown family; cannot size it"
            )
    act = raw.get("hidden_act")
    if isinstance(act, str) and act in _UNGATED_ACTIVATIONS:
        raise GpuplanError(
            f"{name}: model_type {model_type!r} is not a known family and its hidden_act {act!r}"
            " comes with plain (up, down) and gated MLPs alike; cannot size it"
        )
    for key, value in raw.items():
        if isinstance(value, Mapping) and key not in _NEUTRAL_OBJECTS:
            raise GpuplanError(
                f"{name}: model_type {model_type!r} is not a known family and its config has a"
                f" nested {key!r} gpuplan cannot read; cannot size it"
            )


def _quantization(v: ConfigView, notes: list[str]) -> QuantizationSpec | None:
    """The checkpoint's quantisation (engine/quantization.py, imported only for a quantised one).
    A Paddle mix_quant block over unquantised weights is read as stored, with a note."""
    raw = v.raw.get("quantization_config")
    if not raw:
        return None
    from gpuplan.engine.quantization import quantization_from_config

    spec = quantization_from_config(raw, v.name)
    if spec is None and isinstance(raw, Mapping) and raw.get("quantization") == "mix_quant":
        notes.append(
            "Paddle mix_quant block (dense_quant_type"
            f" {str(raw.get('dense_quant_type'))[:24]!r}, moe_quant_type"
            f" {str(raw.get('moe_quant_type'))[:24]!r}) without is_quantized: the weights are read"
            " as the checkpoint stores them (FastDeploy quantises them only as it loads)"
        )
    return spec


class _Reader:
    """Turns one family's view of a config into an `Architecture`, one named step at a time."""

    def __init__(
        self,
        view: ConfigView,
        traits: dict[str, Any],
        family: Family,
        model_type: str,
        notes: list[str],
    ):
        self.v = view
        self.t = traits
        self.family = family
        self.model_type = model_type
        self.notes = notes
        self._layers_cache: tuple[LayerSpec, ...] = ()
        self._specs: dict[tuple[str, int | None, bool], LayerSpec] = {}

    def build(self) -> Architecture:
        v, t = self.v, self.t
        self._check_required()
        hidden = v.require("hidden_size")
        num_layers = self._num_layers()
        attention = self._attention(hidden)
        kinds = self._schedule(num_layers)
        moe, moe_flags = self._moe(num_layers, kinds)
        mamba = self._mamba(hidden) if t["mamba"] else None
        linear = self._linear_attention(attention) if t["linear_attention"] else None
        short = self._short_conv() if t["short_conv"] else None
        layers = tuple(
            self._layer(kind, window, m) for (kind, window), m in zip(kinds, moe_flags, strict=True)
        )
        extras: dict[str, Any] = {}
        if t["per_layer_embeddings"]:
            assert attention is not None
            layers, extras = self._gemma_layers(layers, attention, moe)
        if v.raw.get("per_layer_config") is not None:
            assert attention is not None
            layers = self._per_layer_config(layers, attention)
        if attention is not None and attention.indexer_heads:
            layers = self._shared_indexer_layers(layers, attention)
        if attention is not None and (t["swa_sinks"] or v.get("swa_num_key_value_heads")):
            layers = self._sliding_attention(layers, attention)
        if attention is not None and v.get("num_attention_heads_per_layer") is not None:
            layers = self._heads_per_layer(layers, attention)
        if t["shared_blocks"]:
            layers, extras["shared_blocks"] = self._shared_blocks(layers)
        self._check_mixers(layers, mamba, linear, short)
        self._layers_cache = layers
        dense = any(s.ffn and (not s.moe or extras.get("moe_beside_mlp")) for s in layers)
        dense = dense or bool(t["shared_blocks"])
        mlp = self._mlp(hidden) if dense else None
        if attention is None:
            attention = self._stand_in_attention(mamba, hidden)
        learned = 0
        if t["positions"] == "learned":
            learned = v.require("max_position_embeddings") + t["position_offset"]
        if v.get("num_nextn_predict_layers"):
            self.notes.append(
                f"{v.get('num_nextn_predict_layers')} multi-token-prediction layer(s) in the"
                " checkpoint are not counted (transformers does not build them; engines load them"
                " only for speculative decoding)"
            )
        if any(spec.mixer == "cross_attention" for spec in layers):
            self.notes.append(
                "cross-attention layers hold each request's image K and V (not per text token);"
                " that cache is not billed here"
            )
        embedding_dim = v.get("word_embed_proj_dim") or 0
        return Architecture(
            name=v.name,
            model_type=self.model_type,
            family=self.family.name,
            hidden_size=hidden,
            num_layers=num_layers,
            vocab_size=v.require("vocab_size"),
            attention=attention,
            layers=layers,
            mlp=mlp,
            moe=moe,
            mamba=mamba,
            linear_attention=linear,
            short_conv=short,
            tie_word_embeddings=bool(v.get("tie_word_embeddings")),
            norm=t["norm"],
            norm_bias=t["norm_bias"] and t["norm"] == "layernorm",
            norm_weight=t["norm_weight"],
            norms_per_layer=t["norms_per_layer"],
            parallel_block=t["block"] == "parallel",
            final_norm=t["final_norm"],
            embedding_norm=t["embedding_norm"],
            lm_head_bias=t["lm_head_bias"],
            embedding_dim=embedding_dim if embedding_dim != hidden else 0,
            positions=t["positions"],
            learned_positions=learned,
            max_position_embeddings=v.get("max_position_embeddings") or 0,
            torch_dtype=str(v.get("torch_dtype")).replace("torch.", ""),
            quantization=_quantization(v, self.notes),
            hidden_act=str(v.get("hidden_act")),
            notes=tuple(self.notes),
            rope=self._rope() if t["positions"] == "rope" else None,
            ssm_state_dtype=v.get("mamba_ssm_cache_dtype") or v.get("mamba_ssm_dtype"),
            norm_placement=t["norm_placement"],
            norm_fp32=t["norm_fp32"],
            token_types=int(t["token_types"] or 0),
            head_transform=bool(t["head_transform"]),
            pooler=bool(t["pooler"]),
            extra_vocab_rows=int(t["extra_vocab_rows"] or 0),
            attn_softcap=v.get("attn_logit_softcapping") or 0.0,
            final_softcap=v.get("final_logit_softcapping") or 0.0,
            added=added_params(t["added"], v, hidden),
            **extras,
        )

    def _check_required(self) -> None:
        """Name every missing size at once: hidden, layers, heads (if attention), vocabulary."""
        v = self.v
        fields = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
        if self.t["attention"] == "none":
            fields.remove("num_attention_heads")
        if (self.t["schedule"] == "hybrid_pattern" and v.get("hybrid_override_pattern")) or v.get(
            "layer_types"
        ):
            fields.remove("num_hidden_layers")  # the schedule's length says it
        missing = [v.spelling(f) for f in fields if v.get(f) is None]
        if missing:
            raise GpuplanError(
                f"{v.name}: config.json is missing {', '.join(missing)}"
                f" (model_type {self.model_type!r}); cannot size this model"
            )

    # -- layers -------------------------------------------------------------------------------

    def _num_layers(self) -> int:
        v = self.v
        pattern = (
            v.get("hybrid_override_pattern") if self.t["schedule"] == "hybrid_pattern" else None
        )
        if pattern is not None:
            if v.present("num_hidden_layers") and v.get("num_hidden_layers") != len(pattern):
                raise v.fail(
                    "hybrid_override_pattern",
                    f"has {len(pattern)} layers but num_hidden_layers is {v.get('num_hidden_layers')}",
                )
            if not pattern:
                raise v.fail("hybrid_override_pattern", "is empty")
            return len(pattern)
        layer_types = v.get("layer_types")
        if layer_types is not None and not v.present("num_hidden_layers") and layer_types:
            return len(layer_types)
        return v.require("num_hidden_layers")

    def _schedule(self, n: int) -> list[tuple[str, int | None]]:
        """(kind, window) per layer: from the config's `layer_types`, else the family's rule."""
        v, t = self.v, self.t
        window = v.get("sliding_window") or None
        chunk = v.get("attention_chunk_size") or None
        names = v.get("layer_types")
        if names is not None and len(names) != n:
            raise v.fail("layer_types", f"has {len(names)} entries for {n} layers")
        if names is None:
            kinds = self._schedule_rule(n, window)
        else:
            kinds = [self._layer_kind(name) for name in names]
        if t["schedule"] in ("qwen2", "qwen2_moe") and not v.get("use_sliding_window"):
            window = None  # Qwen2Config: sliding_window only counts with use_sliding_window
        out: list[tuple[str, int | None]] = []
        for kind in kinds:
            if kind == "sliding":
                out.append(("sliding", window) if window else ("full", None))
            elif kind == "chunked":
                out.append(("chunked", chunk) if chunk else ("full", None))
            else:
                out.append((kind, None))
        return out

    def _layer_kind(self, name: str) -> str:
        kinds = self.t["layer_kinds"]
        if name not in kinds:
            raise self.v.fail(
                "layer_types",
                f"names layer type {name!r}, which gpuplan does not model for"
                f" {self.family.name if self.family.name != 'base' else 'an unknown family'}"
                f" (known: {', '.join(sorted(kinds))})",
            )
        return str(kinds[name])

    def _schedule_rule(self, n: int, window: int | None) -> list[str]:
        v, rule = self.v, self.t["schedule"]
        if rule == "uniform":
            return ["sliding" if self.t["sliding"] and window else "full"] * n
        if rule == "alternate":  # Gemma 2, gpt-oss: sliding, full, sliding, ...
            return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
        if rule == "pattern":
            return self._pattern_schedule(n)
        if rule == "qwen2":
            if not v.get("use_sliding_window"):
                return ["full"] * n
            first = v.get("max_window_layers")
            first = 28 if first is None else first
            return ["sliding" if i >= first else "full" for i in range(n)]
        if rule == "qwen2_moe":
            if not v.get("use_sliding_window"):
                return ["full"] * n
            last = v.get("max_window_layers")
            last = 28 if last is None else last
            return ["sliding" if (i + 1) % 2 and i < last else "full" for i in range(n)]
        if rule == "llama4":
            return self._llama4_schedule(n)
        if rule == "interval":
            k = v.get("full_attention_interval") or 4
            linear = self.t["layer_kinds"].get("linear_attention", "gated_delta")
            return ["full" if (i + 1) % k == 0 else linear for i in range(n)]
        if rule == "hybrid_pattern":
            return self._hybrid_pattern(n)
        if rule == "jamba":
            period, offset = v.get("attn_layer_period"), v.get("attn_layer_offset")
            if not period:
                raise v.fail("attn_layer_period", "must be at least 1")
            return ["full" if i % period == offset else "mamba" for i in range(n)]
        if rule == "attn_type_list":
            flags = v.get("attn_type_list")
            if flags is None:  # MiniMaxConfig's default: full, linear, full, ...
                return ["full" if (i + 1) % 2 else "lightning" for i in range(n)]
            if len(flags) != n:
                raise v.fail("attn_type_list", f"has {len(flags)} entries for {n} layers")
            return ["full" if f else "lightning" for f in flags]
        if rule == "full_attn_idxs":
            idxs = v.get("full_attn_idxs")  # LFM2; Bamba's attn_layer_indices (else Mamba-2)
            rest = "mamba" if self.t["mamba"] else "short_conv"
            full = set(idxs) if idxs is not None else set(range(n)) if rest != "mamba" else set()
            return ["full" if i in full else rest for i in range(n)]
        if rule == "smollm3":  # SmolLM3Config: NoPE layers slide when use_sliding_window
            rope = v.get("no_rope_layers")
            if rope is None:
                interval = v.get("no_rope_layer_interval") or 4
                rope = tuple(int((i + 1) % interval != 0) for i in range(n))
            if len(rope) != n:
                raise v.fail("no_rope_layers", f"has {len(rope)} entries for {n} layers")
            slide = bool(v.get("use_sliding_window")) and window is not None
            return ["sliding" if slide and not r else "full" for r in rope]
        if rule == "listed":  # a family whose layers only its layer_types can tell apart
            raise GpuplanError(
                f"{v.name}: config.json has no {v.spelling('layer_types')!r} (model_type"
                f" {self.model_type!r}); cannot tell its layers apart"
            )
        if rule == "cross_listed":  # MllamaTextConfig.cross_attention_layers
            cross = set(v.get("cross_attention_layers") or ())
            if any(i >= n for i in cross):
                raise v.fail("cross_attention_layers", f"names a layer beyond the {n} layers")
            return ["cross" if i in cross else "full" for i in range(n)]
        if rule == "kimi_linear":  # KimiLinearConfig: linear_attn_config.full_attn_layers
            full = v.get("full_attn_layers")  # 1-indexed in the checkpoint
            if full is None:
                return ["full" if i and i % 4 == 0 else "gated_delta" for i in range(n)]
            chosen = {i - 1 for i in full}
            return ["full" if i in chosen else "gated_delta" for i in range(n)]
        if rule == "mimo_v2":  # the checkpoint's hybrid_layer_pattern (0 full, 1 sliding), else
            pattern = v.get("hybrid_layer_pattern")  # MiMoV2FlashConfig: 0 and every k-th full
            if pattern is not None:
                if len(pattern) != n:
                    raise v.fail(
                        "hybrid_layer_pattern", f"has {len(pattern)} entries for {n} layers"
                    )
                return ["sliding" if p else "full" for p in pattern]
            k = v.get("full_attention_interval") or 6
            return ["full" if i == 0 or (i + 1) % k == 0 else "sliding" for i in range(n)]
        if rule == "all_mamba":
            return ["mamba"] * n
        if rule == "all_hybrid":
            return ["hybrid"] * n
        raise AssertionError(rule)

    def _pattern_schedule(self, n: int) -> list[str]:
        """Gemma 3 / Cohere 2 / EXAONE 4: every `sliding_window_pattern`-th layer is global;
        a string pattern ("LLLG") spells local and global layers and repeats."""
        v = self.v
        pattern = v.get("sliding_window_pattern")
        if v.get("sliding_window") is None:
            return ["full"] * n
        if isinstance(pattern, str):
            if not pattern or set(pattern.upper()) - {"L", "G"}:
                raise v.fail("sliding_window_pattern", "must be a number or a string of L and G")
            p = pattern.upper()
            return ["sliding" if p[i % len(p)] == "L" else "full" for i in range(n)]
        if not pattern:
            return ["full"] * n
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]

    def _llama4_schedule(self, n: int) -> list[str]:
        """Llama 4: RoPE layers attend within chunks of attention_chunk_size; NoPE layers (every
        no_rope_layer_interval-th, or 0 in no_rope_layers) are global."""
        v = self.v
        rope = v.get("no_rope_layers")
        if rope is None or len(rope) == 0:
            interval = v.get("no_rope_layer_interval") or 4
            rope = tuple(int((i + 1) % interval != 0) for i in range(n))
        if len(rope) != n:
            raise v.fail("no_rope_layers", f"has {len(rope)} entries for {n} layers")
        return ["chunked" if r else "full" for r in rope]

    def _hybrid_pattern(self, n: int) -> list[str]:
        """Nemotron-H: M Mamba-2, * attention, - MLP, E experts, one block each."""
        v = self.v
        pattern = v.get("hybrid_override_pattern")
        if pattern is None:
            raise GpuplanError(
                f"{v.name}: config.json has neither 'hybrid_override_pattern' nor 'layer_types'"
                " (model_type nemotron_h); cannot tell its layers apart"
            )
        chars = {"M": "mamba", "*": "full", "-": "mlp_only", "E": "moe_only"}
        bad = sorted(set(pattern) - set(chars))
        if bad:
            raise v.fail(
                "hybrid_override_pattern",
                f"has block type(s) {''.join(bad)!r} gpuplan does not model (known: M * - E)",
            )
        return [chars[c] for c in pattern]

    def _layer(self, kind: str, window: int | None, moe: bool) -> LayerSpec:
        """One layer's spec; layers of one kind share one object (grouping them by kind then
        compares by identity)."""
        key = (kind, window, moe)
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = self._new_layer(kind, window, moe)
        return spec

    def _new_layer(self, kind: str, window: int | None, moe: bool) -> LayerSpec:
        block_ffn = self.family.name not in ("nemotron_h", "mamba", "mamba2", "zamba2")
        if kind in ("full", "sliding", "chunked"):
            return LayerSpec(window, moe, "attention", ffn=block_ffn)
        if kind == "cross":
            return LayerSpec(None, moe, "cross_attention", ffn=block_ffn)
        if kind == "moe_only":
            return LayerSpec(None, True, "none")
        if kind == "mlp_only":
            return LayerSpec(None, False, "none")
        mixer = {"mamba": "mamba", "hybrid": "hybrid"}.get(kind, kind)
        return LayerSpec(None, moe, mixer, ffn=block_ffn)

    def _check_mixers(
        self,
        layers: tuple[LayerSpec, ...],
        mamba: MambaSpec | None,
        linear: LinearAttentionSpec | None,
        short: ShortConvSpec | None,
    ) -> None:
        """Every layer's mixer has its shape (a family must declare the mixers it uses)."""
        for spec in layers:
            missing = (
                (spec.mixer in ("mamba", "hybrid") and mamba is None)
                or (spec.mixer in ("gated_delta", "lightning") and linear is None)
                or (spec.mixer == "short_conv" and short is None)
                or (
                    spec.mixer in ("gated_delta", "lightning")
                    and linear
                    and linear.kind != spec.mixer
                )
            )
            if missing:
                raise self.v.fail(
                    "layer_types",
                    f"has {spec.mixer} layers, which the {self.family.name} family does not model",
                )

    def _shared_blocks(
        self, layers: tuple[LayerSpec, ...]
    ) -> tuple[tuple[LayerSpec, ...], SharedBlocksSpec]:
        """Zamba 2 (Zamba2Model.get_layers): the hybrid layers run shared transformer blocks in
        turn; the first `num_mem_blocks` of them hold the blocks' weights, the rest reuse them."""
        v = self.v
        count = v.require("num_mem_blocks")
        hybrid = [i for i, s in enumerate(layers) if s.mixer == "hybrid"]
        out = list(layers)
        for k, i in enumerate(hybrid[:count]):
            out[i] = replace(layers[i], shared_block=k)
        spec = SharedBlocksSpec(
            count=min(count, len(hybrid)),
            uses=len(hybrid),
            adapter_rank=v.require("adapter_rank"),
            attention_adapters=bool(v.get("use_shared_attention_adapter")),
            mlp_adapters=v.get("use_shared_block_lora") is not False,
        )
        return tuple(out), spec

    def _gemma_layers(
        self, layers: tuple[LayerSpec, ...], attention: AttentionSpec, moe: MoESpec | None
    ) -> tuple[tuple[LayerSpec, ...], dict[str, Any]]:
        """Gemma 3n / Gemma 4 per-layer variation: the last num_kv_shared_layers reuse an earlier
        layer's K and V (no k/v projections, no cache: Gemma3nTextAttention, Gemma4TextAttention),
        Gemma 3n's per-layer FFN widths, Gemma 4's global layers with global_head_dim (and with
        attention_k_eq_v, num_global_key_value_heads and no v_proj), double-wide MLPs on the
        KV-sharing layers, and an MoE block beside the dense MLP (enable_moe_block)."""
        v = self.v
        n = len(layers)
        shared = v.get("num_kv_shared_layers") or 0
        if shared > n:
            raise v.fail("num_kv_shared_layers", f"({shared}) exceeds the {n} layers")
        widths = v.raw.get("intermediate_size")
        per_layer_width: list[int | None] = [None] * n
        if isinstance(widths, list):
            if len(widths) != n:
                raise v.fail("intermediate_size", f"lists {len(widths)} widths for {n} layers")
            for i, w in enumerate(widths):
                if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 1 << 22:
                    raise v.fail(
                        "intermediate_size", f"entry {i} must be a whole number in [1, 4194304]"
                    )
                per_layer_width[i] = w
        double = bool(v.get("use_double_wide_mlp"))
        k_eq_v = bool(v.get("attention_k_eq_v"))
        global_spec = attention
        if self.model_type.startswith("gemma4") and v.raw.get("per_layer_config") is None:
            global_spec = replace(
                attention,
                head_dim=v.get("global_head_dim") or 512,
                v_head_dim=v.get("global_head_dim") or 512,
                num_kv_heads=(v.get("num_global_key_value_heads") or attention.num_kv_heads)
                if k_eq_v
                else attention.num_kv_heads,
            )
        if (
            self.model_type.startswith("gemma4")
            and layers
            and layers[-1].sliding_window is not None
        ):
            layers = (*layers[:-1], replace(layers[-1], sliding_window=None))  # Gemma4TextConfig
        out = []
        base_width = None if isinstance(widths, list) else (v.get("intermediate_size") or None)
        for i, spec in enumerate(layers):
            is_shared = i >= n - shared
            attn = (
                global_spec
                if spec.sliding_window is None and global_spec is not attention
                else None
            )
            width = per_layer_width[i]
            if double and is_shared and base_width:
                width = 2 * base_width
            out.append(
                replace(
                    spec,
                    attention=attn,
                    kv_shared=is_shared,
                    mlp_width=width,
                    v_from_k=k_eq_v and spec.sliding_window is None,
                )
            )
        extras = {
            "per_layer_input": v.get("hidden_size_per_layer_input") or 0,
            "per_layer_vocab": v.get("vocab_size_per_layer_input") or v.require("vocab_size"),
            "altup_inputs": v.get("altup_num_inputs") or 0,
            "laurel_rank": v.get("laurel_rank") or 0,
            "moe_beside_mlp": moe is not None,
        }
        return tuple(out), extras

    _PER_LAYER_KEYS = (
        "head_dim",
        "num_key_value_heads",
        "num_attention_heads",
        "intermediate_size",
    )

    def _per_layer_config(
        self, layers: tuple[LayerSpec, ...], attention: AttentionSpec
    ) -> tuple[LayerSpec, ...]:
        """transformers' heterogeneous configs (`per_layer_config`: layer index -> overrides of
        head_dim, num_key_value_heads, num_attention_heads, intermediate_size); any other key is
        refused, naming it."""
        v, raw = self.v, self.v.raw.get("per_layer_config")
        if not isinstance(raw, Mapping):
            raise v.fail("per_layer_config", "must be a JSON object of layer index -> overrides")
        out = list(layers)
        for key, overrides in raw.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise v.fail(
                    "per_layer_config", f"has a key {str(key)[:20]!r} that is not a layer index"
                ) from None
            if not 0 <= i < len(out) or not isinstance(overrides, Mapping):
                raise v.fail(
                    "per_layer_config", f"entry {str(key)[:20]!r} is not a layer of this model"
                )
            unknown = sorted(set(overrides) - set(self._PER_LAYER_KEYS))
            if unknown:
                raise GpuplanError(
                    f"{v.name}: config field 'per_layer_config.{i}.{unknown[0]}' is a per-layer"
                    " override gpuplan does not model; cannot size this model"
                )
            sub = ConfigView(overrides, f"{v.name}: per_layer_config.{i}", {}, {})
            base = out[i].attention or attention
            heads = sub.get("num_attention_heads") or base.num_heads
            kv = sub.get("num_key_value_heads") or base.num_kv_heads
            hd = sub.get("head_dim") or base.head_dim
            if heads % kv:
                raise sub.fail("num_key_value_heads", f"({kv}) must divide {heads} heads")
            spec = replace(base, num_heads=heads, num_kv_heads=kv, head_dim=hd, v_head_dim=hd)
            out[i] = replace(
                out[i],
                attention=None if spec == attention else spec,
                mlp_width=sub.get("intermediate_size") or out[i].mlp_width,
            )
        return tuple(out)

    def _shared_indexer_layers(
        self, layers: tuple[LayerSpec, ...], attention: AttentionSpec
    ) -> tuple[LayerSpec, ...]:
        """GLM-5's cross-layer top-k sharing (GlmMoeDsaConfig.indexer_types): a "shared" layer
        reuses the previous "full" layer's selection, so it has no indexer and caches no indexer
        keys. The list, else `index_topk_pattern` ("F"/"S" per layer), else every
        `index_topk_freq`-th layer from `index_skip_topk_offset` on is full (GlmMoeDsaConfig)."""
        v, n = self.v, len(layers)
        types = v.get("indexer_types")
        pattern = v.get("index_topk_pattern")
        if types is None and pattern is not None:
            if set(pattern) - {"F", "S"}:
                raise v.fail("index_topk_pattern", "must be a string of F and S")
            types = ["full" if c == "F" else "shared" for c in pattern]
        if types is None:
            freq = v.get("index_topk_freq") or 1
            offset = v.get("index_skip_topk_offset")
            offset = 2 if offset is None else offset
            types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
        if len(types) != n:
            raise v.fail("indexer_types", f"has {len(types)} entries for {n} layers")
        bad = sorted(set(types) - {"full", "shared"})
        if bad:
            raise v.fail("indexer_types", f"names {bad[0]!r} (known: full, shared)")
        if "shared" not in types:
            return layers
        bare = replace(attention, indexer_heads=0, indexer_head_dim=0)
        return tuple(
            replace(spec, attention=bare) if kind == "shared" and spec.has_attention else spec
            for spec, kind in zip(layers, types, strict=True)
        )

    def _sliding_attention(
        self, layers: tuple[LayerSpec, ...], attention: AttentionSpec
    ) -> tuple[LayerSpec, ...]:
        """Sliding-window layers with their own attention shape (MiMoV2FlashAttention: its SWA
        layers have swa_num_key_value_heads KV heads, twice the full layers' in transformers, and
        the attention sinks when the family has `swa_sinks`; the checkpoint's config.json also
        spells swa_num_attention_heads, swa_head_dim and swa_v_head_dim)."""
        v, t = self.v, self.t
        kv = v.get("swa_num_key_value_heads") or attention.num_kv_heads
        heads = v.get("swa_num_attention_heads") or attention.num_heads
        if heads % kv:
            raise v.fail(
                "swa_num_key_value_heads", f"({kv}) must divide the sliding layers' {heads} heads"
            )
        sliding = replace(
            attention,
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=v.get("swa_head_dim") or attention.head_dim,
            v_head_dim=v.get("swa_v_head_dim") or attention.v_head_dim,
            sinks=attention.sinks or bool(t["swa_sinks"]),
        )
        return tuple(
            replace(spec, attention=sliding)
            if spec.sliding_window is not None and spec.has_attention
            else spec
            for spec in layers
        )

    def _heads_per_layer(
        self, layers: tuple[LayerSpec, ...], attention: AttentionSpec
    ) -> tuple[LayerSpec, ...]:
        """`num_attention_heads_per_layer` (LagunaConfig): each attention layer's query heads,
        sharing the model's KV heads and head_dim (LagunaAttention)."""
        v = self.v
        heads = v.get("num_attention_heads_per_layer")
        if len(heads) != len(layers):
            raise v.fail(
                "num_attention_heads_per_layer",
                f"has {len(heads)} entries for {len(layers)} layers",
            )
        out = list(layers)
        for i, (spec, n) in enumerate(zip(layers, heads, strict=True)):
            if not spec.has_attention:
                continue
            base = spec.attention or attention
            if n < 1 or n % base.num_kv_heads:
                raise v.fail(
                    "num_attention_heads_per_layer",
                    f"entry {i} ({n}) must be a multiple of the {base.num_kv_heads} KV heads",
                )
            if n != base.num_heads:
                out[i] = replace(spec, attention=replace(base, num_heads=n))
        return tuple(out)

    # -- attention ----------------------------------------------------------------------------

    def _attention(self, hidden: int) -> AttentionSpec | None:
        v, t = self.v, self.t
        if t["attention"] == "none":
            return None
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
        }
        if t["attention"] == "mla" or v.get("kv_lora_rank") is not None:
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
        kv_heads = v.require("num_key_value_heads")
        if t["attention_experts"]:  # JetMoeConfig: num_attention_heads = KV heads x top-k
            heads = kv_heads * v.require("experts_per_token")
            common["attention_experts"] = v.require("num_experts")
        if heads % kv_heads:
            raise v.fail(
                "num_key_value_heads",
                f"({kv_heads}) must divide num_attention_heads ({heads})",
            )
        if not v.present("head_dim") and hidden % heads and t["head_dim_floor"]:
            self.notes.append(  # Glm4MoeAttention: getattr(config, "head_dim", hidden // heads)
                f"no head_dim and {heads} heads do not divide hidden_size {hidden}: head_dim"
                f" read as {hidden // heads} (hidden_size // heads, as transformers builds it)"
            )
        elif not v.present("head_dim") and hidden % heads:
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

    def _stand_in_attention(self, mamba: MambaSpec | None, hidden: int) -> AttentionSpec:
        """Attention-free models (Mamba): a shape with no KV and the mixer's heads, so tensor
        parallelism checks divide what engines shard (Mamba-2 heads, Mamba-1 channels)."""
        heads = (mamba.n_heads or mamba.d_inner) if mamba else 1
        return AttentionSpec(num_heads=heads, num_kv_heads=heads, head_dim=0, v_head_dim=0)

    def _rope(self) -> RopeSpec:
        """The rotary embedding, from `rope_scaling` (or `rope_parameters`)."""
        v = self.v
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

    # -- feed-forward -------------------------------------------------------------------------

    def _mlp(self, hidden: int) -> MLPSpec:
        v, t = self.v, self.t
        if self.model_type in ("llama4", "llama4_text") and v.present("intermediate_size_mlp"):
            width = v.require("intermediate_size_mlp")
        elif t["per_layer_embeddings"] and isinstance(v.raw.get("intermediate_size"), list):
            width = next(s.mlp_width for s in self._layers_cache if s.mlp_width)  # Gemma 3n
        elif t["ffn_width"] == "lfm2":
            width = self._lfm2_width()
        else:
            width = v.require("intermediate_size")
        return MLPSpec(width, gated=t["mlp"] == "gated", bias=bool(t["mlp_bias"]))

    def _lfm2_width(self) -> int:
        """Lfm2MLP: with block_auto_adjust_ff_dim, 2/3 of block_ff_dim, times the multiplier and
        rounded up to block_multiple_of when a multiplier is set."""
        v = self.v
        width = v.require("intermediate_size")
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

    def _moe(
        self, n: int, kinds: list[tuple[str, int | None]]
    ) -> tuple[MoESpec | None, list[bool]]:
        """The experts block and which layers route to it."""
        v, t = self.v, self.t
        rule = t["moe_layers"]
        experts = v.get("num_experts") or 0
        if rule == "pattern":
            flags = [kind == "moe_only" for kind, _ in kinds]
            if any(flags) and not experts:
                raise v.fail("num_experts", "must be at least 1 for the E blocks of the pattern")
        elif not experts or (rule == "jamba" and experts < 2):
            return None, [False] * n
        else:
            flags = self._moe_flags(rule, n)
        if not any(flags):
            return None, flags
        top_k = v.require("experts_per_token")
        if top_k > experts:
            raise v.fail("experts_per_token", f"({top_k}) exceeds the {experts} experts")
        width = v.require("moe_intermediate_size")
        shared_width = v.get("shared_expert_intermediate_size") or 0
        shared = v.get("num_shared_experts") or 0
        if not shared_width and shared:
            shared_width = shared * width
        latent = v.get("moe_latent_size") or 0
        spec = MoESpec(
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
            latent_size=latent,
            output_bias=bool(t["moe_output_bias"]),
        )
        return spec, flags

    def _moe_flags(self, rule: str, n: int) -> list[bool]:
        v = self.v
        listed = v.get("mlp_layer_types")  # transformers 5 spells it out (Glm4MoeLiteConfig)
        if listed:
            return self._listed_moe_flags(listed, n)
        flags = v.get(
            "moe_layer_pattern"
        )  # MiMo-V2-Flash's checkpoint: moe_layer_freq 0/1 per layer
        if flags is not None:
            return self._listed_moe_flags(tuple("sparse" if f else "dense" for f in flags), n)
        if rule == "all":
            return [True] * n
        if rule == "deepseek":  # DeepseekV3DecoderLayer
            first, freq = v.get("first_k_dense_replace") or 0, v.get("moe_layer_freq") or 1
            return [i >= first and i % freq == 0 for i in range(n)]
        if rule == "first_k":  # Glm4MoeDecoderLayer
            first = v.get("first_k_dense_replace") or 0
            return [i >= first for i in range(n)]
        if rule == "qwen":  # Qwen2MoeDecoderLayer
            step = v.get("decoder_sparse_step") or 1
            dense = set(v.get("mlp_only_layers") or ())
            return [i not in dense and (i + 1) % step == 0 for i in range(n)]
        if rule == "llama4":  # Llama4TextConfig.moe_layers
            listed = v.get("moe_layers")
            if listed is None:
                step = v.get("interleave_moe_layer_step") or 1
                listed = tuple(range(step - 1, n, step))
            chosen = set(listed)
            return [i in chosen for i in range(n)]
        if rule == "jamba":
            period, offset = v.get("expert_layer_period") or 1, v.get("expert_layer_offset") or 0
            return [i % period == offset for i in range(n)]
        if rule == "ernie":  # Ernie4_5_MoeDecoderLayer
            start = v.get("moe_layer_start_index") or 0
            end = v.get("moe_layer_end_index")
            end = n - 1 if end is None or end == -1 else end
            step = v.get("moe_layer_interval") or 1
            return [(i + 1) % step == 0 and start <= i <= end for i in range(n)]
        raise AssertionError(rule)

    def _listed_moe_flags(self, listed: tuple[str, ...], n: int) -> list[bool]:
        """`mlp_layer_types`: "sparse" (experts) or "dense" per layer, one entry per layer."""
        unknown = sorted(set(listed) - {"sparse", "dense"})
        if unknown or len(listed) != n:
            raise GpuplanError(
                f"{self.v.name}: config field 'mlp_layer_types' must list 'dense' or 'sparse' for"
                f" each of the {n} layers"
                + (f" (got {unknown[0][:40]!r})" if unknown else f" (got {len(listed)} entries)")
            )
        return [kind == "sparse" for kind in listed]

    # -- state-space and linear-attention mixers ----------------------------------------------

    def _mamba(self, hidden: int) -> MambaSpec:
        v, t = self.v, self.t
        version = 1 if t["mamba"] == "mamba1" else 2
        d_state, d_conv = v.require("mamba_d_state"), v.require("mamba_d_conv")
        common = {
            "d_state": d_state,
            "d_conv": d_conv,
            "conv_bias": bool(v.get("mamba_conv_bias")),
            "proj_bias": bool(v.get("mamba_proj_bias")),
        }
        if version == 1:
            d_inner = v.get("mamba_d_inner") or v.require("mamba_expand") * hidden
            return MambaSpec(
                version=1,
                d_inner=d_inner,
                dt_rank=v.require("mamba_dt_rank"),
                bcdt_norms=bool(t["mamba_bcdt_norms"]),
                gated_norm=False,
                **common,
            )
        heads, head_dim = v.require("mamba_n_heads"), v.require("mamba_head_dim")
        if self.t["shared_blocks"]:  # Zamba 2: d_inner = expand x h; Zyphra's config gives
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

    def _linear_attention(self, attention: AttentionSpec | None) -> LinearAttentionSpec:
        v, kind = self.v, self.t["linear_attention"]
        if kind == "lightning":  # MiniMaxLightningAttention: the attention heads and head_dim
            assert attention is not None
            return LinearAttentionSpec(
                kind,
                attention.num_heads,
                attention.num_heads,
                attention.head_dim,
                attention.head_dim,
            )
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
            per_channel_decay=kind == "kda",
            full_rank_gate=kind == "kda" and bool(v.get("use_full_rank_gate")),
        )

    def _short_conv(self) -> ShortConvSpec:
        return ShortConvSpec(self.v.require("conv_L_cache"), bool(self.v.get("conv_bias")))
