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

Hybrid models (Mamba-2, gated DeltaNet beside attention) split the pool memory between a state
pool and the attention token pool (model_runner_kv_cache_mixin.py, handle_max_mamba_cache):

    per_req              = Σ state layers (conv state × model dtype + SSM state × ssm dtype)
    max_mamba_cache_size = --max-mamba-cache-size, or --max-running-requests with
                           --disable-radix-cache, else rest × r / (1 + r) // per_req
                           (r = --mamba-full-memory-ratio, 0.9)
    max_total_num_tokens = (rest − max_mamba_cache_size × per_req) // attention cell_size

with the SSM state in --mamba-ssm-dtype, else the config's mamba_ssm_dtype, else float32 (an
assumption stated in the notes); the state shapes are engine/state_cache.py's (conv keeps
kernel − 1 inputs), without speculative decoding's intermediate states.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.engine.bill import LineItem
from gpuplan.engine.frozen import record
from gpuplan.engine.precision import Precision
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
from gpuplan.engine.profiles.sglang.load_memory import load_extra_bytes
from gpuplan.engine.profiles.vllm.non_torch import interconnect_class
from gpuplan.engine.state_cache import FP32, layer_state_shape
from gpuplan.errors import GpuplanError

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
    state_requests: int = 0  # hybrid models: max_mamba_cache_size
    state_bytes: int = 0  # hybrid models: the state pool (requests × per_req)


