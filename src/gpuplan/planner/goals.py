"""Plans to a serving goal: layouts that hold N users within a TPOT and TTFT target, ranked by
an objective (training to a deadline: planner/training_goals.py, sharing OBJECTIVES).

For every GPU type, weight format and replica layout (tp within a node dividing the heads, pp in
powers of two, expert parallelism on or off for MoE models) the search asks:

    memory   does one sequence of `context` tokens fit (engine/serving.py), and how many do:
             c_mem = the bill's max concurrent sequences
    TTFT     one prompt's prefill (engine/perf.py) ≤ the target, else the layout cannot serve
    TPOT     the most sequences whose TPOT ≤ the target: c_lat (TPOT grows with the batch, so a
             binary search finds it)
    replicas r = ⌈users ÷ min(c_mem, c_lat)⌉, each serving ⌈users ÷ r⌉ sequences

and keeps every layout whose r × tp × pp GPUs stay within `max_gpus`. Objectives rank them:
fewest GPUs (`gpus`), lowest price per hour of serving all the users (`cost`, GPUs × the price
table or `--price`), lowest price per million output tokens at each layout's own speed
(`token-cost`: $/hour ÷ tokens/hour), most output tokens/s per GPU (`throughput`), lowest TPOT
(`latency`); RANKED_BY names each one's figure. Ties go to fewer GPUs, then the
lower price, then the lower TPOT. Nothing returned misses a target it was given: each candidate's
own figures are checked again before it is kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.perf import (
    PerfKnobs,
    PerfSetup,
    ServingPerf,
    max_concurrency_for_tpot,
    prefill_seconds,
    serving_perf,
)
from gpuplan.engine.serving import ServingBill, ServingSetup, serving_bill
from gpuplan.engine.sharding import tp_problem
from gpuplan.errors import GpuplanError

OBJECTIVES = ("gpus", "cost", "token-cost", "throughput", "latency")
# what each objective ranks by, as the outputs say it (serving; training ranks `cost` and
# `token-cost` alike by the job's total price: its tokens are fixed)
RANKED_BY = {
    "gpus": "fewest GPUs",
    "cost": "$/hour for all the users",
    "token-cost": "$ per million output tokens",
    "throughput": "output tokens/s per GPU",
    "latency": "TPOT",
}
PP_DEGREES = (1, 2, 4, 8, 16)
DEFAULT_MAX_GPUS = 256


@record
class ServingGoal:
    """What the deployment must do."""

    users: int = 1  # concurrent sequences in total
    prompt_tokens: int = 1024
    output_tokens: int = 256
    tpot_s: float | None = None  # time per output token target
    ttft_s: float | None = None  # time to first token target
    objective: str = "gpus"
    prices: Mapping[str, float] = field(default_factory=dict)  # gpu id → $/GPU-hour
    max_gpus: int = DEFAULT_MAX_GPUS
    knobs: PerfKnobs = field(default_factory=PerfKnobs)
    # a pinned replica layout (plan --tp/--pp/--ep): None searches every value
    tp: int | None = None
    pp: int | None = None
    ep: bool | None = None


@record
class ServingCandidate:
    """One layout that meets the goal: its replica bill, how many replicas, and its speed."""

    bill: ServingBill  # one replica, at `concurrency` sequences
    replicas: int
    concurrency: int  # sequences per replica
    memory_limit: int  # sequences per replica the memory holds
    latency_limit: int | None  # sequences per replica within the TPOT target
    expert_parallel: bool
    perf: ServingPerf
    usd_per_gpu_hour: float | None

    @property
    def gpus(self) -> int:
        return self.bill.setup.gpus * self.replicas

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.usd_per_gpu_hour * self.gpus

    @property
    def usd_per_million_tokens(self) -> float | None:
        per_hour = self.usd_per_hour
        tps = self.perf.tokens_per_s
        return None if per_hour is None or tps <= 0 else per_hour / (tps * 3600) * 1e6


def replica_layouts(setup: ServingSetup, max_gpus: int) -> Iterator[tuple[int, int, bool]]:
    """(tp, pp, expert_parallel) of one replica: tp within a node dividing the heads, pp in
    powers of two up to the layers, EP as an alternative to TP-sharded experts for MoE."""
    arch = setup.arch
    node = setup.gpu.gpus_per_node
    for tp in range(1, node + 1):
        if tp_problem(arch, tp) is not None:
            continue
        for pp in PP_DEGREES:
            if pp > arch.num_layers or tp * pp > max_gpus:
                continue
            yield tp, pp, False
            if arch.moe is not None and tp > 1 and arch.moe.num_experts % tp == 0:
                yield tp, pp, True


def _pinned(layout: tuple[int, int, bool], goal: ServingGoal) -> bool:
    tp, pp, ep = layout
    return (
        (goal.tp is None or tp == goal.tp)
        and (goal.pp is None or pp == goal.pp)
        and (goal.ep is None or ep == goal.ep)
    )


def refuse_pinned(setup: ServingSetup, goal: ServingGoal) -> None:
    """A pinned layout `replica_layouts` would never yield, refused in one line saying why."""
    arch, tp, pp = setup.arch, goal.tp or 1, goal.pp or 1
    why = tp_problem(arch, tp) if goal.tp else None
    if why is None and goal.pp and pp not in PP_DEGREES:
        why = f"pp={pp}: the plan searches pp in {', '.join(map(str, PP_DEGREES))}"
    if why is None and pp > arch.num_layers:
        why = f"pp={pp} exceeds the {arch.num_layers} layers"
    if why is None and tp > setup.gpu.gpus_per_node:
        why = f"tp={tp} exceeds the {setup.gpu.gpus_per_node} GPUs of a {setup.gpu.name} node"
    if why is None and tp * pp > goal.max_gpus:
        why = f"tp={tp} × pp={pp} exceeds --max-gpus {goal.max_gpus}"
    if why is None and goal.ep:
        if arch.moe is None:
            why = "--ep: the model has no experts"
        elif tp < 2 or arch.moe.num_experts % tp:
            why = f"--ep: tp={tp} must be ≥ 2 and divide the {arch.moe.num_experts} experts"
    if why is not None:
        raise GpuplanError(f"cannot pin this layout: {why}")


def _rank_key(objective: str):
    inf = float("inf")

    def key(c: ServingCandidate) -> tuple[float, ...]:
        cost = c.usd_per_hour if c.usd_per_hour is not None else inf
        base = (float(c.gpus), cost, c.perf.tpot_s)
        if objective == "cost":
            return (cost, float(c.gpus), c.perf.tpot_s)
        if objective == "token-cost":
            per_token = c.usd_per_million_tokens
            return (inf if per_token is None else per_token, *base)
        if objective == "throughput":
            return (-c.perf.tokens_per_s_per_gpu, *base)
        if objective == "latency":
            return (c.perf.tpot_s, c.perf.ttft_s, *base)
        return base

    return key


def meets(c: ServingCandidate, goal: ServingGoal) -> bool:
    """Does a candidate hold every target it was given (memory, users, TPOT, TTFT, GPUs)?"""
    if not c.bill.fits or c.bill.max_concurrent_sequences < c.concurrency:
        return False
    if c.concurrency * c.replicas < goal.users or c.gpus > goal.max_gpus:
        return False
    if goal.tpot_s is not None and c.perf.tpot_s > goal.tpot_s:
        return False
    return not (goal.ttft_s is not None and c.perf.ttft_s > goal.ttft_s)


def evaluate(
    setup: ServingSetup, tp: int, pp: int, ep: bool, goal: ServingGoal
) -> ServingCandidate | str:
    """The candidate for one replica layout, or why it cannot meet the goal."""
    one = replace(setup, tp=tp, pp=pp, users=1)
    try:
        bill = serving_bill(one)
    except GpuplanError as err:
        return str(err)
    if not bill.fits:
        return "does not fit one sequence"
    mem_limit = bill.max_concurrent_sequences
    perf_setup = PerfSetup(
        one,
        prompt_tokens=goal.prompt_tokens,
        output_tokens=goal.output_tokens,
        expert_parallel=ep,
        knobs=goal.knobs,
    )
    try:
        ttft = prefill_seconds(perf_setup, goal.prompt_tokens)
    except GpuplanError as err:
        return str(err)
    if goal.ttft_s is not None and ttft > goal.ttft_s:
        return f"TTFT {ttft * 1e3:,.0f} ms > {goal.ttft_s * 1e3:,.0f} ms"
    lat_limit = None
    limit = mem_limit
    if goal.tpot_s is not None:
        lat_limit = max_concurrency_for_tpot(perf_setup, goal.tpot_s, mem_limit)
        if lat_limit < 1:
            tpot = serving_perf(perf_setup).tpot_s
            return f"TPOT {tpot * 1e3:,.1f} ms > {goal.tpot_s * 1e3:,.1f} ms even for one user"
        limit = lat_limit
    replicas = math.ceil(goal.users / limit)
    if replicas * tp * pp > goal.max_gpus:
        return f"needs {replicas} replicas = {replicas * tp * pp} GPUs > {goal.max_gpus}"
    per_replica = math.ceil(goal.users / replicas)
    bill = serving_bill(replace(one, users=per_replica))
    perf = serving_perf(
        replace(perf_setup, serving=bill.setup, concurrency=per_replica, replicas=replicas)
    )
    price = goal.prices.get(setup.gpu.id)
    return ServingCandidate(bill, replicas, per_replica, mem_limit, lat_limit, ep, perf, price)


def plan_to_goal(
    setups: list[ServingSetup], goal: ServingGoal
) -> tuple[list[ServingCandidate], list[tuple[str, str]]]:
    """Every layout of every setup (one per GPU type × format) that meets `goal`, best first
    by the goal's objective, and the (layout, reason) of the ones that could not."""
    if goal.objective not in OBJECTIVES:
        raise GpuplanError(
            f"unknown objective {goal.objective!r}; use one of {', '.join(OBJECTIVES)}"
        )
    if goal.users < 1 or goal.prompt_tokens < 1 or goal.output_tokens < 1:
        raise GpuplanError("users, prompt and output tokens must be at least 1")
    found: list[ServingCandidate] = []
    rejected: list[tuple[str, str]] = []
    for setup in setups:
        refuse_pinned(setup, goal)
        for tp, pp, ep in replica_layouts(setup, goal.max_gpus):
            if not _pinned((tp, pp, ep), goal):
                continue
            result = evaluate(setup, tp, pp, ep, goal)
            if isinstance(result, str):
                what = f"{setup.gpu.id} {setup.weights.precision.id} tp={tp} pp={pp}" + (
                    " ep" if ep else ""
                )
                rejected.append((what, result))
            elif meets(result, goal):
                found.append(result)
    found.sort(key=_rank_key(goal.objective))
    return found, rejected
