"""Serving speed: time to first token, time per output token, tokens/s, from the same layout as
the memory bill. A roofline model (Williams et al. 2009), term by term:

Prefill of one prompt of s tokens (compute-bound):
    FLOPs = 2·N·s + 2·L·H·d·s²          forward matmuls 2N per token (Kaplan et al. 2020 §2.1)
                                         + attention QKᵀ and AV, 4·L·H·d per token and key
                                         (PaLM, Chowdhery et al. 2022, App. B), halved by the
                                         causal mask
    time  = max(FLOPs ÷ tp, weight bytes) at η_flops × peak and η_hbm × bandwidth, + TP comm

Decode step for a batch of B sequences at context c (memory-bound until B reaches B*):
    bytes = weights per rank (embedding table excluded: a decode step reads B rows of it)
            with MoE experts counted only if the batch touches them:
            E·(1 − (1 − k/E)^B) distinct experts per layer under uniform routing (the expected
            occupancy of E bins after B·k draws of k distinct experts each)
          + KV cache read for the batch, B × KV bytes per sequence per rank at c
    time  = max(bytes ÷ (η_hbm × bandwidth), FLOPs ÷ (η_flops × peak)) + TP comm
    B*    = the batch where the weights' read time equals 2·N_active·B ÷ (η_flops × peak):
            beyond it decode turns compute-bound (the roofline's ridge point)

Tensor parallel: two all-reduces of B·h activations per layer per step (Shoeybi et al. 2019 §3),
ring cost 2·(tp − 1)/tp of the bytes over the GPU's interconnect, plus a fixed latency per
collective. Expert parallel (vLLM `--enable-expert-parallel`): the MoE layers' all-reduce becomes
an all-to-all dispatch and combine of the B·k routed tokens (GShard, Lepikhin et al. 2020 §2.2).
Pipeline parallel (vLLM's virtual engines): pp micro-batches of B/pp sequences in flight; a
micro-batch advances one token per pp stage-times, so TPOT = pp × stage time at B/pp, and a prompt
crosses every stage in turn.

At a concurrency of C sequences per replica, every request pays its prefill once and shares the
decode steps with the others (continuous batching, or a static batch): a cycle of C requests is
    C × prefill + output × step(C, c = prompt + output/2)
so output tokens/s = C × output ÷ cycle, and TPOT = (cycle − prefill) ÷ output (a request's
tokens wait for the others' prefills too). TTFT is one prefill, not counting queueing.

A decode step also pays a fixed cost per layer (kernel launches, the tails of small kernels that
never reach full bandwidth): t_layer per layer and step, which dominates small models at small
batches.

Efficiencies (`PerfKnobs`, each overridable). llm-analysis (cli99/llm-analysis, examples/llama)
reports η_hbm = 0.9 and η_flops = 0.7 profiling FasterTransformer; with those and no per-layer cost
this model over-predicts the first 23 published measurements of tests/data/serving_speed/ (22
dense, one Mixtral) by a median 25 %. The defaults are instead one global fit over those 23 cases
(bench/serving_speed_accuracy.py --fit): η_hbm = 0.80, η_flops = 0.60, t_layer = 60 µs, median
|error| 4.5 %; leave-one-out (refitting without each case, then predicting it) median |error|
6.8 %, 21 of 23 within 25 %. η_link = 0.8 of the interconnect's one-direction bandwidth and 10 µs
per collective are not fitted.

MoE, out of sample: ten later MoE measurements were not fitted on. On NVIDIA GPUs the expert-
occupancy term holds: DeepSeek-R1 FP8 TP8 on H200 under SGLang at 8 to 64 streams comes out 17 to
25 % fast; its measured TPOT exceeds the modelled one by 1.8 to 6.1 ms, 21 to 31 % of the modelled
memory time at every concurrency, so the shortfall scales with the bytes read (an achieved
bandwidth below 80 % there), not with the layer count. Qwen3-30B-A3B comes out 11 % slow on an
H100 and 1 % fast with expert parallelism on 4 H200s. gpt-oss-120b in MXFP4 on one MI300X (vLLM
0.17) comes out 1.9 to 2.5× too fast: CDNA3 has no FP4 units, so the MoE kernel dequantises every
weight tile on the vector ALUs ("a VALU-bound fused loop", meta-pytorch/MSLK pull request 379),
and vLLM's two ROCm MXFP4 MoE backends differ 2× on the same MI300X (vllm-project/vllm pull
request 55934). Its measured TPOT grows 0.14 ms per added stream, 3.6× this model's KV-read and
matmul time, a kernel cost it has no term for (the GPU catalog has no vector-ALU figure); those
four cases stay misses.
"""