def sglang_bill(launch: EngineLaunch) -> EngineBill:
    """The SGLang startup bill: weights, the static fraction's reserve, and the token pool
    (model_runner.py::profile_max_num_token, as summarised in this module's docstring)."""
    _refuse_unmodelled_states(launch)
    rules = RULES.at(launch.version)
    frac = _static_fraction(rules, launch)
    total = cuda_total_bytes(launch.gpu)
    context = context_bytes(rules, launch)
    pre_load = total - context
    require_budget("--mem-fraction-static", frac.mfs, pre_load, "free at start")
    budget = int(pre_load * frac.mfs)
    stage = min(_stage_pools(launch, rules, budget), key=lambda p: p.tokens)
    page = int(launch.arg("page_size", 1))
    tokens = _capped_tokens(launch, stage.tokens, page)
    max_len = int(launch.arg("context_length", launch.arch.max_position_embeddings or 4096))
    reserve = pre_load - budget
    failure = _failure(stage.rest, tokens)
    if failure is None and launch.arch.num_state_layers and stage.state_requests <= 0:
        failure = "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
    spread = int(gib(0.5) * frac.mfs)  # free memory before loading moves by about 0.5 GiB
    return EngineBill(
        launch=launch,
        engine="sglang",
        version=f"SGLang {launch.version}",
        total_bytes=total,
        budget_bytes=budget,
        items=_items(launch, frac, stage, pre_load, reserve, context),
        kv_cache_bytes=stage.rest - stage.state_bytes,
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
                max(0, (stage.rest - stage.state_bytes - spread) // max(1, stage.cell)),
                max(0, (stage.rest - stage.state_bytes + spread) // max(1, stage.cell)),
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
            *_state_notes(launch, stage),
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


def _stage_pools(launch: EngineLaunch, rules: dict[str, Any], budget: int) -> list[StagePool]:
    """Token-pool phase, per pipeline stage: rest = budget − weights (as SGLang measures them:
    the allocator's segments and the RoPE table included, load_memory.py), tokens = rest //
    cell_size; a model with sliding-window and full layers splits the pool, full tokens = layer
    tokens ÷ (swa_full_tokens_ratio × SWA layers + full layers)
    (model_runner.py::set_num_token_hybrid)."""
    arch = launch.arch
    stages = pp_layers(arch.num_layers, launch.pp)
    weights = stage_weights(arch, launch.weights, launch.tp, stages, launch.extra_params)
    per_layer = kv_bytes_per_token_layer(arch, launch.kv, launch.tp)
    ratio = float(launch.arg("swa_full_tokens_ratio", SWA_FULL_TOKENS_RATIO))
    pools = []
    last = len(stages) - 1
    for s, layers in enumerate(stages):
        w = weights[s].total + sum(load_extra_bytes(launch, rules, layers, s == 0, s == last))
        rest = budget - w
        if any(arch.layers[i].has_state for i in layers):
            pools.append(_hybrid_pool(launch, s, w, rest, layers, per_layer))
            continue
        cell = int(per_layer * len(layers))
        n_swa = sum(1 for i in layers if arch.layers[i].sliding_window)
        n_full = len(layers) - n_swa
        if n_swa and n_full:
            tokens = int(max(0, rest) // per_layer / (ratio * n_swa + n_full))
        else:
            tokens = max(0, rest) // max(1, cell)
        pools.append(StagePool(s, w, rest, cell, tokens))
    return pools


STATE_KINDS = ("mamba", "hybrid", "gated_delta")  # the state layers SGLang's Mamba2 pool holds


def _refuse_unmodelled_states(launch: EngineLaunch) -> None:
    """State layers other than Mamba / gated DeltaNet (lightning attention, short convolutions)
    are still refused in one line."""
    arch = launch.arch
    other = sorted({x.mixer for x in arch.layers if x.has_state and x.mixer not in STATE_KINDS})
    if other:
        refuse_state_layers(arch, "SGLang", f"state pool for {', '.join(other)} layers")


def ssm_state_precision(launch: EngineLaunch) -> tuple[Precision, bool]:
    """The SSM state's dtype: --mamba-ssm-dtype, the config's mamba_ssm_dtype, else float32
    (the second value: whether float32 was assumed)."""
    flag = launch.arg("mamba_ssm_dtype")
    if flag and str(flag).lower() not in ("float32", "bfloat16", "float16"):
        raise GpuplanError(f"--mamba-ssm-dtype {flag!r} is not one of float32, bfloat16, float16")
    name = str(flag or launch.arch.ssm_state_dtype or "").lower()
    if name in ("bfloat16", "bf16", "torch.bfloat16"):
        return Precision(id="bf16", bits=16), False
    if name in ("float16", "fp16", "torch.float16"):
        return Precision(id="fp16", bits=16), False
    return FP32, name not in ("float32", "fp32", "torch.float32")


def state_bytes_per_request(launch: EngineLaunch, layers: range | list[int]) -> int:
    """mamba_cache_per_req on one rank: every state layer's conv state (model dtype) and SSM
    state (ssm dtype) for one request."""
    ssm, _ = ssm_state_precision(launch)
    conv = launch.weights.base
    total = 0
    for i in layers:
        shape = layer_state_shape(launch.arch, launch.arch.layers[i], launch.tp, "engine")
        if shape is not None:
            total += conv.bytes_for(shape.conv_elements) + ssm.bytes_for(shape.ssm_elements)
    return total


def _state_notes(launch: EngineLaunch, stage: StagePool) -> tuple[str, ...]:
    if not launch.arch.num_state_layers:
        return ()
    _, assumed = ssm_state_precision(launch)
    notes = [
        f"state pool: {stage.state_requests:,} requests (max_mamba_cache_size) of"
        f" {stage.state_bytes / max(1, stage.state_requests) / 2**20:.2f} MiB; running requests"
        " are capped by it"
    ]
    if assumed:
        notes.append(
            "SSM state assumed float32 (no --mamba-ssm-dtype, no mamba_ssm_dtype in config.json)"
        )
    return tuple(notes)


def _hybrid_pool(
    launch: EngineLaunch, s: int, w: int, rest: int, layers: range, per_layer: float
) -> StagePool:
    """A hybrid stage: the state pool first (handle_max_mamba_cache), the attention pool of the
    rest over the attention layers only."""
    per_req = state_bytes_per_request(launch, layers)
    if launch.args.get("max_mamba_cache_size"):
        size = int(launch.args["max_mamba_cache_size"])
    elif launch.args.get("disable_radix_cache") and launch.args.get("max_running_requests"):
        size = int(launch.args["max_running_requests"])
    else:
        r = float(launch.arg("mamba_full_memory_ratio", 0.9))
        size = int(max(0, rest) * r / (1 + r) // max(1, per_req))
    state = size * per_req
    n_attn = sum(1 for i in layers if launch.arch.layers[i].has_attention)
    cell = int(per_layer * n_attn)
    tokens = max(0, rest - state) // max(1, cell) if cell else 0
    return StagePool(s, w, rest, cell, tokens, size, state)


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
    """Weights, the token pool (and a hybrid model's state pool), the reserve and the CUDA
    context (they sum to total)."""
    tp, pp = launch.tp, launch.pp
    state = (
        (
            budget_item(
                "state_cache",
                "State pool (Mamba / linear attention)",
                stage.state_bytes,
                "max_mamba_cache_size × per-request conv + SSM state",
                {"max_mamba_cache_size": stage.state_requests},
                "kv_cache",
            ),
        )
        if stage.state_bytes
        else ()
    )
    return (
        budget_item(
            "weights",
            "Weights",
            stage.weights,
            "layers ÷ tp + padded vocab ÷ tp + RoPE table + allocator segment rounding",
            {"tp": tp, "pp": pp, "stage": stage.index},
            "weights",
        ),
        *state,
        budget_item(
            "kv_cache",
            "KV cache (token pool)",
            stage.rest - stage.state_bytes,
            "free before load × mem_fraction_static − weights"
            + (" − state pool" if stage.state_bytes else ""),
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
