"""Time to train N tokens, GPU-hours and cost, from a training bill's step time.

    steps      = ⌈N ÷ tokens per step⌉
    wall time  = steps × step time          (engine/cost.py `step_time`: FLOPs at MFU, bubble,
                                             exposed communication)
    GPU-hours  = GPUs × wall time ÷ 3600
    cost       = GPU-hours × price per GPU-hour

The step time is the operators' (engine/train_speed.py: GEMMs, attention, elementwise traffic,
recompute, optimizer, pipeline bubble, exposed communication per dimension), unless
`TrainingSetup.mfu` pins it (`--mfu`); the achieved MFU is model FLOPs ÷ (GPUs × peak × wall
time) either way, and `where` says where the operators' step time goes.
"""

from __future__ import annotations

import math

from gpuplan.engine.cost import StepTime
from gpuplan.engine.frozen import record
from gpuplan.engine.training import TrainingBill
from gpuplan.errors import GpuplanError

SECONDS_PER_DAY = 86_400


@record
class TrainingTime:
    tokens: int
    steps: int
    step_s: float
    seconds: float
    gpus: int
    gpu_hours: float
    usd_per_gpu_hour: float | None
    cost_usd: float | None
    tokens_per_s: float
    mfu_assumed: float | None  # the pinned MFU; None: the step time is from operators
    mfu_achieved: float
    where: dict[str, float] | None = None  # share of the step by component (operators)

    @property
    def days(self) -> float:
        return self.seconds / SECONDS_PER_DAY

    def to_dict(self) -> dict[str, object]:
        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "step_time_s": self.step_s,
            "seconds": self.seconds,
            "days": self.days,
            "gpus": self.gpus,
            "gpu_hours": self.gpu_hours,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "cost_usd": self.cost_usd,
            "tokens_per_second": self.tokens_per_s,
            "mfu_assumed": self.mfu_assumed,
            "mfu_achieved": self.mfu_achieved,
            "where": self.where,
        }


def training_time(
    bill: TrainingBill, tokens: int, usd_per_gpu_hour: float | None = None
) -> TrainingTime:
    """How long `bill`'s layout takes to train `tokens` tokens, in GPU-hours and dollars."""
    if tokens < 1:
        raise GpuplanError(f"tokens to train must be at least 1, got {tokens}")
    t = bill.time
    if t is None:
        raise GpuplanError(f"{bill.setup.gpu.name} has no FLOPS figure; cannot estimate time")
    per_step = bill.setup.tokens_per_step
    steps = math.ceil(tokens / per_step)
    seconds = steps * t.step_s
    gpus = bill.setup.layout.gpus
    gpu_hours = gpus * seconds / 3600
    model_flops = bill.flops.model * steps
    achieved = model_flops / (gpus * t.peak_flops * seconds) if seconds > 0 else 0.0
    return TrainingTime(
        tokens=tokens,
        steps=steps,
        step_s=t.step_s,
        seconds=seconds,
        gpus=gpus,
        gpu_hours=gpu_hours,
        usd_per_gpu_hour=usd_per_gpu_hour,
        cost_usd=None if usd_per_gpu_hour is None else gpu_hours * usd_per_gpu_hour,
        tokens_per_s=per_step * steps / seconds if seconds > 0 else 0.0,
        mfu_assumed=bill.setup.mfu,
        mfu_achieved=achieved,
        where=_where(t),
    )


def _where(t: StepTime) -> dict[str, float] | None:
    """Each component's share of the step (engine/train_speed.py StepBreakdown), when the step
    time is from operators."""
    b, step = t.breakdown, t.step_s
    if b is None or step <= 0:
        return None
    return {k.removesuffix("_s"): v / step for k, v in b.to_dict().items()}
