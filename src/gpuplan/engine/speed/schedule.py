"""A discrete-event simulation of `vllm bench serve` against an engine's scheduler.

Load modes (vllm/benchmarks/serve.py):
    concurrency  num_prompts requests, at most C in flight (--max-concurrency): the first C are
                 sent at t = 0, each completion sends the next
    rate         Poisson arrivals at --request-rate (exponential gaps, seeded: deterministic;
                 a load from sglang.bench_serving replays that client's own draw, dynamic.py)
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

from gpuplan.engine.frozen import field, record
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
    spread: float = 0.0  # lengths uniform on mean·[1 − spread, 1 + spread] (0: all equal)
    # the benchmark client: "sglang", sglang.bench_serving, whose own seeded draw of lengths
    # and Poisson gaps is replayed (dynamic.py `_sglang_draw`); "in_process", a benchmark that
    # drives the engine in its own process with token ids (LMDeploy's profile_generation.py,
    # vLLM's benchmark_latency.py): no HTTP request, tokenisation or detokenisation, so the
    # fitted per-request cost (kernels.py SpeedKnobs.request_ms) is not added; "": an HTTP
    # serving client with gpuplan's own draw
    client: str = ""
    # the client's random dataset: --random-input-len, --random-output-len, --random-range-ratio
    # (input_len 0: not a random-dataset run; lengths come from prompt, output and spread)
    random_lens: tuple[int, int, float] = (0, 0, 0.0)

    @property
    def request_knob(self) -> str:
        """The fitted per-request cost this client pays (kernels.py SpeedKnobs): SGLang's own
        client calls its native /generate endpoint (--backend sglang), any other HTTP client an
        OpenAI-compatible server's."""
        return "native_request_ms" if self.client == "sglang" else "request_ms"


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
    # arrival to the step that starts the request's prefill: time spent waiting for a slot or
    # for the step's token budget (vLLM's WAITING queue); part of TTFT, no GPU time of its own
    queue: Stat = field(default_factory=lambda: Stat(0.0, 0.0, 0.0))


def _one(value: float) -> Stat:
    """A figure every request shares: its mean, median and p99 alike."""
    return Stat(value, value, value)


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
    """Times steps of the layout: pp stages of micro-batches, plus the CPU cost per step and per
    sequence the step carries (decodes and prefill chunks)."""

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
            overlap=self.p.graph_tokens > 0,
        )
        comm = pp * st.comm + pp_handoff(s, m / pp)
        seqs = dec + (round(pre / chunk) if pre and chunk else 0)
        per_seq = self.k.seq_us + (self.k.legacy_seq_us if self.p.legacy_cpu else 0.0)
        cpu = self.k.step_ms * 1e-3 + per_seq * 1e-6 * seqs
        st = StepTime(pp * st.compute, pp * st.memory, comm, pp * st.overhead + cpu)
        return st.total, st

    def charge(self, phase: str, st: StepTime, times: float = 1.0) -> None:
        a = self.acc[phase]
        a["compute"] += st.compute * times
        a["memory"] += st.memory * times
        a["comm"] += st.comm * times
        a["overhead"] += st.overhead * times


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
    return SimResult(
        _one(ttft), _one(tpot), itl, _one(end), c * o / end, c * (o + p) / end, end, c, eng.acc
    )
