"""A discrete-event simulation of `vllm bench serve` against an engine's scheduler.

Load modes (vllm/benchmarks/serve.py):
    concurrency  num_prompts requests, at most C in flight (--max-concurrency): the first C are
                 sent at t = 0, each completion sends the next
    rate         Poisson arrivals at --request-rate (exponential gaps, seeded: deterministic)
    static       one batch of C prompts prefilled in one step, then decoded together

Each engine step is timed by step.py on the layout's rank shape; a pipeline of pp stages runs
pp micro-batches of the step's sequences, a token advancing every pp stage-times (vLLM's virtual
engines). Decode-only stretches between events (a completion, an arrival) advance in bulk: the
step time is linear in the context read, so k steps take k·(t_first + t_last)/2 exactly.

Outputs as the benchmark prints them: mean, median and p99 of TTFT (arrival to first token),
TPOT ((e2e − TTFT) ÷ (output − 1) per request), ITL (gaps between a request's tokens) and E2E,
output and total tokens/s over the run's duration."""

from __future__ import annotations

import math
import random
from collections import deque

from gpuplan.engine.frozen import record
from gpuplan.engine.speed.kernels import SpeedKnobs
from gpuplan.engine.speed.policy import Policy
from gpuplan.engine.speed.shape import RankShape
from gpuplan.engine.speed.step import StepTime, pp_handoff, stage_step

PHASES = ("prefill", "decode")
PARTS = ("compute", "memory", "comm", "overhead")


@record
class Load:
    """The client's traffic."""

    mode: str = "concurrency"  # concurrency | rate | static
    prompt: int = 1024
    output: int = 256
    concurrency: int = 1
    request_rate: float = 0.0
    num_prompts: int = 0  # 0: the mode's default (concurrency: 4·C, at least 16; rate: 200)
    seed: int = 0


@record
class Stat:
    mean: float
    median: float
    p99: float


@record
class SimResult:
    """What the benchmark prints, and where the GPU time went (seconds by phase and part)."""

    ttft: Stat
    tpot: Stat
    itl: Stat
    e2e: Stat
    output_tokens_per_s: float
    total_tokens_per_s: float
    duration_s: float
    requests: int
    breakdown: dict[str, dict[str, float]]


def _weighted(values: list[tuple[float, float]]) -> Stat:
    """Mean, median, p99 of weighted samples (numpy's linear percentile on equal weights)."""
    if not values:
        return Stat(0.0, 0.0, 0.0)
    values.sort()
    total = sum(w for _, w in values)
    mean = sum(v * w for v, w in values) / total

    def q(p: float) -> float:
        target, acc = p * total, 0.0
        for v, w in values:
            acc += w
            if acc >= target:
                return v
        return values[-1][0]

    return Stat(mean, q(0.5), q(0.99))


def _stat(xs: list[float]) -> Stat:
    return _weighted([(x, 1.0) for x in xs])


class _Engine:
    """Times steps of the layout: pp stages of micro-batches, plus the per-step CPU cost."""

    def __init__(self, shape: RankShape, knobs: SpeedKnobs, policy: Policy) -> None:
        self.s, self.k, self.p = shape, knobs, policy
        self.acc = {ph: dict.fromkeys(PARTS, 0.0) for ph in PHASES}

    def time(
        self, dec: int, ctx: float, pre: int, work: float, chunk: float, sampled: int
    ) -> tuple[float, StepTime]:
        s, pp = self.s, self.s.pp
        m = dec + pre
        graphs = m <= self.p.graph_tokens and (pre == 0 or self.p.graph_prefill)
        st = stage_step(
            s,
            self.k,
            math.ceil(dec / pp),
            ctx / pp,
            math.ceil(pre / pp),
            work / pp,
            chunk,
            math.ceil(sampled / pp),
            graphs,
            self.p.gqa_decode,
        )
        comm = pp * st.comm + pp_handoff(s, m / pp)
        st = StepTime(
            pp * st.compute, pp * st.memory, comm, pp * st.overhead + self.k.step_ms * 1e-3
        )
        return st.total, st

    def charge(self, phase: str, st: StepTime, times: float = 1.0) -> None:
        a = self.acc[phase]
        a["compute"] += st.compute * times
        a["memory"] += st.memory * times
        a["comm"] += st.comm * times
        a["overhead"] += st.overhead * times


def _arrivals(load: Load, n: int) -> list[float]:
    if load.mode != "rate":
        return [0.0] * n
    rng, t, out = random.Random(load.seed), 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(load.request_rate)
    return out


