"""KV-cache bytes: per token, per sequence, per GPU.

    KV cache per token = 2 × layers × KV heads × head dim × bytes        (the lesson, step 3)

(the 2 is K and V). Grouped-query attention (Ainslie et al. 2023) caches only the KV heads, so
64 query heads sharing 8 KV heads cache 8× less than multi-head attention would.

MLA (DeepSeek-V2 paper §2.1.2, eq. 10 and Table 1): engines (vLLM's MLA backends, SGLang)
cache only the compressed latent c_KV (kv_lora_rank) and the shared RoPE key (qk_rope_head_dim)
per layer and token: (kv_lora_rank + qk_rope_head_dim) × bytes, the same on every TP rank.
transformers 5.x does the same (DeepseekV2/V3Attention caches the latent and expands it each
step with `expand_kv`). `layout="expanded"` gives instead the per-head K of (nope + rope) and
V of v_head_dim for every head: what `expand_kv` materialises, and what transformers 4.x kept
in its DynamicCache. (Checked against both in tests/test_reference_params.py.)

Sliding-window layers (Mistral, Gemma 2/3, gpt-oss) keep at most `window` tokens, so a sequence
of length L costs min(L, window) tokens on those layers: the buffer transformers' StaticCache
allocates (StaticSlidingWindowLayer); its DynamicCache keeps one token fewer (window − 1).

Under tensor parallelism each rank caches KV heads ÷ tp, but never less than one whole head:
when tp > KV heads the heads are replicated (vLLM: num_kv_heads per rank = max(1, kv_heads / tp)).
Under pipeline parallelism a GPU caches only its stage's layers.
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.precision import Precision
from gpuplan.engine.weights import stage_layers

LAYOUTS = ("engine", "expanded")


def kv_elements_per_token_per_layer(arch: Architecture, layout: str = "engine") -> int:
    """Elements cached per token in one layer, all KV heads."""
    a = arch.attention
    if a.is_mla:
        assert a.kv_lora_rank is not None
        if layout == "engine":
            return a.kv_lora_rank + a.qk_rope_head_dim
        return a.num_heads * (a.head_dim + a.v_head_dim)
    return a.num_kv_heads * (a.head_dim + a.v_head_dim)


def kv_heads_per_rank(arch: Architecture, tp: int) -> float:
    """KV heads one TP rank caches: kv_heads / tp, at least one whole head (replication)."""
    a = arch.attention
    if a.is_mla:
        return 1.0
    return max(1, a.num_kv_heads // tp) if tp > a.num_kv_heads else a.num_kv_heads / tp


def kv_fraction_per_rank(arch: Architecture, tp: int) -> float:
    """Share of a layer's KV cache that one TP rank holds (1.0 for MLA: the latent is replicated)."""
    a = arch.attention
    if a.is_mla:
        return 1.0
    return kv_heads_per_rank(arch, tp) / a.num_kv_heads


@lru_cache(maxsize=4096)
def kv_cache_bytes_per_layer_token(
    arch: Architecture, kv: Precision, layout: str = "engine"
) -> int:
    """Bytes of KV cache one token adds in one layer, all KV heads."""
    return kv.bytes_for(kv_elements_per_token_per_layer(arch, layout))


def kv_cache_bytes_per_token(arch: Architecture, kv: Precision, layout: str = "engine") -> int:
    """Bytes of KV cache one token adds across all layers (before any sliding-window cap)."""
    return kv_cache_bytes_per_layer_token(arch, kv, layout) * arch.num_layers


def kv_cache_bytes_per_sequence(
    arch: Architecture, kv: Precision, context: int, layout: str = "engine"
) -> int:
    """Bytes of KV cache for one sequence of `context` tokens, sliding layers capped at their window."""
    return kv_cache_bytes_per_layer_token(arch, kv, layout) * capped_tokens(arch, context)


def kv_cache_bytes_per_sequence_per_gpu(
    arch: Architecture, kv: Precision, context: int, tp: int = 1, pp: int = 1, stage: int = 0
) -> int:
    """KV bytes one GPU holds for one sequence: its stage's layers, its share of the KV heads."""
    layers = stage_layers(arch.num_layers, pp)[stage] if pp > 1 else None  # None: every layer
    tokens = capped_tokens(arch, context, layers)
    return round(kv_cache_bytes_per_layer_token(arch, kv) * tokens * kv_fraction_per_rank(arch, tp))


def capped_tokens(arch: Architecture, context: int, layers: range | None = None) -> int:
    """Σ over layers of the tokens each caches: context, or its window if smaller."""
    return sum(
        count * min(context, window or context) for window, count in arch.window_counts(layers)
    )
