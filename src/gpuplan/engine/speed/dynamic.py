"""The request-by-request benchmarks (`vllm bench serve` with --max-concurrency or
--request-rate) as engine/speed/schedule.py's module docstring describes them, on numpy arrays.
Split from schedule.py so that a static batch (the planner's) never imports numpy."""

from __future__ import annotations

import math

import numpy as np

from gpuplan.engine.speed.policy import Policy
from gpuplan.engine.speed.schedule import Load, SimResult, Stat, _Engine


def _arrivals(load: Load, n: int) -> np.ndarray:
    """Send times: all at 0 (concurrency: the client's semaphore holds them back), or Poisson."""
    if load.mode != "rate":
        return np.zeros(n)
    gaps = np.random.default_rng(load.seed).exponential(1.0 / load.request_rate, n)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1])))


def _lengths(mean: int, spread: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Request lengths: the mean, or uniform on mean·[1 − spread, 1 + spread] (a random
    dataset's range ratio r gives spread (1 − r)/(1 + r) around its mean)."""
    if spread <= 0:
        return np.full(n, mean, dtype=np.int64)
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.integers(lo, hi + 1, n)


class _Itl:
    """Inter-token gaps as weighted samples."""

    def __init__(self) -> None:
        self.values: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []

    def add(self, values: np.ndarray, weight: float = 1.0) -> None:
        self.values.append(values)
        self.weights.append(np.full(len(values), weight))

    def stat(self) -> Stat:
        if not self.values:
            return Stat(0.0, 0.0, 0.0)
        return _np_stat(np.concatenate(self.values), np.concatenate(self.weights))


def _np_stat(v: np.ndarray, w: np.ndarray | None = None) -> Stat:
    w = np.ones(len(v)) if w is None else w
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    total = cum[-1]

    def q(p: float) -> float:
        return float(v[min(len(v) - 1, int(np.searchsorted(cum, p * total)))])

    return Stat(float((v * w).sum() / total), q(0.5), q(0.99))


def _prefill_chunks(
    pre: np.ndarray, need: np.ndarray, budget: int
) -> tuple[np.ndarray, np.ndarray]:
    """First come first served chunks of the waiting prompts within the step's token budget."""
    before = np.cumsum(need) - need
    q = np.minimum(need, np.maximum(0, budget - before))
    keep = q > 0
    return pre[keep], q[keep]


def _kv_room(
    policy: Policy,
    run: np.ndarray,
    head: np.ndarray,
    plen: np.ndarray,
    olen: np.ndarray,
    gen: np.ndarray,
) -> int:
    """How many of the queue's `head` the KV cache admits, first come first served: a request
    takes its prompt plus `reserve` of its remaining output; the running ones hold what they have
    (prompt + tokens generated) plus the same reserve. The first request is always admitted when
    nothing runs (an engine serves a request that fits alone). Running requests are not preempted
    (vLLM's recompute preemption and SGLang's retraction are not modelled)."""
    if policy.kv_tokens <= 0:
        return len(head)
    r = policy.reserve
    held = float((plen[run] + gen[run] + r * (olen[run] - gen[run])).sum())
    need = np.cumsum(plen[head] + r * olen[head])
    room = int(np.searchsorted(need, policy.kv_tokens - held, side="right"))
    return max(room, 1 if not len(run) else 0)


def run_dynamic(load: Load, eng: _Engine) -> SimResult:
    """The concurrency and Poisson-rate benchmarks, request by request (schedule.py's module
    docstring)."""
    policy = eng.p
    n = load.num_prompts or (max(16, 4 * load.concurrency) if load.mode != "rate" else 200)
    rng = np.random.default_rng(load.seed + 1)
    plen = _lengths(load.prompt, load.spread, n, rng)
    olen = np.maximum(1, _lengths(load.output, load.spread, n, rng))
    arrive = _arrivals(load, n)
    rate = load.mode == "rate"
    sent = n if rate else min(max(1, load.concurrency), n)
    if not rate:
        arrive[sent:] = np.inf
    filled, gen = np.zeros(n, np.int64), np.zeros(n, np.int64)
    first, last, done, start = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    queue = np.arange(0 if rate else sent)  # arrived, not admitted
    nxt = 0 if rate else sent  # rate: next arrival not yet queued
    run = np.zeros(0, np.int64)
    itl = _Itl()
    finished, t = 0, 0.0
    while finished < n:
        if rate and nxt < n and arrive[nxt] <= t:
            upto = int(np.searchsorted(arrive, t, side="right"))
            queue = np.concatenate((queue, np.arange(nxt, upto)))
            nxt = upto
        room = policy.max_seqs - len(run)
        if room > 0 and len(queue):
            room = _kv_room(policy, run, queue[:room], plen, olen, gen)
            run, queue = np.concatenate((run, queue[:room])), queue[room:]
        if not len(run):
            t = float(arrive[nxt])
            continue
        prefilling = filled[run] < plen[run]
        dec, pre = run[~prefilling], run[prefilling]
        chunks = q = np.zeros(0, np.int64)
        if len(pre):
            budget = policy.budget - (len(dec) if policy.mixed else 0)
            chunks, q = _prefill_chunks(pre, plen[pre] - filled[pre], budget)
            if len(chunks) and not policy.mixed:
                dec = dec[:0]
        ctx = float((plen[dec] + gen[dec]).sum())
        nd = len(dec)
        if not len(chunks):
            # decode-only: advance in bulk to the next completion or arrival
            k = int((olen[dec] - gen[dec]).min())
            t0, st0 = eng.time(nd, ctx, 0, 0.0, 0.0, nd)
            if rate and nxt < n:
                k = max(1, min(k, math.ceil((arrive[nxt] - t) / t0)))
            t1, _ = eng.time(nd, ctx + (k - 1) * nd, 0, 0.0, 0.0, nd)
            span = k * (t0 + t1) / 2
            eng.charge("decode", st0, span / t0)
            # a request's first gap includes any stall since its last token (a prefill step it
            # sat out); its other k − 1 gaps ramp from t0 to t1
            itl.add(t - last[dec] + t0)
            if k > 1:
                itl.add(np.array([t0, (t0 + t1) / 2, t1]), nd * (k - 1) / 3)
            t += span
            gen[dec] += k
            last[dec] = t
        else:
            pre_tokens = int(q.sum())
            work = float((q * (filled[chunks] + q / 2)).sum())
            completes = int((filled[chunks] + q >= plen[chunks]).sum())
            dt, st = eng.time(nd, ctx, pre_tokens, work, pre_tokens / len(chunks), nd + completes)
            fresh = chunks[filled[chunks] == 0]
            start[fresh] = t
            eng.charge("prefill", st)
            t += dt
            if nd:
                itl.add(t - last[dec])
            gen[dec] += 1
            last[dec] = t
            filled[chunks] += q
            now = chunks[filled[chunks] >= plen[chunks]]
            gen[now], first[now], last[now] = 1, t, t
        ended_mask = gen[run] >= olen[run]
        if ended_mask.any():
            ended = run[ended_mask]
            run = run[~ended_mask]
            done[ended] = t
            finished += len(ended)
            if not rate and sent < n:
                more = min(len(ended), n - sent)
                arrive[sent : sent + more] = t
                queue = np.concatenate((queue, np.arange(sent, sent + more)))
                sent += more
    return _result(load, plen, olen, arrive, (start, first, done), itl, t, eng)


def _result(
    load: Load,
    plen: np.ndarray,
    olen: np.ndarray,
    arrive: np.ndarray,
    times: tuple[np.ndarray, np.ndarray, np.ndarray],
    itl: _Itl,
    end: float,
    eng: _Engine,
) -> SimResult:
    start, first, done = times
    req = eng.k.request_ms * 1e-3
    ttft = first - arrive + req
    e2e = done - arrive + req
    tpot = np.where(olen > 1, (done - first) / np.maximum(1, olen - 1), 0.0)
    dur = max(end, 1e-12)
    return SimResult(
        ttft=_np_stat(ttft),
        tpot=_np_stat(tpot[olen > 1]) if (olen > 1).any() else Stat(0.0, 0.0, 0.0),
        itl=itl.stat(),
        e2e=_np_stat(e2e),
        output_tokens_per_s=float(olen.sum()) / dur,
        total_tokens_per_s=float(olen.sum() + plen.sum()) / dur,
        duration_s=dur,
        requests=len(plen),
        breakdown=eng.acc,
        queue=_np_stat(start - arrive),
    )
