"""One engine step's time on one rank, operator by operator (a Vidur-style step model).

A step carries `decode` sequences (one token each, at their contexts) and prefill chunks
(`prefill` tokens in all). With M = decode + prefill tokens, per stage:

    dense GEMMs   max(2·N_dense·M' ÷ F_gemm, W_dense ÷ (η_hbm·BW))      M' = M rounded up to the
                                                                        MMA tile (kernels.toml;
                  Marlin's 16 rows on the weight-only path); with 128×128-block fp8 weights
                  (DeepGEMM-class tiles) N_dense + K½·ΣN, and each distinct GEMM input quantised
                  per 1×128 group first: 3 bytes a value (widths.dense_sides)
    LM head       the same over the sampled tokens only (vLLM computes logits for the last token
                  of each sequence: the decode tokens and the prompts this step completes)
    routed        touched experts T = E·(1 − (1 − k/E)^M) (uniform routing); bytes T/E of the
    experts       experts' weights; FLOPs 2·N_expert·T·⌈M·k/T⌉_tile (tokens per expert padded to
                  the grouped GEMM's block, DeepGEMM / Triton fused_moe) + 2·K½·ΣN·M·k (each
                  output column's tile cost, widths.py: narrow-K w2 under TP); plus the M·k routed
                  rows' activation traffic (gather, intermediate, output and weighted sum);
                  under expert parallelism a rank holds E/ep whole experts, moves M·k/ep rows,
                  and the step waits for the rank with the most touched experts
    attention     prefill: 4·H·(d_qk + d_v)/2 per query token and key (PaLM App. B), causal
                  chunks of q tokens after c cached keys see c + q/2 keys, at the FlashAttention
                  efficiency of length q (FA2/FA3 tables); decode: KV bytes of every context
                  ÷ (η_attn·BW), and for MLA the absorbed matmuls, 2·H·(2·r + d_rope) per key
                  (DeepSeek-V2 §2.1.2) against the latent cache
    elementwise   norms, rotary, activations, residuals: ~12 passes of M·h 16-bit values
    TP comm       2 all-reduces of M·h·2 bytes per layer (Shoeybi et al. 2019 §3): latency α +
                  2(tp−1)/tp·S ÷ (bus share × link) (ring bus bandwidth, nccl-tests' definition)
    PP            one hand-off of M·h·2 bytes per stage boundary
    overhead      kernels launched (per layer, counted from the engine's model code: shape.py)
                  × (t_kernel with CUDA graphs | without) + t_step per engine step, and the GEMM
                  kernels × the architecture's fixed GEMM time where one is published
                  (kernels.toml gemm_fixed_us: CDNA3); a decode step past the engine's
                  captured graph sizes overlaps its launches with its GPU work
                  (`eager_launch_exposed`)

Every operator takes the larger of its compute and memory time (roofline, Williams et al.
2009); operators run one after another (no overlap)."""

from __future__ import annotations

import math

from gpuplan.engine.frozen import record
from gpuplan.engine.speed.kernels import SpeedKnobs
from gpuplan.engine.speed.shape import RankShape

ACT_BYTES = 2
QUANT_BYTES = 3  # a block-fp8 GEMM input quantised: 16-bit values read, fp8 written (scales ~3 %)
ELEMENTWISE_PASSES = 12  # RMSNorm ×2 (read+write), residual adds ×2, rotary, SiLU·mul, qkv split


@record
class StepTime:
    """Seconds of one step, by where the time goes."""

    compute: float
    memory: float
    comm: float
    overhead: float

    @property
    def total(self) -> float:
        return self.compute + self.memory + self.comm + self.overhead


def _roof(flops: float, rate: float, nbytes: float, bw: float) -> tuple[float, float]:
    """(compute s, memory s) of one operator: only the larger one counts."""
    tc, tm = flops / rate, nbytes / bw
    return (tc, 0.0) if tc >= tm else (0.0, tm)


def _tile(rows: float, tile: int) -> float:
    return math.ceil(rows / tile) * tile if rows > 0 else 0.0