def simulate(shape: RankShape, knobs: SpeedKnobs, policy: Policy, load: Load) -> SimResult:
    """Run the benchmark of `load` against the engine (module docstring)."""
    eng = _Engine(shape, knobs, policy)
    if load.mode == "static":
        return _static(load, eng)
    n = load.num_prompts or (max(16, 4 * load.concurrency) if load.mode != "rate" else 200)
    plen, olen = load.prompt, load.output
    arrive = _arrivals(load, n)
    limit = n if load.mode in ("rate", "static") else max(1, load.concurrency)
    sent = min(limit, n)
    for i in range(sent, n):
        if load.mode != "rate":
            arrive[i] = math.inf
    filled, gen = [0] * n, [0] * n
    first, last, done = [0.0] * n, [0.0] * n, [0.0] * n
    waiting: deque[int] = deque(range(sent)) if load.mode != "rate" else deque()
    nxt = sent if load.mode != "rate" else 0
    running: list[int] = []
    itl: list[tuple[float, float]] = []
    finished, t = 0, 0.0
    static = load.mode == "static"
    while finished < n:
        if load.mode == "rate":
            while nxt < n and arrive[nxt] <= t:
                waiting.append(nxt)
                nxt += 1
        while waiting and len(running) < policy.max_seqs:
            running.append(waiting.popleft())
        if not running:
            t = arrive[nxt]
            continue
        dec = [i for i in running if filled[i] >= plen]
        pre_ids = [i for i in running if filled[i] < plen]
        step_pre: list[tuple[int, int]] = []
        if pre_ids:
            budget = (1 << 60) if static else policy.budget - (len(dec) if policy.mixed else 0)
            for i in pre_ids:
                if budget <= 0:
                    break
                q = min(plen - filled[i], budget)
                step_pre.append((i, q))
                budget -= q
        if step_pre and not policy.mixed and not static:
            dec = []
        if static and step_pre:
            dec = []
        ctx = float(sum(plen + gen[i] for i in dec))
        if not step_pre:
            # decode-only: advance in bulk to the next completion or arrival
            k = min(olen - gen[i] for i in dec)
            t0, st0 = eng.time(len(dec), ctx, 0, 0.0, 0.0, len(dec))
            if load.mode == "rate" and nxt < n:
                k = max(1, min(k, math.ceil((arrive[nxt] - t) / t0)))
            t1, _ = eng.time(len(dec), ctx + (k - 1) * len(dec), 0, 0.0, 0.0, len(dec))
            span = k * (t0 + t1) / 2
            eng.charge("decode", st0, span / t0)
            # each request's first gap includes any stall since its last token (a prefill
            # step it sat out); the other k − 1 gaps ramp from t0 to t1
            itl.extend((t - last[i] + t0, 1.0) for i in dec)
            if k > 1:
                w = len(dec) * (k - 1) / 3
                itl.extend(((t0, w), ((t0 + t1) / 2, w), (t1, w)))
            t += span
            for i in dec:
                gen[i] += k
                last[i] = t
        else:
            pre = sum(q for _, q in step_pre)
            work = sum(q * (filled[i] + q / 2) for i, q in step_pre)
            completes = sum(1 for i, q in step_pre if filled[i] + q >= plen)
            dt, st = eng.time(len(dec), ctx, pre, work, pre / len(step_pre), len(dec) + completes)
            eng.charge("prefill", st)
            t += dt
            itl.extend((t - last[i], 1.0) for i in dec)
            for i in dec:
                gen[i] += 1
                last[i] = t
            for i, q in step_pre:
                filled[i] += q
                if filled[i] >= plen:
                    gen[i], first[i], last[i] = 1, t, t
        ended = [i for i in running if gen[i] >= olen]
        if ended:
            running = [i for i in running if gen[i] < olen]
        for i in ended:
            done[i] = t
            finished += 1
            if load.mode == "concurrency" and sent < n:
                arrive[sent] = t
                waiting.append(sent)
                sent += 1
    return _result(load, n, arrive, first, done, itl, t, eng)


def _static(load: Load, eng: _Engine) -> SimResult:
    """One batch of C prompts prefilled in one step, then O − 1 decode steps (closed form: the
    decode steps' time is linear in the context read)."""
    c, p, o = load.concurrency, load.prompt, load.output
    ttft, st = eng.time(0, 0.0, c * p, c * p * p / 2, float(p), c)
    eng.charge("prefill", st)
    k = o - 1
    span, t0, t1 = 0.0, 0.0, 0.0
    if k > 0:
        t0, st0 = eng.time(c, float(c * (p + 1)), 0, 0.0, 0.0, c)
        t1, _ = eng.time(c, float(c * (p + k)), 0, 0.0, 0.0, c)
        span = k * (t0 + t1) / 2
        eng.charge("decode", st0, span / t0)
    tpot = span / k if k > 0 else 0.0
    itl = _weighted([(t0, 1.0), ((t0 + t1) / 2, 1.0), (t1, 1.0)] if k > 0 else [])
    end = ttft + span
    one = lambda v: Stat(v, v, v)  # noqa: E731
    return SimResult(
        one(ttft), one(tpot), itl, one(end), c * o / end, c * (o + p) / end, end, c, eng.acc
    )


def _result(
    load: Load,
    n: int,
    arrive: list[float],
    first: list[float],
    done: list[float],
    itl: list[tuple[float, float]],
    end: float,
    eng: _Engine,
) -> SimResult:
    o, req = load.output, eng.k.request_ms * 1e-3
    ttft = [first[i] - arrive[i] + req for i in range(n)]
    e2e = [done[i] - arrive[i] + req for i in range(n)]
    tpot = [(done[i] - first[i]) / (o - 1) if o > 1 else 0.0 for i in range(n)]
    dur = max(end, 1e-12)
    return SimResult(
        ttft=_stat(ttft),
        tpot=_stat(tpot),
        itl=_weighted(itl),
        e2e=_stat(e2e),
        output_tokens_per_s=n * o / dur,
        total_tokens_per_s=n * (o + load.prompt) / dur,
        duration_s=dur,
        requests=n,
        breakdown=eng.acc,
    )
