"""Plans to a training goal: for each GPU type, the fewest GPUs whose fastest layout
(planner/training_search.py) trains N tokens within a deadline at a fixed global batch, ranked by
an objective (planner/goals.py names them; training ranks `cost` and `token-cost` alike by the
job's total price: its tokens are fixed). A serving plan never loads this module.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.train_time import TrainingTime, training_time
from gpuplan.engine.training import TrainingBill, TrainingSetup
from gpuplan.errors import GpuplanError
from gpuplan.planner.goals import OBJECTIVES
from gpuplan.planner.training_search import candidate_layouts, rank_training_layouts


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
    count_rule: str = ""  # how GPU counts were chosen (COUNT_RULE)
    batch_note: str = ""  # the global batch and where it came from


def gpu_counts(node: int, max_gpus: int) -> list[int]:
    """Every count within a node (1 … node), then whole nodes: 2·node, 3·node, … ≤ `max_gpus`."""
    within = list(range(1, min(node, max_gpus) + 1))
    return within + list(range(2 * node, max_gpus + 1, node))


def splits_batch(setup: TrainingSetup, gpus: int, batch_tokens: int) -> bool:
    """Some layout of `gpus` GPUs (planner/training_search.py `candidate_layouts`) has a
    data-parallel degree that divides the batch's sequences: no bill is built."""
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
        try:
            search = rank_training_layouts(self.setup, n, self.batch, top=1)
            best = search.options[0]
            t = training_time(best, self.goal.tokens, self.goal.prices.get(self.setup.gpu.id))
        except GpuplanError as err:
            return str(err)
        if self.goal.days is not None and t.days > self.goal.days:
            return f"{t.days:,.1f} days > {self.goal.days:g} days"
        return TrainingCandidate(best, t)

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
