"""Serving speed for the planner and older callers: TTFT, TPOT and tokens/s of a layout at a
concurrency, from the operator-level model of engine/speed/ (step.py's per-step operator times
with kernels.toml's published efficiencies, schedule.py's scheduler simulation).

`serving_perf` runs one static batch of C requests (all prefilled in one step, then decoded
together: the steady cycle of `vllm bench serve --max-concurrency C` with equal lengths, in two
step evaluations, fast enough for the planner's searches). Its TTFT is one prompt's prefill alone
(no queueing behind other prompts), the planner's per-layout check. For the benchmark's load modes
(fixed concurrency with chunked prefill, Poisson request rate) and mean / median / p99 figures use
`gpuplan.engine.speed.serving.serving_speed`.

Terms (per GPU, heaviest pipeline stage): decode memory (weights a step touches, MoE experts
counted only if the batch routes to them, plus the batch's KV reads), decode compute (GEMMs and
attention at the kernels' efficiencies), communication (TP all-reduces with latency, PP
hand-offs) and fixed overhead (per layer with CUDA graphs, per step on the CPU). The efficiencies
and their sources are in engine/speed/kernels.toml; the five fitted figures are reported with
leave-one-source-out errors by bench/serving_speed_accuracy.py --fit."""

from __future__ import annotations

import math
from functools import lru_cache

from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.serving import ServingSetup
from gpuplan.engine.speed.kernels import SpeedKnobs, default_knobs, kernel_figures
from gpuplan.engine.speed.schedule import Load
from gpuplan.engine.speed.serving import SpeedSetup, serving_speed, shape_of
from gpuplan.engine.speed.shape import RankShape
from gpuplan.engine.speed.step import stage_step, touched_experts
from gpuplan.errors import GpuplanError

PerfKnobs = SpeedKnobs  # the fitted figures (engine/speed/kernels.toml [fitted])
__all__ = [
    "PerfKnobs",
    "PerfSetup",
    "PerfTerm",
    "ServingPerf",
    "compute_bound_batch",
    "max_concurrency_for_tpot",
    "prefill_seconds",
    "serving_perf",
    "touched_experts",
]


@record
class PerfSetup:
    """What a speed estimate depends on: the serving layout and the traffic it carries."""

    serving: ServingSetup  # tp, pp, GPU, formats; `users` is ignored (see concurrency)
    prompt_tokens: int = 1024
    output_tokens: int = 256
    concurrency: int = 1  # sequences decoding together on one replica
    replicas: int = 1  # data-parallel copies of the layout
    expert_parallel: bool = False  # MoE experts split over the tp ranks as whole experts
    knobs: SpeedKnobs = field(default_factory=default_knobs)
    engine: str | None = None  # vllm | sglang | trtllm (None: vLLM V1)
    cuda_graphs: bool = True


@record
class PerfTerm:
    """One named term of the estimate, its value in seconds, and where it is from."""

    key: str
    label: str
    value: float
    formula: str


@record
class ServingPerf:
    """The speed of one layout at one concurrency."""

    setup: PerfSetup
    ttft_s: float
    tpot_s: float
    step_s: float  # one decode step of the whole batch
    prefill_s: float  # one prompt alone
    decode_memory_s: float
    decode_compute_s: float
    decode_comm_s: float
    decode_overhead_s: float
    weights_read_bytes: int  # per GPU per step
    kv_read_bytes: int  # per GPU per step
    tokens_per_s: float  # output tokens/s of all replicas
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    bound: str  # "memory" or "compute": what limits a decode step
    terms: tuple[PerfTerm, ...]

    @property
    def gpus(self) -> int:
        return self.setup.serving.gpus * self.setup.replicas

    @property
    def compute_bound_batch(self) -> int:
        """B*: decode turns compute-bound at this many sequences (found when asked: a planner's
        search weighs hundreds of candidates and shows a few)."""
        return compute_bound_batch(self.setup)

    def to_dict(self) -> dict[str, object]:
        keys = (
            "ttft_s",
            "tpot_s",
            "step_s",
            "prefill_s",
            "decode_memory_s",
            "decode_compute_s",
            "decode_comm_s",
            "decode_overhead_s",
            "weights_read_bytes",
            "kv_read_bytes",
            "compute_bound_batch",
            "tokens_per_s",
            "tokens_per_s_per_user",
            "tokens_per_s_per_gpu",
            "bound",
        )
        out: dict[str, object] = {k: getattr(self, k) for k in keys}
        out.update(
            concurrency=self.setup.concurrency,
            replicas=self.setup.replicas,
            prompt_tokens=self.setup.prompt_tokens,
            output_tokens=self.setup.output_tokens,
            efficiency={"hbm": self.setup.knobs.hbm},
            terms=[
                {"key": t.key, "label": t.label, "value": t.value, "formula": t.formula}
                for t in self.terms
            ],
            sources=self.sources(),
        )
        return out

    def sources(self) -> dict[str, object]:
        """Where the figures come from: the kernel table's source keys for the GPU's
        architecture (engine/speed/kernels.toml) and the fitted figures' origin."""
        k = kernel_figures(self.setup.serving.gpu)
        fitted = self.setup.knobs == default_knobs()
        return {
            "kernel_architecture": k.arch,
            "kernel_source_keys": list(k.sources),
            "fitted": "kernels.toml [fitted]" if fitted else "a calibration file (--calibration)",
        }