def touched_experts(num_experts: int, k: int, tokens: float) -> float:
    """Expected distinct experts `tokens` tokens route to, k each, uniformly: E·(1 − (1 − k/E)^T)
    (the occupancy of E bins; exact for one token: k)."""
    if tokens <= 0 or num_experts <= 0:
        return 0.0
    return float(num_experts * (1.0 - (1.0 - k / num_experts) ** tokens))


def moe_activation_bytes(s: RankShape, m: float) -> float:
    """HBM bytes the routed-expert path moves per step besides weights: each of the M·k (token,
    expert) rows is gathered as the grouped GEMM's input (h values at the GEMM's input width),
    its intermediate written and read back through the activation (3·I values, I = this rank's
    share of the expert's intermediate size), and its h-wide output written by the down GEMM and
    read again by the weighted sum (2·h 16-bit values) — vLLM fused_moe / SGLang: moe_align,
    fused_moe_kernel for w13 and w2, silu_and_mul, moe_sum. Under expert parallelism a rank
    holds E/ep whole experts and moves only the M·k/ep rows routed to them (at the full I)."""
    if not s.moe_layers or m <= 0:
        return 0.0
    inter = s.expert_params / (3 * s.hidden)
    per_row = s.hidden * (s.expert_input_bytes + 2 * ACT_BYTES) + 3 * inter * ACT_BYTES
    return m * s.top_k / s.expert_ranks * per_row * s.moe_layers


def busiest_rank_experts(num_experts: int, k: int, tokens: float, ranks: int) -> float:
    """Expected touched experts on the busiest of `ranks` expert-parallel ranks holding E/ranks
    experts each: every expert is touched with p = 1 − (1 − k/E)^T (uniform routing, experts taken
    as independent), a rank's count is Binomial(E/ranks, p), and the step waits for the largest
    of the `ranks` counts: E[max] = Σ_t≥1 (1 − F(t − 1)^ranks). With one rank (or experts split
    by tensor parallelism, every rank reading a slice of each touched expert) it is the mean."""
    if tokens <= 0 or num_experts <= 0:
        return 0.0
    mean = touched_experts(num_experts, k, tokens)
    local = num_experts // ranks
    if ranks <= 1 or local < 1:
        return mean / max(1, ranks)
    p = min(1.0, mean / num_experts)
    cdf, out = 0.0, 0.0
    for t in range(local):
        cdf += math.comb(local, t) * p**t * (1 - p) ** (local - t)
        out += 1.0 - min(1.0, cdf) ** ranks
    return out


def _experts(s: RankShape, m: float, bw: float) -> tuple[float, float]:
    """Routed experts of one step on the busiest rank (under expert parallelism the ranks meet
    at the combine, so the rank with the most touched experts sets the time)."""
    if not s.moe_layers or m <= 0:
        return 0.0, 0.0
    touched = touched_experts(s.num_experts, s.top_k, m)
    per_expert = m * s.top_k / touched
    busiest = busiest_rank_experts(s.num_experts, s.top_k, m, s.expert_ranks)
    rows = busiest * _tile(per_expert, s.expert_tile_m)
    tiles = s.kernels.gemm_k_half * s.expert_width * busiest * per_expert  # real rows' tiles
    flops = 2 * (s.expert_params * rows + tiles) * s.moe_layers
    nbytes = s.experts_bytes * busiest * s.expert_ranks / s.num_experts
    tc, tm = _roof(flops, s.expert_flops, nbytes, bw)
    return tc, tm + moe_activation_bytes(s, m) / bw


def _attention(
    s: RankShape, decode: int, decode_ctx: float, prefill: int, prefill_work: float, chunk: float
) -> tuple[float, float]:
    """Attention of one stage: (compute s, memory s)."""
    k = s.kernels
    tc = tm = 0.0
    if prefill:
        eff = chunk / (chunk + k.attn_prefill_half_seq)
        flops = 4 * s.layers * s.heads * (s.attn_qk_dim + s.attn_v_dim) / 2 * prefill_work
        tc += flops / (s.attn_flops * eff)
    if decode:
        kv = s.kv_bytes_per_token * decode_ctx
        if s.mla_latent:
            flops = 2 * s.layers * s.heads * (s.mla_latent + s.mla_v) * decode_ctx
        else:
            flops = 4 * s.layers * s.heads * (s.attn_qk_dim + s.attn_v_dim) / 2 * decode_ctx
        c, m = _roof(flops, s.attn_flops, kv, s.bandwidth * k.attn_decode_bw)
        tc, tm = tc + c, tm + m
    return tc, tm


