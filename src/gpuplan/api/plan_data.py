"""The JSON documents of `gpuplan plan` (docs/json.md), shaped once for every interface (the CLI,
the MCP tools): `gpuplan.plan/1` (serving plans to a goal), `gpuplan.plan-train/1` (training
layouts of a GPU count) and `gpuplan.plan-train-goal/1` (training to a token deadline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.api.answers import three_answers
from gpuplan.api.common import gpu_dict
from gpuplan.api.planning import DEFAULT_PLAN_GPUS, PlanOption, parse_duration, plan
from gpuplan.engine.serving import DEFAULT_HEADROOM
from gpuplan.engine.speed.scope import unmodelled_for_speed

if TYPE_CHECKING:  # the training plans' types only: a serving plan loads no training code
    from gpuplan.api.training import TrainingPlan
    from gpuplan.api.training_plans import TrainGoalOption, TrainOption

PLAN_SCHEMA_VERSION = "gpuplan.plan/1"
PLAN_TRAIN_SCHEMA_VERSION = "gpuplan.plan-train/1"
PLAN_TRAIN_GOAL_SCHEMA_VERSION = "gpuplan.plan-train-goal/1"


def serving_plan_data(
    model: str,
    *,
    gpus: tuple[str, ...] | list[str] = (),
    dtypes: tuple[str, ...] | list[str] = (),
    kv_dtype: str | None = None,
    context: int = 4096,
    users: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    tpot: str | None = None,
    ttft: str | None = None,
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    objective: str = "gpus",
    prices: tuple[str, ...] | list[str] = (),
    max_gpus: int | None = None,
    top: int = 10,
    units: str = "GB",
    engine: str | None = None,
    manifest: Callable[[PlanOption], dict[str, Any]] | None = None,
    calibration: Any = None,
    pin: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan/1`: the `top` plans of `planning.plan` (gpus default: DEFAULT_PLAN_GPUS;
    max_gpus None: the planner's cap), each with its launch command when `engine` is named; when
    nothing meets the ask, the three answers (`fixes`). `manifest`: the top plan's deployment
    manifest (api/manifests.py serving_manifest_for)."""
    extra: dict[str, Any] = {"max_gpus": max_gpus} if max_gpus is not None else {}
    if calibration is not None:  # fitted speed figures (api/calibration.py load_calibration)
        extra["calibration"] = calibration
    options = plan(
        model,
        gpus=gpus or DEFAULT_PLAN_GPUS,
        dtypes=dtypes or None,
        kv_dtype=kv_dtype,
        context=context,
        users=users,
        headroom=headroom,
        tpot=tpot,
        ttft=ttft,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        objective=objective,
        prices=list(prices),
        **extra,
        **(pin or {}),
    )[: max(1, top)]
    rows = [o.to_dict(units, engine) for o in options]
    speed = rows[0]["speed"] if rows else {}
    data: dict[str, Any] = {
        "schema": PLAN_SCHEMA_VERSION,
        "model": model,
        "context": context,
        "users": users,
        "prompt_tokens": speed.get("prompt_tokens"),
        "output_tokens": speed.get("output_tokens"),
        "tpot_s": parse_duration(tpot, "tpot"),
        "ttft_s": parse_duration(ttft, "ttft"),
        "objective": objective,
        "options": rows,
        "fixes": [],
    }
    if options and (what := unmodelled_for_speed(options[0].plan.bill.setup.arch)):
        data["speed_note"] = f"TTFT/TPOT leave out {what}: not timed, a lower bound"
    if pin:
        data["pinned"] = dict(pin)
    if manifest is not None and options:
        data["manifest"] = manifest(options[0])
    if not rows:
        data["fixes"] = _serving_fixes(
            model, gpus, dtypes, kv_dtype, context, users, headroom, max_gpus
        )
    return data


def _serving_fixes(
    model: str,
    gpus: tuple[str, ...] | list[str],
    dtypes: tuple[str, ...] | list[str],
    kv_dtype: str | None,
    context: int,
    users: int,
    headroom: float,
    max_gpus: int | None,
) -> list[dict[str, Any]]:
    """Nothing meets the ask: the three answers for the first GPU type at the most GPUs allowed
    (one without a cap), in the one weight format asked for (else the checkpoint's)."""
    return three_answers(
        model,
        gpus[0] if gpus else "h100",
        gpus=max_gpus or 1,
        dtype=dtypes[0] if len(dtypes) == 1 else None,
        kv_dtype=kv_dtype,
        context=context,
        users=users,
        headroom=headroom,
    )


def training_plan_data(
    ranked: list[TrainOption],
    *,
    engine: str | None = None,
    units: str = "GB",
    manifest: Callable[[TrainingPlan, str | None], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan-train/1` for `plan_training`'s ranked layouts (at least one): the ask they
    share (GPU, count, sequence, batch, recipe, LoRA, headroom) and one row per layout, with the
    `engine` export when one is named; `manifest`: the top layout's deployment manifest
    (api/manifests.py training_manifest_for)."""
    first = ranked[0].plan
    s = first.bill.setup
    data: dict[str, Any] = {
        "schema": PLAN_TRAIN_SCHEMA_VERSION,
        "model": first.model_id,
        "gpu": gpu_dict(s.gpu),
        "gpus": s.layout.gpus,
        "seq": s.seq,
        "global_batch_tokens": s.tokens_per_step,
        "recipe": s.recipe.id,
        "lora": None
        if s.lora is None
        else {"rank": s.lora.rank, "targets": list(s.lora.targets), "qlora": s.lora.quantized},
        "headroom": s.headroom,
        "engine": engine,
        "options": [o.to_dict(units, engine) for o in ranked],
    }
    if manifest is not None:
        data["manifest"] = manifest(first, engine)
    return data


def training_goal_data(
    ranked: list[TrainGoalOption],
    *,
    days: float | None,
    objective: str,
    units: str = "GB",
    model: str | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan-train-goal/1` for `plan_training_goal`'s ranked options (at least one);
    `model` is the name reported (default: the catalog id the plans resolved to)."""
    return {
        "schema": PLAN_TRAIN_GOAL_SCHEMA_VERSION,
        "model": ranked[0].plan.model_id if model is None else model,
        "tokens": ranked[0].time.tokens,
        "days": days,
        "objective": objective,
        "gpu_counts": ranked[0].count_rule,
        "global_batch": ranked[0].batch_note,
        "left_out": list(ranked[0].left_out),
        "options": [o.to_dict(units) for o in ranked],
    }
