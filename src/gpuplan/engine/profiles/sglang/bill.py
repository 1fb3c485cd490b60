"""SGLang memory accounting (read at 9c800728, 2025-12, and ce31934c, 2026-04; same rule).

    pre_load   = free memory after distributed init, before weights (min over ranks)
    rest       = post_load − pre_load × (1 − mem_fraction_static)
               = pre_load × mem_fraction_static − weights                  model_runner.py::profile_max_num_token
    cell_size  = kv_heads_per_rank × head_dim × 2 × kv bytes × layers      (MLA: (kv_lora_rank + rope) × bytes × layers)
    max_total_num_tokens = rest // cell_size, capped by --max-total-tokens, rounded down to page_size

The reserve for activations and CUDA graphs is `1 − mem_fraction_static` of the free memory at
start. The default fraction comes from the GPU's size (server_args.py::_handle_gpu_memory_settings):
reserved MB = 512 + max(chunked_prefill, 2048) × 1.5 + cuda_graph_max_bs × 2 + tp × pp / 8 × 1024,
at least 10 GiB on GPUs over 60 GiB, fraction = (capacity − reserved) / capacity, 3 decimals.
Sliding-window models split the pool between full and SWA layers (swa_full_tokens_ratio 0.8,
model_runner.py::set_num_token_hybrid); the full-attention token count is reported.
"""

from __future__ import annotations

from gpuplan.engine.profiles import GIB, EngineBill, EngineLaunch, Range, budget_item, gib
from gpuplan.engine.profiles.common import cuda_total_bytes, pp_layers, stage_weights

VERSION = "SGLang 0.5.x (server_args.py / model_runner.py at 2025-12 … 2026-04)"
SWA_FULL_TOKENS_RATIO = 0.8
CONTEXT_TP1 = gib(0.51)  # CUDA context etc. before weights: H100 logs, 79.19 − 78.68 GiB
CONTEXT_TP = gib(1.55)  # with NCCL communicators (TP/PP ≥ 2), H100 logs 77.12…77.66 GiB free