from __future__ import annotations

import math
from functools import lru_cache

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence_per_gpu
from gpuplan.engine.params import count_params, expert_params
from gpuplan.engine.serving import ServingSetup
from gpuplan.engine.weights import WeightFormat, stage_layers, weights_per_gpu
from gpuplan.errors import GpuplanError

ACT_BYTES = 2  # activations travel in 16-bit between ranks


@record
class PerfKnobs:
    """The efficiencies of the roofline, as fractions of the GPU's datasheet peaks."""

    hbm_efficiency: float = 0.8  # fitted (see the module docstring)
    flops_efficiency: float = 0.6  # fitted
    link_efficiency: float = 0.8  # of the interconnect's one-direction bandwidth
    collective_latency_s: float = 10e-6  # one small NCCL all-reduce within a node (~10 µs)
    layer_latency_s: float = 60e-6  # fitted: fixed cost per layer and decode step


@record
class PerfSetup:
    """What a speed estimate depends on: the serving layout and the traffic it carries."""

    serving: ServingSetup  # tp, pp, GPU, formats; `users` is ignored (see concurrency)
    prompt_tokens: int = 1024
    output_tokens: int = 256
    concurrency: int = 1  # sequences decoding together on one replica
    replicas: int = 1  # data-parallel copies of the layout
    expert_parallel: bool = False  # MoE experts split over the tp ranks as whole experts
    knobs: PerfKnobs = field(default_factory=PerfKnobs)


@record
class PerfTerm:
    """One named term of the estimate, its value in seconds (or a count), and where it is from."""

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
    prefill_s: float
    decode_memory_s: float
    decode_compute_s: float
    decode_comm_s: float
    weights_read_bytes: int  # per GPU per step
    kv_read_bytes: int  # per GPU per step
    compute_bound_batch: int  # B*: decode turns compute-bound at this many sequences
    tokens_per_s: float  # output tokens/s of all replicas
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    bound: str  # "memory" or "compute": what limits a decode step
    terms: tuple[PerfTerm, ...]

    @property
    def gpus(self) -> int:
        return self.setup.serving.gpus * self.setup.replicas

    def to_dict(self) -> dict[str, object]:
        return {
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "step_s": self.step_s,
            "prefill_s": self.prefill_s,
            "decode_memory_s": self.decode_memory_s,
            "decode_compute_s": self.decode_compute_s,
            "decode_comm_s": self.decode_comm_s,
            "weights_read_bytes": self.weights_read_bytes,
            "kv_read_bytes": self.kv_read_bytes,
            "compute_bound_batch": self.compute_bound_batch,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "bound": self.bound,
            "concurrency": self.setup.concurrency,
            "replicas": self.setup.replicas,
            "prompt_tokens": self.setup.prompt_tokens,
            "output_tokens": self.setup.output_tokens,
            "efficiency": {
                "hbm": self.setup.knobs.hbm_efficiency,
                "flops": self.setup.knobs.flops_efficiency,
                "link": self.setup.knobs.link_efficiency,
            },
            "terms": [
                {"key": t.key, "label": t.label, "value": t.value, "formula": t.formula}
                for t in self.terms
            ],
        }


def peak_flops(setup: ServingSetup) -> float:
    """The matmul peak the weights run at: fp8 tensor cores for fp8 weights (W8A8) where the GPU
    has them, else 16-bit (weight-only int4/int8 formats dequantise to 16-bit for the matmul)."""
    gpu = setup.gpu
    if setup.weights.precision.id.startswith("fp8") and gpu.fp8_dense_tflops:
        return gpu.fp8_dense_tflops * 1e12
    if not gpu.half_dense_tflops:
        raise GpuplanError(f"{gpu.name} has no FLOPS figure in the catalog; cannot time it")
    return gpu.half_dense_tflops * 1e12


def _bandwidth(setup: ServingSetup) -> float:
    bw = setup.gpu.memory_bandwidth_bytes_per_s
    if not bw:
        raise GpuplanError(f"{setup.gpu.name} has no memory bandwidth in the catalog")
    return bw


def touched_experts(num_experts: int, k: int, tokens: int) -> float:
    """Expected distinct experts a batch of `tokens` tokens routes to, k each, uniformly:
    E·(1 − (1 − k/E)^T) (occupancy of E bins; exact for one token: k)."""
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - k / num_experts) ** tokens)


