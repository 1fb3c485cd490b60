"""vLLM's startup bill, step by step, for the version the launch names.

What one worker does at startup (docs/engines-research.md §1 has the line-by-line reading):

    requested   = ceil(total × gpu_memory_utilization)        v1/worker/utils.py::request_memory
    non_kv      = weights + torch peak increase + non-torch    utils/mem_utils.py::memory_profiling
    available   = requested − non_kv                           v1/worker/gpu_worker.py::determine_available_memory
    page        = block_size × kv_heads_per_rank × (d_k + d_v) × kv bytes    v1/kv_cache_interface.py
    num_blocks  = min over workers(available // page // layer slots)         v1/core/kv_cache_utils.py
    tokens      = num_blocks // groups × block_size            kv_cache_utils.py::_report_kv_cache_config
    concurrency = num_blocks / blocks one max_model_len request needs
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuplan.engine.profiles import (
    GIB,
    EngineBill,
    EngineLaunch,
    Range,
    budget_item,
    gib,
)
from gpuplan.engine.profiles.common import (
    cuda_total_bytes,
    padded_vocab,
    pp_layers,
    rope_cache_bytes,
    stage_weights,
)
from gpuplan.engine.profiles.vllm.backends import mxfp4_padding_bytes
from gpuplan.engine.profiles.vllm.kv_layout import blocks_per_request, kv_layout, tokens_for
from gpuplan.engine.profiles.vllm.profile_run import (
    ACT_SPREAD,
    activation_features,
    activation_peak_bytes,
    non_torch_bytes,
)
from gpuplan.engine.profiles.vllm.rules import RULES

DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE; FlashAttention / FLASH_ATTN_MLA on Hopper
CUDAGRAPH_NOMINAL = gib(0.91)
CUDAGRAPH_LOW = gib(0.5)
CUDAGRAPH_HIGH = gib(1.9)


def batch_defaults(launch: EngineLaunch, total: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) as engine/arg_utils.py::get_batch_defaults picks
    them for the OpenAI API server: 1024 / 8192 on >= 70 GiB GPUs other than A100, else 256 / 2048."""
    big = total >= 70 * GIB and not launch.gpu.id.startswith("a100")
    seqs = int(launch.arg("max_num_seqs", 1024 if big else 256))
    tokens = int(launch.arg("max_num_batched_tokens", 8192 if big else 2048))
    return seqs, tokens


def _max_model_len(launch: EngineLaunch) -> int:
    value = launch.args.get("max_model_len")
    if isinstance(value, int) and value > 0:
        return value
    return launch.arch.max_position_embeddings or 4096


