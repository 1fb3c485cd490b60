"""The request-by-request benchmarks (`vllm bench serve` with --max-concurrency or
--request-rate) as engine/speed/schedule.py's module docstring describes them, on numpy arrays.
Split from schedule.py so that a static batch (the planner's) never imports numpy: numpy is
imported inside the functions that use it (cold start)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpuplan.engine.speed.kernels import SpeedKnobs
from gpuplan.engine.speed.policy import Policy
from gpuplan.engine.speed.schedule import Load, SimResult, Stat, _Engine

if TYPE_CHECKING:
    import numpy as np


def _arrivals(load: Load, n: int) -> np.ndarray:
    """Send times: all at 0 (concurrency: the client's semaphore holds them back), or Poisson."""
    import numpy as np

    if load.mode != "rate":
        return np.zeros(n)
    gaps = np.random.default_rng(load.seed).exponential(1.0 / load.request_rate, n)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1])))


def _lengths(mean: int, spread: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Request lengths: the mean, or uniform on mean·[1 − spread, 1 + spread] (a random
    dataset's range ratio r gives spread (1 − r)/(1 + r) around its mean)."""
    import numpy as np

    if spread <= 0:
        return np.full(n, mean, dtype=np.int64)
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.integers(lo, hi + 1, n)


def _sglang_draw(load: Load, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lengths and send times as sglang.bench_serving draws them (python/sglang/bench_serving.py
    of late 2024): main() seeds numpy's global generator with --seed (default 1); the random
    dataset (`sample_random_requests`) draws every input length, then every output length,
    with np.random.randint on [max(int(L·r), 1), L] and [int(O·r), O]; ShareGPT prompts are
    shuffled with Python's `random`, which leaves numpy's state alone; `get_request` then draws
    one np.random.exponential(1 / rate) gap after sending each request. Replaying the draw makes
    a run's arrival span, and so its throughput, the measured one: the 300 draws of the 1
    request/s run end at 293.6 s (measured duration 298.4 s), where an unrelated seeded draw
    gives ~347 s. An output length of 0 still yields the prefill's token (counted as 1)."""
    import numpy as np

    rs = np.random.RandomState(load.seed)
    inp, out, ratio = load.random_lens
    if inp > 0:
        plen = rs.randint(max(int(inp * ratio), 1), inp + 1, size=n).astype(np.int64)
        olen = np.maximum(1, rs.randint(int(out * ratio), out + 1, size=n)).astype(np.int64)
    else:
        plen, olen = _own_lengths(load, n)
    arrive = np.zeros(n)
    if load.mode == "rate":
        gaps = rs.exponential(1.0 / load.request_rate, n)
        arrive = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    return plen, olen, arrive


def _draw(load: Load, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's prompt and output length and send time, by the load's client."""

    if load.client == "sglang":
        return _sglang_draw(load, n)
    return (*_own_lengths(load, n), _arrivals(load, n))


def _own_lengths(load: Load, n: int) -> tuple[np.ndarray, np.ndarray]:
    """gpuplan's own seeded draw of prompt and output lengths (`_lengths`, at least one output
    token), where no client's draw is replayed."""
    import numpy as np

    rng = np.random.default_rng(load.seed + 1)
    plen = _lengths(load.prompt, load.spread, n, rng)
    return plen, np.maximum(1, _lengths(load.output, load.spread, n, rng))


class _Itl:
    """Inter-token gaps as weighted samples."""

    def __init__(self) -> None:
        self.values: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []

    def add(self, values: np.ndarray, weight: float = 1.0) -> None:
        import numpy as np

        self.values.append(np.asarray(values, dtype=float))
        self.weights.append(np.full(len(self.values[-1]), weight))

    def stat(self) -> Stat:
        import numpy as np

        if not self.values:
            return Stat(0.0, 0.0, 0.0)
        return _np_stat(np.concatenate(self.values), np.concatenate(self.weights))


def _np_stat(v: np.ndarray, w: np.ndarray | None = None) -> Stat:
    import numpy as np

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
    import numpy as np

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
    import numpy as np

    if policy.kv_tokens <= 0:
        return len(head)
    r = policy.reserve
    held = float((plen[run] + gen[run] + r * (olen[run] - gen[run])).sum())
    need = np.cumsum(plen[head] + r * olen[head])
    room = int(np.searchsorted(need, policy.kv_tokens - held, side="right"))
    return max(room, 1 if not len(run) else 0)


def _fits_to_the_end(free: float, left: np.ndarray, held: np.ndarray) -> bool:
    """Whether `free` KV tokens last while the requests run out their `left` output tokens, each
    releasing its `held` tokens (and what it grew) when done: SGLang's walk over the requests by
    tokens left (PrefillAdder.add_one_req_ignore_eos), which charges the i-th shortest stretch as
    the next one's tokens left times the requests still running, and credits the tokens held by
    those already done."""
    import numpy as np

    order = np.argsort(left, kind="stable")
    left, held = left[order], held[order]
    steps = np.append(left[1:], left[-1:])
    running = len(left) - np.arange(len(left))
    freed = np.cumsum(held) - held
    return bool((free + freed - steps * running > 0).all())


def _kv_room_exact(
    policy: Policy,
    run: np.ndarray,
    head: np.ndarray,
    plen: np.ndarray,
    olen: np.ndarray,
    gen: np.ndarray,
) -> int:
    """How many of the queue's `head` SGLang admits when the requests ignore EOS and the radix
    cache is off (sglang/srt/managers/schedule_policy.py PrefillAdder.add_one_req_ignore_eos,
    late 2024): no reserve ratio; a request is added, first come first served, only while the KV
    pool, less the prompts admitted with it, lasts to the end of every running and admitted
    request's output (`_fits_to_the_end`): a loaded run's queue waits for completions instead
    of over-admitting at the 0.1 ratio (schedule_policy.py add_one_req, `_kv_room`)."""
    import numpy as np

    if policy.kv_tokens <= 0:
        return len(head)
    left = (olen[run] - gen[run]).astype(float)
    held = (plen[run] + gen[run]).astype(float)
    free = policy.kv_tokens - float(held.sum())
    room = 0
    for h in head:
        left2 = np.append(left, float(olen[h]))
        held2 = np.append(held, float(plen[h]))
        keep = left2 > 0
        if not _fits_to_the_end(free - plen[h], left2[keep], held2[keep]):
            break
        left, held, free, room = left2, held2, free - plen[h], room + 1
    return max(room, 1 if not len(run) else 0)


class _Run:
    """The state of one benchmark run: each request's lengths, arrival, progress and times, the
    queue (arrived, not admitted) and the running set, and the clock."""

    def __init__(self, load: Load, eng: _Engine) -> None:
        import numpy as np

        self.load, self.eng, self.rate = load, eng, load.mode == "rate"
        n = load.num_prompts or (max(16, 4 * load.concurrency) if not self.rate else 200)
        self.n = n
        self.plen, self.olen, self.arrive = _draw(load, n)
        self.sent = n if self.rate else min(max(1, load.concurrency), n)
        if not self.rate:
            self.arrive[self.sent :] = np.inf
        self.filled, self.gen = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.first, self.last = np.zeros(n), np.zeros(n)
        self.done, self.start = np.zeros(n), np.zeros(n)
        self.inbox = np.arange(0 if self.rate else self.sent)  # sent, not yet received
        self.queue = np.zeros(0, np.int64)  # received by the scheduler, not admitted
        self.nxt = 0 if self.rate else self.sent  # rate: next arrival not yet sent
        self.run = np.zeros(0, np.int64)
        self.itl = _Itl()
        self.finished, self.t = 0, 0.0
        self.since_poll, self.prefilled = 0, False  # decode steps since the last receive

    def admit(self) -> None:
        """Send the arrivals up to now; receive them into the scheduler's queue when it polls
        (`receive`); admit from the queue's head what the sequence cap and the KV cache allow."""
        import numpy as np

        if self.rate and self.nxt < self.n and self.arrive[self.nxt] <= self.t:
            upto = int(np.searchsorted(self.arrive, self.t, side="right"))
            self.inbox = np.concatenate((self.inbox, np.arange(self.nxt, upto)))
            self.nxt = upto
        self.receive()
        policy = self.eng.p
        room = policy.max_seqs - len(self.run)
        if room > 0 and len(self.queue):
            head = self.queue[:room]
            rule = _kv_room_exact if policy.exact_kv else _kv_room
            room = rule(policy, self.run, head, self.plen, self.olen, self.gen)
            self.run = np.concatenate((self.run, self.queue[:room]))
            self.queue = self.queue[room:]

    def receive(self) -> None:
        """The scheduler takes the sent requests when nothing runs, right after a prefill step, or
        once `poll_steps` decode steps have run since it last did (policy.py's request intake)."""
        import numpy as np

        due = self.since_poll >= self.eng.p.poll_steps or self.prefilled or not len(self.run)
        if due and len(self.inbox):
            self.queue = np.concatenate((self.queue, self.inbox))
            self.inbox = self.inbox[:0]
        if due:
            self.since_poll, self.prefilled = 0, False

    def _poll_cap(self, k: int) -> int:
        """Decode steps to run before the next receive matters: up to the poll when a sent
        request waits in the inbox."""
        if len(self.inbox) and self.eng.p.poll_steps > 1:
            return max(1, min(k, self.eng.p.poll_steps - self.since_poll))
        return k

    def decode_span(self, dec: np.ndarray, ctx: float) -> None:
        """Decode-only steps, advanced in bulk to the next completion or arrival."""
        import numpy as np

        eng, nd = self.eng, len(dec)
        k = int((self.olen[dec] - self.gen[dec]).min())
        t0, st0 = eng.time(nd, ctx, 0, 0.0, 0.0, nd)
        if self.rate and self.nxt < self.n:
            k = max(1, min(k, math.ceil((self.arrive[self.nxt] - self.t) / t0)))
        k = self._poll_cap(k)
        t1, _ = eng.time(nd, ctx + (k - 1) * nd, 0, 0.0, 0.0, nd)
        span = k * (t0 + t1) / 2
        eng.charge("decode", st0, span / t0)
        # a prompt whose first token the generation step emits (Policy.first_in_generation)
        # gets it at the end of the span's first step; that gap is its TTFT, not an ITL
        fresh = np.isnan(self.first[dec])
        self.first[dec[fresh]] = self.t + t0
        # a request's first gap includes any stall since its last token (a prefill step it
        # sat out); its other k − 1 gaps ramp from t0 to t1
        self.itl.add(self.t - self.last[dec[~fresh]] + t0)
        if k > 1:
            self.itl.add(np.array([t0, (t0 + t1) / 2, t1]), nd * (k - 1) / 3)
        self.t += span
        self.gen[dec] += k
        self.last[dec] = self.t
        self.since_poll += k

    def prefill_step(self, dec: np.ndarray, ctx: float, chunks: np.ndarray, q: np.ndarray) -> None:
        """One step carrying prefill chunks `q` of `chunks` (and the decodes `dec`)."""
        import numpy as np

        filled, plen, nd = self.filled, self.plen, len(dec)
        pre_tokens = int(q.sum())
        work = float((q * (filled[chunks] + q / 2)).sum())
        completes = int((filled[chunks] + q >= plen[chunks]).sum())
        dt, st = self.eng.time(nd, ctx, pre_tokens, work, pre_tokens / len(chunks), nd + completes)
        self.start[chunks[filled[chunks] == 0]] = self.t
        self.eng.charge("prefill", st)
        self.t += dt
        self.prefilled = True
        if nd:
            self.itl.add(self.t - self.last[dec])
        self.gen[dec] += 1
        self.last[dec] = self.t
        filled[chunks] += q
        now = chunks[filled[chunks] >= plen[chunks]]
        if self.eng.p.first_in_generation:  # no token yet: the next generation step emits it
            self.gen[now], self.first[now], self.last[now] = 0, np.nan, self.t
        else:
            self.gen[now], self.first[now], self.last[now] = 1, self.t, self.t

    def retire(self) -> None:
        """Finished requests leave; under --max-concurrency each completion sends the next."""
        import numpy as np

        ended_mask = self.gen[self.run] >= self.olen[self.run]
        if not ended_mask.any():
            return
        ended = self.run[ended_mask]
        self.run = self.run[~ended_mask]
        self.done[ended] = self.t
        self.finished += len(ended)
        if not self.rate and self.sent < self.n:
            more = min(len(ended), self.n - self.sent)
            self.arrive[self.sent : self.sent + more] = self.t
            self.inbox = np.concatenate((self.inbox, np.arange(self.sent, self.sent + more)))
            self.sent += more


def run_dynamic(load: Load, eng: _Engine) -> SimResult:
    """The concurrency and Poisson-rate benchmarks, request by request (schedule.py's module
    docstring): each step admits, schedules the decodes and the prefill chunks its token budget
    holds (mixed or prefill-first, policy.py), and retires what finished."""
    import numpy as np

    r, policy = _Run(load, eng), eng.p
    while r.finished < r.n:
        r.admit()
        if not len(r.run):
            r.t = float(r.arrive[r.nxt])
            continue
        prefilling = r.filled[r.run] < r.plen[r.run]
        dec, pre = r.run[~prefilling], r.run[prefilling]
        chunks = q = np.zeros(0, np.int64)
        if len(pre):
            budget = policy.budget - (len(dec) if policy.mixed else 0)
            chunks, q = _prefill_chunks(pre, r.plen[pre] - r.filled[pre], budget)
            if len(chunks) and not policy.mixed:
                dec = dec[:0]
        ctx = float((r.plen[dec] + r.gen[dec]).sum())
        if len(chunks):
            r.prefill_step(dec, ctx, chunks, q)
        else:
            r.decode_span(dec, ctx)
        r.retire()
    return _result(r)


def request_seconds(load: Load, k: SpeedKnobs) -> float:
    """The fixed per-request cost the client times in TTFT and E2E: none in process, SGLang's
    native /generate endpoint for its own client (sglang.bench_serving --backend sglang), else
    an OpenAI-compatible HTTP server's (kernels.toml [fitted])."""
    if load.client == "in_process":
        return 0.0
    return float(getattr(k, load.request_knob)) * 1e-3


def _result(r: _Run) -> SimResult:
    import numpy as np

    eng, plen, olen, arrive = r.eng, r.plen, r.olen, r.arrive
    req = request_seconds(r.load, eng.k)
    ttft = r.first - arrive + req
    e2e = r.done - arrive + req
    tpot = np.where(olen > 1, (r.done - r.first) / np.maximum(1, olen - 1), 0.0)
    dur = max(r.t, 1e-12)
    return SimResult(
        ttft=_np_stat(ttft),
        tpot=_np_stat(tpot[olen > 1]) if (olen > 1).any() else Stat(0.0, 0.0, 0.0),
        itl=r.itl.stat(),
        e2e=_np_stat(e2e),
        output_tokens_per_s=float(olen.sum()) / dur,
        total_tokens_per_s=float(olen.sum() + plen.sum()) / dur,
        duration_s=dur,
        requests=len(plen),
        breakdown=eng.acc,
        queue=_np_stat(r.start - arrive),
    )
