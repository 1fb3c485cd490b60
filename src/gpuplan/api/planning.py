"""`gpuplan.plan`: ranked ways to serve a model, with launch commands; `plan_training`: ranked
training layouts of a GPU count, with engine configs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.api.serving import ServingPlan
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.serving import DEFAULT_HEADROOM, ServingSetup
from gpuplan.errors import GpuplanError
from gpuplan.planner.goals import DEFAULT_MAX_GPUS, ServingCandidate

if TYPE_CHECKING:  # the training code loads only when a training plan is asked for (cold start)
    from gpuplan.api.training import TrainingPlan

DEFAULT_PLAN_GPUS = ("h100", "h200", "b200", "a100-80gb", "l40s", "mi300x")


@record
class PlanOption:
    """One ranked way to serve a model: a GPU type, a weight format, a replica layout, how many
    replicas, and how fast it serves (`candidate`)."""

    rank: int
    plan: ServingPlan  # one replica's bill, at its share of the users
    candidate: ServingCandidate

    @property
    def gpus(self) -> int:
        return self.candidate.gpus

    def to_dict(self, units: str = "GB", engine: str | None = None) -> dict[str, Any]:
        c = self.candidate
        s = self.plan.bill.setup
        out: dict[str, Any] = {
            "rank": self.rank,
            "gpu": s.gpu.id,
            "gpus": c.gpus,
            "replicas": c.replicas,
            "gpus_per_replica": s.gpus,
            "tp": s.tp,
            "pp": s.pp,
            "expert_parallel": c.expert_parallel,
            "dtype": s.weights.precision.id,
            "kv_dtype": s.kv.id,
            "users_per_replica": c.concurrency,
            "memory_limit_users": c.memory_limit,
            "latency_limit_users": c.latency_limit,
            "per_gpu_total_bytes": self.plan.per_gpu_total_bytes,
            "budget_bytes": self.plan.budget_bytes,
            "kv_capacity_tokens": self.plan.kv_capacity_tokens,
            "max_concurrent_sequences": self.plan.max_concurrent_sequences,
            "total_memory_bytes": c.gpus * s.gpu.memory_bytes,
            "speed": c.perf.to_dict(),
            "usd_per_gpu_hour": c.usd_per_gpu_hour,
            "usd_per_hour": c.usd_per_hour,
            "usd_per_million_tokens": c.usd_per_million_tokens,
        }
        if engine:  # the engine adapters load only for a launch line (cold start of `plan`)
            from gpuplan.planner.export import launch_command

            out["launch"] = launch_command(
                self.plan.bill, self.plan.hf_id or self.plan.model_id, engine
            )
        return out


def parse_duration(value: str | float | None, name: str) -> float | None:
    """'33ms', '2s', '1.5 s', '250us', or a number (not text) of seconds → seconds. Text
    needs its unit: '33' could mean seconds or milliseconds, so it is refused, never guessed."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0)):
            if text.endswith(suffix):
                text, factor = text[: -len(suffix)], scale
                break
        else:
            from gpuplan.units import shown

            raise GpuplanError(
                f"--{name} needs a unit: write {shown(value)} as ms or s, like 33ms or 2s"
            )
        try:
            seconds = float(text) * factor
        except ValueError:
            raise GpuplanError(f"--{name} takes a time like 33ms or 2s, got {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise GpuplanError(f"--{name} must be a positive time, got {value!r}")
    return seconds


def parse_tokens(value: str | int | float) -> int:
    """'2T', '500B', '1.5e12', '300M' tokens → an integer count."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        n = float(value)
    else:
        text = str(value).strip().upper().replace(",", "").replace("_", "")
        scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(text[-1:], 1.0)
        if scale != 1.0:
            text = text[:-1]
        try:
            n = float(text) * scale
        except ValueError:
            raise GpuplanError(f"--tokens takes a count like 2T or 500B, got {value!r}") from None
    if not 1 <= n < float("inf"):
        raise GpuplanError(f"--tokens must be at least 1, got {value!r}")
    return int(round(n))


def _serving_setups(
    model: str | dict[str, Any],
    gpus: tuple[str, ...] | list[str],
    dtypes: tuple[str, ...] | list[str] | None,
    kv_dtype: str | None,
    context: int,
    headroom: float,
) -> list[ServingSetup]:
    from gpuplan.api.common import _model, resolve_gpu, resolve_kv, resolve_weight_format

    arch, _, _ = _model(model)
    if not dtypes:
        dtypes = ("auto",) if arch.quantization is not None else ("auto", "fp8-tensor")
    setups = []
    for gpu in gpus:
        spec = resolve_gpu(gpu)
        for dtype in dtypes:
            fmt = resolve_weight_format(arch, dtype)
            setups.append(
                ServingSetup(
                    arch, fmt, resolve_kv(fmt, kv_dtype), spec, context=context, headroom=headroom
                )
            )
    return setups


def plan(
    model: str | dict[str, Any],
    *,
    gpus: tuple[str, ...] | list[str] = DEFAULT_PLAN_GPUS,
    dtypes: tuple[str, ...] | list[str] | None = None,
    kv_dtype: str | None = None,
    context: int = 4096,
    users: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    tpot: str | float | None = None,
    ttft: str | float | None = None,
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    objective: str = "gpus",
    prices: Any = None,
    max_gpus: int = DEFAULT_MAX_GPUS,
    calibration: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    ep: bool | None = None,
) -> list[PlanOption]:
    """Rank the ways to serve `model` to `users` concurrent sequences of `context` tokens: for
    each GPU type and weight format, the best replica layout (tp, pp, expert parallelism) and
    replica count that fit in memory and meet the TPOT / TTFT targets (planner/goals.py), ranked
    by `objective` (gpus, cost, throughput or latency).

    dtypes default: the checkpoint's own format, plus fp8 weights (as vLLM's `--quantization fp8`
    stores them: linear layers in fp8, the rest in 16-bit) unless the checkpoint is already
    quantised. prompt/output tokens (for the speed model) default to 3/4 and 1/4 of `context`.
    prices: {gpu: $/GPU-hour} or ["H100=2.5"] over the catalog's table (catalog/data/prices.toml).
    calibration: a file of `gpuplan calibrate` whose fitted speed figures replace the defaults.
    tp/pp/ep: pin each replica's layout (None: search it); a pin no layout can take is refused.
    """
    from gpuplan.api.common import _positive, real_number
    from gpuplan.catalog.prices import gpu_price, parse_prices
    from gpuplan.planner.goals import ServingGoal, plan_to_goal

    max_gpus = DEFAULT_MAX_GPUS if max_gpus is None else max_gpus
    for name, value in (("context", context), ("users", users), ("max_gpus", max_gpus)):
        if value is None:
            raise GpuplanError(f"{name} must be a whole number ≥ 1, got None")
        _positive(name, value)
    real_number("headroom", headroom)  # as serve refuses it: a fraction in (0, 1]
    # 0 is a value (refused below), not "the default": only None takes the default
    prompt = prompt_tokens if prompt_tokens is not None else max(1, context * 3 // 4)
    output = output_tokens if output_tokens is not None else max(1, context - prompt)
    _positive("prompt tokens", prompt)
    _positive("output tokens", output)
    if prompt + output > context:
        raise GpuplanError(
            f"prompt ({prompt:,}) + output ({output:,}) tokens exceed the context ({context:,})"
        )
    setups = _serving_setups(model, gpus, dtypes, kv_dtype, context, headroom)
    overrides = parse_prices(prices)
    table = {s.gpu.id: gpu_price(s.gpu.id, overrides) for s in setups}
    goal = ServingGoal(
        users=int(users),
        prompt_tokens=int(prompt),
        output_tokens=int(output),
        tpot_s=parse_duration(tpot, "tpot"),
        ttft_s=parse_duration(ttft, "ttft"),
        objective=objective,
        prices={k: v for k, v in table.items() if v is not None},
        max_gpus=int(max_gpus),
    )
    goal = _pinned(goal, tp, pp, ep)
    if calibration:
        from gpuplan.api.calibration import load_calibration

        goal = replace(goal, knobs=load_calibration(calibration))
    found, rejected = plan_to_goal(setups, goal)
    _refuse_pin(goal, found, rejected)
    from gpuplan.api.common import _model

    _, model_id, hf_id = _model(model)
    best: dict[tuple[str, str], ServingCandidate] = {}
    for c in found:  # best first: keep the best layout per GPU type and format
        best.setdefault((c.bill.setup.gpu.id, c.bill.setup.weights.precision.id), c)
    return [
        PlanOption(i + 1, ServingPlan(c.bill, model_id, hf_id), c)
        for i, c in enumerate(best.values())
    ]


def _pinned(goal: Any, tp: int | None, pp: int | None, ep: bool | None) -> Any:
    """The goal with its replica layout pinned (plan --tp/--pp/--ep), the degrees checked."""
    from gpuplan.api.common import _positive

    for name, value in (("tp", tp), ("pp", pp)):
        _positive(name, value)
    return replace(goal, tp=tp, pp=pp, ep=ep)


def _refuse_pin(goal: Any, found: list[Any], rejected: list[tuple[str, str]]) -> None:
    """A pinned layout that serves the ask on no GPU type or format: one line, the first reason."""
    if found or (goal.tp is None and goal.pp is None and goal.ep is None):
        return
    if not rejected:
        raise GpuplanError(
            "the pinned layout cannot serve the ask: it misses the --tpot/--ttft target"
        )
    what, why = rejected[0]
    more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
    raise GpuplanError(f"the pinned layout cannot serve the ask: {what}: {why}{more}")


PLAN_TRAIN_SCHEMA_VERSION = "gpuplan.plan-train/1"


@record
class TrainOption:
    """One ranked training layout of a fixed GPU count that fits, with its full bill."""

    rank: int
    plan: TrainingPlan

    def to_dict(self, units: str = "GB", engine: str | None = None) -> dict[str, Any]:
        """One row of `gpuplan.plan-train/1` (docs/json.md); with `engine`, its export."""
        from gpuplan.planner.training_export import fsdp_strategy, training_export

        b = self.plan.bill
        s, lo, t = b.setup, b.setup.layout, b.time
        out: dict[str, Any] = {
            "rank": self.rank,
            "gpus": lo.gpus,
            "dp": lo.dp,
            "tp": lo.tp,
            "pp": lo.pp,
            "cp": lo.cp,
            "ep": lo.ep,
            "vpp": lo.vpp,
            "sp": lo.sp,
            "zero": lo.zero,
            "fsdp_strategy": None if lo.zero == 1 else fsdp_strategy(lo),  # FSDP has no ZeRO-1
            "hybrid": lo.hybrid,
            "layout": lo.describe(),
            "micro_batch": s.micro_batch,
            "grad_accum": s.micro_batches,
            "tokens_per_step": s.tokens_per_step,
            "checkpointing": s.recompute,
            "offload": s.offload,
            "per_gpu_total_bytes": b.per_gpu_total_bytes,
            "budget_bytes": b.budget_bytes,
            "model_states_bytes": b.model_states_bytes,
            "activations_bytes": b.activations_bytes,
            "host_bytes_per_gpu": b.host_bytes_per_gpu,
            "step_time_s": t.step_s if t else None,
            "tokens_per_second": t.tokens_per_second if t else None,
            "mfu": t.mfu if t else s.mfu,
            "mfu_pinned": s.mfu is not None,
            "step_breakdown_s": t.breakdown.to_dict() if t and t.breakdown else None,
        }
        if engine:
            out["export"] = training_export(b, engine).to_dict()
        return out


def plan_training(
    model: str | dict[str, Any],
    *,
    gpu: str = "h100",
    gpus: int = 8,
    seq: int = 4096,
    global_batch_tokens: int | None = None,
    recipe: str = "adamw-bf16",
    lora_rank: int | None = None,
    qlora: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
    top: int = 10,
    engine: str | None = None,
    attention: str = "flash",
    mfu: float | None = None,
) -> list[TrainOption]:
    """Rank the training layouts of `gpus` × `gpu` that fit, fastest first (estimated tokens/s,
    then less memory per GPU). See planner/training_search.py for what is searched.

    global_batch_tokens: tokens per optimizer step, a whole number of `seq`-token sequences
    (default gpus × seq × 8: eight sequences per GPU). engine: deepspeed, fsdp or megatron
    narrows the search to the layouts that engine runs as exported; with megatron the default
    recipe becomes Megatron-LM's own (bf16 weights, fp32 gradients: 18 bytes/param).
    """
    from gpuplan.api.training import train
    from gpuplan.planner.training_export import engine_allows, engine_recipe
    from gpuplan.planner.training_search import (
        default_global_batch_tokens,
        rank_training_layouts,
    )

    _check_layout_search(gpus, seq, top, global_batch_tokens, engine)
    start = train(
        model,
        gpu,
        gpus=int(gpus),
        recipe=engine_recipe(engine, recipe),
        seq=int(seq),
        lora_rank=lora_rank,
        qlora=qlora,
        headroom=headroom,
        gpu_memory=gpu_memory,
        attention=attention,
        mfu=mfu,
    )
    batch = global_batch_tokens or default_global_batch_tokens(int(gpus), int(seq))
    found = rank_training_layouts(
        start.bill.setup, int(gpus), int(batch), engine_allows(engine), engine, top=int(top)
    )
    return [
        TrainOption(i + 1, replace(start, bill=bill))
        for i, bill in enumerate(found.options[: int(top)])
    ]


def _check_layout_search(
    gpus: int, seq: int, top: int, global_batch_tokens: int | None, engine: str | None
) -> None:
    """`plan_training`'s ask: whole positive counts, and a training engine when one is named."""
    from gpuplan.planner.training_export import TRAIN_ENGINES

    for name, value in (("gpus", gpus), ("seq", seq), ("top", top)):
        if value is None or isinstance(value, bool) or int(value) != value or value < 1:
            raise GpuplanError(f"{name} must be a positive whole number, got {value!r}")
    if global_batch_tokens is not None and (
        isinstance(global_batch_tokens, bool) or global_batch_tokens < 1
    ):
        raise GpuplanError(
            f"global-batch-tokens must be a positive whole number, got {global_batch_tokens!r}"
        )
    if engine is not None and engine not in TRAIN_ENGINES:
        raise GpuplanError(
            f"{engine!r} is not a training engine; export training to one of"
            f" {', '.join(TRAIN_ENGINES)}"
        )


