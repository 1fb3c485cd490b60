"""KV-cache bytes: per token, per sequence, per GPU.

    KV cache per token = 2 × layers × KV heads × head dim × bytes        (the lesson, step 3)

(the 2 is K and V), summed over the layers that attend and keep their own cache: Mamba, linear-
attention and short-convolution layers keep a fixed-size state instead (engine/state_cache.py), and
Gemma 3n's KV-sharing layers read an earlier layer's cache. Grouped-query attention (Ainslie et
al. 2023) caches only the KV heads, so 64 query heads sharing 8 KV heads cache 8× less than
multi-head attention would; multi-query attention (Shazeer 2019; StarCoder, Falcon-7B) one head.

MLA (DeepSeek-V2 paper §2.1.2, eq. 10 and Table 1): engines (vLLM's MLA backends, SGLang)
cache only the compressed latent c_KV (kv_lora_rank) and the shared RoPE key (qk_rope_head_dim)
per layer and token: (kv_lora_rank + qk_rope_head_dim) × bytes, the same on every TP rank.
transformers 5.x does the same (DeepseekV2/V3Attention caches the latent and expands it each
step with `expand_kv`). `layout="expanded"` gives instead the per-head K of (nope + rope) and
V of v_head_dim for every head: what `expand_kv` materialises, and what transformers 4.x kept
in its DynamicCache. (Checked against both in tests/test_reference_params.py.) For grouped-query
attention "expanded" means K and V broadcast to every query head: what transformers' Falcon keeps
for the new decoder architecture (FalconAttention broadcasts the 8 KV heads of Falcon-40B before
caching them), while serving engines cache the KV heads only.

DeepSeek-V3.2's lightning indexer keeps one more key per layer and token, of index_head_dim:
vLLM stores it in fp8 with one fp32 scale per 128 values (DeepseekV32IndexerCache: head_dim +
head_dim / 128 × 4 bytes) whatever the KV dtype; transformers keeps it in the model dtype
(DynamicIndexedLayer.indexer_keys), layout "expanded" here.

Sliding-window layers (Mistral, Gemma 2/3, gpt-oss) and Llama 4's chunked layers keep at most
`window` tokens, so a sequence of length L costs min(L, window) tokens on those layers: the buffer
transformers' StaticCache allocates (StaticSlidingWindowLayer); its DynamicCache keeps one token
fewer (window − 1).

DeepSeek-V4 (DeepSeek-V4 report §2.3; transformers DeepseekV4Attention, DeepseekV4CSACache /
DeepseekV4HCACache) keeps one K=V head of head_dim per token over its sliding window on every
layer, and on compressed layers one compressed entry per `compress_rate` tokens beside it:
compressed sparse attention (CSA, rate 4) an entry of head_dim plus an indexer key of
index_head_dim, heavily compressed attention (HCA, rate 128) an entry of head_dim. Each
compressor also holds the tokens of its unfinished window (their projected kv and gate, 2 x
head_dim wide on CSA's two overlapping series, plus the indexer's 2 x index_head_dim) and, on CSA,
the last window's first series (kv in the model dtype, gate in fp32: the gate has position_bias,
an fp32 parameter, added): `compressor_bytes`, what transformers' caches hold at a given context.
transformers' sliding-only V4 layers (DynamicSlidingWindowLayer) store the K=V tensor twice, as
keys and values: layout "expanded" counts that; engines keep it once.

Under tensor parallelism each rank caches KV heads ÷ tp, but never less than one whole head:
when tp > KV heads the heads are replicated (vLLM: num_kv_heads per rank = max(1, kv_heads / tp)).
Under pipeline parallelism a GPU caches only its stage's layers.
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.engine.architecture import Architecture, AttentionSpec, LayerSpec
from gpuplan.engine.precision import Precision
from gpuplan.engine.state_cache import FP32
from gpuplan.engine.weights import stage_layers


def layer_kv_elements(arch: Architecture, layer: LayerSpec, layout: str = "engine") -> int:
    """Elements one token adds to `layer`'s KV cache, all KV heads (0 if it keeps none)."""
    if not layer.has_attention or layer.kv_shared:
        return 0
    return attention_kv_elements(arch.attention_of(layer), layout)


def attention_kv_elements(a: AttentionSpec, layout: str = "engine") -> int:
    """Elements per token of one attention block's cache: K and V of every KV head, or MLA's
    latent and RoPE key (layout "engine") / its expanded per-head K and V ("expanded")."""
    if a.shared_kv_head:  # DeepSeek-V4: K is V (transformers' sliding-only layers store it twice)
        return a.head_dim * (2 if layout == "expanded" and not a.compress_rate else 1)
    if a.is_mla:
        assert a.kv_lora_rank is not None
        if layout == "engine":
            return a.kv_lora_rank + a.qk_rope_head_dim
        return a.num_heads * (a.head_dim + a.v_head_dim)
    heads = a.num_kv_heads if layout == "engine" else a.num_heads
    return heads * (a.head_dim + a.v_head_dim)