@record
class _Stage:
    """Per-rank bytes of the heaviest pipeline stage, split by what a decode step reads."""

    stage: int
    layers: int
    moe_layers: int
    dense_bytes: int  # everything a step reads whatever the batch (embedding table excluded)
    expert_bytes_per_layer: float  # one layer's routed experts on this rank
    active_params: float  # parameters a token multiplies on this rank (the 2N of FLOPs)


@lru_cache(maxsize=2048)
def _stage(arch: Architecture, fmt: WeightFormat, tp: int, pp: int) -> _Stage:
    w = weights_per_gpu(arch, fmt, tp, pp)
    counts = count_params(arch)
    layers = stage_layers(arch.num_layers, pp)[w.stage]
    moe_layers = sum(1 for i in layers if arch.layers[i].moe)
    expert_layer = 0.0
    if arch.moe is not None and moe_layers:
        per_expert = expert_params(arch)
        expert_layer = fmt.for_kind("experts").bytes_for(arch.moe.num_experts * per_expert) / tp
    embedding_table = fmt.for_kind("embedding").bytes_for(round(counts.embedding / tp))
    embedding_table = embedding_table if w.embedding_bytes else 0
    vision = fmt.for_kind("vision").bytes_for(round(arch.vision_params / tp))
    vision = vision if w.embedding_bytes else 0
    dense = w.bytes - embedding_table - vision - round(expert_layer * moe_layers)
    active = (
        (counts.active - counts.embedding - arch.vision_params)
        * len(layers)
        / (arch.num_layers * tp)
    )
    if w.lm_head_bytes and arch.tie_word_embeddings:
        dense += fmt.for_kind("lm_head").bytes_for(round(arch.vocab_size * arch.hidden_size / tp))
    return _Stage(w.stage, len(layers), moe_layers, max(0, dense), expert_layer, active)


def _experts_read(arch: Architecture, st: _Stage, tokens: int, ep: bool) -> float:
    """Bytes of routed experts one rank reads for a step of `tokens` tokens."""
    if arch.moe is None or not st.moe_layers:
        return 0.0
    e, k = arch.moe.num_experts, arch.moe.experts_per_token
    share = touched_experts(e, k, tokens) / e  # fraction of the layer's experts touched
    return st.expert_bytes_per_layer * st.moe_layers * min(1.0, share)


