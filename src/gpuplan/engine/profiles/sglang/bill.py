"""SGLang's memory accounting, by version (versions.toml beside this file).

    pre_load   = free memory after distributed init, before weights (min over ranks)
    rest       = post_load − pre_load × (1 − mem_fraction_static)
               = pre_load × mem_fraction_static − weights                  model_runner.py::profile_max_num_token
    cell_size  = kv_heads_per_rank × head_dim × 2 × kv bytes × layers      (MLA: (kv_lora_rank + rope) × bytes × layers)
    max_total_num_tokens = rest // cell_size, capped by --max-total-tokens, rounded down to page_size

The reserve for activations and CUDA graphs is `1 − mem_fraction_static` of the free memory at
start. When not given, the fraction comes from the GPU's size (`nvidia-smi` MiB), the layout and
the version: a table by TP degree (to 0.4.7), a reserve by GPU tier (0.4.8–0.5.2), then
server_args.py::_handle_gpu_memory_settings (0.5.3+): reserved MB = 512 + max(chunked_prefill,
2048) × 1.5 + cuda_graph_max_bs × 2 + tp × pp / 8 × 1024 (+ 8 MB per piecewise CUDA-graph size
from 0.5.9), at least 10 GiB on GPUs over 60 GiB, fraction = (capacity − reserved) / capacity.
Sliding-window models split the pool between full and SWA layers (swa_full_tokens_ratio 0.8,
model_runner.py::set_num_token_hybrid); the full-attention token count is reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.engine.bill import LineItem
from gpuplan.engine.frozen import record
from gpuplan.engine.profiles import GIB, EngineBill, EngineLaunch, Range, budget_item, gib
from gpuplan.engine.profiles.common import (
    cuda_total_bytes,
    kv_bytes_per_token_layer,
    load_version_rules,
    pp_layers,
    refuse_state_layers,
    require_budget,
    stage_weights,
)

RULES = load_version_rules(Path(__file__).with_name("versions.toml"))
SWA_FULL_TOKENS_RATIO = 0.8


def gpu_tier(rules: dict[str, Any], capacity_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory, as the version picks them."""
    gb = capacity_mib / 1024
    if rules["chunked_tiers"] == "old":
        if gb < 35:
            return 2048, 8 if tp < 4 else 80
        return (8192 if gb < 160 else 16384), 160
    if gb < 20:
        return 2048, 8
    if gb < 35:
        return 2048, 80 if tp >= 4 else 24
    if gb < 60:
        return 4096, 160 if tp >= 4 else 32
    if gb < 160:
        return 8192, 512 if tp >= 4 else 256
    return 16384, 512


def piecewise_sizes(max_tokens: int) -> int:
    """How many token sizes the piecewise CUDA graphs capture up to max_tokens
    (server_args.py::_generate_piecewise_cuda_graph_tokens)."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_tokens)


def default_mem_fraction(
    rules: dict[str, Any],
    capacity_mib: int,
    tp: int,
    pp: int,
    chunked: int,
    graph_bs: int,
    mla: bool = False,
    draft: bool = False,
) -> float:
    """SGLang's default mem_fraction_static for a GPU of `capacity_mib`, by version."""
    kind = rules["default_fraction"]
    if kind == "by_tp":
        return (
            0.79
            if tp >= 16
            else 0.81
            if tp >= 8
            else 0.85
            if tp >= 4
            else 0.87
            if tp >= 2
            else 0.88
        )
    par = tp * pp
    gb = capacity_mib / 1024
    if kind == "tiered":
        if gb < 35:
            reserved = (2.8 + par / 10) * 1024
        elif gb < 90:
            reserved = (9.5 + par / 2) * 1024
        elif gb < 160:
            reserved = (12 + par / 2) * 1024
        else:
            reserved = 32 * 1024
        reserved += 2 * 1024 if draft else 0
        return round((capacity_mib - reserved) / capacity_mib, 3)
    reserved = 512 + max(chunked, 2048) * 1.5 + graph_bs * 2 + par / 8 * 1024
    if rules["piecewise_reserve"]:
        reserved += 1.5 * 1024 if mla else piecewise_sizes(2048 if mla else chunked) * 8
    if gb > 60:
        reserved = max(reserved, 10 * 1024)
    reserved += 2 * 1024 if draft else 0
    return round((capacity_mib - reserved) / capacity_mib, 3)