def _comm(s: RankShape, m: float) -> float:
    k = s.kernels
    t = 0.0
    if s.tp > 1:
        msg = m * s.hidden * ACT_BYTES
        ring = 2 * (s.tp - 1) / s.tp * msg / (s.link * k.link_bus)
        t += 2 * s.layers * (k.link_latency_us * 1e-6 + ring)
    return t


def stage_step(
    s: RankShape,
    knobs: SpeedKnobs,
    decode: int,
    decode_ctx: float,
    prefill: int = 0,
    prefill_work: float = 0.0,
    chunk: float = 0.0,
    sampled: int | None = None,
    graphs: bool = True,
    gqa_decode: bool = True,
    overlap: bool = False,
) -> StepTime:
    """One stage's step: `decode` sequences with `decode_ctx` context tokens in all, `prefill`
    prompt tokens whose attention sees `prefill_work` (Σ q·(c + q/2)) keys, in chunks of about
    `chunk` tokens; `sampled` sequences get logits (default: decode). `graphs`: the step replays
    CUDA graphs (decode-only steps on engines that capture them); `gqa_decode`: the decode
    kernel shares each KV head's reads across its query heads (else it reads them per head);
    `overlap`: an eager decode step whose launches overlap its GPU work (`eager_launch_exposed`)."""
    bw = s.bandwidth * knobs.hbm
    m = decode + prefill
    tile = s.dense_tile_m
    comp = mem = 0.0
    for c, t in (
        _roof(
            2 * (s.dense_params + s.kernels.gemm_k_half * s.dense_width) * _tile(m, tile),
            s.dense_flops,
            s.dense_bytes,
            bw,
        ),
        _roof(
            2 * s.lm_params * _tile(sampled if sampled is not None else decode, tile),
            s.dense_flops,
            s.lm_bytes,
            bw,
        ),
        _experts(s, m, bw),
        _attention(
            s, decode, decode_ctx * (1 if gqa_decode else s.gqa_group), prefill, prefill_work, chunk
        ),
    ):
        comp, mem = comp + c, mem + t
    mem += ELEMENTWISE_PASSES * m * s.hidden * ACT_BYTES * s.layers / bw
    mem += QUANT_BYTES * m * s.quant_width / bw
    comm = _comm(s, m)
    per_kernel = knobs.kernel_graph_us if graphs else knobs.kernel_eager_us
    launch = s.launches * per_kernel * 1e-6
    fixed = s.gemms * s.kernels.gemm_fixed_us * 1e-6
    if overlap and not graphs and prefill == 0:
        launch = eager_launch_exposed(launch, comp + mem + comm + fixed)
    return StepTime(comp, mem, comm, launch + fixed)


def eager_launch_exposed(launch: float, gpu: float) -> float:
    """The part of an eager decode step's host launch time the GPU waits for, where the engine
    runs a decode batch past its captured CUDA-graph sizes (SGLang above cuda_graph_max_bs:
    DataCrunch's 8 and 16 requests/s runs). Kernels launch asynchronously (PyTorch "CUDA
    semantics: asynchronous execution"): the host queues the step's kernels while the GPU runs
    those already queued, and a large batch's kernels outlast their launches, so the step takes
    the longer of the two, max(launch, gpu) = gpu + max(0, launch − gpu). Runs without graphs
    at all (`--enforce-eager`) and steps with prefill keep the launch time on top: at their
    batches the GPU idles between short kernels, and the fitted per-kernel cost was fitted on
    them as that sum (README, Serving speed, gives the three variants' figures)."""
    return max(0.0, launch - gpu)


def pp_handoff(s: RankShape, m: float) -> float:
    """Seconds of the pp − 1 stage-to-stage sends of M tokens' activations."""
    if s.pp <= 1:
        return 0.0
    msg = m * s.hidden * ACT_BYTES
    return (s.pp - 1) * (s.kernels.link_latency_us * 1e-6 + msg / (s.link * s.kernels.link_bus))
