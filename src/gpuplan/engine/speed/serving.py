"""Serving speed of a pinned layout under a benchmark load: the rank shape (shape.py), the
engine's step rules (policy.py) and the scheduler simulation (schedule.py), with the sources of
every kernel figure used."""

from __future__ import annotations

from typing import Any

from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.profiles import EngineLaunch, engine_bill
from gpuplan.engine.serving import ServingSetup, serving_bill
from gpuplan.engine.speed.kernels import SpeedKnobs, default_knobs, source_titles
from gpuplan.engine.speed.policy import Policy, engine_policy
from gpuplan.engine.speed.run import simulate
from gpuplan.engine.speed.schedule import Load, SimResult
from gpuplan.engine.speed.shape import RankShape, rank_shape
from gpuplan.errors import GpuplanError


@record
class SpeedSetup:
    """A layout, the engine that runs it and the load it carries."""

    serving: ServingSetup
    load: Load = field(default_factory=Load)
    engine: str | None = None  # vllm | sglang | trtllm (None: vLLM V1)
    engine_version: str | None = None
    cuda_graphs: bool = True
    max_num_batched_tokens: int | None = None
    expert_parallel: bool = False  # routed experts whole on each rank (EP = tp), not split tp ways
    # decode steps between the scheduler's receives of new requests (SGLang
    # --scheduler-recv-interval / --num-continuous-decode-steps; policy.py): 1 = every step
    poll_steps: int = 1
    knobs: SpeedKnobs = field(default_factory=default_knobs)
    # SGLang's radix (prefix) cache; --disable-radix-cache turns it off, and with it on the
    # admission of requests that ignore EOS (policy.py `exact_kv`)
    radix_cache: bool = True
    # the engine's own launch arguments by its names (("mem_fraction_static", 0.87), ...): they
    # size its KV pool where gpuplan models the engine's memory (`kv_tokens`)
    engine_args: tuple[tuple[str, Any], ...] = ()


@record
class SpeedResult:
    setup: SpeedSetup
    sim: SimResult
    policy: Policy
    sources: tuple[str, ...]


def check_interconnect(s: ServingSetup) -> None:
    """A layout spanning GPUs needs the interconnect's bandwidth: refused in one line without it."""
    if s.tp * s.pp > 1 and not s.gpu.interconnect_bytes_per_s_per_dir:
        raise GpuplanError(
            f"{s.gpu.name} has no interconnect bandwidth in the catalog"
            " (interconnect_bytes_per_s_per_dir); cannot time tp/pp communication"
        )


def shape_of(setup: SpeedSetup) -> RankShape:
    s = setup.serving
    check_interconnect(s)
    ctx = setup.load.prompt + max(1, setup.load.output // 2)
    return rank_shape(s.arch, s.weights, s.kv, s.gpu, s.tp, s.pp, ctx, setup.expert_parallel)


def kv_capacity(setup: SpeedSetup) -> int:
    """Sequences of prompt + output tokens the KV cache holds (the memory bill's figure): an
    engine admits no more at once (vLLM preempts, SGLang reserves for max_new_tokens); 0 when
    the bill cannot say."""
    s, ld = setup.serving, setup.load
    try:
        bill = serving_bill(replace(s, context=ld.prompt + ld.output, users=1))
    except GpuplanError:
        return 0
    return max(1, bill.max_concurrent_sequences)


def kv_tokens(setup: SpeedSetup) -> int:
    """Tokens the KV cache of one replica holds (the memory bill's `kv_capacity_tokens`): the
    scheduler admits a request only while its tokens fit (schedule.py); 0 when the bill cannot
    say (then admission is not limited by memory). SGLang at a stated version: its own pool,
    max_total_num_tokens (engine/profiles/sglang/bill.py, with the launch's
    mem_fraction_static), which the generic bill overstates (Llama-3.1-405B on 8 H200s with
    --mem-fraction-static 0.87: 431k tokens against 492k)."""
    s, ld = setup.serving, setup.load
    own = _engine_kv_tokens(setup)
    if own is not None:
        return own
    try:
        bill = serving_bill(replace(s, context=ld.prompt + ld.output, users=1))
    except GpuplanError:
        return 0
    return max(0, int(bill.kv_capacity_tokens))


def _engine_kv_tokens(setup: SpeedSetup) -> int | None:
    """The KV pool SGLang's own memory rules give the layout (None: another engine, no
    version, or a launch the engine bill refuses)."""
    s = setup.serving
    if not (setup.engine or "").lower().startswith("sglang") or not setup.engine_version:
        return None
    launch = EngineLaunch(
        "sglang",
        s.arch,
        s.weights,
        s.kv,
        s.gpu,
        s.tp,
        s.pp,
        1,
        dict(setup.engine_args),
        setup.engine_version,
    )
    try:
        bill = engine_bill(launch)
    except GpuplanError:
        return None
    return max(0, int(bill.kv_capacity_tokens)) if bill.fits else None


def serving_speed(setup: SpeedSetup) -> SpeedResult:
    """TTFT, TPOT, ITL and throughput of `setup` as `vllm bench serve` would print them."""
    ld = setup.load
    for name, value in (
        ("prompt tokens", ld.prompt),
        ("output tokens", ld.output),
        ("concurrency", ld.concurrency),
    ):
        if value < 1:
            raise GpuplanError(f"{name} must be at least 1, got {value}")
    if ld.mode == "rate" and ld.request_rate <= 0:
        raise GpuplanError("request rate must be above 0 requests/s")
    if ld.mode not in ("concurrency", "rate", "static"):
        raise GpuplanError(f"unknown load mode {ld.mode!r} (concurrency, rate or static)")
    shape = shape_of(setup)
    policy = engine_policy(
        setup.engine,
        setup.engine_version,
        setup.serving.gpu,
        setup.cuda_graphs,
        setup.max_num_batched_tokens,
        setup.poll_steps,
        setup.serving.tp,
    )
    # sglang.bench_serving's requests ignore EOS (its default, without --disable-ignore-eos)
    exact = policy.engine == "sglang" and ld.client == "sglang" and not setup.radix_cache
    policy = replace(policy, kv_tokens=kv_tokens(setup), exact_kv=exact)
    sim = simulate(shape, setup.knobs, policy, ld)
    return SpeedResult(setup, sim, policy, source_titles(shape.kernels.sources))