def _attention_flops(
    arch: Architecture, layers: int, tp: int, tokens: int, context: float
) -> float:
    """QKᵀ and AV of `tokens` query tokens against `context` keys each, on one rank: 4·H·d·c per
    layer and token (PaLM App. B), heads split over tp."""
    a = arch.attention
    heads = max(1, a.num_heads // tp)
    return 4.0 * layers * heads * (a.head_dim + a.v_head_dim) / 2 * tokens * context


def _tp_comm(setup: PerfSetup, st: _Stage, tokens: int) -> float:
    """Seconds of TP (and EP) collectives for one pass of `tokens` tokens through a stage."""
    s, knobs = setup.serving, setup.knobs
    tp = s.tp
    if tp <= 1:
        return 0.0
    link = (s.gpu.interconnect_bytes_per_s_per_dir or 32e9) * knobs.link_efficiency
    h = s.arch.hidden_size
    message = tokens * h * ACT_BYTES
    all_reduce = 2 * (tp - 1) / tp * message / link + knobs.collective_latency_s
    dense_layers = st.layers - st.moe_layers
    if setup.expert_parallel and s.arch.moe is not None:
        k = s.arch.moe.experts_per_token
        a2a = 2 * (tp - 1) / tp * message * k / link + 2 * knobs.collective_latency_s
        return (st.layers + dense_layers) * all_reduce + st.moe_layers * a2a
    return 2 * st.layers * all_reduce


def _step(
    setup: PerfSetup, st: _Stage, batch: int, context: float
) -> tuple[float, float, float, int, int]:
    """One stage's decode step for `batch` sequences: (memory s, compute s, comm s, weight bytes,
    KV bytes)."""
    s, knobs = setup.serving, setup.knobs
    arch = s.arch
    weights = st.dense_bytes + _experts_read(arch, st, batch, setup.expert_parallel)
    kv_seq = kv_cache_bytes_per_sequence_per_gpu(
        arch, s.kv, max(1, round(context)), s.tp, s.pp, st.stage
    )
    kv = kv_seq * batch
    mem = (weights + kv) / (_bandwidth(s) * knobs.hbm_efficiency)
    flops = 2 * st.active_params * batch + _attention_flops(arch, st.layers, s.tp, batch, context)
    comp = flops / (peak_flops(s) * knobs.flops_efficiency)
    return mem, comp, _tp_comm(setup, st, batch), int(weights), int(kv)


def prefill_seconds(setup: PerfSetup, tokens: int) -> float:
    """One prompt of `tokens` tokens through every stage: max(compute, weight read) + TP comm."""
    s, knobs = setup.serving, setup.knobs
    st = _stage(s.arch, s.weights, s.tp, s.pp)
    flops = 2 * st.active_params * tokens + _attention_flops(
        s.arch, st.layers, s.tp, tokens, tokens / 2
    )
    compute = flops / (peak_flops(s) * knobs.flops_efficiency)
    weights = st.dense_bytes + _experts_read(s.arch, st, tokens, setup.expert_parallel)
    memory = weights / (_bandwidth(s) * knobs.hbm_efficiency)
    return s.pp * (max(compute, memory) + _tp_comm(setup, st, tokens))


def compute_bound_batch(setup: PerfSetup) -> int:
    """B*: the batch at which a decode step's matmul time reaches its weight-read time
    (weights ÷ (η_hbm·BW) = 2·N_active·B ÷ (η_flops·peak)); KV reads push it higher."""
    s, knobs = setup.serving, setup.knobs
    st = _stage(s.arch, s.weights, s.tp, s.pp)
    if st.active_params <= 0:
        return 0
    read = st.dense_bytes + st.expert_bytes_per_layer * st.moe_layers
    t_read = read / (_bandwidth(s) * knobs.hbm_efficiency)
    per_seq = 2 * st.active_params / (peak_flops(s) * knobs.flops_efficiency)
    return max(1, math.ceil(t_read / per_seq))


def serving_perf(setup: PerfSetup) -> ServingPerf:
    """TTFT, TPOT and tokens/s of `setup` at its concurrency (see the module docstring)."""
    s = setup.serving
    for name, value in (
        ("prompt tokens", setup.prompt_tokens),
        ("output tokens", setup.output_tokens),
        ("concurrency", setup.concurrency),
        ("replicas", setup.replicas),
    ):
        if value < 1:
            raise GpuplanError(f"{name} must be at least 1, got {value}")
    st = _stage(s.arch, s.weights, s.tp, s.pp)
    c = setup.concurrency
    context = setup.prompt_tokens + setup.output_tokens / 2
    micro = max(1, math.ceil(c / s.pp))
    mem, comp, comm, w_bytes, kv_bytes = _step(setup, st, micro, context)
    stage_s = max(mem, comp) + comm + st.layers * setup.knobs.layer_latency_s
    p2p = (
        (s.pp - 1)
        * micro
        * s.arch.hidden_size
        * ACT_BYTES
        / max(1.0, (s.gpu.interconnect_bytes_per_s_per_dir or 32e9) * setup.knobs.link_efficiency)
    )
    step = s.pp * stage_s + p2p
    prefill = prefill_seconds(setup, setup.prompt_tokens)
    out = setup.output_tokens
    cycle = c * prefill + out * step
    tokens_per_s_replica = c * out / cycle
    tpot = (cycle - prefill) / out
    total = tokens_per_s_replica * setup.replicas
    terms = (
        PerfTerm(
            "prefill",
            "Prefill (one prompt)",
            prefill,
            "max(2·N·s + 2·L·H·d·s², weights) at η·peak, + TP comm, × pp",
        ),
        PerfTerm(
            "decode_memory",
            "Decode step, memory",
            s.pp * mem,
            "(weights read + B × KV per sequence) ÷ (η_hbm × bandwidth)",
        ),
        PerfTerm(
            "decode_compute",
            "Decode step, compute",
            s.pp * comp,
            "(2·N_active·B + attention) ÷ (η_flops × peak)",
        ),
        PerfTerm(
            "decode_comm",
            "Decode step, TP/PP comm",
            s.pp * comm + p2p,
            "2 all-reduces of B·h per layer (ring 2(tp−1)/tp) + latency; pp hand-offs",
        ),
        PerfTerm("cycle", "Cycle of C requests", cycle, "C × prefill + output × step"),
    )
    return ServingPerf(
        setup=setup,
        ttft_s=prefill,
        tpot_s=tpot,
        step_s=step,
        prefill_s=prefill,
        decode_memory_s=s.pp * mem,
        decode_compute_s=s.pp * comp,
        decode_comm_s=s.pp * comm + p2p,
        weights_read_bytes=w_bytes,
        kv_read_bytes=kv_bytes,
        compute_bound_batch=compute_bound_batch(setup),
        tokens_per_s=total,
        tokens_per_s_per_user=1.0 / tpot if tpot > 0 else 0.0,
        tokens_per_s_per_gpu=total / (s.gpus * setup.replicas),
        bound="compute" if comp > mem else "memory",
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