INDEXER_QUANT_BLOCK = 128  # vLLM: fp8 indexer keys with one fp32 scale per 128 values


def layer_kv_bytes_per_token(
    arch: Architecture, layer: LayerSpec, kv: Precision, layout: str = "engine"
) -> int:
    """Bytes one token adds to `layer`'s caches: its K and V (or MLA latent) and, for
    DeepSeek-V3.2, its indexer key."""
    out = kv.bytes_for(layer_kv_elements(arch, layer, layout))
    a = arch.attention_of(layer)
    if out and a.indexer_head_dim and not a.compress_rate:  # V4's: one per compressed entry
        out += indexer_key_bytes(a, kv, layout)
    return out


def compressor_bytes(a: AttentionSpec, kv: Precision, context: int, layout: str = "engine") -> int:
    """DeepSeek-V4: bytes one layer's compressor holds for a sequence of `context` tokens (0 for
    a layer without one): context // rate compressed entries of head_dim (with an indexer key
    each on CSA layers), the context % rate tokens of the unfinished window (kv and gate, 2 x
    head_dim wide on CSA plus the indexer's 2 x index_head_dim; head_dim on HCA), and on CSA,
    once a window closed, its first series kept for the next window's overlap (rate x
    (head_dim + index_head_dim), kv in the cache dtype, gate in fp32). Mirrors
    DeepseekV4HCACache.store_compression_weights / update_compressor_states and
    DeepseekV4CSACache.update_overlap_state."""
    rate = a.compress_rate
    if not rate:
        return 0
    entries, pending = divmod(context, rate)
    d, di = a.head_dim, a.indexer_head_dim
    out = entries * _compressed_entry_bytes(a, kv, layout)
    width = d * (2 if a.compress_overlap else 1) + 2 * di
    out += kv.bytes_for(2 * pending * width)  # buffered kv and gate
    if a.compress_overlap and entries:
        out += kv.bytes_for(rate * (d + di)) + FP32.bytes_for(rate * (d + di))
    return out


def _compressed_entry_bytes(a: AttentionSpec, kv: Precision, layout: str) -> int:
    """One DeepSeek-V4 compressed entry: head_dim, and its indexer key on CSA layers."""
    return kv.bytes_for(a.head_dim) + indexer_key_bytes(a, kv, layout)


@lru_cache(maxsize=1024)
def _has_compressors(arch: Architecture) -> bool:
    return any(arch.attention_of(spec).compress_rate for spec, _ in arch.layer_groups())


def compressed_bytes_per_sequence(
    arch: Architecture,
    kv: Precision,
    context: int,
    layout: str = "engine",
    pp: int = 1,
    stage: int = 0,
) -> int:
    """Every compressor's bytes for one sequence (`compressor_bytes`) over the stage's layers;
    the single K=V head is replicated on every TP rank, like MLA's latent."""
    if not _has_compressors(arch):
        return 0
    layers = stage_layers(arch.num_layers, pp)[stage] if pp > 1 else None
    return sum(
        n * compressor_bytes(arch.attention_of(spec), kv, context, layout)
        for spec, n in arch.layer_groups(layers)
        if spec.has_attention
    )


