"""vLLM's KV-cache layout: layer specs → page size → KV cache groups → blocks and tokens.

Mirrors vllm/v1/core/kv_cache_utils.py (get_kv_cache_groups, _get_kv_cache_groups_uniform_page_size,
get_num_blocks, _report_kv_cache_config, get_max_concurrency_for_kv_cache_config) and
vllm/v1/kv_cache_interface.py (FullAttentionSpec / SlidingWindowSpec / MLAAttentionSpec page
sizes), read at v0.19 (docs/engines-research.md §1.2–1.4). The V0 engine (vllm/worker/
cache_engine.py::get_cache_block_size) has one group of every layer, windows ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.profiles import EngineLaunch
from gpuplan.engine.profiles.common import kv_bytes_per_token_layer


@dataclass(frozen=True)
class KvLayout:
    """How the KV cache of one worker is cut: page bytes, layer slots, groups."""

    page_bytes: int  # one block of one layer
    slots: int  # layer slots per block (uniform: layers; hybrid: group size)
    groups: int
    group_kinds: tuple[tuple[str, int | None], ...]  # (kind, window) per group
    padding_layers: int = 0


def kv_layout(
    arch: Architecture,
    launch: EngineLaunch,
    block_size: int,
    layers: range,
    *,
    hybrid: bool = True,
    group_ratio: float = 1.5,
) -> KvLayout:
    """kv_cache_utils.py::get_kv_cache_groups: one group when every layer has the same spec;
    else (sliding + full attention) layers bucketed by spec, group_size = the smallest bucket
    (or the largest if max < group_ratio × min: 1.25 before #36684, 1.5 after), each bucket cut
    into ceil(n / group_size) groups. `hybrid=False` (V0, --disable-hybrid-kv-cache-manager,
    --disable-sliding-window) treats every layer as full attention: one group."""
    page = int(block_size * kv_bytes_per_token_layer(arch, launch.kv, launch.tp))
    kinds: dict[tuple[str, int | None], int] = {}
    for i in range(arch.num_layers):
        w = arch.layers[i].sliding_window
        key: tuple[str, int | None] = ("full", None) if w is None or not hybrid else ("sliding", w)
        kinds[key] = kinds.get(key, 0) + 1
    local = len(layers)
    if len(kinds) == 1:
        return KvLayout(page, local, 1, (next(iter(kinds)),))
    counts = sorted(kinds.values())
    group = counts[0] if counts[-1] >= group_ratio * counts[0] else counts[-1]
    group_kinds: list[tuple[str, int | None]] = []
    for kind, n in sorted(kinds.items(), key=lambda kv: kv[0][0]):
        group_kinds += [kind] * math.ceil(n / group)
    padding = group * len(group_kinds) - arch.num_layers
    slots = math.ceil(group * local / arch.num_layers) if local < arch.num_layers else group
    return KvLayout(page, slots, len(group_kinds), tuple(group_kinds), padding)


def blocks_per_request(
    layout: KvLayout, max_model_len: int, block_size: int, batched_tokens: int
) -> int:
    """Blocks (of one layer slot) one max_model_len request needs, summed over the groups:
    full attention ceil(L / bs); a sliding window (SlidingWindowSpec.max_memory_usage_bytes)
    ceil(min(window − 1 + max_num_batched_tokens, L) / bs) + 1."""
    n = 0
    for kind, window in layout.group_kinds:
        if kind == "sliding" and window:
            n += math.ceil(min(window - 1 + batched_tokens, max_model_len) / block_size) + 1
        else:
            n += math.ceil(max_model_len / block_size)
    return n


def tokens_for(available: int, layout: KvLayout, block_size: int) -> int:
    """The token figure vLLM logs for `available` bytes: blocks // groups × block_size."""
    blocks = max(0, available) // layout.page_bytes // max(1, layout.slots)
    return blocks // layout.groups * block_size
