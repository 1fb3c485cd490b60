"""SGLang's "mem usage" at load end: the caching allocator's segments and the RoPE table
(engine/profiles/sglang/load_memory.py). Expected values are derived here from the allocator's
rules (c10/cuda/CUDACachingAllocator.cpp constants) and from the shapes, not from gpuplan."""

from __future__ import annotations

import json
from pathlib import Path

from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.precision import get_precision
from gpuplan.engine.profiles.sglang.load_memory import reserved_bytes, weight_tensors
from gpuplan.engine.weights import WeightFormat

MIB = 2**20
CONFIGS = Path(__file__).parent / "data" / "engine_configs"


def test_small_requests_share_two_mib_segments():
    assert reserved_bytes([1000]) == 2 * MIB  # rounded to 1024 B, one small segment
    assert reserved_bytes([512 * 1024] * 4) == 2 * MIB  # four halves of a MiB fill one
    assert reserved_bytes([512 * 1024] * 5) == 4 * MIB


def test_mid_requests_are_carved_from_twenty_mib_segments():
    assert reserved_bytes([8 * MIB]) == 20 * MIB
    # 8 + 4 + 6 MiB fit one 20 MiB segment; the 2 MiB left over is split off (> 1 MiB)
    assert reserved_bytes([8 * MIB, 4 * MIB, 6 * MIB]) == 20 * MIB
    # the third 8 MiB request finds only a 4 MiB free block: a second segment
    assert reserved_bytes([8 * MIB, 8 * MIB, 8 * MIB]) == 40 * MIB


def test_large_requests_get_their_own_segment_rounded_to_two_mib():
    assert reserved_bytes([10 * MIB]) == 10 * MIB  # kMinLargeAlloc: not from a 20 MiB segment
    assert reserved_bytes([12 * MIB + 1]) == 14 * MIB
    assert reserved_bytes([int(12.5 * MIB)]) == 14 * MIB


def test_qwen3_14b_tp4_tensors_sum_to_its_parameters():
    """The listed tensors of one TP4 rank hold exactly the rank's share of the parameters:
    embedding and LM head split by vocabulary, attention and MLP by heads and width, norms
    replicated."""
    config = json.loads((CONFIGS / "Qwen--Qwen3-14B.json").read_text())
    arch = architecture_from_config(config)
    bf16 = get_precision("bf16")
    fmt = WeightFormat(bf16, bf16)
    sizes = weight_tensors(arch, fmt, 4, range(arch.num_layers), True, True)
    assert sizes is not None
    h, layers, d = 5120, 40, 128
    q, kv, inter = 40 * d // 4, 8 * d // 4, 17408 // 4
    per_layer = (q + 2 * kv) * h + h * q + 3 * inter * h + 2 * h + 2 * d
    expected = 2 * (2 * 151936 // 4 * h + layers * per_layer + h)
    assert sum(sizes) == expected
