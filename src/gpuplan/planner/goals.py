"""Plans to a goal: serving layouts that hold N users within a TPOT and TTFT target, and
training layouts that train N tokens within a deadline, ranked by an objective.

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
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the training code loads only when a training goal is planned (cold start)
    from gpuplan.engine.train_time import TrainingTime
    from gpuplan.engine.training import TrainingBill, TrainingSetup

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


# --- training to a deadline ---------------------------------------------------------------


@record
class TrainingGoal:
    """Train `tokens` tokens within `days` (None: no deadline, fewest GPUs that fit), at a
    fixed global batch of `global_batch_tokens` (None: `default_goal_batch_tokens`)."""

    tokens: int
    days: float | None = None
    objective: str = "gpus"
    prices: Mapping[str, float] = field(default_factory=dict)
    max_gpus: int = 4096
    global_batch_tokens: int | None = None


DEFAULT_GOAL_BATCH_TOKENS = 4 * 1024 * 1024
GOAL_BATCH_SOURCE = "about 4M tokens, Llama 2's global batch (Touvron et al. 2023 §2.2)"


def default_goal_batch_tokens(seq: int) -> int:
    """The global batch when the user gives none: about 4M tokens in whole sequences (at least
    one), the same at every GPU count (`GOAL_BATCH_SOURCE`)."""
    return max(1, round(DEFAULT_GOAL_BATCH_TOKENS / seq)) * seq


COUNT_RULE = "any count within one server; beyond it, whole servers of {node} GPUs"


@record
class TrainingCandidate:
    bill: TrainingBill
    time: TrainingTime
    bills_tried: int
    count_rule: str = ""  # how GPU counts were chosen (COUNT_RULE)
    batch_note: str = ""  # the global batch and where it came from


def gpu_counts(node: int, max_gpus: int) -> list[int]:
    """Every count within a node (1 … node), then whole nodes: 2·node, 3·node, … ≤ `max_gpus`."""
    within = list(range(1, min(node, max_gpus) + 1))
    return within + list(range(2 * node, max_gpus + 1, node))


def splits_batch(setup: TrainingSetup, gpus: int, batch_tokens: int) -> bool:
    """Some layout of `gpus` GPUs (planner/training_search.py `candidate_layouts`) has a
    data-parallel degree that divides the batch's sequences: no bill is built."""
    from gpuplan.planner.training_search import candidate_layouts

    sequences = batch_tokens // setup.seq
    return any(sequences % lo.dp == 0 for lo in candidate_layouts(setup, gpus))


class _Probe:
    """The fastest layout at each GPU count of one setup, searched once per count."""

    def __init__(self, setup: TrainingSetup, goal: TrainingGoal, batch: int) -> None:
        self.setup, self.goal, self.batch = setup, goal, batch
        self.seen: dict[int, TrainingCandidate | str] = {}

    def at(self, n: int) -> TrainingCandidate | str:
        """The candidate at `n` GPUs, or why there is none (no layout splits the batch or
        fits, or it misses the deadline)."""
        if n not in self.seen:
            self.seen[n] = self._search(n)
        return self.seen[n]

    def _search(self, n: int) -> TrainingCandidate | str:
        from gpuplan.engine.train_time import training_time
        from gpuplan.planner.training_search import rank_training_layouts

        try:
            search = rank_training_layouts(self.setup, n, self.batch, top=1)
            best = search.options[0]
            t = training_time(best, self.goal.tokens, self.goal.prices.get(self.setup.gpu.id))
        except GpuplanError as err:
            return str(err)
        if self.goal.days is not None and t.days > self.goal.days:
            return f"{t.days:,.1f} days > {self.goal.days:g} days"
        return TrainingCandidate(best, t, search.bills)

    def meets(self, n: int) -> bool:
        return not isinstance(self.at(n), str)


def fewest_meeting(probe: _Probe, counts: list[int]) -> int | None:
    """The index in `counts` of the fewest GPUs that meet the goal: a gallop up the counts
    (1, 2, 4, … positions) to the first that meets, then a binary search below it. Training
    time falls as GPUs are added, so this finds the fewest (`counts` holds only the counts some
    layout of which splits the batch: `splits_batch`)."""
    if not counts:
        return None
    lo, hi, step = -1, None, 1
    while hi is None:
        i = min(lo + step, len(counts) - 1)
        if probe.meets(counts[i]):
            hi = i
        elif i == len(counts) - 1:
            return None
        else:
            lo, step = i, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe.meets(counts[mid]):
            hi = mid
        else:
            lo = mid
    return hi


def _cost_counts(counts: list[int], first: int) -> list[int]:
    """For the `cost` objective: the fewest count and a few above it, up to 4× (more GPUs can be
    cheaper when they cut the bubble or exposed communication)."""
    top = 4 * counts[first]
    picks = {counts[first]}
    for factor in (1.25, 1.5, 2, 3, 4):
        want = counts[first] * factor
        picks |= {c for c in counts if c >= want and c <= top}
    return sorted(c for c in picks if c <= top)[:6]


def train_to_goal(
    setups: list[TrainingSetup], goal: TrainingGoal
) -> tuple[list[TrainingCandidate], list[tuple[str, str]]]:
    """For each GPU type, the fewest GPUs whose fastest layout (planner/training_search.py,
    tp/pp/cp/ep/dp/ZeRO/recompute/micro-batch) trains `tokens` within `days` at the fixed global
    batch — any count within a server, whole servers beyond it — and, for `cost`, a few counts
    up to 4× that; ranked by the objective."""
    if goal.objective not in OBJECTIVES:
        raise GpuplanError(
            f"unknown objective {goal.objective!r}; use one of {', '.join(OBJECTIVES)}"
        )
    found: list[TrainingCandidate] = []
    rejected: list[tuple[str, str]] = []
    for setup in setups:
        batch = goal.global_batch_tokens or default_goal_batch_tokens(setup.seq)
        note = f"global batch {batch:,} tokens" + (
            " (given)" if goal.global_batch_tokens else f" (default: {GOAL_BATCH_SOURCE})"
        )
        node = setup.gpu.gpus_per_node
        counts = [n for n in gpu_counts(node, goal.max_gpus) if splits_batch(setup, n, batch)]
        probe = _Probe(setup, goal, batch)
        first = fewest_meeting(probe, counts)
        for n, why in sorted(probe.seen.items()):
            if isinstance(why, str):
                rejected.append((f"{n} × {setup.gpu.id}", why))
        if first is None:
            continue
        picks = _cost_counts(counts, first) if goal.objective == "cost" else [counts[first]]
        rule = COUNT_RULE.format(node=node)
        for n in picks:
            c = probe.at(n)
            if not isinstance(c, str):
                found.append(replace(c, count_rule=rule, batch_note=note))
    found.sort(key=_goal_key(goal.objective))
    return found, rejected


def _goal_key(objective: str):
    inf = float("inf")

    def key(c: TrainingCandidate) -> tuple[float, ...]:
        cost = c.time.cost_usd if c.time.cost_usd is not None else inf
        gpus = float(c.time.gpus)
        if objective in ("cost", "token-cost"):
            return (cost, gpus, c.time.seconds)
        if objective == "throughput":
            return (-c.time.tokens_per_s / gpus, gpus, cost)
        if objective == "latency":
            return (c.time.seconds, gpus, cost)
        return (gpus, cost, c.time.seconds)

    return key