def context_bytes(rules: dict[str, Any], launch: EngineLaunch) -> int:
    """Device memory in use before the weights: CUDA context, plus NCCL at tp × pp > 1."""
    from gpuplan.engine.profiles.vllm.non_torch import interconnect_class

    table = rules["context_gib"]
    if launch.tp * launch.pp == 1:
        return gib(table["single"])
    return gib(table[interconnect_class(launch.gpu, launch.interconnect)])


@record
class StaticFraction:
    """mem_fraction_static and the batch knobs its default is read from."""

    chunked: int  # chunked_prefill_size
    graph_bs: int  # cuda_graph_max_bs
    mfs: float
    given: bool  # --mem-fraction-static was given


@record
class StagePool:
    """One pipeline stage's token pool (model_runner.py::profile_max_num_token)."""

    index: int
    weights: int
    rest: int  # pre_load × mem_fraction_static − weights: the pool's memory
    cell: int  # cell_size: KV bytes of one token over the stage's layers
    tokens: int  # before --max-total-tokens and the page rounding


def sglang_bill(launch: EngineLaunch) -> EngineBill:
    """The SGLang startup bill: weights, the static fraction's reserve, and the token pool
    (model_runner.py::profile_max_num_token, as summarised in this module's docstring)."""
    refuse_state_layers(
        launch.arch, "SGLang", "Mamba / linear-attention state pool (mamba_full_memory_ratio)"
    )
    rules = RULES.at(launch.version)
    frac = _static_fraction(rules, launch)
    total = cuda_total_bytes(launch.gpu)
    context = context_bytes(rules, launch)
    pre_load = total - context
    require_budget("--mem-fraction-static", frac.mfs, pre_load, "free at start")
    budget = int(pre_load * frac.mfs)
    stage = min(_stage_pools(launch, budget), key=lambda p: p.tokens)
    page = int(launch.arg("page_size", 1))
    tokens = _capped_tokens(launch, stage.tokens, page)
    max_len = int(launch.arg("context_length", launch.arch.max_position_embeddings or 4096))
    reserve = pre_load - budget
    failure = _failure(stage.rest, tokens)
    spread = int(gib(0.5) * frac.mfs)  # free memory before loading moves by about 0.5 GiB
    return EngineBill(
        launch=launch,
        engine="sglang",
        version=f"SGLang {launch.version}",
        total_bytes=total,
        budget_bytes=budget,
        items=_items(launch, frac, stage, pre_load, reserve, context),
        kv_cache_bytes=stage.rest,
        kv_capacity_tokens=tokens,
        max_concurrency=tokens / max_len if max_len else 0.0,
        max_model_len=max_len,
        kv_bytes_per_token=stage.cell,
        block_size=page,
        num_blocks=tokens // page,
        fits=failure is None,
        failure=failure,
        ranges={
            "kv_capacity_tokens": Range(
                tokens,
                max(0, (stage.rest - spread) // max(1, stage.cell)),
                max(0, (stage.rest + spread) // max(1, stage.cell)),  # a pool cannot go below 0
                "free memory before loading (driver, NCCL buffers)",
            )
        },
        notes=(
            f"mem_fraction_static {frac.mfs}"
            + (" (SGLang's default for this GPU and version)" if not frac.given else ""),
            f"reserve for activations and CUDA graphs {reserve / GIB:.2f} GiB",
            *(
                (
                    f"the token pool ({tokens:,}) is smaller than --context-length {max_len:,}:"
                    f" SGLang starts and caps a request at {tokens - 1:,} tokens (max_req_len)",
                )
                if 0 < tokens < max_len
                else ()
            ),
        ),
        settings=_settings(launch, frac, page, max_len),
    )


def _static_fraction(rules: dict[str, Any], launch: EngineLaunch) -> StaticFraction:
    """Reserve phase: the batch knobs (given, or by GPU tier) and mem_fraction_static (given, or
    SGLang's default from them); the GPU's size as get_nvgpu_memory_capacity reads it
    (nvidia-smi total)."""
    capacity_mib = launch.gpu.memory_bytes // 2**20
    tier_chunked, tier_bs = gpu_tier(rules, capacity_mib, launch.tp)
    chunked = int(launch.arg("chunked_prefill_size", tier_chunked))
    graph_bs = int(launch.arg("cuda_graph_max_bs", tier_bs))
    given = launch.args.get("mem_fraction_static")
    draft = bool(launch.args.get("speculative_algorithm"))
    mla = launch.arch.attention.is_mla
    mfs = float(
        given
        or default_mem_fraction(
            rules, capacity_mib, launch.tp, launch.pp, chunked, graph_bs, mla, draft
        )
    )
    return StaticFraction(chunked, graph_bs, mfs, bool(given))


def _settings(
    launch: EngineLaunch, frac: StaticFraction, page: int, max_len: int
) -> dict[str, Any]:
    """The defaults SGLang picked for this launch."""
    return {
        "mem_fraction_static": frac.mfs,
        "chunked_prefill_size": frac.chunked,
        "cuda_graph_max_bs": frac.graph_bs,
        "page_size": page,
        "context_length": max_len,
        "kv_cache_dtype": launch.kv.id,
    }


def _stage_pools(launch: EngineLaunch, budget: int) -> list[StagePool]:
    """Token-pool phase, per pipeline stage: rest = budget − weights, tokens = rest // cell_size;
    a model with sliding-window and full layers splits the pool, full tokens = layer tokens ÷
    (swa_full_tokens_ratio × SWA layers + full layers) (model_runner.py::set_num_token_hybrid)."""
    arch = launch.arch
    stages = pp_layers(arch.num_layers, launch.pp)
    weights = stage_weights(arch, launch.weights, launch.tp, stages, launch.extra_params)
    per_layer = kv_bytes_per_token_layer(arch, launch.kv, launch.tp)
    ratio = float(launch.arg("swa_full_tokens_ratio", SWA_FULL_TOKENS_RATIO))
    pools = []
    for s, layers in enumerate(stages):
        w = weights[s].total
        rest = budget - w
        cell = int(per_layer * len(layers))
        n_swa = sum(1 for i in layers if arch.layers[i].sliding_window)
        n_full = len(layers) - n_swa
        if n_swa and n_full:
            tokens = int(max(0, rest) // per_layer / (ratio * n_swa + n_full))
        else:
            tokens = max(0, rest) // max(1, cell)
        pools.append(StagePool(s, w, rest, cell, tokens))
    return pools


def _capped_tokens(launch: EngineLaunch, tokens: int, page: int) -> int:
    """max_total_num_tokens: capped by --max-total-tokens, rounded down to whole pages."""
    if launch.args.get("max_total_tokens"):
        tokens = min(tokens, int(launch.args["max_total_tokens"]))
    return tokens // page * page


MIN_POOL = 7  # tp_worker.py: max_req_input_len = min(context_len − 1, pool − 1) − 5 must be > 0


def _failure(rest: int, tokens: int) -> str | None:
    """Why SGLang would not start: no memory for the pool, or a pool too small for any request
    (tp_worker.py asserts 'Memory pool size is too small'). A pool smaller than --context-length
    is not a failure: SGLang caps a request at pool − 1 tokens (max_req_len) and starts."""
    if rest <= 0:
        return (
            "Not enough memory: weights exceed mem_fraction_static × free memory"
            " (increase --mem-fraction-static)"
        )
    if tokens < MIN_POOL:
        return f"Memory pool size is too small ({tokens:,} tokens)"
    return None


def _items(
    launch: EngineLaunch,
    frac: StaticFraction,
    stage: StagePool,
    pre_load: int,
    reserve: int,
    context: int,
) -> tuple[LineItem, ...]:
    """Weights, the token pool, the reserve and the CUDA context (the four sum to total)."""
    tp, pp = launch.tp, launch.pp
    return (
        budget_item(
            "weights",
            "Weights",
            stage.weights,
            "layers ÷ tp + padded vocab ÷ tp",
            {"tp": tp, "pp": pp, "stage": stage.index},
            "weights",
        ),
        budget_item(
            "kv_cache",
            "KV cache (token pool)",
            stage.rest,
            "free before load × mem_fraction_static − weights",
            {
                "pre_load_free_bytes": pre_load,
                "mem_fraction_static": frac.mfs,
                "cell_size_bytes": stage.cell,
            },
            "kv_cache",
        ),
        budget_item(
            "reserve",
            "Activations + CUDA graphs (reserve)",
            reserve,
            "free before load × (1 − mem_fraction_static)",
            {"chunked_prefill_size": frac.chunked, "cuda_graph_max_bs": frac.graph_bs},
            "activations",
        ),
        budget_item(
            "cuda_context",
            "CUDA context / NCCL",
            context,
            "total − free before load (by interconnect)",
            {"tp": tp, "pp": pp},
            "overhead",
        ),
    )