PLAN_TRAIN_GOAL_SCHEMA_VERSION = "gpuplan.plan-train-goal/1"


@record
class TrainGoalOption:
    """One GPU type and count that trains the tokens within the deadline, with its fastest
    layout (a full training plan) and the time, GPU-hours and cost."""

    rank: int
    plan: TrainingPlan
    time: Any  # engine.train_time.TrainingTime
    count_rule: str = ""  # how the GPU counts were chosen (planner/goals.py COUNT_RULE)
    batch_note: str = ""  # the fixed global batch and where it came from
    left_out: tuple[str, ...] = ()  # GPU types not ranked, and why

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        row = TrainOption(self.rank, self.plan).to_dict(units)
        row["gpu"] = self.plan.bill.setup.gpu.id
        row["time"] = self.time.to_dict()
        return row


def plan_training_goal(
    model: str | dict[str, Any],
    *,
    tokens: str | int,
    days: float | None = None,
    gpus: tuple[str, ...] | list[str] | None = None,
    seq: int = 4096,
    global_batch_tokens: int | None = None,
    recipe: str = "adamw-bf16",
    lora_rank: int | None = None,
    qlora: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    attention: str = "flash",
    mfu: float | None = None,
    objective: str = "gpus",
    prices: Any = None,
    max_gpus: int = 4096,
) -> list[TrainGoalOption]:
    """For each GPU type, the fewest GPUs (or the cheapest count, `objective="cost"`) whose
    fastest layout trains `tokens` tokens within `days`, with GPU-hours and cost; ranked by
    `objective`. The layouts searched are planner/training_search.py's (tp, pp, cp, ep, dp,
    ZeRO/FSDP, recompute, micro-batch); the step time is from operators unless `mfu` pins the
    utilisation. `gpus` None: every default GPU type with a complete catalog entry (the others
    named in each option's `left_out`); GPU counts: any within a server, whole servers beyond;
    the global batch is fixed: `global_batch_tokens`, else about 4M tokens."""
    from gpuplan.api.training import train
    from gpuplan.catalog.prices import parse_prices
    from gpuplan.planner.training_goals import train_to_goal

    n_tokens = parse_tokens(tokens)
    if days is not None and (isinstance(days, bool) or not 0 < float(days) < float("inf")):
        raise GpuplanError(f"--days must be a positive number, got {days!r}")
    overrides = parse_prices(prices)
    ask: dict[str, Any] = {
        "recipe": recipe,
        "seq": int(seq),
        "lora_rank": lora_rank,
        "qlora": qlora,
    }
    ask |= {"headroom": headroom, "attention": attention, "mfu": mfu}
    # one 8-GPU plan per GPU type: the model, recipe and GPU the search scales up from
    chosen, left_out = _goal_gpus(gpus)
    starts = [train(model, gpu, gpus=8, **ask) for gpu in chosen]
    goal = _training_goal(
        starts, n_tokens, days, objective, overrides, max_gpus, global_batch_tokens
    )
    found, rejected = train_to_goal([p.bill.setup for p in starts], goal)
    if not found:
        last = rejected[-1][1] if rejected else "no layout fits"
        raise GpuplanError(
            f"no layout of up to {max_gpus} GPUs trains {n_tokens:,} tokens"
            + (f" within {days:g} days" if days is not None else "")
            + f" ({last})"
        )
    by_gpu = {p.bill.setup.gpu.id: p for p in starts}
    return [
        TrainGoalOption(
            i + 1,
            replace(by_gpu[c.bill.setup.gpu.id], bill=c.bill, search=()),
            c.time,
            c.count_rule,
            c.batch_note,
            left_out,
        )
        for i, c in enumerate(found)
    ]


