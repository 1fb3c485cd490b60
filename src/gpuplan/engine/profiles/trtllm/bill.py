"""TensorRT-LLM memory accounting (PyTorch backend, tensorrt_llm/_torch/pyexecutor/_util.py,
KvCacheCreator, read in 2025–2026 versions).

    peak        = weights + activation peak of a max_num_tokens dummy context + non-torch
    available   = (total − peak) × free_gpu_memory_fraction                 _cal_max_memory
    max_tokens  = available // kv_bytes_per_token, rounded up to blocks of tokens_per_block (32)
    kv_bytes_per_token = layers × kv_heads_per_rank × head_dim × 2 × bytes (MLA: latent + rope)

Unlike vLLM the fraction applies to the memory still free after loading and profiling. The
activation and non-torch terms reuse the vLLM-calibrated models (no sampler run), so they carry a
wider range.

The TensorRT-engine backend (C++ runtime) sizes the pool by the same rule from the memory free
once the engine, its execution context and the runtime buffers are in place
(cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp, BaseKVCacheManager::calculateFreeMemBytes:
free × fraction; calculateMaxNumBlocks: tokens rounded up to whole blocks): `engine_kv_blocks`.
The engine's own memory (weights and the activation workspace fixed at build time by
max_num_tokens / max_batch_size) is not modelled, so the bill is the PyTorch flow's. Whether the
pool leaves the runtime what it still allocates after it (a failed start): engine_start.py.
"""

from __future__ import annotations

from gpuplan.engine.bill import LineItem
from gpuplan.engine.frozen import record
from gpuplan.engine.profiles import EngineBill, EngineLaunch, Range, budget_item, gib
from gpuplan.engine.profiles.common import (
    ProfileBatch,
    cuda_total_bytes,
    kv_bytes_per_token_layer,
    peak_terms,
    pp_layers,
    refuse_state_layers,
    require_budget,
    stage_weights,
)

VERSION = "TensorRT-LLM 0.2x–1.x (PyTorch backend, _util.py KvCacheCreator)"
DEFAULT_FRACTION = 0.9
DEFAULT_TOKENS_PER_BLOCK = 32
DEFAULT_MAX_NUM_TOKENS = 8192
LOGIT_BYTES = 4.0  # one fp32 row of logits per dummy request
ACT_CONSTANT = gib(0.12)  # allocator rounding and workspaces, as for vLLM's profile run
CUDA_CONTEXT = gib(0.45)  # device memory in use before any tensor (H100 logs: 79.19 − 78.68 GiB)
TP_BUFFERS = gib(0.41)  # NCCL at TP > 1 (H100 SXM, vLLM 0.11 logs: 0.54 vs 0.13 GiB)


