"""`simulate`: a benchmark of a load against an engine — a static batch in closed form
(schedule.py), the request-by-request benchmarks in dynamic.py, whose numpy is loaded only when
one runs (the planner's static batches start without it: cold start)."""

from __future__ import annotations

from gpuplan.engine.speed.dynamic import run_dynamic
from gpuplan.engine.speed.kernels import SpeedKnobs
from gpuplan.engine.speed.policy import Policy
from gpuplan.engine.speed.schedule import Load, SimResult, _Engine, _static
from gpuplan.engine.speed.shape import RankShape


def simulate(shape: RankShape, knobs: SpeedKnobs, policy: Policy, load: Load) -> SimResult:
    """Run the benchmark of `load` against the engine (schedule.py's module docstring)."""
    eng = _Engine(shape, knobs, policy)
    if load.mode == "static":
        return _static(load, eng)
    return run_dynamic(load, eng)