SPEED_FIGURES = (
    ("bf16_dense_tflops", "dense bf16 FLOP/s"),
    ("memory_bandwidth_bytes_per_s", "HBM bandwidth"),
    ("interconnect_bytes_per_s_per_dir", "interconnect bandwidth"),
)


def _goal_gpus(gpus: tuple[str, ...] | list[str] | None) -> tuple[list[str], tuple[str, ...]]:
    """The GPU types a token goal ranks: the ones given, else every default plan GPU
    (DEFAULT_PLAN_GPUS, as --help lists them) whose catalog entry has what the training step
    time needs; the others are named with the figure they lack."""
    from gpuplan.catalog.gpus import get_gpu

    if gpus:
        return list(gpus), ()
    chosen, left_out = [], []
    for gpu_id in DEFAULT_PLAN_GPUS:
        spec = get_gpu(gpu_id)
        missing = [what for key, what in SPEED_FIGURES if not getattr(spec, key)]
        if missing:
            left_out.append(f"{gpu_id}: no {', '.join(missing)} in the GPU catalog")
        else:
            chosen.append(gpu_id)
    return chosen, tuple(left_out)


def _training_goal(
    starts: list[TrainingPlan],
    tokens: int,
    days: float | None,
    objective: str,
    overrides: Any,
    max_gpus: int,
    global_batch_tokens: int | None,
) -> Any:
    """The planner's `TrainingGoal`, priced per GPU type of `starts` (the catalog's table under
    the parsed `--price` overrides; a GPU type without a price is left out of the table)."""
    from gpuplan.catalog.prices import gpu_price
    from gpuplan.planner.training_goals import TrainingGoal

    table = {p.bill.setup.gpu.id: gpu_price(p.bill.setup.gpu.id, overrides) for p in starts}
    return TrainingGoal(
        tokens=tokens,
        days=None if days is None else float(days),
        objective=objective,
        prices={k: v for k, v in table.items() if v is not None},
        max_gpus=int(max_gpus),
        global_batch_tokens=global_batch_tokens,
    )