def _speed_setup(setup: PerfSetup, concurrency: int) -> SpeedSetup:
    load = Load("static", setup.prompt_tokens, setup.output_tokens, concurrency)
    return SpeedSetup(
        setup.serving,
        load,
        setup.engine,
        None,
        setup.cuda_graphs,
        knobs=setup.knobs,
        expert_parallel=setup.expert_parallel,
    )


def prefill_seconds(setup: PerfSetup, tokens: int) -> float:
    """One prompt of `tokens` tokens through every stage, alone (no CUDA graphs)."""
    return _prefill(shape_of(_speed_setup(setup, 1)), setup.knobs, tokens)


@lru_cache(maxsize=4096)
def _prefill(sh: RankShape, knobs: SpeedKnobs, tokens: int) -> float:
    st = stage_step(sh, knobs, 0, 0.0, tokens, tokens * tokens / 2, tokens, 1, False)
    return sh.pp * st.total + knobs.step_ms * 1e-3


def compute_bound_batch(setup: PerfSetup) -> int:
    """B*: the smallest batch whose decode step is compute- rather than memory-bound (doubling
    search, then bisection); it depends on the layout's shape and the request lengths only, so a
    planner's candidates at other concurrencies share it."""
    sh = shape_of(_speed_setup(setup, 1))
    return _ridge(sh, setup.knobs, setup.prompt_tokens + setup.output_tokens / 2)


@lru_cache(maxsize=4096)
def _ridge(sh: RankShape, knobs: SpeedKnobs, ctx: float) -> int:
    def compute(b: int) -> bool:
        st = stage_step(sh, knobs, b, b * ctx)
        return st.compute > st.memory

    hi = 1
    while not compute(hi):
        hi *= 2
        if hi > 1 << 20:
            return hi
    lo = hi // 2
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute(mid) else (mid, hi)
    return hi


def serving_perf(setup: PerfSetup) -> ServingPerf:
    """TTFT, TPOT and tokens/s of `setup` at its concurrency (module docstring)."""
    if setup.replicas < 1:
        raise GpuplanError(f"replicas must be at least 1, got {setup.replicas}")
    c = setup.concurrency
    speed = serving_speed(_speed_setup(setup, c))
    sim, s = speed.sim, setup.serving
    sh = shape_of(_speed_setup(setup, c))
    ctx = setup.prompt_tokens + setup.output_tokens / 2
    micro = max(1, math.ceil(c / s.pp))
    st = stage_step(sh, setup.knobs, micro, micro * ctx)
    kv = int(sh.kv_bytes_per_token * micro * ctx)
    share = (
        touched_experts(sh.num_experts, sh.top_k, micro) / sh.num_experts if sh.moe_layers else 0
    )
    weights = int(sh.dense_bytes + sh.lm_bytes + sh.experts_bytes * share)
    step = sim.tpot.mean
    total = sim.output_tokens_per_s * setup.replicas
    prefill = prefill_seconds(setup, setup.prompt_tokens)
    pp = s.pp
    terms = (
        PerfTerm(
            "prefill",
            "Prefill (one prompt)",
            prefill,
            "GEMMs, causal attention, comm, eager per-layer cost (engine/speed/step.py)",
        ),
        PerfTerm(
            "decode_memory",
            "Decode step, memory",
            pp * st.memory,
            "weights touched + B × KV per sequence ÷ achieved bandwidth",
        ),
        PerfTerm(
            "decode_compute",
            "Decode step, compute",
            pp * st.compute,
            "GEMM and attention FLOPs ÷ (kernel efficiency × peak)",
        ),
        PerfTerm(
            "decode_comm",
            "Decode step, TP/PP comm",
            pp * st.comm,
            "2 all-reduces of B·h per layer (latency + ring bus bandwidth)",
        ),
        PerfTerm(
            "decode_overhead",
            "Decode step, fixed overhead",
            pp * st.overhead,
            "layers × per-layer cost (CUDA graphs) + per-step CPU cost",
        ),
    )
    return ServingPerf(
        setup=setup,
        ttft_s=prefill,
        tpot_s=sim.tpot.mean,
        step_s=step,
        prefill_s=prefill,
        decode_memory_s=pp * st.memory,
        decode_compute_s=pp * st.compute,
        decode_comm_s=pp * st.comm,
        decode_overhead_s=pp * st.overhead,
        weights_read_bytes=weights,
        kv_read_bytes=kv,
        tokens_per_s=total,
        tokens_per_s_per_user=1.0 / sim.tpot.mean if sim.tpot.mean > 0 else 0.0,
        tokens_per_s_per_gpu=total / (s.gpus * setup.replicas),
        bound="compute" if st.compute > st.memory else "memory",
        terms=terms,
    )


def max_concurrency_for_tpot(setup: PerfSetup, tpot_s: float, limit: int) -> int:
    """The most sequences per replica (≤ `limit`, the memory's) whose TPOT stays ≤ `tpot_s`;
    0 if not even one does. TPOT grows with the batch, so a binary search finds it."""

    def ok(c: int) -> bool:
        return serving_perf(replace(setup, concurrency=c)).tpot_s <= tpot_s

    if limit < 1 or not ok(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
