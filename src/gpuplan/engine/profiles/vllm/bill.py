"""vLLM's startup bill, step by step, with the rules of the version the launch names.

What one worker does at startup (docs/engines-research.md §1 reads it line by line):

    requested   = total × gpu_memory_utilization (ceil)        v1/worker/utils.py::request_memory
                  (total as cudaMemGetInfo reports it; V0: worker.py, the same product)
    non_kv      = weights + torch peak of the profile run + non-torch growth
                  (+ the CUDA-graph estimate where the version deducts it)   utils/mem_utils.py
    available   = requested − non_kv                            v1/worker/gpu_worker.py::determine_available_memory
    num_blocks  = min over workers(available // page // layer slots)        v1/core/kv_cache_utils.py
    tokens      = num_blocks // groups × block_size             kv_cache_utils.py::_report_kv_cache_config
    concurrency = num_blocks / blocks one max_model_len request needs

Each term has its own module: profile_run.py (torch peak), non_torch.py, kv_layout.py,
features.py (LoRA, drafts, offload, expert parallel), backends.py (MXFP4 padding); the
version's rules come from versions.toml (rules.py).
"""

from __future__ import annotations

import math
from typing import Any

from gpuplan.engine.bill import LineItem
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.profiles import (
    GIB,
    EngineBill,
    EngineLaunch,
    Range,
    budget_item,
    gib,
)
from gpuplan.engine.profiles.common import (
    StageWeights,
    cuda_total_bytes,
    kv_bytes_per_token_layer,
    padded_vocab,
    pp_layers,
    require_budget,
    rope_cache_bytes,
    stage_weights,
)
from gpuplan.engine.profiles.vllm.backends import mxfp4_padding_bytes
from gpuplan.engine.profiles.vllm.features import (
    expert_parallel_saving,
    lora_slot_bytes,
    offloaded_bytes,
    speculative_method,
)
from gpuplan.engine.profiles.vllm.kv_layout import (
    KvLayout,
    StateFormat,
    blocks_per_request,
    kv_layout,
    num_blocks,
    reported_tokens,
    resolve_state_format,
    tokens_for,
)
from gpuplan.engine.profiles.vllm.mla_absorption import absorbed_mla_bytes
from gpuplan.engine.profiles.vllm.non_torch import non_torch_bytes
from gpuplan.engine.profiles.vllm.profile_run import (
    PeakTerms,
    ProfileBatch,
    moe_workspace_at_sampler,
    peak_terms,
    v0_peak_terms,
    without_moe_workspace_at_sampler,
)
from gpuplan.engine.profiles.vllm.rules import rules_for
from gpuplan.engine.state_cache import state_bytes_per_layer
from gpuplan.errors import GpuplanError

ACT_SPREAD = gib(0.5)  # about the worst activation error across the logs, either side
CUDAGRAPH_LOW = gib(0.5)
CUDAGRAPH_HIGH = gib(1.9)


@record
class Stage:
    """One pipeline stage's worker: its lines and its KV blocks."""

    index: int
    weights: StageWeights
    peak: PeakTerms
    non_torch: int
    non_torch_parts: dict[str, Any]
    graphs: int  # CUDA-graph memory deducted before KV sizing (0 where the version does not)
    state_cache: int  # V0: the separate state cache of the stage's state layers
    available: int
    layout: KvLayout
    blocks: int

    @property
    def activation(self) -> int:
        return self.peak.peak