PLAN_MATRIX_SCHEMA_VERSION = "gpuplan.plan-matrix/1"


def _cell_dict(c: Any) -> dict[str, Any]:
    return {
        "per_gpu_total_bytes": c.per_gpu_total_bytes,
        "budget_bytes": c.budget_bytes,
        "fits": c.fits,
        "note": c.note,
    }


def serving_budget_matrix(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpus: int | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    contexts: tuple[int, ...] | list[int] | None = None,
    users: tuple[int, ...] | list[int] | None = None,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan-matrix/1` for serving: context × concurrency on `gpus` × `gpu` (default:
    the fewest that fit one sequence of the smallest context), and the largest context that fits
    for each concurrency."""
    from gpuplan.api.serving import serve
    from gpuplan.planner.matrix import (
        DEFAULT_CONTEXTS,
        DEFAULT_USERS,
        largest_context,
        serving_matrix,
    )

    ctx = tuple(sorted(set(contexts or DEFAULT_CONTEXTS)))
    us = tuple(sorted(set(users or DEFAULT_USERS)))
    if not ctx or not us or min(ctx) < 1 or min(us) < 1:
        raise GpuplanError("contexts and users must be positive whole numbers")
    base = serve(
        model,
        gpu,
        gpus=gpus if gpus is not None else "auto",
        dtype=dtype,
        kv_dtype=kv_dtype,
        context=ctx[0],
        headroom=headroom,
        gpu_memory=gpu_memory,
    )
    setup = base.bill.setup
    cells = serving_matrix(setup, ctx, us)
    return {
        "schema": PLAN_MATRIX_SCHEMA_VERSION,
        "mode": "serve",
        "model": base.model_id,
        "gpu": setup.gpu.id,
        "gpus": setup.gpus,
        "tp": setup.tp,
        "pp": setup.pp,
        "dtype": setup.weights.precision.id,
        "kv_dtype": setup.kv.id,
        "rows": "context",
        "cols": "users",
        "row_values": list(ctx),
        "col_values": list(us),
        "cells": [{"context": c.rows, "users": c.cols, **_cell_dict(c)} for c in cells],
        "largest_context": {str(u): largest_context(setup, u) for u in us},
    }


def training_budget_matrix(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpu_counts: tuple[int, ...] | list[int] | None = None,
    seq: int = 4096,
    recipe: str = "adamw-bf16",
    checkpointing: str = "none",
    lora_rank: int | None = None,
    qlora: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan-matrix/1` for training: memory per GPU vs GPU count for ZeRO 0-3."""
    from gpuplan.api.training import train
    from gpuplan.planner.matrix import DEFAULT_TRAIN_GPUS, training_matrix

    counts = tuple(sorted(set(gpu_counts or DEFAULT_TRAIN_GPUS)))
    if not counts or min(counts) < 1:
        raise GpuplanError("GPU counts must be positive whole numbers")
    base = train(
        model,
        gpu,
        gpus=1,
        seq=int(seq),
        recipe=recipe,
        checkpointing=checkpointing,
        lora_rank=lora_rank,
        qlora=qlora,
        headroom=headroom,
        gpu_memory=gpu_memory,
    )
    cells = training_matrix(base.bill.setup, counts)
    return {
        "schema": PLAN_MATRIX_SCHEMA_VERSION,
        "mode": "train",
        "model": base.model_id,
        "gpu": base.bill.setup.gpu.id,
        "seq": base.bill.setup.seq,
        "recipe": base.bill.setup.recipe.id,
        "checkpointing": checkpointing,
        "rows": "gpus",
        "cols": "zero",
        "row_values": list(counts),
        "col_values": [0, 1, 2, 3],
        "cells": [{"gpus": c.rows, "zero": c.cols, **_cell_dict(c)} for c in cells],
    }


def serving_answers(kwargs: dict[str, Any], plan: Any) -> list[dict[str, Any]]:
    """The ways out of a serving plan that does not fit (`planner.fixes.serving_fixes`, each asked
    of the engine), as answers: `answer` is the lesson's (fewer bytes, bigger GPU, more GPUs,
    smaller ask), `kind` the fix's own, with its label, change and resulting plan's figures.
    `kwargs` are the `serve` arguments `plan` was made with (`model` included). Empty when it
    fits."""
    from gpuplan.api.serving import serve
    from gpuplan.planner.fixes import serving_fixes

    return [_answer(fix) for fix in serving_fixes(kwargs, plan, serve)]


def training_answers(kwargs: dict[str, Any], plan: Any) -> list[dict[str, Any]]:
    """The same for a training plan (`planner.fixes.training_fixes`: ZeRO stage, recompute,
    LoRA/QLoRA, a bigger GPU, more GPUs); `kwargs` are the `train` arguments."""
    from gpuplan.api.training import train
    from gpuplan.planner.fixes import training_fixes

    return [_answer(fix) for fix in training_fixes(kwargs, plan, train)]


def _answer(fix: Any) -> dict[str, Any]:
    from gpuplan.planner.fixes import THREE_ANSWERS

    return {**fix.to_dict(), **fix.detail, "answer": THREE_ANSWERS[fix.answer], "kind": fix.answer}


def three_answers(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpus: int | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """What to change when serving `model` on `gpus` (default 1) × `gpu` does not fit: the plan
    `serve(model, gpu, gpus=gpus, **kwargs)`, then `serving_answers`. Empty when it fits or the
    engine refuses the request."""
    from gpuplan.api.serving import serve

    ask: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus or 1, **kwargs}
    try:
        current = serve(**ask)
    except GpuplanError:
        return []
    return serving_answers(ask, current)


def training_three_answers(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpus: int = 8,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """The same for training `model` on `gpus` × `gpu` (`train` arguments in `kwargs`): the plan
    `train(...)`, then `training_answers`."""
    from gpuplan.api.training import train

    ask: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus, **kwargs}
    try:
        current = train(**ask)
    except GpuplanError:
        return []
    return training_answers(ask, current)
