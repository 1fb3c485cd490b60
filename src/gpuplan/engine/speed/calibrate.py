"""Calibration on a user's own benchmark: refit the few fitted figures (kernels.toml [fitted]:
achieved HBM share, per-kernel cost with CUDA graphs and without, per-step and per-request cost;
the per-request cost of SGLang's native endpoint for runs of its own client)
to the figures of one or more measured runs of one GPU and engine, by coordinate descent on the
median |relative error| of their figures.

A measured run is a `SpeedSetup` (layout, engine, load) and its figures keyed `figure@stat`
(`ttft_ms@median`, `tokens_per_s@mean`, ...), the keys of the benchmark table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.speed.kernels import SpeedKnobs
from gpuplan.engine.speed.schedule import SimResult
from gpuplan.engine.speed.serving import SpeedSetup, serving_speed

KNOB_BOUNDS = {
    "hbm": (0.3, 1.0),
    "kernel_graph_us": (0.0, 50.0),
    "kernel_eager_us": (0.0, 200.0),
    "step_ms": (0.0, 50.0),
    "request_ms": (0.0, 500.0),
    "native_request_ms": (0.0, 500.0),
    "seq_us": (0.0, 1000.0),
}
# Values tried for a figure that starts at zero (a multiplicative step cannot leave it).
FROM_ZERO = {"seq_us": (25.0, 50.0, 100.0, 200.0), "native_request_ms": (2.5, 5.0, 10.0, 20.0)}
STEPS = (0.5, 0.75, 0.9, 1.1, 1.33, 2.0)


@record
class MeasuredRun:
    """One benchmark run: what ran, and what it measured (figure@stat → value)."""

    setup: SpeedSetup
    measured: dict[str, float] = field(default_factory=dict)
    label: str = ""


def figure(sim: SimResult, name: str) -> float:
    """A figure of the simulated run by its table key (`ttft_ms@p99`, `tokens_per_s@mean`)."""
    key, _, stat = name.partition("@")
    if key == "tokens_per_s":
        return sim.output_tokens_per_s
    if key == "total_tokens_per_s":
        return sim.total_tokens_per_s
    st = {"ttft_ms": sim.ttft, "tpot_ms": sim.tpot, "itl_ms": sim.itl, "e2e_ms": sim.e2e}[key]
    return float(getattr(st, stat or "mean")) * 1e3


def run_errors(run: MeasuredRun, knobs: SpeedKnobs) -> dict[str, float]:
    """Each measured figure's relative error (predicted ÷ measured − 1) at `knobs`."""
    sim = serving_speed(replace(run.setup, knobs=knobs)).sim
    return {k: figure(sim, k) / v - 1 for k, v in run.measured.items() if v}


def median_error(runs: Sequence[MeasuredRun], knobs: SpeedKnobs) -> float:
    errs = [abs(e) for r in runs for e in run_errors(r, knobs).values()]
    return statistics.median(errs) if errs else 0.0


def request_knob(runs: Sequence[MeasuredRun]) -> str:
    """The per-request figure the runs' client pays (schedule.Load.request_knob): SGLang's native
    endpoint's only when every run called it."""
    knobs = {r.setup.load.request_knob for r in runs}
    return knobs.pop() if len(knobs) == 1 else "request_ms"


def fit_knobs(
    runs: Sequence[MeasuredRun], start: SpeedKnobs, passes: int = 3
) -> tuple[SpeedKnobs, float]:
    """The knobs minimising the runs' median |error|, from `start` (coordinate descent over
    multiplicative steps within KNOB_BOUNDS; per-kernel eager cost only where a run is eager)."""
    names = ["hbm", "kernel_graph_us", "step_ms", request_knob(runs), "seq_us"]
    if any(not r.setup.cuda_graphs for r in runs):
        names.append("kernel_eager_us")
    best, score = start, median_error(runs, start)
    for _ in range(passes):
        improved = False
        for name in names:
            lo, hi = KNOB_BOUNDS[name]
            base = getattr(best, name)
            tries = (
                [base * f for f in STEPS] if base else list(FROM_ZERO.get(name, (0.5, 2.0, 8.0)))
            )
            for value in tries:
                value = min(hi, max(lo, value))
                cand = replace(best, **{name: value})
                s = median_error(runs, cand)
                if s < score - 1e-9:
                    best, score, improved = cand, s, True
        if not improved:
            break
    return best, score