def indexer_key_bytes(a: AttentionSpec, kv: Precision, layout: str = "engine") -> int:
    """Bytes of one token's indexer key in one layer (0 without an indexer)."""
    d = a.indexer_head_dim
    if not d:
        return 0
    if layout == "engine":
        return d + 4 * -(-d // INDEXER_QUANT_BLOCK)
    return kv.bytes_for(d)


def kv_heads_per_rank(arch: Architecture, tp: int, spec: AttentionSpec | None = None) -> float:
    """KV heads one TP rank caches: kv_heads / tp, at least one whole head (replication)."""
    a = spec or arch.attention
    if a.is_mla:
        return 1.0
    return max(1, a.num_kv_heads // tp) if tp > a.num_kv_heads else a.num_kv_heads / tp


def kv_fraction_per_rank(arch: Architecture, tp: int, spec: AttentionSpec | None = None) -> float:
    """Share of a layer's KV cache that one TP rank holds (1.0 for MLA: the latent is replicated)."""
    a = spec or arch.attention
    if a.is_mla or not a.num_kv_heads:
        return 1.0
    return kv_heads_per_rank(arch, tp, a) / a.num_kv_heads


def kv_cache_bytes_per_token(arch: Architecture, kv: Precision, layout: str = "engine") -> int:
    """Bytes of KV cache one token adds across all layers (before any sliding-window cap;
    DeepSeek-V4's compressed entries amortised over the tokens each one stands for)."""
    per_token = sum(
        n * layer_kv_bytes_per_token(arch, spec, kv, layout) for spec, n in arch.layer_groups()
    )
    return per_token + _compressed_per_token(arch, kv, layout)


def _compressed_per_token(arch: Architecture, kv: Precision, layout: str) -> int:
    """DeepSeek-V4's compressed entries per token: each one's bytes ÷ its rate (rounded down)."""
    if not _has_compressors(arch):
        return 0
    total = 0
    for spec, n in arch.layer_groups():
        a = arch.attention_of(spec)
        if spec.has_attention and a.compress_rate:
            total += n * _compressed_entry_bytes(a, kv, layout) // a.compress_rate
    return total


def kv_cache_bytes_per_sequence(
    arch: Architecture, kv: Precision, context: int, layout: str = "engine"
) -> int:
    """Bytes of KV cache for one sequence of `context` tokens, sliding layers capped at their
    window; an encoder-decoder's request adds its cross-attention K and V and encoder output."""
    return (
        sum(
            per_token * _tokens(window, context)
            for per_token, _, window in _layer_terms(arch, kv, layout, 1, 1, 0)
        )
        + encoder_bytes_per_sequence(arch, kv, context)
        + compressed_bytes_per_sequence(arch, kv, context, layout)
    )


def encoder_bytes_per_sequence(
    arch: Architecture, kv: Precision, context: int, tp: int = 1, pp: int = 1, stage: int = 0
) -> int:
    """An encoder-decoder request's fixed caches on one GPU (0 for a decoder-only model): the
    cross-attention K and V of every encoder token in each of its stage's decoder layers (vLLM
    v1's CrossAttentionSpec: heads ÷ tp per rank, like self-attention), and the encoder output,
    encoder tokens × d_model in the model dtype, on the first stage (vLLM's encoder cache).
    The encoder length is the model's fixed one (Whisper) or the request's `context`."""
    enc = arch.encoder
    if enc is None:
        return 0
    tokens = enc.encoder_tokens or context
    layers = len(stage_layers(arch.num_layers, pp)[stage]) if pp > 1 else arch.num_layers
    cross = cross_kv_bytes(arch, kv, tokens) * layers / arch.num_layers
    output = tokens * enc.width * (4 if arch.torch_dtype == "float32" else 2) if stage == 0 else 0
    return round(cross * kv_fraction_per_rank(arch, tp)) + output


def cross_kv_bytes(arch: Architecture, kv: Precision, encoder_tokens: int) -> int:
    """Cross-attention K and V of `encoder_tokens` encoder tokens over all decoder layers, all
    heads (what transformers' EncoderDecoderCache.cross_attention_cache holds)."""
    enc = arch.encoder
    if enc is None:
        return 0
    per_token = kv.bytes_for(2 * enc.cross_heads * enc.cross_head_dim)
    return arch.num_layers * per_token * encoder_tokens


def kv_cache_bytes_per_sequence_per_gpu(
    arch: Architecture, kv: Precision, context: int, tp: int = 1, pp: int = 1, stage: int = 0
) -> int:
    """KV bytes one GPU holds for one sequence: its stage's layers, its share of the KV heads."""
    total = 0.0
    for per_token, share, window in _layer_terms(arch, kv, "engine", tp, pp, stage):
        if per_token:
            total += per_token * _tokens(window, context) * share
    return (
        round(total)
        + encoder_bytes_per_sequence(arch, kv, context, tp, pp, stage)
        + compressed_bytes_per_sequence(arch, kv, context, "engine", pp, stage)
    )


@lru_cache(maxsize=4096)
def _layer_terms(
    arch: Architecture, kv: Precision, layout: str, tp: int, pp: int, stage: int
) -> tuple[tuple[int, float, int | None], ...]:
    """Per layer kind of the stage: (its layers' KV bytes per token, one TP rank's share, its
    window or None): what any context's KV bytes sum over, worked out once per model, format
    and layout (a serving search bills the same layout at many contexts)."""
    layers = stage_layers(arch.num_layers, pp)[stage] if pp > 1 else None
    return tuple(
        (
            n * layer_kv_bytes_per_token(arch, spec, kv, layout),
            kv_fraction_per_rank(arch, tp, arch.attention_of(spec)),
            spec.sliding_window,
        )
        for spec, n in arch.layer_groups(layers)
    )


def _tokens(window: int | None, context: int) -> int:
    """Tokens a layer caches for a sequence of `context`: all, or its window if smaller."""
    return min(context, window or context)