def batch_shape(
    launch: EngineLaunch, rules: dict[str, Any], total: int, max_len: int
) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) as the version picks them when not given.

    V1 (engine/arg_utils.py::get_batch_defaults, API server): 8192 tokens / 1024 seqs on GPUs
    of >= 70 GiB (not A100 from 0.9), else 2048 / 256, by device name before 0.8.5 and with
    1024 seqs everywhere before 0.8.4 (v1_big_defaults); --no-enable-chunked-prefill makes the
    batch a whole max_model_len. V0 (config.py SchedulerConfig): 256 seqs; max(max_model_len,
    2048) tokens, or the chunked-prefill size when chunked prefill is on (by default only for
    max_model_len > 32768 without sliding windows)."""
    args = launch.args
    if rules["engine"] == "v0":
        seqs = int(args.get("max_num_seqs") or 256)
        chunked = args.get("enable_chunked_prefill")
        if chunked is None:
            chunked = max_len > 32768 and not any(lay.sliding_window for lay in launch.arch.layers)
        default = int(rules["v0.chunked_prefill_tokens"]) if chunked else max(max_len, 2048)
        return seqs, int(args.get("max_num_batched_tokens") or default)
    big, many = v1_big_defaults(rules["v1.batch_defaults"], launch.gpu, total)
    seqs = int(args.get("max_num_seqs") or (1024 if many else 256))
    tokens = args.get("max_num_batched_tokens")
    if tokens is None:
        tokens = (
            max(max_len, 2048)
            if args.get("enable_chunked_prefill") is False
            else (8192 if big else 2048)
        )
    return seqs, int(tokens)


def v1_big_defaults(rule: str, gpu: GpuSpec, total: int) -> tuple[bool, bool]:
    """(8192 batched tokens, 1024 sequences) for the V1 API server's defaults, by the version's
    rule (versions.toml `v1.batch_defaults`, engine/arg_utils.py): the device name holding
    'h100' / 'h200' (#12369; with 1024 sequences on every GPU until #16158), then the device's
    memory >= 70 GiB (#17073), A100 excepted (#17885)."""
    if rule in ("h100_name_1024", "h100_name"):
        named = any(k in f"{gpu.id} {gpu.name}".lower() for k in ("h100", "h200"))
        return named, named or rule == "h100_name_1024"
    big = total >= 70 * GIB
    if rule == "70gib_not_a100":
        big = big and not gpu.id.startswith("a100")
    return big, big


def stage_weight_lines(
    launch: EngineLaunch, stages: list[range], notes: list[str], rules: dict[str, Any]
) -> list[StageWeights]:
    """Weights each stage's rank loads: layers, embeddings, encoder, RoPE tables, MXFP4
    padding, LoRA slots, V0 0.7's absorbed MLA matrices (mla_absorption.py) and a draft model;
    less what --cpu-offload-gb keeps on the host."""
    arch, fmt, tp = launch.arch, launch.weights, launch.tp
    padding = mxfp4_padding_bytes(arch, fmt, tp, launch.gpu, rules)
    weights = stage_weights(arch, fmt, tp, stages, launch.extra_params, padding)
    rope = rope_cache_bytes(arch, fmt)
    out = []
    for s, w in enumerate(weights):
        extra = rope
        if launch.arg("enable_lora", False):
            slots = int(launch.arg("max_loras", 1))
            rank = int(launch.arg("max_lora_rank", 16))
            extra += lora_slot_bytes(arch, fmt.base, tp, slots, rank, stages[s])
        if rules.get("mla_absorption"):
            extra += absorbed_mla_bytes(arch, fmt, tp, stages[s])
        if launch.draft is not None:
            draft_fmt = fmt.__class__(fmt.base, fmt.base)
            draft = stage_weights(launch.draft, draft_fmt, tp, [range(launch.draft.num_layers)], 0)
            extra += draft[0].total if s == 0 else 0
        layers = w.layers
        if launch.arg("enable_expert_parallel", False):
            per_param = fmt.for_kind("experts").bytes_for(1024) / 1024
            layers -= (
                expert_parallel_saving(arch, per_param, tp, launch.dp)
                * len(stages[s])
                // arch.num_layers
            )
        offload = float(launch.arg("cpu_offload_gb", 0.0) or 0.0)
        if offload:
            moved = offloaded_bytes(offload, layers)
            layers -= moved
            if s == 0:
                notes.append(
                    f"--cpu-offload-gb {offload:g}: {moved / GIB:.2f} GiB of layer weights stay in host memory"
                )
        out.append(StageWeights(layers, w.embedding, w.lm_head, w.extra, extra))
    return out


def _max_model_len(launch: EngineLaunch, rules: dict[str, Any]) -> tuple[int, bool]:
    """(max_model_len, auto): the given length, or the model's; auto = fit it to the KV memory."""
    value = launch.args.get("max_model_len")
    model_max = launch.arch.max_position_embeddings or 4096
    if value == "auto":
        if not rules["max_model_len_auto"]:
            raise GpuplanError(
                f"vLLM {launch.version} does not take --max-model-len auto / -1 (from 0.14)"
            )
        return model_max, True
    if isinstance(value, int) and value > 0:
        return value, False
    return model_max, False


def derived_max_len(arch: Any) -> int:
    """The longest max_model_len vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN
    (config/model.py::_get_and_verify_max_len): max_position_embeddings, times the RoPE scaling
    factor for linear / dynamic / yarn scaling (yarn from its original length)."""
    rope = arch.rope
    derived = arch.max_position_embeddings or 0
    if rope is not None and rope.kind in ("linear", "dynamic", "yarn") and rope.factor > 1:
        base = (
            rope.original_max_position
            if rope.kind == "yarn" and rope.original_max_position
            else derived
        )
        derived = int(base * rope.factor)
    return derived


def fit_max_model_len(
    layout: KvLayout, num_blocks: int, block_size: int, batched: int, model_max: int
) -> int:
    """The longest max_model_len one request of which fits in `num_blocks` (what vLLM's auto
    length finds: kv_cache_utils.py::_check_enough_kv_cache_memory's binary search)."""
    lo, hi = 0, model_max
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks_per_request(layout, mid, block_size, batched) <= num_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


@record
class Shape:
    """What every stage shares: the budget, the batch, the block and the state-page rules."""

    total: int  # the memory cudaMemGetInfo reports
    util: float  # --gpu-memory-utilization
    requested: int
    seqs: int
    batched: int
    block_size: int
    max_len: int  # as given (the model's length under --max-model-len auto)
    auto_len: bool  # --max-model-len auto: fit the length to the KV memory
    eager: bool
    hybrid: bool
    state_format: StateFormat
    state_mode: str
    sampler_path: str
    graphs_in: int  # CUDA-graph estimate deducted before KV sizing (0.21+)
    graphs_after: int  # CUDA-graph pool captured after KV sizing (before 0.21)


@record
class KvSize:
    """The KV figures of the stage with the fewest blocks (vLLM takes the minimum over workers)."""

    layout: KvLayout
    blocks: int
    max_len: int  # after --max-model-len auto
    report: str  # how the version logs the token figure
    tokens: int
    concurrency: float
    per_token: int


def vllm_bill(launch: EngineLaunch) -> EngineBill:
    """The startup bill of the worker that sets the KV size (vLLM takes the minimum over workers):
    the budget and batch, each stage's weights and profile run, the KV size, then the lines."""
    rules = rules_for(launch)
    notes: list[str] = []
    shape, unmodelled = _shape(launch, rules, notes)
    per_stage = _stages(launch, rules, shape, notes)
    limiting = min(per_stage, key=lambda st: st.blocks)
    first = per_stage[0]  # the log prints rank 0's lines
    kv = _kv_size(launch, rules, shape, limiting, notes)
    failure = _failure(launch, rules, shape, per_stage, kv)
    return EngineBill(
        launch=launch,
        engine="vllm",
        version=f"vLLM {launch.version} ({rules['engine'].upper()} engine)",
        total_bytes=shape.total,
        budget_bytes=shape.requested,
        items=_items(launch, first, shape, kv),
        kv_cache_bytes=first.available,
        kv_capacity_tokens=kv.tokens,
        max_concurrency=kv.concurrency,
        max_model_len=kv.max_len,
        kv_bytes_per_token=kv.per_token,
        block_size=kv.layout.block_size,
        num_blocks=kv.blocks,
        fits=failure is None,
        failure=failure,
        outside_budget=(_graphs_after_item(shape),),
        ranges=_ranges(first, kv.layout, shape, kv.tokens, launch, kv.report),
        notes=tuple(
            _notes(launch, rules, shape, limiting, kv.layout)
            + _state_notes(launch, rules, shape, first, kv.layout)
            + notes
        ),
        settings=_settings(launch, shape, first, kv),
        unmodelled=_unmodelled(launch) + unmodelled,
    )


def _shape(
    launch: EngineLaunch, rules: dict[str, Any], notes: list[str]
) -> tuple[Shape, tuple[str, ...]]:
    """Budget and batch phase: requested = ceil(total × gpu_memory_utilization)
    (v1/worker/utils.py::request_memory), the profile batch, the block size, the state-page
    rules and where the CUDA graphs are counted; with the flags left unmodelled."""
    total = cuda_total_bytes(launch.gpu)
    util = float(launch.arg("gpu_memory_utilization", rules["default_utilization"]))
    require_budget("--gpu-memory-utilization", util, total, "total memory")
    max_len, auto_len = _max_model_len(launch, rules)
    seqs, batched = batch_shape(launch, rules, total, max_len)
    eager = bool(launch.arg("enforce_eager", False))
    state_mode, unmodelled = _state_mode(launch, rules, notes)
    graphs = gib(rules["cudagraph_gib"])
    shape = Shape(
        total=total,
        util=util,
        requested=math.ceil(total * util),
        seqs=seqs,
        batched=batched,
        block_size=int(launch.arg("block_size", rules["block_size"])),
        max_len=max_len,
        auto_len=auto_len,
        eager=eager,
        hybrid=rules["hybrid_kv"]
        and not (
            launch.arg("disable_hybrid_kv_cache_manager", False)
            or launch.arg("disable_sliding_window", False)
        ),
        state_format=_state_format(launch, rules),
        state_mode=state_mode,
        sampler_path=str(launch.arg("sampler_backend", rules["sampler_path"])),
        graphs_in=0 if eager or not rules["cudagraph_in_budget"] else graphs,
        graphs_after=0 if eager or rules["cudagraph_in_budget"] else graphs,
    )
    return shape, unmodelled


def _stages(
    launch: EngineLaunch, rules: dict[str, Any], shape: Shape, notes: list[str]
) -> list[Stage]:
    """Weights phase, then each pipeline stage's worker: profile run, non-torch memory, KV blocks."""
    stages = pp_layers(launch.arch.num_layers, launch.pp)
    weights = stage_weight_lines(launch, stages, notes, rules)
    return [_stage(launch, rules, shape, s, layers, weights[s]) for s, layers in enumerate(stages)]


def _kv_size(
    launch: EngineLaunch, rules: dict[str, Any], shape: Shape, limiting: Stage, notes: list[str]
) -> KvSize:
    """KV phase, from the limiting stage's blocks: the auto length, the logged token figure
    (kv_cache_utils.py::_report_kv_cache_config), the concurrency (blocks ÷ the blocks one
    max_model_len request needs; V0 with state layers only: its state slots) and bytes per token."""
    layout, n_blocks = limiting.layout, limiting.blocks
    block_size, batched = layout.block_size, shape.batched
    max_len = shape.max_len
    if shape.auto_len:
        max_len = fit_max_model_len(layout, n_blocks, block_size, batched, max_len)
        notes.append(f"--max-model-len auto: the longest request that fits is {max_len:,} tokens")
    report = str(rules["kv_tokens_report"])
    tokens = reported_tokens(layout, n_blocks, block_size, report, max_len, batched)
    per_request = blocks_per_request(layout, max_len, block_size, batched) if max_len else 0
    concurrency = n_blocks / per_request if per_request else 0.0
    if not layout.groups and launch.arch.num_state_layers:  # V0, state layers only: one slot each
        concurrency = float(v0_state_slots(shape.seqs, shape.eager))
    per_token = layout.page_bytes * layout.slots * layout.groups // max(1, block_size)
    return KvSize(layout, n_blocks, max_len, report, tokens, concurrency, per_token)


def _settings(launch: EngineLaunch, shape: Shape, first: Stage, kv: KvSize) -> dict[str, Any]:
    """The defaults vLLM picked for this launch."""
    return {
        "gpu_memory_utilization": shape.util,
        "max_num_seqs": shape.seqs,
        "max_num_batched_tokens": shape.batched,
        "block_size": kv.layout.block_size,
        "max_model_len": kv.max_len,
        "kv_cache_dtype": launch.kv.id,
        "sampler": shape.sampler_path,
        "interconnect": first.non_torch_parts["interconnect"],
        **({"mamba_cache_mode": shape.state_mode} if kv.layout.has_state else {}),
    }


def _stage(
    launch: EngineLaunch,
    rules: dict[str, Any],
    shape: Shape,
    s: int,
    layers: range,
    weights: StageWeights,
) -> Stage:
    """One pipeline stage's worker: its profile peak, non-torch memory, V0 state cache, the
    KV memory left and how its layout cuts it into blocks."""
    arch, pp = launch.arch, launch.pp
    peak = _profile_peak(launch, rules, shape, s)
    nt, nt_parts = non_torch_bytes(rules, launch.gpu, launch.tp, pp, launch.interconnect)
    paged = rules["engine"] == "v1"
    state = 0
    if not paged and arch.num_state_layers:
        slots = v0_state_slots(shape.seqs, shape.eager)
        state = slots * v0_state_bytes(launch, layers)
    if launch.args.get("kv_cache_memory_bytes") is not None:
        available = int(launch.args["kv_cache_memory_bytes"])
    else:
        available = shape.requested - (weights.total + peak.peak + nt + shape.graphs_in + state)
    layout = kv_layout(
        arch,
        launch,
        shape.block_size,
        layers,
        hybrid=shape.hybrid,
        group_ratio=rules["hybrid_group_ratio"],
        paged_state=paged,
        state_format=shape.state_format,
        align_to_block=rules["hybrid_block_align"] == "block",
        max_model_len=shape.max_len,
        state_mode=shape.state_mode,
        mla_align=int(rules.get("mla_kv_align_bytes", 1)),
    )
    if launch.draft is not None and s == pp - 1:
        layout = _with_draft_layers(layout, launch)
    blocks = num_blocks(available, layout)
    if launch.args.get("num_gpu_blocks_override"):
        blocks = int(launch.args["num_gpu_blocks_override"])
    return Stage(s, weights, peak, nt, nt_parts, shape.graphs_in, state, available, layout, blocks)


def _profile_peak(launch: EngineLaunch, rules: dict[str, Any], shape: Shape, s: int) -> PeakTerms:
    """Profile-run phase: the torch peak of stage `s`'s dummy batch (profile_run.py); the last
    stage runs the sampler, the first a multimodal encoder's dummy input."""
    batch = ProfileBatch(
        shape.batched, logit_rows(shape.sampler_path, shape), sampler=s == launch.pp - 1
    )
    encoder = gib(rules["encoder_gib"]) if launch.is_multimodal and s == 0 else 0
    args = (
        launch.arch,
        launch.weights,
        launch.tp,
        batch,
        float(rules["sampler_bytes"][shape.sampler_path]),
        gib(rules["activation_constant_gib"]),
        encoder,
    )
    if rules["engine"] == "v0":  # V0: its eager forward replayed (profile_run.v0_peak_terms)
        return v0_peak_terms(*args, reserved=rules["non_torch_scope"] == "init_free")
    terms = peak_terms(*args)
    if rules["engine"] == "v1" and not moe_workspace_at_sampler(
        rules, launch.weights.for_kind("experts").id
    ):
        terms = without_moe_workspace_at_sampler(terms)
    return terms


def logit_rows(sampler_path: str, shape: Shape) -> int:
    """Rows of full-vocabulary logits the profile run computes. V1 before 0.8 (`v1_logits`:
    v1/worker/gpu_model_runner.py::profile_run at 0.7.x) took compute_logits over the whole
    dummy batch's hidden states, all max_num_batched_tokens rows ("TODO: Consider the memory
    usage of the sampler"); from 0.8 _dummy_run keeps one row per request (logit_indices) and
    the sampler sees min(max_num_seqs, max_num_batched_tokens) rows, as V0's does."""
    return shape.batched if sampler_path == "v1_logits" else shape.seqs


def v0_state_slots(max_num_seqs: int, eager: bool) -> int:
    """State slots the V0 MambaCacheManager allocates (model_executor/models/mamba_cache.py):
    max_num_seqs, padded up to a captured CUDA-graph batch size (1, 2, 4, then multiples of 8)
    unless --enforce-eager."""
    if eager or max_num_seqs <= 2:
        return max_num_seqs
    if max_num_seqs <= 4:
        return 4
    return -(-max_num_seqs // 8) * 8


def v0_state_bytes(launch: EngineLaunch, layers: range) -> int:
    """One sequence's state on one V0 worker: its stage's state layers ÷ tp, conv and SSM states
    in the model dtype (the V0 cache is allocated with the LM head's dtype)."""
    base = launch.weights.base
    return sum(
        n * state_bytes_per_layer(launch.arch, spec, base, launch.tp, "engine", base)
        for spec, n in launch.arch.layer_groups(layers)
    )


def _state_format(launch: EngineLaunch, rules: dict[str, Any]) -> StateFormat:
    return resolve_state_format(
        launch.arch,
        launch.weights.base,
        launch.args.get("mamba_cache_dtype"),
        launch.args.get("mamba_ssm_cache_dtype"),
        tuple(rules["ssm_dtype_from_config"]),
        tuple(rules["ssm_fp32_default"]),
    )


def _state_mode(
    launch: EngineLaunch, rules: dict[str, Any], notes: list[str]
) -> tuple[str, tuple[str, ...]]:
    """mamba_cache_mode for a model with state layers (model_executor/models/config.py::
    MambaModelConfig): "none" unless prefix caching is asked for; then "all" for Mamba-1/2
    models, "align" for the others (0.15+), as the version allows. "all" keeps a state page
    per block of the context and aligns blocks to the Mamba chunk size, which gpuplan does not
    read: it is reported unmodelled (the pool is sized as in mode "none")."""
    arch = launch.arch
    if not arch.num_state_layers or rules["engine"] != "v1":
        return "none", ()
    asked = launch.args.get("mamba_cache_mode")
    if not launch.arg("enable_prefix_caching", False):
        if asked not in (None, "none"):
            notes.append(f"--mamba-cache-mode {asked}: vLLM sets it to none without prefix caching")
        return "none", ()
    if asked is None:
        policy = rules["mamba_prefix_caching"]
        mamba = arch.mamba is not None
        if policy == "off" or (policy == "all" and not mamba):
            notes.append(
                f"--enable-prefix-caching: vLLM {launch.version} disables prefix caching for"
                " models with state layers"
            )
            return "none", ()
        asked = "all" if mamba else "align"
    if asked == "all":
        return "none", (
            "--enable-prefix-caching (mamba_cache_mode all: a state page per block, blocks"
            " aligned to the Mamba chunk size; the pool is sized as without it)",
        )
    return str(asked), ()


def _with_draft_layers(layout: KvLayout, launch: EngineLaunch) -> KvLayout:
    """A draft model's attention layers share the KV pages (one more layer slot each) when their
    page is the target's; otherwise they are left out (noted)."""
    draft = launch.draft
    assert draft is not None
    per_layer = kv_bytes_per_token_layer(draft, launch.kv, launch.tp)
    target = kv_bytes_per_token_layer(launch.arch, launch.kv, launch.tp)
    if per_layer != target or layout.groups > 1:
        return layout
    return replace(layout, slots=layout.slots + draft.num_layers)


def _failure(
    launch: EngineLaunch,
    rules: dict[str, Any],
    shape: Shape,
    stages: list[Stage],
    kv: KvSize,
) -> str | None:
    """Why the engine would not start: no KV memory or too little for one request, more decode
    sequences than state blocks (where the version checks it); a max_model_len above the
    model's positions overrides both (vLLM refuses it at config time, before profiling)."""
    failure = _memory_failure(stages, kv, shape.util, shape.auto_len)
    if (
        failure is None
        and kv.layout.has_state
        and rules["state_blocks_cover_seqs"]
        and not shape.eager
        and shape.seqs > kv.blocks
    ):
        failure = (
            f"max_num_seqs ({shape.seqs}) exceeds available Mamba cache blocks ({kv.blocks}): each"
            " decode sequence needs one (lower --max-num-seqs or raise the memory share)"
        )
    derived = derived_max_len(launch.arch)
    if derived and kv.max_len > derived and not shape.auto_len:
        failure = (
            f"max_model_len {kv.max_len:,} is above the model's {derived:,} positions (vLLM"
            " refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    return failure


def _memory_failure(stages: list[Stage], kv: KvSize, util: float, auto: bool) -> str | None:
    """No memory left for KV blocks on some worker, or not enough for one request."""
    if min(st.available for st in stages) <= 0:
        return (
            "No available memory for the cache blocks: weights + activation peak + non-torch"
            f" exceed gpu_memory_utilization {util} × total"
        )
    if auto and kv.max_len < 1:
        return "not enough KV cache for a request of any length"
    if kv.concurrency < 1:
        return (
            f"not enough KV cache for one request of max_model_len {kv.max_len:,} tokens"
            f" ({kv.tokens:,} tokens available)"
        )
    return None


def _items(launch: EngineLaunch, st: Stage, shape: Shape, kv: KvSize) -> tuple[LineItem, ...]:
    """Rank 0's budget lines, KV cache last: weights, activation peak, non-torch memory, the V0
    state cache and the in-budget CUDA-graph estimate where there are any, then the KV cache."""
    items = [
        _weights_item(launch, st),
        _activation_item(st, shape),
        budget_item(
            "non_torch",
            "Non-torch memory",
            st.non_torch,
            "CUDA/NCCL memory outside torch: base + all-reduce buffers by interconnect",
            {"tp": launch.tp, "pp": launch.pp, **st.non_torch_parts},
            "overhead",
        ),
    ]
    if st.state_cache:
        items.append(_state_cache_item(launch, st, shape))
    if st.graphs:
        items.append(
            budget_item(
                "cuda_graphs",
                "CUDA graphs (estimated)",
                st.graphs,
                "graph pool estimate deducted before KV sizing (0.21+)",
                {},
                "overhead",
            )
        )
    items.append(_kv_item(st, shape, kv))
    return tuple(items)


def _weights_item(launch: EngineLaunch, st: Stage) -> LineItem:
    sw = st.weights
    return budget_item(
        "weights",
        "Weights",
        sw.total,
        "layers ÷ tp + padded vocab ÷ tp (embedding, LM head) + encoder + RoPE tables"
        " (+ LoRA slots, draft model)",
        {
            "layers_bytes": sw.layers,
            "embedding_bytes": sw.embedding,
            "lm_head_bytes": sw.lm_head,
            "encoder_bytes": sw.extra,
            "buffers_bytes": sw.buffers,
            "precision": launch.weights.describe(),
            "tp": launch.tp,
            "pp": launch.pp,
            "stage": st.index,
            "padded_vocab": padded_vocab(launch.arch.vocab_size),
        },
        "weights",
    )


def _activation_item(st: Stage, shape: Shape) -> LineItem:
    p = st.peak
    return budget_item(
        "activation_peak",
        "Activation peak",
        p.peak,
        "max(forward: 2 hidden + widest layer transient (V0: its eager forward replayed, up to"
        " 0.6.3 as reserved); sampler: seqs × vocab × bytes + hidden (+ MoE workspace where kept"
        " between calls)) + constant",
        {
            "max_num_batched_tokens": shape.batched,
            "max_num_seqs": shape.seqs,
            "sampler": shape.sampler_path,
            "hidden_bytes": p.hidden,
            "layer_transient_bytes": p.layer_transient,
            "moe_workspace_bytes": p.moe_workspace,
            "sampler_bytes": p.sampler,
            "encoder_bytes": p.encoder,
            "constant_bytes": p.constant,
            "forward_bytes": p.forward,
        },
        "activations",
    )


def _state_cache_item(launch: EngineLaunch, st: Stage, shape: Shape) -> LineItem:
    layers = pp_layers(launch.arch.num_layers, launch.pp)[st.index]
    return budget_item(
        "state_cache",
        "State cache (V0)",
        st.state_cache,
        "state slots (max_num_seqs, padded to a CUDA-graph batch) × state layers ÷ tp"
        " × (conv + SSM state)",
        {
            "state_slots": v0_state_slots(shape.seqs, shape.eager),
            "state_layers": launch.arch.num_state_layers,
            "bytes_per_sequence_bytes": v0_state_bytes(launch, layers),
        },
        "kv_cache",
    )


def _kv_item(st: Stage, shape: Shape, kv: KvSize) -> LineItem:
    """What is left of the requested memory: rank 0's KV memory; its layout's page and slots,
    the limiting stage's block size and blocks."""
    layout = st.layout
    return budget_item(
        "kv_cache",
        "KV cache",
        st.available,
        "requested − weights − activation peak − non-torch"
        + (" − CUDA graphs" if st.graphs else "")
        + (" − state cache" if st.state_cache else ""),
        {
            "requested_bytes": shape.requested,
            "page_bytes": layout.page_bytes,
            "layer_slots": layout.slots,
            "groups": layout.groups,
            "block_size": kv.layout.block_size,
            "num_blocks": kv.blocks,
            **(
                {
                    "attention_layers": layout.attention_layers,
                    "state_layers": layout.state_layers,
                    "state_page_bytes": layout.state_page_bytes,
                }
                if layout.has_state
                else {}
            ),
        },
        "kv_cache",
    )


def _graphs_after_item(shape: Shape) -> LineItem:
    return budget_item(
        "cuda_graphs",
        "CUDA graphs",
        shape.graphs_after,
        "graph pool captured after KV sizing (outside the budget before 0.21)",
        {"enforce_eager": shape.eager},
        "overhead",
    )


def _notes(
    launch: EngineLaunch, rules: dict[str, Any], shape: Shape, limiting: Stage, layout: KvLayout
) -> list[str]:
    """The budget, the profile batch and how the KV cache is laid out, then the launch's
    features (_feature_notes)."""
    arch = launch.arch
    notes = [
        f"budget = ceil({shape.util} × {shape.total / GIB:.2f} GiB)"
        f" = {shape.requested / GIB:.2f} GiB per GPU",
        f"profile batch: max_num_seqs {shape.seqs}, max_num_batched_tokens {shape.batched};"
        f" sampler path {shape.sampler_path}; block_size {layout.block_size}",
    ]
    if launch.pp > 1:
        notes.append(
            f"lines are rank 0's (stage 0, as the log prints them); stage {limiting.index} has the"
            " fewest blocks and sets the KV size (vLLM takes the minimum over workers)"
        )
    if layout.groups > 1:
        notes.append(
            f"hybrid KV cache: {layout.groups} groups of {layout.slots} layer slots"
            + (f" ({layout.padding_layers} padding layers)" if layout.padding_layers else "")
            + (
                "; the logged token figure charges every slot, sliding windows and state"
                " layers show in concurrency"
                if rules["kv_tokens_report"] == "blocks"
                else "; the logged token figure is max concurrency × max_model_len"
            )
        )
    if launch.tp > arch.attention.num_kv_heads and not arch.attention.is_mla:
        notes.append(
            f"tp {launch.tp} > {arch.attention.num_kv_heads} KV heads: KV heads replicated"
        )
    if shape.graphs_after > shape.total - shape.requested:
        notes.append(
            "CUDA graphs may not fit in the 1 − utilization headroom: lower"
            " --gpu-memory-utilization or use --enforce-eager"
        )
    return notes + _feature_notes(launch)


def _feature_notes(launch: EngineLaunch) -> list[str]:
    """Speculative decoding, LoRA on a MoE model, data parallel."""
    notes = []
    spec = launch.args.get("speculative_config")
    if isinstance(spec, dict):
        method = speculative_method(spec)
        if launch.draft is not None:
            notes.append(
                f"speculative decoding ({method}): the draft's weights and KV layers are counted"
            )
        elif method == "ngram":
            notes.append("speculative decoding (ngram): no draft model, no extra memory")
    if launch.arg("enable_lora", False) and launch.arch.moe is not None:
        notes.append(
            "LoRA slots are counted for attention and dense layers, not for routed experts"
        )
    if launch.dp > 1:
        notes.append(f"data parallel {launch.dp}: each replica's ranks hold the same bill")
    return notes


def _unmodelled(launch: EngineLaunch) -> tuple[str, ...]:
    out = []
    spec = launch.args.get("speculative_config")
    if isinstance(spec, dict) and launch.draft is None and speculative_method(spec) != "ngram":
        out.append(
            f"--speculative-config ({speculative_method(spec) or 'draft'}: draft model not in the catalog)"
        )
    if launch.args.get("kv_transfer_config"):
        out.append(
            "--kv-transfer-config (connector buffers; the GPU KV pool is sized as without it)"
        )
    return tuple(out)


def _ranges(
    st: Stage, layout: KvLayout, shape: Shape, tokens: int, launch: EngineLaunch, report: str
) -> dict[str, Range]:
    act = st.activation
    spread_nt = gib(0.21) if launch.tp == 1 and launch.pp == 1 else gib(0.3)
    graph = shape.graphs_after or st.graphs
    eager = shape.eager

    def tokens_at(available: int) -> int:
        return tokens_for(
            available, layout, layout.block_size, report, shape.max_len, shape.batched
        )

    return {
        "activation_peak": Range(
            act,
            max(0, act - ACT_SPREAD),
            act + ACT_SPREAD,
            "--max-num-batched-tokens, --max-num-seqs",
        ),
        "non_torch": Range(
            st.non_torch,
            max(0, st.non_torch - gib(0.1)),
            st.non_torch + spread_nt,
            "interconnect, driver, NCCL version",
        ),
        "cuda_graphs": Range(
            graph,
            0 if eager or not graph else min(graph, CUDAGRAPH_LOW),
            0 if eager or not graph else max(graph, CUDAGRAPH_HIGH),
            "--max-num-seqs (capture sizes), --enforce-eager",
        ),
        "kv_capacity_tokens": Range(
            tokens,
            tokens_at(st.available - ACT_SPREAD - spread_nt),
            tokens_at(st.available + ACT_SPREAD),
            "activation peak and non-torch memory (allocator, driver version)",
        ),
    }


def _state_notes(
    launch: EngineLaunch, rules: dict[str, Any], shape: Shape, st: Stage, layout: KvLayout
) -> list[str]:
    """What the bill did with state layers (Mamba, gated DeltaNet, lightning, short conv)."""
    arch = launch.arch
    if not arch.num_state_layers:
        return []
    if st.state_cache or (rules["engine"] == "v0" and arch.num_state_layers):
        why = (
            f"vLLM {launch.version} runs models with state layers on the V0 engine"
            if rules.get("state_model_fallback")
            else "the V0 engine"
        )
        slots = v0_state_slots(shape.seqs, shape.eager)
        return [
            f"{why}: {arch.num_state_layers} state layers keep their own cache of {slots}"
            " sequence slots, allocated in the profile run; the KV cache holds the"
            f" {layout.attention_layers} attention layers only"
        ]
    padded = layout.page_bytes - layout.state_page_bytes
    notes = [
        f"{layout.state_layers} state layers page with {layout.attention_layers} attention layers:"
        f" one state page of {layout.state_page_bytes / 2**20:.2f} MiB per sequence per layer"
        f" ({st.layout.state_mode} mode)"
    ]
    if layout.attention_layers:
        notes.append(
            f"attention block size raised to {layout.block_size} tokens so that its page holds a"
            f" state page; state pages padded by {100 * padded / layout.state_page_bytes:.2f}%"
        )
    return notes
