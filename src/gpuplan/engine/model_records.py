"""The architecture record: every decoder gpuplan sizes, as the shapes that decide memory.

`Architecture` holds widths, head counts, what each layer is (attention, sliding or chunked
attention, Mamba, gated-delta or lightning linear attention, a short convolution, an FFN-only
block), its FFN (dense or experts), norms, embeddings and quantisation. engine/model_reader/ builds
it from a config.json; engine/architecture.py re-exports these records with the reader's
`architecture_from_config`, the one name the rest of gpuplan imports.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from gpuplan.engine.added_params import AddedParams
from gpuplan.engine.frozen import field, record
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:  # annotations only: a serving answer imports neither unless it needs them
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
    "rwkv",  # RWKV-4 time mixing (a WKV recurrence) and channel mixing, no attention
    "rglru",  # Griffin's recurrent block: a short convolution and an RG-LRU (RecurrentGemma)
    "mlstm",  # xLSTM's mLSTM layer: a matrix memory per head (linear_attention kind "mlstm")
)
STATE_MIXERS = (
    "mamba",
    "gated_delta",
    "lightning",
    "short_conv",
    "hybrid",
    "rwkv",
    "rglru",
    "mlstm",
)


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
    gate_bias: bool = False  # the output gate has one bias per head (BeamAttention.gate_bias)
    k_rope_norm: bool = False  # MLA: an RMSNorm on the RoPE key part (Dots3NoteTextAttention)
    # MLA: q_b reads [q_a residual, normed q_a] (2 x q_lora_rank) and also emits a gate of v_head_dim
    # per head (AXK2Attention.q_gate_proj)
    q_gate_fused: bool = False
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
    # DeepSeek-V4 (DeepseekV4Attention): one K=V head of head_dim over a sliding window, the
    # output through o_groups groups of o_lora_rank; a compressor keeping one entry per
    # `compress_rate` tokens (0: none), of two overlapping series on compressed sparse attention
    # layers (compress_overlap), whose lightning indexer is indexer_heads x indexer_head_dim
    shared_kv_head: bool = False
    o_groups: int = 0
    o_lora_rank: int = 0
    compress_rate: int = 0
    compress_overlap: bool = False

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
    output_norm: bool = False  # an RMSNorm on the block's output (AXK1MoE.post_mlp_layernorm)
    zero_experts: int = 0  # identity experts the router also scores (LongCat-Flash); no weights


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

    kind: str  # "gated_delta" | "lightning" | "mlstm" (xLSTM: C, n and m per head)
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
    # Bailing hybrid's KDA (BailingHybridForgetGate): the forget gate is one full-rank f_proj
    # (h x heads·d) instead of the low-rank f_a / f_b pair
    full_rank_forget: bool = False

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim


@record
class ShortConvSpec:
    """LFM2's gated short convolution: in_proj (3h), a depthwise conv of `kernel` taps, out_proj."""

    kernel: int
    bias: bool = False


@record
class RgLruSpec:
    """Griffin's recurrent block (De et al. 2024, Griffin §2.4; RecurrentGemmaRecurrentBlock):
    two h -> width branches, a depthwise convolution of `conv_width` taps, a Real-Gated Linear
    Recurrent Unit whose gates are block-diagonal over `heads` blocks, and width -> h out."""

    width: int  # lru_width
    heads: int  # the gates' diagonal blocks (num_attention_heads)
    conv_width: int


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
    # AXK2GatedRMSNorm: a norm with a low-rank gate (fc1 h x r, fc2 r x h) before attention, and
    # before the FFN of MoE layers; 0 for plain norms
    gated_norm_rank: int = 0
    # an assistant (drafter) model's target width: pre_projection 2B x h in, post_projection
    # h x B out (Gemma4UnifiedAssistantForCausalLM), 0 for a model of its own
    drafter_width: int = 0
    # hyper-connections (Zhu et al. 2025): n residual streams; each block's pre/post mixing
    # (HYV4HyperConnection) and the head's (HYV4HyperHead) parameters; 0 for one plain stream
    hyper_streams: int = 0
    # mHC (DeepseekV4HyperConnection): each block's mixing also emits the n x n residual matrix
    hyper_comb: bool = False
    # encoder-decoders (engine/encoder_decoder.py): the encoder, the embeddings, every weight by
    # part; `layers` are the decoder's, each with self- and cross-attention
    encoder: EncoderSpec | None = None
    # modules a family holds beyond these shapes (engine/added_params.py; params.py counts them)
    added: AddedParams | None = None
    rglru: RgLruSpec | None = None  # RecurrentGemma's recurrent layers (params.rglru_params)

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