def engine_kv_blocks(free_bytes: int, fraction: float, bytes_per_token: int, block: int) -> int:
    """Blocks in the primary KV pool: max_tokens = ⌊⌊free × fraction⌋ ÷ bytes per token⌋, then
    ⌈max_tokens ÷ tokens_per_block⌉ (kvCacheManager.cpp: calculateFreeMemBytes, then
    calculateMaxNumBlocks' tc::ceilDiv; the PyTorch flow's _util.py hands its max_tokens to the
    same manager)."""
    tokens = max(0, int(free_bytes * fraction)) // max(1, bytes_per_token)
    return -(-tokens // max(1, block))


@record
class StagePool:
    """One pipeline stage's rank: its peak terms and the KV memory left (_cal_max_memory)."""

    index: int
    weights: int
    activation: int
    non_torch: int
    available: int  # (total − peak) × free_gpu_memory_fraction
    per_token: int  # KV bytes of one token over the stage's layers
    tokens: int


def trtllm_bill(launch: EngineLaunch) -> EngineBill:
    """The TensorRT-LLM startup bill: the KV cache gets free_gpu_memory_fraction of the memory
    still free after weights and the runtime's peak (KvCacheConfig; see this module's docstring)."""
    refuse_state_layers(launch.arch, "TensorRT-LLM", "Mamba state cache (MambaHybridCacheManager)")
    total = cuda_total_bytes(launch.gpu)
    frac = float(launch.arg("free_gpu_memory_fraction", DEFAULT_FRACTION))
    require_budget("--free-gpu-memory-fraction", frac, total, "total memory")
    block = int(launch.arg("tokens_per_block", DEFAULT_TOKENS_PER_BLOCK))
    max_tokens = int(launch.arg("max_num_tokens", DEFAULT_MAX_NUM_TOKENS))
    max_len = int(launch.arg("max_seq_len", launch.arch.max_position_embeddings or 4096))
    pools = _stage_pools(launch, total, frac, block, max_tokens, max_len)
    stage = min(pools, key=lambda p: p.tokens)
    tokens, available, per_token = stage.tokens, stage.available, stage.per_token
    failure = (
        None if available > 0 else "no memory left for the KV cache after weights and activations"
    )
    spread = gib(0.6)
    return EngineBill(
        launch=launch,
        engine="trtllm",
        version=launch.version,
        total_bytes=total,
        budget_bytes=total,
        items=_items(launch, stage, frac, block, max_tokens),
        kv_cache_bytes=available,
        kv_capacity_tokens=tokens,
        max_concurrency=tokens / max_len if max_len else 0.0,
        max_model_len=max_len,
        kv_bytes_per_token=per_token,
        block_size=block,
        num_blocks=tokens // block,
        fits=failure is None and tokens >= max_len,
        failure=failure,
        ranges={
            "kv_capacity_tokens": Range(
                tokens,
                max(0, int((available - spread * frac) // per_token)),
                max(0, int((available + spread * frac) // per_token)),
                "activation peak and runtime buffers (max_num_tokens, max_batch_size)",
            )
        },
        notes=(f"free_gpu_memory_fraction {frac} of the memory free after loading and profiling",),
        settings={
            "free_gpu_memory_fraction": frac,
            "tokens_per_block": block,
            "max_num_tokens": max_tokens,
            "max_seq_len": max_len,
            "kv_cache_dtype": launch.kv.id,
        },
    )


def _stage_pools(
    launch: EngineLaunch, total: int, frac: float, block: int, max_tokens: int, max_len: int
) -> list[StagePool]:
    """Per pipeline stage: weights, the profiling context batch's activation peak (max_num_tokens
    in max_seq_len requests; the last stage computes the logits), non-torch memory, then the KV
    memory (total − peak) × fraction cut into whole blocks of tokens."""
    arch, tp = launch.arch, launch.tp
    stages = pp_layers(arch.num_layers, launch.pp)
    weights = stage_weights(arch, launch.weights, tp, stages, launch.extra_params)
    per_layer = kv_bytes_per_token_layer(arch, launch.kv, tp)
    requests = max(1, max_tokens // max(1, max_len))
    nt = CUDA_CONTEXT + (TP_BUFFERS if tp > 1 else 0)
    pools = []
    for s, layers in enumerate(stages):
        batch = ProfileBatch(max_tokens, requests, sampler=s == len(stages) - 1)
        act = peak_terms(arch, launch.weights, tp, batch, LOGIT_BYTES, ACT_CONSTANT).peak
        w = weights[s].total
        available = int((total - (w + act + nt)) * frac)
        per_token = int(per_layer * len(layers))
        tokens = engine_kv_blocks(available, 1.0, per_token, block) * block
        pools.append(StagePool(s, w, act, nt, available, per_token, tokens))
    return pools


def _items(
    launch: EngineLaunch, stage: StagePool, frac: float, block: int, max_tokens: int
) -> tuple[LineItem, ...]:
    """Weights, activation peak, non-torch memory, then the KV cache."""
    tp, pp = launch.tp, launch.pp
    return (
        budget_item(
            "weights",
            "Weights",
            stage.weights,
            "layers ÷ tp + vocab ÷ tp",
            {"tp": tp, "pp": pp},
            "weights",
        ),
        budget_item(
            "activation_peak",
            "Activation peak",
            stage.activation,
            "dummy context batch of max_num_tokens: 2 hidden + widest layer transient, fp32 logits",
            {"max_num_tokens": max_tokens},
            "activations",
        ),
        budget_item(
            "non_torch",
            "Non-torch memory",
            stage.non_torch,
            "CUDA context + NCCL / all-reduce buffers (the peak is total − free)",
            {"tp": tp},
            "overhead",
        ),
        budget_item(
            "kv_cache",
            "KV cache",
            stage.available,
            "(total − peak) × free_gpu_memory_fraction",
            {"free_gpu_memory_fraction": frac, "tokens_per_block": block},
            "kv_cache",
        ),
    )
