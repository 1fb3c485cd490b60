"""Bounds on what a checkpoint header may claim, shared by the safetensors and GGUF readers.

A tensor dimension is bounded as config.json's longest field is (engine/config_schema.py
MAX_POSITIONS: 2^34), a tensor's element count by MAX_TENSOR_ELEMENTS (2^44 ≈ 1.8·10^13: a
35 TB bf16 tensor; the largest published tensors, fused expert banks and 256k-row embeddings,
hold ~10^10), and a checkpoint's tensor count by MAX_TENSORS (Kimi-K2's int4 checkpoint, among
the largest, lists ~2·10^5). A header past any of them is refused in one line before its
tensors are built, so a crafted header can neither ask for 10^76 bytes nor take minutes.
"""

from __future__ import annotations

from gpuplan.engine.config_schema import MAX_POSITIONS
from gpuplan.errors import GpuplanError

MAX_DIM = MAX_POSITIONS
MAX_TENSOR_ELEMENTS = 1 << 44
MAX_TENSORS = 500_000  # in one checkpoint, all shards together
MAX_FILE_TENSORS = 100_000  # in one file's header (a 5 GB shard lists ~10^3)


def check_shape(dims: list[int] | tuple[int, ...], tensor: str, where: str) -> int:
    """The element count of a shape whose every dimension and product are within bounds."""
    numel = 1
    for d in dims:
        if not 0 <= d <= MAX_DIM:
            raise GpuplanError(
                f"{where}: tensor {tensor[:80]!r} has a dimension of {d:,} (over {MAX_DIM:,})"
            )
        numel *= d
    if numel > MAX_TENSOR_ELEMENTS:
        raise GpuplanError(
            f"{where}: tensor {tensor[:80]!r} claims {numel:.3g} elements"
            f" (over {MAX_TENSOR_ELEMENTS:.3g}); not a real checkpoint"
        )
    return numel


def check_count(n: int, where: str, limit: int = MAX_TENSORS) -> int:
    if n > limit:
        raise GpuplanError(f"{where}: more than {limit:,} tensors; not read")
    return n
