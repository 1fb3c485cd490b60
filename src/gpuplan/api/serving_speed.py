"""`gpuplan.serve_speed`: the serving speed of a pinned layout as `vllm bench serve` prints it
(mean, median and p99 of TTFT, TPOT, ITL and E2E, and throughput), where the GPU time goes by
phase (compute, memory, communication, overhead) and the request's wait before its prefill
(queueing), with the sources of every kernel figure used (engine/speed/kernels.toml).

    gpuplan.serve_speed("llama-3.1-70b", "h100", tp=4, users=64, prompt=2000, output=200)

The load is `vllm bench serve --max-concurrency users` (each completion sends the next prompt),
or with `request_rate` its Poisson mode (`--request-rate R`, the default 200 prompts). The engine's
step rules are vLLM V1's defaults (engine/speed/policy.py); `eager` turns CUDA graphs off. A GPU
without a figure the model needs is refused in one line naming it (engine/speed/serving.py,
shape.py, kernels.py)."""

from __future__ import annotations

from typing import Any

from gpuplan.api.calibration import load_calibration
from gpuplan.api.requests import serve_context, speed_tokens
from gpuplan.api.serving import serve
from gpuplan.engine.serving import ServingSetup
from gpuplan.engine.speed.kernels import SpeedKnobs, default_knobs
from gpuplan.engine.speed.schedule import PARTS, Load, Stat
from gpuplan.engine.speed.scope import check_speed_scope
from gpuplan.engine.speed.serving import SpeedResult, SpeedSetup, kv_capacity, serving_speed
from gpuplan.engine.speed.shape import rank_shape
from gpuplan.errors import GpuplanError

SPEED_SCHEMA = "gpuplan.speed/1"
FITTED_SOURCE = (
    "kernels.toml [fitted], fitted to published serving runs (bench/serving_speed_accuracy.py)"
)


MAX_USERS = 8192  # the simulation runs 4 × users requests: a bound on the work of one answer


def speed_load(
    users: int, prompt: int, output: int, request_rate: float | None, num_prompts: int = 0
) -> Load:
    """The benchmark's load: fixed concurrency `users`, or Poisson arrivals at `request_rate`."""
    if users > MAX_USERS:
        raise GpuplanError(f"speed: at most {MAX_USERS:,} users in flight, got {users:,}")
    if request_rate is not None:
        if not request_rate > 0:
            raise GpuplanError(f"request rate must be above 0 requests/s, got {request_rate}")
        return Load("rate", prompt, output, users, float(request_rate), num_prompts)
    return Load("concurrency", prompt, output, users, 0.0, num_prompts)


def _stat(s: Stat) -> dict[str, float]:
    return {"mean": s.mean, "median": s.median, "p99": s.p99}


def _breakdown(r: SpeedResult) -> dict[str, Any]:
    """GPU seconds of the whole run by phase and part, each phase's share of the run, and the
    mean wait of a request before its prefill starts (queueing, part of its TTFT)."""
    total = sum(sum(p.values()) for p in r.sim.breakdown.values()) or 1.0
    phases = {
        ph: {**{k: parts[k] for k in PARTS}, "share": sum(parts.values()) / total}
        for ph, parts in r.sim.breakdown.items()
    }
    return {"phases_s": phases, "queueing_s": _stat(r.sim.queue)}


def _sources(r: SpeedResult, knobs_source: str) -> dict[str, Any]:
    shape = _shape(r.setup)
    return {
        "gpu": r.setup.serving.gpu.id,
        "kernel_architecture": shape.kernels.arch,
        "kernel_source_keys": list(shape.kernels.sources),
        "kernel_sources": list(r.sources),
        "fitted": knobs_source,
    }


