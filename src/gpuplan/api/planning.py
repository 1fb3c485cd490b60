"""`gpuplan.plan`: ranked ways to serve a model, with launch commands (training plans:
api/training_plans.py; budget tables: api/plan_matrix.py; the ways out: api/answers.py)."""

from __future__ import annotations

from typing import Any

from gpuplan.api.common import (
    _model,
    _positive,
    real_number,
    resolve_gpu,
    resolve_kv,
    resolve_weight_format,
)
from gpuplan.api.requests import speed_tokens
from gpuplan.api.serving import ServingPlan
from gpuplan.catalog.prices import gpu_price, parse_prices
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.serving import DEFAULT_HEADROOM, ServingSetup
from gpuplan.engine.speed.kernels import SpeedKnobs
from gpuplan.engine.speed.scope import check_speed_scope
from gpuplan.errors import GpuplanError
from gpuplan.planner.export import launch_command
from gpuplan.planner.goals import DEFAULT_MAX_GPUS, ServingCandidate, ServingGoal, plan_to_goal
from gpuplan.units import shown

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
        if engine:
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
    calibration: SpeedKnobs | None = None,
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
    calibration: fitted speed figures that replace the defaults (`gpuplan calibrate`'s file, read
    by api/calibration.py load_calibration).
    tp/pp/ep: pin each replica's layout (None: search it); a pin no layout can take is refused.
    """
    max_gpus = DEFAULT_MAX_GPUS if max_gpus is None else max_gpus
    for name, value in (("context", context), ("users", users), ("max_gpus", max_gpus)):
        if value is None:
            raise GpuplanError(f"{name} must be a whole number ≥ 1, got None")
        _positive(name, value)
    real_number("headroom", headroom)  # as serve refuses it: a fraction in (0, 1]
    prompt, output = _load(context, prompt_tokens, output_tokens)
    setups = _serving_setups(model, gpus, dtypes, kv_dtype, context, headroom)
    if tpot is not None or ttft is not None or objective in ("throughput", "latency"):
        check_speed_scope(setups[0].arch)  # a latency goal needs a speed the model can time
    goal = _serving_goal(setups, users, prompt, output, tpot, ttft, objective, prices, max_gpus)
    goal = _pinned(goal, tp, pp, ep)
    if calibration is not None:
        goal = replace(goal, knobs=calibration)
    found, rejected = plan_to_goal(setups, goal)
    _refuse_pin(goal, found, rejected)
    _, model_id, hf_id = _model(model)
    best: dict[tuple[str, str], ServingCandidate] = {}
    for c in found:  # best first: keep the best layout per GPU type and format
        best.setdefault((c.bill.setup.gpu.id, c.bill.setup.weights.precision.id), c)
    return [
        PlanOption(i + 1, ServingPlan(c.bill, model_id, hf_id), c)
        for i, c in enumerate(best.values())
    ]


def _load(context: int, prompt_tokens: int | None, output_tokens: int | None) -> tuple[int, int]:
    """Prompt and output tokens per request: as given (0 is a value, refused, not "the
    default"), else 3/4 of the context and the rest; together within the context."""
    if prompt_tokens is not None:
        _positive("prompt tokens", prompt_tokens)
    if output_tokens is not None:
        _positive("output tokens", output_tokens)
    prompt, output = speed_tokens(context, prompt_tokens, output_tokens)
    return prompt, output


def _serving_goal(
    setups: list[ServingSetup],
    users: int,
    prompt: int,
    output: int,
    tpot: str | float | None,
    ttft: str | float | None,
    objective: str,
    prices: Any,
    max_gpus: int,
) -> ServingGoal:
    """The planner's goal, priced per GPU type of `setups` (the catalog's table under the
    `prices` overrides; a GPU type without a price is left out of the table)."""
    overrides = parse_prices(prices)
    table = {s.gpu.id: gpu_price(s.gpu.id, overrides) for s in setups}
    return ServingGoal(
        users=int(users),
        prompt_tokens=int(prompt),
        output_tokens=int(output),
        tpot_s=parse_duration(tpot, "tpot"),
        ttft_s=parse_duration(ttft, "ttft"),
        objective=objective,
        prices={k: v for k, v in table.items() if v is not None},
        max_gpus=int(max_gpus),
    )


def _pinned(goal: Any, tp: int | None, pp: int | None, ep: bool | None) -> Any:
    """The goal with its replica layout pinned (plan --tp/--pp/--ep), the degrees checked."""
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
