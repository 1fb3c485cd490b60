"""Rank the training layouts of a fixed GPU count that fit, fastest first.

For N GPUs and a global batch of B tokens the search walks, for every layout:

    tp      degrees that shard the attention heads (`tp_problem`) within one node, dividing N;
            sequence parallelism on whenever tp > 1 (it divides activations at no extra traffic,
            Korthikanti et al. 2022 §4.2.2)
    pp      divisors of N ÷ tp up to min(layers, 16)
    cp      context parallelism of 2, 4, 8 for sequences of 8,192 tokens or more (ring attention
            splits the sequence; at shorter sequences it only adds K/V traffic)
    ep      expert parallelism for MoE models: powers of two up to 64 dividing the experts and
            dp × cp (Megatron-core carves the expert groups out of the data-parallel ranks)
    dp      N ÷ (tp × pp × cp); ZeRO 0-3 over it (1-3 only when dp > 1: one rank has nothing to shard),
            plus FSDP HYBRID_SHARD (ZeRO-3 within a node, replicated across) when N spans nodes
    micro   micro-batches of 1, 2, 4, ... sequences with micro × grad-accum × dp × seq = B
    recompute  none and full (selective too with eager attention; under flash/SDPA it frees no
            memory, the engine's own note, so it would only be a slower copy of none)

and keeps the layouts whose heaviest GPU fits its budget. What keeps the bills few:
  - a layout whose weights, master and optimizer states alone are over the budget
    (`model_states_floor`: no bill built), or where no recompute mode fits at micro-batch 1, is
    dropped at once (which mode keeps least depends on the model: full recompute can hold more
    than selective or none on a one-layer stage or with eager attention's s² scores);
  - a bill only grows with the micro-batch, so the walk up the micro-batches stops at the first
    that does not fit;
  - a bill that does not fit is only weighed (`fitting_training_bill`: its stages' peaks, up to
    the first over the budget), never built into lines, cost and notes;
  - what a layout fixes (each stage's model states and the amounts they fix) and what one
    micro-batch saves on a stage are computed once by the engine, not once per bill;
  - asked for the `top` plans only (the CLI, the API and the goal planner are), the search is a
    branch and bound: each layout gets a speed ceiling from its fastest bill that fits at
    micro-batch 1 (`_Walk.ceiling`: compute + the traffic no overlap hides), layouts
    are walked from the highest ceiling down, and the walk stops when a ceiling falls below
    the `top`-th best speed found. The first `top` plans are exactly the exhaustive ranking's
    (tests/test_plan_training.py checks it against billing every candidate).
CPU offload (optimizer states with ZeRO 1-3, parameters too with ZeRO-3, ZeRO-Offload, Ren et al.
2021) is tried only when nothing fits without it, since it trades GPU memory for PCIe traffic the
cost model does not price.

Ranked by the estimated tokens/s of the bill's step time (from operators, engine/train_speed.py,
or at a pinned MFU, engine/cost.py), ties broken by
lower per-GPU memory, then by the simpler layout, then by the order of the walk.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from gpuplan.engine.frozen import fields, record, replace
from gpuplan.engine.sharding import Layout, tp_problem
from gpuplan.engine.training import (
    TrainingBill,
    TrainingSetup,
    budget_bytes,
    fitting_training_bill,
    model_states_floor,
)
from gpuplan.errors import GpuplanError

PP_MAX = 16
CP_MIN_SEQ = 8192  # context parallelism is tried from this sequence length up
CP_DEGREES = (2, 4, 8)
EP_MAX = 64
SEQUENCES_PER_GPU = 8  # the default global batch: 8 sequences of `seq` tokens per GPU


@record
class TrainingSearch:
    """The layouts that fit, best first (all of them, or a set holding the first `top` of the
    full ranking), and how many bills the search built to find them."""

    options: tuple[TrainingBill, ...]
    bills: int
    offload: str  # "none", or the CPU offload every option needed


def default_global_batch_tokens(gpus: int, seq: int) -> int:
    """gpus × seq × 8: eight sequences per GPU per step, so every data-parallel degree divides
    the batch, micro-batches up to 8 can be tried, and a pipeline of up to 8 stages is full."""
    return gpus * seq * SEQUENCES_PER_GPU


def _tps(setup: TrainingSetup, gpus: int) -> list[int]:
    node = setup.gpu.gpus_per_node
    return [
        t
        for t in range(1, min(node, gpus) + 1)
        if gpus % t == 0 and tp_problem(setup.arch, t) is None
    ]


def _cps(setup: TrainingSetup, ranks: int) -> list[int]:
    """Context-parallel degrees for `ranks` = N ÷ (tp × pp): 1, and 2/4/8 for long sequences
    (each rank takes 2·cp chunks of the sequence for load balance, Megatron-core's CP)."""
    if setup.seq < CP_MIN_SEQ:
        return [1]
    return [1, *(c for c in CP_DEGREES if ranks % c == 0 and setup.seq % (2 * c) == 0)]


def _eps(setup: TrainingSetup, dp_cp: int) -> list[int]:
    """Expert-parallel degrees: 1, and for MoE models the powers of two ≤ 64 that divide the
    experts and the dp × cp ranks."""
    moe = setup.arch.moe
    if moe is None:
        return [1]
    out, e = [1], 2
    while e <= min(EP_MAX, dp_cp):
        if moe.num_experts % e == 0 and dp_cp % e == 0:
            out.append(e)
        e *= 2
    return out


def candidate_layouts(
    setup: TrainingSetup, gpus: int, offloading: bool = False
) -> Iterator[Layout]:
    """Every (tp, pp, cp, ep, dp, ZeRO/FSDP) layout of `gpus` GPUs the search considers. With
    one data-parallel rank ZeRO shards nothing, so stages 1 and 3 appear only when `offloading`
    (ZeRO-Offload runs on a single rank, Ren et al. 2021 §5)."""
    base = setup.layout
    node = setup.gpu.gpus_per_node
    layers = setup.arch.num_layers
    for tp in _tps(setup, gpus):
        for pp in range(1, min(layers, PP_MAX, gpus // tp) + 1):
            if (gpus // tp) % pp:
                continue
            ranks = gpus // (tp * pp)
            for cp in _cps(setup, ranks):
                dp = ranks // cp
                for ep in _eps(setup, dp * cp):
                    common = replace(
                        base, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, sp=tp > 1, fsdp=None, hybrid=False
                    )
                    single = (0, 1, 3) if offloading else (0,)
                    for zero in range(4) if dp * cp > 1 else single:
                        yield replace(common, zero=zero)
                    if dp > 1 and gpus > node and (node // (tp * pp * cp)) > 1 and ep == 1:
                        yield replace(common, zero=3, fsdp="hybrid_shard", hybrid=True)


def _recomputes(setup: TrainingSetup) -> tuple[str, ...]:
    if setup.kernel == "eager":
        return ("full", "selective", "none")
    return ("full", "none")


def _micro_batches(per_rank: int) -> list[int]:
    """Powers of two that divide the sequences each data-parallel rank takes per step."""
    out, m = [], 1
    while m <= per_rank:
        if per_rank % m == 0:
            out.append(m)
        m *= 2
    return out


def _bill(setup: TrainingSetup) -> TrainingBill | None:
    """The bill of `setup` when it fits (None when it does not, or the engine refuses it)."""
    try:
        return fitting_training_bill(setup)
    except GpuplanError:
        return None


class _Cell(NamedTuple):
    """One (layout, offload) of the walk, with the sequences each data-parallel rank takes."""

    order: int  # its place in the exhaustive walk: the last tie-break of the ranking
    layout: Layout
    offload: str
    per_rank: int


def _cells(
    setup: TrainingSetup,
    gpus: int,
    batch: int,
    offloads: tuple[str, ...],
    allowed: Callable[[Layout, str], bool],
) -> Iterator[_Cell]:
    """Every (layout, offload) the search bills, in the exhaustive walk's order."""
    order = 0
    for layout in candidate_layouts(setup, gpus, offloads != ("none",)):
        for offload in offloads:
            if offload == "optimizer" and (
                layout.zero == 0 or (layout.dp == 1 and layout.zero > 1)
            ):
                continue
            if offload == "params" and layout.zero != 3:
                continue
            if (offload == "none" and layout.dp == 1 and layout.zero) or not allowed(
                layout, offload
            ):
                continue
            per_rank = batch // (layout.dp * setup.seq)
            if batch % (layout.dp * setup.seq) or per_rank < 1:
                continue
            yield _Cell(order, layout, offload, per_rank)
            order += 1


class _Walk:
    """Bills of the cells' candidates, each built once, counted, and ranked with its place in
    the exhaustive walk (cell, recompute, micro-batch) as the final tie-break."""

    def __init__(self, setup: TrainingSetup) -> None:
        self.setup = setup
        self.recomputes = _recomputes(setup)
        self.bills = 0
        self.found: list[tuple[tuple[float, ...], TrainingBill]] = []
        # per cell (its order): (recompute, micro-batch) -> the bill, None when it does not fit
        self._known: dict[int, dict[tuple[str, int], TrainingBill | None]] = {}
        self._fields = {f.name: getattr(setup, f.name) for f in fields(setup) if f.init}

    def candidate(self, cell: _Cell, **changes: object) -> TrainingSetup:
        """The setup with `cell`'s layout and offload and `changes`: `replace`, but
        with the setup's fields read once per search instead of once per candidate."""
        given = {**self._fields, "layout": cell.layout, "offload": cell.offload, **changes}
        return TrainingSetup(**given)  # type: ignore[arg-type]

    def bill(self, cell: _Cell, recompute: str, micro: int) -> TrainingBill | None:
        """The bill of one candidate when it fits (None when it does not, or the engine
        refuses it: `fitting_training_bill` weighs a bill that does not fit without building
        its lines). Every candidate weighed is counted."""
        known = self._known.setdefault(cell.order, {})
        key = (recompute, micro)
        if key not in known:
            candidate = self.candidate(
                cell, recompute=recompute, micro_batch=micro, grad_accum=cell.per_rank // micro
            )
            self.bills += 1
            known[key] = _bill(candidate)
        return known[key]

    def chain(self, cell: _Cell, recompute: str) -> list[TrainingBill]:
        """The candidates of one recompute mode that fit, up the micro-batches: a bill only
        grows with the micro-batch, so the chain stops at the first that does not fit."""
        out = []
        for micro in _micro_batches(cell.per_rank):
            bill = self.bill(cell, recompute, micro)
            if bill is None:
                break
            out.append(bill)
        return out

    def walk(self, cell: _Cell) -> None:
        """Every candidate of `cell` that fits, chain by chain (each recompute mode)."""
        for r, recompute in enumerate(self.recomputes):
            fitted = self.chain(cell, recompute)
            self.found += [
                (_rank_key(bill) + (cell.order, r, m), bill) for m, bill in enumerate(fitted)
            ]
        self._known.pop(cell.order, None)

    def hopeless(self, cell: _Cell) -> bool:
        """The cell cannot fit whatever its micro-batch and recompute: its model states alone
        are over the budget (`model_states_floor`: no bill built), or no recompute mode fits
        at micro-batch 1 (its smallest bill: a bill only grows with the micro-batch). Which
        mode is smallest depends on the model: full recompute keeps every layer's input plus
        one layer rebuilt, which on a one-layer stage, or with eager attention's s² scores,
        can be more than selective or none keep."""
        try:
            floor = model_states_floor(self.candidate(cell))
        except GpuplanError:
            return True
        if floor > budget_bytes(self.setup):
            return True
        return self.fastest(cell) is None

    def fastest(self, cell: _Cell) -> TrainingBill | None:
        """The micro-batch-1 bill of the fastest recompute mode that fits at all (none, then
        selective, then full: the fewer FLOPs executed, the faster)."""
        for recompute in reversed(self.recomputes):
            bill = self.bill(cell, recompute, 1)
            if bill is not None:
                return bill
        return None

    def ceiling(self, cell: _Cell) -> float:
        """An upper bound on the tokens/s of every candidate of `cell` that fits, from one bill.
        Every candidate moves the same tokens per step, and a step is at least its compute
        plus the traffic no overlap hides (`critical_comm_s`): from operators
        (engine/train_speed.py) compute + optimizer + bubble + exposed TP/DP/PP/CP/EP ≥ compute +
        optimizer + bubble + TP/PP/EP, the compute the same at every micro-batch and the bubble
        least at micro-batch 1 (the most micro-batches); at a pinned MFU
        (engine/cost.py) max(compute, data-parallel time) + TP/CP/EP/PP time with the bubble in
        the compute, least at micro-batch 1 (the most micro-batches). Both are least for the
        fastest recompute mode that fits at all (`fastest`: fewer FLOPs, and TP sends less
        without full recompute); the TP/CP/EP/PP bytes are the same at every micro-batch."""
        fastest = self.fastest(cell)
        if fastest is None or fastest.time is None:
            return math.inf
        t = fastest.time
        bubble = t.breakdown.bubble_s if t.breakdown is not None else 0.0
        step = t.compute_s + bubble + t.critical_comm_s
        return fastest.setup.tokens_per_step / step if step > 0 else math.inf

    def ranked(self) -> list[TrainingBill]:
        return [bill for _, bill in sorted(self.found, key=lambda kb: kb[0])]


def _search(
    setup: TrainingSetup,
    gpus: int,
    batch: int,
    offloads: tuple[str, ...],
    allowed: Callable[[Layout, str], bool],
    top: int | None,
) -> tuple[list[TrainingBill], int]:
    """All fitting candidates (top=None), or a set that holds the `top` best exactly.

    With `top`, a branch and bound: every cell that can fit gets a speed ceiling; cells are
    walked from the highest ceiling down, and the walk stops at the first cell whose ceiling
    is below the `top`-th best speed found, since none of its candidates (nor any later
    cell's) could rank among the first `top`. Ties stay: a cell is dropped only when its
    ceiling is strictly below."""
    walk = _Walk(setup)
    cells = list(_cells(setup, gpus, batch, offloads, allowed))
    if top is None:
        for cell in cells:
            if not walk.hopeless(cell):
                walk.walk(cell)
        return walk.ranked(), walk.bills
    open_cells = [(walk.ceiling(c), c) for c in cells if not walk.hopeless(c)]
    open_cells.sort(key=lambda cc: (-cc[0], cc[1].order))
    best: list[float] = []  # min-heap of the `top` best speeds so far
    for ceiling, cell in open_cells:
        if len(best) == top and ceiling < best[0] * (1 - 1e-9):
            break
        before = len(walk.found)
        walk.walk(cell)
        for key, _ in walk.found[before:]:
            speed = -key[0]
            if len(best) < top:
                heapq.heappush(best, speed)
            elif speed > best[0]:
                heapq.heapreplace(best, speed)
    return walk.ranked(), walk.bills


def _rank_key(bill: TrainingBill) -> tuple[float, int, int, int, int, int]:
    lo = bill.setup.layout
    speed = bill.time.tokens_per_second if bill.time else 0.0
    return (-speed, bill.per_gpu_total_bytes, lo.tp * lo.pp, lo.zero, int(lo.hybrid), lo.pp)


@contextmanager
def _cycle_collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (and restored as it was): a search builds some
    10^5 objects, bills and their lines, kept or dropped whole, and the collector's passes over
    them, triggered by the allocations alone, found nothing to free and cost 5-10 % of the
    search. Reference counting frees what is dropped as before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def rank_training_layouts(
    setup: TrainingSetup,
    gpus: int,
    global_batch_tokens: int,
    allowed: Callable[[Layout, str], bool] = lambda layout, offload: True,
    engine: str | None = None,
    top: int | None = None,
) -> TrainingSearch:
    """Every layout of `gpus` GPUs that fits `setup`'s model, recipe and GPU, fastest first;
    with `top`, the first `top` of that ranking exactly (and possibly more, not all: the search
    drops layouts that cannot reach them, see `_search`).

    `allowed(layout, offload)` narrows the search to what one `engine` can run. Raises a
    one-line GpuplanError when no layout fits, even with CPU offload.
    """
    if global_batch_tokens < 1 or global_batch_tokens % setup.seq:
        raise GpuplanError(
            f"global batch tokens ({global_batch_tokens:,}) must be a whole number of"
            f" sequences of {setup.seq:,} tokens"
        )
    total = 0
    for offloads in (("none",), ("optimizer", "params")):
        with _cycle_collector_paused():
            found, bills = _search(setup, gpus, global_batch_tokens, offloads, allowed, top)
        total += bills
        if found:
            return TrainingSearch(tuple(found), total, found[0].setup.offload)
    sequences = global_batch_tokens // setup.seq
    if not any(sequences % lo.dp == 0 for lo in candidate_layouts(setup, gpus)):
        raise GpuplanError(
            f"the global batch of {sequences} sequences does not split over the data-parallel"
            f" ranks of any layout of {gpus} GPUs; give --global-batch-tokens a multiple of"
            f" {gpus} × {setup.seq}"
        )
    runs = f" as {engine} runs it" if engine else ""
    limit = f"the sharding and CPU offload {engine} allows" if engine else "ZeRO-3, CPU offload"
    raise GpuplanError(
        f"no layout of {gpus} × {setup.gpu.name} fits {setup.arch.name} for training{runs}"
        f" ({total} bills tried, up to full recompute and {limit});"
        " use more GPUs, --lora-rank/--qlora or a shorter --seq"
    )