def _shape(setup: SpeedSetup) -> Any:
    s = setup.serving
    ctx = setup.load.prompt + max(1, setup.load.output // 2)
    return rank_shape(s.arch, s.weights, s.kv, s.gpu, s.tp, s.pp, ctx)


def _notes(setup: SpeedSetup) -> list[str]:
    ld, notes = setup.load, []
    cap = kv_capacity(setup)
    if ld.mode == "concurrency" and cap and ld.concurrency > cap:
        notes.append(
            f"{ld.concurrency} concurrent requests but the KV cache holds {cap} of"
            f" {ld.prompt + ld.output:,} tokens: the engine would preempt; preemption is not modelled"
        )
    if ld.mode == "rate":
        notes.append(
            "Poisson arrivals, no client concurrency cap (vllm bench serve --request-rate)"
        )
    return notes


def speed_dict(result: SpeedResult, knobs_source: str = FITTED_SOURCE) -> dict[str, Any]:
    """The `speed` object of docs/json.md."""
    setup, sim, ld = result.setup, result.sim, result.setup.load
    return {
        "schema": SPEED_SCHEMA,
        "engine": result.policy.engine,
        "cuda_graphs": setup.cuda_graphs,
        "max_num_batched_tokens": result.policy.budget,
        "max_num_seqs": result.policy.max_seqs,
        "tp": setup.serving.tp,
        "pp": setup.serving.pp,
        "load": {
            "mode": ld.mode,
            "prompt_tokens": ld.prompt,
            "output_tokens": ld.output,
            "concurrency": ld.concurrency if ld.mode != "rate" else None,
            "request_rate": ld.request_rate if ld.mode == "rate" else None,
            "num_prompts": sim.requests,
        },
        "ttft_s": _stat(sim.ttft),
        "tpot_s": _stat(sim.tpot),
        "itl_s": _stat(sim.itl),
        "e2e_s": _stat(sim.e2e),
        "output_tokens_per_s": sim.output_tokens_per_s,
        "total_tokens_per_s": sim.total_tokens_per_s,
        "duration_s": sim.duration_s,
        "breakdown": _breakdown(result),
        "figures": dict(setup.knobs.__dict__),
        "sources": _sources(result, knobs_source),
        "notes": _notes(setup),
    }


def layout_speed(
    serving: ServingSetup,
    *,
    users: int = 1,
    prompt: int = 1024,
    output: int = 256,
    request_rate: float | None = None,
    eager: bool = False,
    calibration: str | None = None,
    num_prompts: int = 0,
) -> dict[str, Any]:
    """The speed dict of one layout (a serving bill's setup) under the benchmark's load; a model
    the speed model does not time is refused in one line (engine/speed/scope.py)."""
    check_speed_scope(serving.arch)
    knobs, knobs_source = _knobs(calibration)
    load = speed_load(users, prompt, output, request_rate, num_prompts)
    setup = SpeedSetup(serving, load, None, None, not eager, knobs=knobs)
    return speed_dict(serving_speed(setup), knobs_source)


def _knobs(calibration: str | None) -> tuple[SpeedKnobs, str]:
    if calibration is None:
        return default_knobs(), FITTED_SOURCE
    return load_calibration(calibration), f"calibration file {calibration}"


def serve_speed(
    model: Any,
    gpu: Any = "h100",
    *,
    users: int = 1,
    prompt: int | None = None,
    output: int | None = None,
    request_rate: float | None = None,
    eager: bool = False,
    calibration: str | None = None,
    **layout: Any,
) -> dict[str, Any]:
    """`gpuplan.serve` at context prompt + output for `users`, then the speed of its layout
    (`layout`: serve's tp, pp, gpus, dtype, kv_dtype, gpu_memory, revision ...)."""
    context = serve_context(layout.pop("context", None), prompt, output)
    prompt, output = speed_tokens(context, prompt, output)
    plan = serve(model, gpu, context=context, users=users, **layout)
    refuse_unfit(plan.fits, plan.bill.setup)
    return layout_speed(
        plan.bill.setup,
        users=users,
        prompt=prompt,
        output=output,
        request_rate=request_rate,
        eager=eager,
        calibration=calibration,
    )


def refuse_unfit(fits: bool, s: ServingSetup) -> None:
    """Speed is for a layout that starts: one line when the memory bill says it does not."""
    if not fits:
        raise GpuplanError(
            f"no speed: the model does not fit on {s.tp * s.pp} × {s.gpu.name}"
            f" (tp={s.tp} pp={s.pp}) at this context and users; see the bill"
        )


__all__ = ["SPEED_SCHEMA", "layout_speed", "serve_speed", "speed_dict", "speed_load"]
