"""vLLM's KV layout for models whose attention layers differ in shape or share KV (Gemma 4's
512-wide global layers beside 256-wide sliding ones; Gemma 3n / Gemma 4 num_kv_shared_layers),
as kv_cache_utils.py lays it out: KV-sharing layers get no spec, each spec's block size is raised
until its page equals the largest (unify_kv_cache_spec_page_size), groups form per spec.

Expected values: a vLLM startup log (hf-mem PR #61) or vLLM's rules applied by hand to the
configs' shapes."""

from __future__ import annotations

import math

import pytest

from family_configs import BUILT
from gpuplan.api import engine_serve
from gpuplan.engine.profiles.vllm.kv_layout import blocks_per_request, kv_layout, reported_tokens

GIB = 2**30

# google/gemma-4-31B-it config.json (text part; the shapes the KV layout reads), as quoted in
# public repositories' tests of it (60 layers: 5 sliding + 1 full, sliding window 1024).
GEMMA4_31B = {
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "hidden_size": 5376,
    "num_hidden_layers": 60,
    "intermediate_size": 21504,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "num_global_key_value_heads": 4,
    "head_dim": 256,
    "global_head_dim": 512,
    "attention_k_eq_v": True,
    "num_kv_shared_layers": 0,
    "sliding_window": 1024,
    "max_position_embeddings": 262144,
    "vocab_size": 262144,
    "tie_word_embeddings": True,
    "final_logit_softcapping": 30.0,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
}


def _bill(config, version="0.20.0", **args):
    return engine_serve(config, "h100", engine="vllm", args=args, version=version, name="m").bill


def test_gemma4_global_layers_get_a_larger_block_for_one_page():
    """Sliding layers: 16 KV heads × (256 + 256) × 2 B = 16,384 B per token, page 16 × 16,384;
    global layers: 4 × (512 + 512) × 2 B = 8,192 B per token, so their block is 32 for the same
    page. 50 sliding + 10 global specs: group size 10 → 5 sliding groups + 1 global group."""
    b = _bill(GEMMA4_31B, max_model_len=8192)
    layout = kv_layout(b.launch.arch, b.launch, 16, range(60), max_model_len=8192)
    assert layout.page_bytes == 16 * 16 * 512 * 2
    assert (layout.slots, layout.groups) == (10, 6)
    assert sorted(layout.group_blocks) == [16] * 5 + [32]


def test_gemma4_31b_logged_token_count():
    """hf-mem PR #61 (vLLM, 2026-05): 'Available KV cache memory: 24.54 GiB' → 'GPU KV cache
    size: 26,800 tokens' (blocks // 6 groups × the smallest block size, 16)."""
    b = _bill(GEMMA4_31B, max_model_len=8192)
    layout = kv_layout(b.launch.arch, b.launch, 16, range(60), max_model_len=8192)
    blocks = int(24.54 * GIB) // layout.page_bytes // layout.slots
    assert reported_tokens(layout, blocks, 16) == 26_800


def test_gemma4_a_request_counts_each_group_with_its_own_block_size():
    """SlidingWindowSpec.max_memory_usage_bytes: ceil(min(window − 1 + batched, L) / 16) + 1
    blocks per sliding group; FullAttentionSpec: ceil(L / 32) for the global group (#41069's
    'GPU KV cache size' from 0.21 is that concurrency × L)."""
    L, batched = 262144, 8192
    b = _bill(GEMMA4_31B, version="0.21.0", max_model_len=L)
    layout = kv_layout(b.launch.arch, b.launch, 16, range(60), max_model_len=L)
    sliding = math.ceil(min(1024 - 1 + batched, L) / 16) + 1
    assert blocks_per_request(layout, L, 16, batched) == 5 * sliding + math.ceil(L / 32)


@pytest.mark.parametrize("name, shared", [("gemma-3n-e2b-text", 10), ("gemma-4-text-moe", 4)])
def test_kv_sharing_layers_keep_no_cache(name, shared):
    """gpu_model_runner.py::get_kv_cache_spec skips a layer with kv_sharing_target_layer_name:
    only the first num_hidden_layers − num_kv_shared_layers layers have specs."""
    config = BUILT[name]
    b = _bill(config, max_model_len=4096)
    arch = b.launch.arch
    layout = kv_layout(arch, b.launch, 16, range(arch.num_layers), max_model_len=4096)
    kept = [layer for layer in arch.layers[: arch.num_layers - shared] if layer.has_attention]
    assert layout.attention_layers == len(kept)
    # group size = the smallest spec count (every spec has at least 1.5 × as many... or not)
    counts: dict[tuple, int] = {}
    for layer in kept:
        key = (layer.sliding_window, layer.attention)
        counts[key] = counts.get(key, 0) + 1
    small, large = min(counts.values()), max(counts.values())
    group = small if large >= 1.5 * small else large
    assert layout.groups == sum(math.ceil(n / group) for n in counts.values())
