"""Whether a TensorRT-engine start leaves the runtime what it still allocates after the KV pool
(TensorRT-LLM C++ runtime, 0.8 → 1.2; read in cpp/tensorrt_llm/batch_manager/
trtGptModelInflightBatching.cpp, kvCacheManager.cpp, runtime/cudaMemPool.cpp, runtime/tllmBuffers.h).

The order of the engine backend's start (TrtGptModelInflightBatching's constructor):

    engine + execution context      the weights and the activation memory fixed at build time
    createBuffers / createDecoder   runtime buffers, decoder ("[MemUsageChange] Allocated ...")
    calculateFreeMemBytes           available = cudaMemGetInfo free + the caching pool's free
                                    bytes  ("Memory usage when calculating max tokens ...")
    calculateMaxNumBlocks           blocks = ⌈⌊available × fraction ÷ bytes per token⌋ ÷ tokens
                                    per block⌉  (engine_kv_blocks in bill.py)
    clampWindowSizesToFit...        a pool smaller than one max_seq_len sequence cuts max_seq_len
                                    and re-runs createBuffers and createDecoder
    allocatePools                   the pool, by cudaMalloc (BufferManager::gpuSync →
                                    CudaAllocator, "::cudaMalloc(ptr, n)")
    first forward                   cuBLAS and cuBLASLt handles, one per CUDA context and
                                    thread (opUtils.cpp getCublasHandle / getCublasLtHandle,
                                    taken by the attention and GEMM plugins): a thread without
                                    one creates it (the 1.2.1 RTX 3050 run at fraction 0.5 died
                                    there, on its first request, with 7 MB free)

So the pool leaves `headroom = available − blocks × tokens per block × bytes per token` (the
rounding up to whole blocks can take more than the fraction), and three things must still come
out of it: the caching pool's free bytes, which the printed figure counts but which cudaMalloc
cannot use (cudaMemPool.cpp sets the pool's release threshold to the maximum, so what the async
buffers free stays in the pool); whatever the clamp's re-created buffers add; and the first
forward's cuBLAS handle. The first two are not printed. The third has a documented size: the
workspace the cuBLAS documentation gives a handle (cublasSetWorkspace's table: 4 MiB, 32 MiB on
Hopper; later architectures are taken as Hopper here). A headroom below that floor is a start that
cannot serve: the runtime either fails at the pool's cudaMalloc itself (the unprinted terms took
the rest) or at the first request's cuBLAS handle. The floor is a necessary condition only: a
headroom above it can still fail when the unprinted terms are larger, so this check can miss a
failure; it flags only a start with no room for the handle its plugins take on the first request.
"""

from __future__ import annotations

from gpuplan.engine.frozen import record
from gpuplan.engine.profiles.trtllm.bill import engine_kv_blocks

MIB = 2**20
# a cuBLAS handle's workspace (cuBLAS docs, cublasSetWorkspace): before Hopper, from Hopper on
CUBLAS_WORKSPACE = 4 * MIB
CUBLAS_WORKSPACE_HOPPER = 32 * MIB


def cublas_floor(compute_capability: str | None) -> int:
    """The cuBLAS workspace of the first forward's handle: 32 MiB from compute capability 9.0
    (Hopper) on, 4 MiB before; an unknown GPU gets the smaller (no false alarm)."""
    try:
        major = int(str(compute_capability).split(".")[0])
    except ValueError:
        return CUBLAS_WORKSPACE
    return CUBLAS_WORKSPACE_HOPPER if major >= 9 else CUBLAS_WORKSPACE


@record
class EngineStart:
    """The KV pool an engine-backend start allocates and the memory it leaves."""

    blocks: int
    pool_bytes: int  # blocks × tokens per block × bytes per token, as cudaMalloc'd
    headroom: int  # available − pool_bytes
    needed: int  # the floor of what is allocated after the measurement (cublas_floor)
    clamped: bool | None  # the pool holds less than one max_seq_len sequence (None: not known)

    @property
    def fails(self) -> bool:
        return self.headroom < self.needed


def engine_start(
    available: int,
    fraction: float,
    per_token: int,
    block: int,
    max_seq_len: int | None = None,
    compute_capability: str | None = None,
) -> EngineStart:
    """The pool from the printed free memory (engine_kv_blocks) and the headroom it leaves
    against the cuBLAS floor (this module's docstring). `clamped` is
    clampWindowSizesToFitAtLeastOneSequence's test for beam width 1:
    ⌈max_seq_len ÷ tokens per block⌉ blocks do not fit in the pool."""
    blocks = engine_kv_blocks(available, fraction, per_token, block)
    pool = blocks * block * per_token
    clamped = None if max_seq_len is None else -(-max_seq_len // max(1, block)) > blocks
    return EngineStart(blocks, pool, available - pool, cublas_floor(compute_capability), clamped)
