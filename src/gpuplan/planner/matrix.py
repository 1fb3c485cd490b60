"""Budget tables: what fits on a GPU type and count, as a grid.

Serving: context × concurrency, each cell the per-GPU bill (engine/serving.py) against the
budget, and the largest context that fits for each concurrency (a bill only grows with the
context, so a binary search finds it). Training: memory per GPU against GPU count for each ZeRO
stage (engine/training.py, data parallel over N GPUs), the lesson's "memory vs GPUs" picture.
"""

from __future__ import annotations

from gpuplan.engine.frozen import record, replace
from gpuplan.engine.serving import ServingSetup, serving_bill
from gpuplan.engine.training import TrainingSetup, budget_bytes, training_bill
from gpuplan.errors import GpuplanError

DEFAULT_CONTEXTS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
DEFAULT_USERS = (1, 4, 16, 64, 256)
DEFAULT_TRAIN_GPUS = (1, 2, 4, 8, 16, 32, 64, 128)
MAX_CONTEXT = 1 << 24


@record
class Cell:
    rows: int  # context (serving) or GPU count (training)
    cols: int  # users (serving) or ZeRO stage (training)
    per_gpu_total_bytes: int | None  # None: the layout is impossible (reason in `note`)
    budget_bytes: int
    fits: bool
    note: str = ""


def serving_matrix(
    setup: ServingSetup, contexts: tuple[int, ...], users: tuple[int, ...]
) -> list[Cell]:
    """One cell per (context, users): the per-GPU bill of `setup`'s layout."""
    cells = []
    for context in contexts:
        for u in users:
            bill = serving_bill(replace(setup, context=context, users=u))
            cells.append(Cell(context, u, bill.per_gpu_total_bytes, bill.budget_bytes, bill.fits))
    return cells


def largest_context(setup: ServingSetup, users: int) -> int:
    """The longest context of which `users` sequences fit (0 if not even one token does)."""

    def fits(context: int) -> bool:
        return serving_bill(replace(setup, context=context, users=users)).fits

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_CONTEXT and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, MAX_CONTEXT + 1)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def training_matrix(setup: TrainingSetup, gpu_counts: tuple[int, ...]) -> list[Cell]:
    """One cell per (GPU count, ZeRO stage 0-3): the heaviest GPU's bill under plain data
    parallelism over that many GPUs (tp = pp = 1) at the setup's sequence and micro-batch."""
    cells = []
    for n in gpu_counts:
        for zero in range(4):
            layout = replace(
                setup.layout,
                dp=n,
                tp=1,
                pp=1,
                cp=1,
                ep=1,
                sp=False,
                zero=zero,
                fsdp=None,
                hybrid=False,
            )
            try:
                bill = training_bill(replace(setup, layout=layout, grad_accum=0))
            except GpuplanError as err:
                cells.append(Cell(n, zero, None, budget_bytes(setup), False, str(err)))
                continue
            cells.append(Cell(n, zero, bill.per_gpu_total_bytes, bill.budget_bytes, bill.fits))
    return cells
