"""`plan_training`: ranked training layouts of a GPU count, with engine configs;
`plan_training_goal`: the fewest (or cheapest) GPUs of each type that train a token count within
a deadline. Their JSON documents are api/plan_data.py's."""

from __future__ import annotations

from typing import Any

from gpuplan.api.planning import DEFAULT_PLAN_GPUS, parse_tokens
from gpuplan.api.training import TrainingPlan, train
from gpuplan.catalog.gpus import get_gpu
from gpuplan.catalog.prices import gpu_price, parse_prices
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.serving import DEFAULT_HEADROOM
from gpuplan.errors import GpuplanError
from gpuplan.planner.training_export import (
    TRAIN_ENGINES,
    engine_allows,
    engine_recipe,
    fsdp_strategy,
    training_export,
)
from gpuplan.planner.training_goals import TrainingGoal, train_to_goal
from gpuplan.planner.training_search import default_global_batch_tokens, rank_training_layouts


@record
class TrainOption:
    """One ranked training layout of a fixed GPU count that fits, with its full bill."""

    rank: int
    plan: TrainingPlan

    def to_dict(self, units: str = "GB", engine: str | None = None) -> dict[str, Any]:
        """One row of `gpuplan.plan-train/1` (docs/json.md); with `engine`, its export."""
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
    table = {p.bill.setup.gpu.id: gpu_price(p.bill.setup.gpu.id, overrides) for p in starts}
    return TrainingGoal(
        tokens=tokens,
        days=None if days is None else float(days),
        objective=objective,
        prices={k: v for k, v in table.items() if v is not None},
        max_gpus=int(max_gpus),
        global_batch_tokens=global_batch_tokens,
    )
