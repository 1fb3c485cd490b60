"""Fewest GPUs for training, and the layout that achieves it.

The lesson's lower bound first: fewest GPUs ≥ ⌈model states of the whole model ÷ usable memory
per GPU⌉ (usable = headroom × memory): no layout can beat dividing the bytes perfectly. From there
GPU counts go up one by one within a node and in whole nodes beyond it; for each, layouts are tried from the least communication to the most
(ZeRO stage 0 → 3 unless fixed, then tensor parallelism within a node with sequence parallelism,
then pipeline stages), each without recompute if it fits so, else with full recompute (unless the
checkpointing was given), and the first whose heaviest GPU fits wins. Every smaller count gets its reason. When not
even the most frugal layout fits (activations that no amount of sharding divides), CPU offload
(ZeRO-3 parameter offload, Ren et al. 2021) is tried unless the offload or the ZeRO stage was
given; then the search stops and says so.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import asdict, record, replace
from gpuplan.engine.sharding import tp_problem
from gpuplan.engine.training import TrainingBill, TrainingSetup, budget_bytes, training_bill
from gpuplan.errors import GpuplanError
from gpuplan.units import format_bytes

MAX_GPUS = 4096


@record
class TrainAttempt:
    """One GPU count the search looked at, and why it was or was not the answer."""

    gpus: int
    layout: str | None
    fits: bool
    reason: str
    per_gpu_total_bytes: int | None = None
    tried: bool = True  # False: a note on counts skipped (whole servers beyond one)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def lower_bound(setup: TrainingSetup) -> int:
    """⌈total model-state bytes ÷ (headroom × memory per GPU)⌉: the lesson's fewest GPUs."""
    zero = {"optimizer": 1, "params": 3}.get(setup.offload, 0)
    single = replace(setup.layout, dp=1, tp=1, pp=1, vpp=1, cp=1, ep=1, sp=False, zero=zero)
    one = training_bill(replace(setup, layout=single))
    total = one.model_states_bytes
    return max(1, -(-total // budget_bytes(setup)))


def _valid_tp(setup: TrainingSetup, n: int) -> list[int]:
    if setup.arch.encoder is not None:  # an encoder-decoder trains on data parallelism only
        return [1]
    node = setup.gpu.gpus_per_node
    return [t for t in range(1, node + 1) if tp_problem(setup.arch, t) is None and n % t == 0]


RECOMPUTES = ("none", "full")  # searched unless given: no recompute first, then full


def _describe(setup: TrainingSetup) -> str:
    extra = f", {setup.recompute} recompute" if setup.recompute != "none" else ""
    if setup.offload != "none":
        extra += f", {setup.offload} offloaded"
    return setup.layout.describe() + extra


def _bill_at(candidate: TrainingSetup, fixed: set[str]) -> tuple[TrainingBill | None, TrainingBill]:
    """(the bill that fits at this layout, preferring no recompute; the smallest bill tried).
    Unless the recompute was given, full recompute is tried first: if even it does not fit,
    no recompute will not either, and the layout costs one bill."""
    if "recompute" in fixed:
        bill = training_bill(candidate)
        return (bill if bill.fits else None), bill
    full = training_bill(replace(candidate, recompute=RECOMPUTES[-1]))
    if not full.fits:
        return None, full
    plain = training_bill(replace(candidate, recompute=RECOMPUTES[0]))
    return (plain if plain.fits else full), full


def _layouts(setup: TrainingSetup, n: int, fixed: set[str]) -> Iterator[TrainingSetup]:
    """Layouts of n GPUs, least communication first: ZeRO stage, then tp (with sequence
    parallelism, which costs no extra traffic), then pp."""
    lo, arch = setup.layout, setup.arch
    zeros = [lo.zero] if "zero" in fixed else [0, 1, 2, 3]
    tps = [lo.tp] if "tp" in fixed else _valid_tp(setup, n)
    for zero in zeros:
        for tp in tps:
            sp = lo.sp if "tp" in fixed else tp > 1
            pps = (
                [lo.pp]
                if "pp" in fixed
                else [p for p in range(1, _max_pp(arch) + 1) if (n // tp) % p == 0]
            )
            for pp in pps:
                rest = n // (tp * pp * lo.cp) if n % (tp * pp * lo.cp) == 0 else 0
                if rest < 1 or (lo.ep > 1 and (rest * lo.cp) % lo.ep):
                    continue
                yield replace(setup, layout=replace(lo, zero=zero, tp=tp, pp=pp, dp=rest, sp=sp))


def _max_pp(arch: Architecture) -> int:
    """Pipeline stages to search: one per layer; an encoder-decoder is not split."""
    return 1 if arch.encoder is not None else arch.num_layers


def _counts(start: int, node: int, max_gpus: int) -> Iterator[int]:
    """GPU counts to try: every count within a node, whole nodes (servers) beyond it: a job
    spread over part of a second server shares its NVLink island and network with nothing
    useful, and schedulers hand out whole nodes."""
    n = start if start <= node else -(-start // node) * node
    while n <= max_gpus:
        yield n
        n = n + 1 if n < node else (n // node + 1) * node


def whole_server_rule(low: int, high: int, node: int) -> TrainAttempt:
    """The attempt that says why the counts `low`..`high` were not tried."""
    nor = "" if low == high else f" (nor {low}–{high - 1})"
    return TrainAttempt(
        high,
        None,
        False,
        f"not tried{nor}: beyond one server ({node} GPUs) only whole servers are used,"
        f" so the next count is {(high // node + 1) * node} = {high // node + 1} × {node}",
        tried=False,
    )


def _frugal(setup: TrainingSetup, fixed: set[str], max_gpus: int) -> TrainingBill:
    """The least memory any layout can reach: ZeRO-3 over many ranks, widest tp with SP, full
    recompute (each unless fixed)."""
    lo = setup.layout
    tp = lo.tp if "tp" in fixed else max(_valid_tp(setup, setup.gpu.gpus_per_node))
    sp = lo.sp if "tp" in fixed else tp > 1
    zero = lo.zero if "zero" in fixed else 3
    pp = lo.pp if "pp" in fixed else 1
    dp = max(1, max_gpus // (tp * pp * lo.cp))
    if lo.ep > 1:
        dp -= dp % lo.ep
    recompute = setup.recompute if "recompute" in fixed else RECOMPUTES[-1]
    # an error here is the request's own (ep on a dense model, cp not dividing seq, ...)
    return training_bill(
        replace(
            setup,
            recompute=recompute,
            layout=replace(lo, zero=zero, tp=tp, pp=pp, dp=max(dp, 1), sp=sp),
        )
    )


def _short(n: int, best: TrainingBill) -> TrainAttempt:
    return TrainAttempt(
        n,
        _describe(best.setup),
        False,
        f"best layout needs {format_bytes(best.per_gpu_total_bytes)} per GPU >"
        f" {format_bytes(best.budget_bytes)} budget",
        best.per_gpu_total_bytes,
    )


def fewest_gpus(
    setup: TrainingSetup, fixed: frozenset[str] = frozenset(), max_gpus: int = MAX_GPUS
) -> tuple[TrainingBill, list[TrainAttempt]]:
    """Search GPU counts from the lower bound up for the first layout whose bill fits."""
    start = lower_bound(setup)
    frugal = _frugal(setup, set(fixed), max_gpus)
    if not frugal.fits and "offload" not in fixed and "zero" not in fixed:
        offloaded = replace(setup, offload="params", layout=replace(setup.layout, zero=3))
        if _frugal(offloaded, set(fixed) | {"zero"}, max_gpus).fits:
            return fewest_gpus(offloaded, fixed | {"zero", "offload"}, max_gpus)
    if not frugal.fits:
        act = sum(i.bytes for i in frugal.items if i.category == "activations")
        raise GpuplanError(
            f"{setup.arch.name} does not fit for training on any number of {setup.gpu.name}:"
            f" even {frugal.setup.layout.describe()} needs {format_bytes(frugal.per_gpu_total_bytes)}"
            f" per GPU ({format_bytes(act)} of activations) > {format_bytes(frugal.budget_bytes)};"
            " use --checkpointing full, a shorter --seq, a smaller --micro-batch or --cp"
        )
    attempts: list[TrainAttempt] = []
    if start > 1:
        attempts.append(
            TrainAttempt(
                start - 1,
                None,
                False,
                f"below the lower bound: the model states alone need ≥ {start} GPUs"
                f" at {setup.headroom:.0%} of {format_bytes(setup.gpu.memory_bytes)}",
            )
        )
    node = setup.gpu.gpus_per_node
    previous = start - 1
    for n in _counts(start, node, max_gpus):
        if n - previous > 1:
            attempts.append(whole_server_rule(previous + 1, n - 1, node))
        previous = n
        best: TrainingBill | None = None
        for candidate in _layouts(setup, n, set(fixed)):
            try:
                fitting, bill = _bill_at(candidate, set(fixed))
            except GpuplanError:
                continue
            if fitting is not None:
                attempts.append(
                    TrainAttempt(
                        n, _describe(fitting.setup), True, "fits", fitting.per_gpu_total_bytes
                    )
                )
                return fitting, attempts
            if best is None or bill.per_gpu_total_bytes < best.per_gpu_total_bytes:
                best = bill
        if best is None:
            continue
        attempts.append(_short(n, best))
    raise GpuplanError(
        f"{setup.arch.name} does not fit for training on up to {max_gpus} × {setup.gpu.name}"
    )
