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
"""

from __future__ import annotations

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
