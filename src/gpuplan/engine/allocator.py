"""What the GPU shows beyond the tensors: the caching allocator's reserve and the CUDA context.

Three figures describe one step's memory, and each bill line predicts one of them:

    allocated   torch.cuda.max_memory_allocated(): the live tensors at the peak phase (every
                line of a phase; MemTracker and Megatron-LM's `mem-max-allocated-bytes` read it;
                torchtune's `peak_memory_active` is the same figure plus blocks whose frees wait
                on another stream)
    reserved    torch.cuda.max_memory_reserved(): allocated + what the caching allocator holds
                but cannot hand out (torchtitan's `memory:` log line is this figure)
    nvidia-smi  reserved + the CUDA context, cuBLAS/NCCL workspaces and kernels, which no torch
                counter sees

The reserve is fragmentation: the caching allocator (c10/cuda/CUDACachingAllocator.cpp) rounds
requests up (to 512 B; large ones to 2 MiB) and splits cached blocks, so a freed block often
cannot serve the next, larger request and a new segment is reserved beside it. Guo et al. 2024
(GMLake, ASPLOS '24, §7) measure it on eight LLM fine-tuning workloads on A100-80GB with
recompute, offload, ZeRO and LoRA: their stitching allocator, close to fragmentation-free, cuts
fragmentation by 15 % of reserved memory on average (up to 33 %) against PyTorch's caching
allocator — taken here as the caching allocator's fragmentation, f.
`expandable_segments:True` (torchtitan's default) grows one virtually contiguous segment per
stream instead of many, but a freed range inside it still serves only requests that fit it, and
no published figure separates its fragmentation from the classic allocator's: the same f is
used (torchtitan's published reserved peaks sit 15-25 % above gpuplan's allocated ones).

    reserve = allocated × f ÷ (1 − f),   f = 0.15

The generic (lesson) bill charges no reserve: its 90 % headroom is the lesson's allowance for it.

Where an engine's own measurement depends on the allocator's exact blocks (vLLM V0's profile run,
SGLang's weight load), `replay` runs the allocator's rules on the engine's allocations instead of
using f (c10/cuda/CUDACachingAllocator.cpp, one stream, nothing handed back to the driver): a
request is rounded up to 512 B (kMinBlockSize); one of at most 1 MiB (kSmallSize) is served from
the small pool, whose segments are 2 MiB (kSmallBuffer); a larger one from the large pool, whose
segments are 20 MiB under 10 MiB (kLargeBuffer, kMinLargeAlloc) or the request rounded up to
2 MiB (kRoundLarge); a request takes the smallest free block of its pool that holds it, split
when what is left is at least 512 B (small pool) or over 1 MiB (large pool); a freed block merges
with the free blocks beside it in its segment.
"""

from __future__ import annotations

from collections.abc import Iterable

CACHING_FRAGMENTATION = 0.15  # Guo et al. 2024 (GMLake) §7: mean fragmentation, 8 LLMs, A100-80GB

FIGURES = ("allocated", "reserved", "nvidia-smi")


def reserve_bytes(allocated: int) -> int:
    """Reserved − allocated at the peak: allocated × f ÷ (1 − f) (module docstring)."""
    f = CACHING_FRAGMENTATION
    return round(allocated * f / (1 - f))


def predicts(line_key: str) -> str:
    """Which figure a bill line adds to: the allocator reserve to `reserved`, the CUDA context to
    `nvidia-smi`, every tensor line to `allocated` (and so to all three)."""
    return {"allocator_reserve": "reserved", "cuda_context": "nvidia-smi"}.get(
        line_key, "allocated"
    )


MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to a multiple of it
SMALL_SIZE = 2**20  # kSmallSize: largest request served from the small pool
SMALL_BUFFER = 2 * 2**20  # kSmallBuffer: the small pool's segment
LARGE_BUFFER = 20 * 2**20  # kLargeBuffer: segment for large requests under kMinLargeAlloc
MIN_LARGE_ALLOC = 10 * 2**20  # kMinLargeAlloc
ROUND_LARGE = 2 * 2**20  # kRoundLarge: larger requests get a segment rounded up to it

Event = tuple[str, str, int]  # ("alloc" | "free", tensor name, bytes; 0 for a free)


def segment_bytes(size: int) -> int:
    """The segment cudaMalloc'd for a rounded request no cached block serves
    (get_allocation_size; module docstring)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class _Block:
    """One block of a reserved segment: its size and the tensor holding it ("" when free)."""

    __slots__ = ("owner", "size")

    def __init__(self, size: int, owner: str = "") -> None:
        self.size = size
        self.owner = owner


def replay(events: Iterable[Event]) -> tuple[int, int]:
    """(peak allocated, reserved at the end) of the caching allocator serving `events` in order
    (module docstring). Tensor names are unique among the live ones."""
    segments: dict[bool, list[list[_Block]]] = {True: [], False: []}  # small pool?
    live: dict[str, tuple[bool, int]] = {}
    allocated = peak = 0
    for kind, name, size in events:
        if kind == "free":
            small, held = live.pop(name)
            allocated -= held
            for seg in segments[small]:
                _release(seg, name)
            continue
        need = max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)
        small = need <= SMALL_SIZE
        pool = segments[small]
        fits = [
            (b.size, si, bi)
            for si, seg in enumerate(pool)
            for bi, b in enumerate(seg)
            if not b.owner and b.size >= need
        ]
        if not fits:
            pool.append([_Block(segment_bytes(need))])
            fits = [(0, len(pool) - 1, 0)]
        _, si, bi = min(fits)
        blk = pool[si][bi]
        left = blk.size - need
        if left >= MIN_BLOCK if small else left > SMALL_SIZE:
            pool[si].insert(bi + 1, _Block(left))
            blk.size = need
        blk.owner = name
        live[name] = (small, blk.size)
        allocated += blk.size
        peak = max(peak, allocated)
    reserved = sum(b.size for pool in segments.values() for seg in pool for b in seg)
    return peak, reserved


def _release(seg: list[_Block], name: str) -> None:
    """Free `name`'s block in `seg` (if it is there) and coalesce adjacent free blocks (the
    allocator's free_block)."""
    for blk in seg:
        if blk.owner == name:
            blk.owner = ""
    i = 0
    while i < len(seg) - 1:
        if not seg[i].owner and not seg[i + 1].owner:
            seg[i].size += seg.pop(i + 1).size
        else:
            i += 1