def vllm_bill(launch: EngineLaunch) -> EngineBill:
    """The vLLM V1 startup bill of the worker that sets the KV size (min over workers)."""
    arch, fmt, tp, pp = launch.arch, launch.weights, launch.tp, launch.pp
    rules = RULES.at(launch.version)
    hybrid = not (
        launch.arg("disable_hybrid_kv_cache_manager", False)
        or launch.arg("disable_sliding_window", False)
    )
    total = cuda_total_bytes(launch.gpu)
    util = float(launch.arg("gpu_memory_utilization", rules["default_utilization"]))
    requested = math.ceil(total * util)
    seqs, batched = batch_defaults(launch, total)
    block_size = int(launch.arg("block_size", DEFAULT_BLOCK_SIZE))
    max_len = _max_model_len(launch)
    stages = pp_layers(arch.num_layers, pp)
    padding = mxfp4_padding_bytes(arch, fmt, tp, launch.gpu)
    weights = stage_weights(arch, fmt, tp, stages, launch.extra_params, padding)
    rope = rope_cache_bytes(arch, fmt)
    weights = [replace(w, buffers=rope) for w in weights]

    per_stage = []
    for s, layers in enumerate(stages):
        feats = activation_features(arch, fmt, tp, seqs, batched, sampler=s == pp - 1)
        feats["encoder"] = float(GIB if launch.is_multimodal and s == 0 else 0)
        act = activation_peak_bytes(feats)
        nt = non_torch_bytes(tp, pp, s == 0)
        w = weights[s].total
        available = (
            int(launch.args["kv_cache_memory_bytes"])
            if launch.args.get("kv_cache_memory_bytes") is not None
            else requested - (w + act + nt)
        )
        layout = kv_layout(
            arch, launch, block_size, layers, hybrid=hybrid, group_ratio=rules["hybrid_group_ratio"]
        )
        blocks = max(0, available) // layout.page_bytes // max(1, layout.slots)
        if launch.args.get("num_gpu_blocks_override"):
            blocks = int(launch.args["num_gpu_blocks_override"])
        per_stage.append((blocks, w, act, nt, available, layout, feats))
    # every worker sizes its own blocks; all take the minimum (get_kv_cache_configs)
    limiting = min(range(pp), key=lambda i: per_stage[i][0])
    num_blocks = per_stage[limiting][0]
    layout = per_stage[limiting][5]
    # the log prints rank 0's figures: the lines are stage 0's
    s = 0
    _, w, act, nt, available, _, feats = per_stage[0]
    sw = weights[0]
    tokens = num_blocks // layout.groups * block_size
    per_request = blocks_per_request(layout, max_len, block_size, batched)
    concurrency = num_blocks / per_request if per_request else 0.0
    per_token = layout.page_bytes * layout.slots * layout.groups // block_size

    failure = None
    if min(p[4] for p in per_stage) <= 0:
        failure = (
            "No available memory for the cache blocks: weights + activation peak + non-torch"
            f" exceed gpu_memory_utilization {util} × total"
        )
    elif concurrency < 1:
        failure = (
            f"not enough KV cache for one request of max_model_len {max_len:,} tokens"
            f" ({tokens:,} tokens available)"
        )
    eager = bool(launch.arg("enforce_eager", False))
    graph = 0 if eager else CUDAGRAPH_NOMINAL
    items = (
        budget_item(
            "weights",
            "Weights",
            w,
            "layers ÷ tp + padded vocab ÷ tp (embedding, LM head) + encoder + RoPE tables",
            {
                "layers_bytes": sw.layers,
                "embedding_bytes": sw.embedding,
                "lm_head_bytes": sw.lm_head,
                "encoder_bytes": sw.extra,
                "rope_cache_bytes": sw.buffers,
                "precision": fmt.describe(),
                "tp": tp,
                "pp": pp,
                "stage": s,
                "stage_layers": len(stages[s]),
                "padded_vocab": padded_vocab(arch.vocab_size),
            },
            "weights",
        ),
        budget_item(
            "activation_peak",
            "Activation peak",
            act,
            "profile run of max_num_batched_tokens + sampler over max_num_seqs × vocab (fitted)",
            {
                "max_num_batched_tokens": batched,
                "max_num_seqs": seqs,
                "sampler": s == pp - 1,
                **{f"{k}_bytes": int(v) for k, v in feats.items()},
            },
            "activations",
        ),
        budget_item(
            "non_torch",
            "Non-torch memory",
            nt,
            "CUDA/NCCL memory grown during profiling (by layout, fitted)",
            {"tp": tp, "pp": pp},
            "overhead",
        ),
        budget_item(
            "kv_cache",
            "KV cache",
            available,
            "requested − weights − activation peak − non-torch",
            {
                "requested_bytes": requested,
                "page_bytes": layout.page_bytes,
                "layer_slots": layout.slots,
                "groups": layout.groups,
                "block_size": block_size,
                "num_blocks": num_blocks,
            },
            "kv_cache",
        ),
    )
    outside = (
        budget_item(
            "cuda_graphs",
            "CUDA graphs",
            graph,
            "graph pool captured after KV sizing (outside the budget in 0.19)",
            {"enforce_eager": eager},
            "overhead",
        ),
    )
    headroom = total - requested
    notes = [
        f"budget = ceil({util} × {total / GIB:.2f} GiB) = {requested / GIB:.2f} GiB per GPU",
        f"max_num_seqs {seqs}, max_num_batched_tokens {batched}, block_size {block_size}",
    ]
    if pp > 1:
        notes.append(
            f"lines are rank 0's (stage 0, as the log prints them); stage {limiting} has the"
            " fewest blocks and sets the KV size (vLLM takes the minimum over workers)"
        )
    if layout.groups > 1:
        notes.append(
            f"hybrid KV cache: {layout.groups} groups of {layout.slots} layer slots"
            + (f" ({layout.padding_layers} padding layers)" if layout.padding_layers else "")
            + "; the logged token figure charges every slot, sliding windows show in concurrency"
        )
    if tp > arch.attention.num_kv_heads and not arch.attention.is_mla:
        notes.append(f"tp {tp} > {arch.attention.num_kv_heads} KV heads: KV heads replicated")
    if graph > headroom:
        notes.append(
            "CUDA graphs may not fit in the 1 − utilization headroom: lower"
            " --gpu-memory-utilization or use --enforce-eager"
        )
    spread_act = ACT_SPREAD
    spread_nt = gib(0.21) if tp == 1 and pp == 1 else gib(0.1)
    low_kv = available - spread_act - spread_nt
    high_kv = available + spread_act
    ranges = {
        "activation_peak": Range(
            act,
            max(0, act - spread_act),
            act + spread_act,
            "--max-num-batched-tokens, --max-num-seqs",
        ),
        "non_torch": Range(
            nt, max(0, nt - gib(0.05)), nt + spread_nt, "tp/pp layout, driver, NCCL"
        ),
        "cuda_graphs": Range(
            graph,
            0 if eager else CUDAGRAPH_LOW,
            0 if eager else CUDAGRAPH_HIGH,
            "--max-num-seqs (capture sizes), --enforce-eager",
        ),
        "kv_capacity_tokens": Range(
            tokens,
            tokens_for(low_kv, layout, block_size),
            tokens_for(high_kv, layout, block_size),
            "activation peak and non-torch memory (allocator, driver version)",
        ),
    }
    return EngineBill(
        launch=launch,
        engine="vllm",
        version=launch.version,
        total_bytes=total,
        budget_bytes=requested,
        items=items,
        kv_cache_bytes=available,
        kv_capacity_tokens=tokens,
        max_concurrency=concurrency,
        max_model_len=max_len,
        kv_bytes_per_token=per_token,
        block_size=block_size,
        num_blocks=num_blocks,
        fits=failure is None,
        failure=failure,
        outside_budget=outside,
        ranges=ranges,
        notes=tuple(notes),
        settings={
            "gpu_memory_utilization": util,
            "max_num_seqs": seqs,
            "max_num_batched_tokens": batched,
            "block_size": block_size,
            "max_model_len": max_len,
            "kv_cache_dtype": launch.kv.id,
        },
    )