def gpu_tier(capacity_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory, as _handle_gpu_memory_settings."""
    gb = capacity_mib / 1024
    if gb < 20:
        return 2048, 8
    if gb < 35:
        return 2048, 80 if tp >= 4 else 24
    if gb < 60:
        return 4096, 160 if tp >= 4 else 32
    if gb < 160:
        return 8192, 512 if tp >= 4 else 256
    return 16384, 512


def default_mem_fraction(capacity_mib: int, tp: int, pp: int, chunked: int, graph_bs: int) -> float:
    """SGLang's default mem_fraction_static for a GPU of `capacity_mib` (server_args.py::
    _handle_gpu_memory_settings): capacity less a reserve for activations and CUDA graphs."""
    reserved = 512 + max(chunked, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if capacity_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((capacity_mib - reserved) / capacity_mib, 3)


def sglang_bill(launch: EngineLaunch) -> EngineBill:
    """The SGLang startup bill: weights, the static fraction's reserve, and the token pool
    (model_runner.py::profile_max_num_token, as summarised in this module's docstring)."""
    arch, tp, pp = launch.arch, launch.tp, launch.pp
    capacity = launch.gpu.memory_bytes  # nvidia-smi total, as get_nvgpu_memory_capacity reads it
    capacity_mib = capacity // 2**20
    tier_chunked, tier_bs = gpu_tier(capacity_mib, tp)
    chunked = int(launch.arg("chunked_prefill_size", tier_chunked))
    graph_bs = int(launch.arg("cuda_graph_max_bs", tier_bs))
    given_mfs = launch.args.get("mem_fraction_static")
    mfs = float(given_mfs or default_mem_fraction(capacity_mib, tp, pp, chunked, graph_bs))
    total = cuda_total_bytes(launch.gpu)
    context = CONTEXT_TP if tp * pp > 1 else CONTEXT_TP1
    pre_load = total - context
    stages = pp_layers(arch.num_layers, pp)
    weights = stage_weights(arch, launch.weights, tp, stages, launch.extra_params)
    a = arch.attention
    kv_elem = launch.kv.bytes_for(1024) / 1024
    if a.is_mla:
        assert a.kv_lora_rank is not None
        per_layer = (a.kv_lora_rank + a.qk_rope_head_dim) * kv_elem
    else:
        per_layer = max(1, a.num_kv_heads // tp) * (a.head_dim + a.v_head_dim) * kv_elem
    best = None
    for s, layers in enumerate(stages):
        w = weights[s].total
        rest = int(pre_load * mfs) - w
        cell = int(per_layer * len(layers))
        n_swa = sum(1 for i in layers if arch.layers[i].sliding_window)
        n_full = len(layers) - n_swa
        if n_swa and n_full:
            # pool split: full = total_layer_tokens / (ratio × n_swa + n_full)
            tokens = int(max(0, rest) // per_layer / (SWA_FULL_TOKENS_RATIO * n_swa + n_full))
        else:
            tokens = max(0, rest) // max(1, cell)
        if best is None or tokens < best[0]:
            best = (tokens, s, w, rest, cell)
    assert best is not None
    tokens, s, w, rest, cell = best
    if launch.args.get("max_total_tokens"):
        tokens = min(tokens, int(launch.args["max_total_tokens"]))
    page = int(launch.arg("page_size", 1))
    tokens = tokens // page * page
    max_len = int(launch.arg("context_length", arch.max_position_embeddings or 4096))
    reserve = pre_load - int(pre_load * mfs)
    failure = None
    if rest <= 0:
        failure = "Not enough memory: weights exceed mem_fraction_static × free memory (increase --mem-fraction-static)"
    items = (
        budget_item(
            "weights",
            "Weights",
            w,
            "layers ÷ tp + padded vocab ÷ tp",
            {"tp": tp, "pp": pp, "stage": s},
            "weights",
        ),
        budget_item(
            "kv_cache",
            "KV cache (token pool)",
            rest,
            "free before load × mem_fraction_static − weights",
            {"pre_load_free_bytes": pre_load, "mem_fraction_static": mfs, "cell_size_bytes": cell},
            "kv_cache",
        ),
        budget_item(
            "reserve",
            "Activations + CUDA graphs (reserve)",
            reserve,
            "free before load × (1 − mem_fraction_static)",
            {"chunked_prefill_size": chunked, "cuda_graph_max_bs": graph_bs},
            "activations",
        ),
        budget_item(
            "cuda_context",
            "CUDA context / NCCL",
            context,
            "total − free before load (calibrated on H100)",
            {"tp": tp, "pp": pp},
            "overhead",
        ),
    )
    spread = gib(0.5)
    return EngineBill(
        launch=launch,
        engine="sglang",
        version=launch.version,
        total_bytes=total,
        budget_bytes=int(pre_load * mfs),
        items=items,
        kv_cache_bytes=rest,
        kv_capacity_tokens=tokens,
        max_concurrency=tokens / max_len if max_len else 0.0,
        max_model_len=max_len,
        kv_bytes_per_token=cell,
        block_size=page,
        num_blocks=tokens // page,
        fits=failure is None and tokens >= max_len,
        failure=failure
        or (
            None
            if tokens >= max_len
            else f"the token pool ({tokens:,}) is smaller than one {max_len:,}-token request"
        ),
        ranges={
            "kv_capacity_tokens": Range(
                tokens,
                max(0, (rest - int(spread * mfs)) // max(1, cell)),
                (rest + int(spread * mfs)) // max(1, cell),
                "free memory before loading (driver, NCCL buffers)",
            )
        },
        notes=(
            f"mem_fraction_static {mfs}"
            + (" (SGLang's default for this GPU)" if not given_mfs else ""),
            f"reserve for activations and CUDA graphs {reserve / GIB:.2f} GiB",
        ),
        settings={
            "mem_fraction_static": mfs,
            "chunked_prefill_size": chunked,
            "cuda_graph_max_bs": graph_bs,
            "page_size": page,
            "context_length": max_len,
            "kv_cache_dtype": launch.kv.id,
        },
    )
