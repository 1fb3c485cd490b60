"""What one rank of a layout computes and reads per step: the operator shapes of its heaviest
pipeline stage (parameters and bytes of the dense GEMMs, the routed experts, the LM head), its
attention heads and KV bytes per token, and the peaks of the GEMM paths its formats run on.

GEMM paths by weight format and GPU (kernels.toml's figures):
    bf16/fp16                      16-bit tensor cores
    fp8 (W8A8)                     fp8 tensor cores where the GPU has them (Ada, Hopper, Blackwell,
                                   CDNA3), else weight-only W8A16 (Marlin) at the 16-bit peak
    int4/int8 weight-only (GPTQ,   dequantised in registers, 16-bit MMA (Marlin, Frantar et al.
    AWQ, bitsandbytes)             2024): the 16-bit peak at the w4a16 efficiency
    MXFP4/NVFP4                    FP4 tensor cores on Blackwell (2x the fp8 peak), else weight-only
                                   as int4 (Hopper's Marlin MXFP4; CDNA3 dequantises on its vector
                                   ALUs, kernels.toml's cdna3 gemm_w4a16)
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.frozen import record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence_per_gpu
from gpuplan.engine.params import count_params, expert_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.speed.kernels import KernelFigures, kernel_figures
from gpuplan.engine.speed.widths import dense_sides, expert_widths
from gpuplan.engine.weights import WeightFormat, stage_layers, weights_per_gpu
from gpuplan.errors import GpuplanError


@record
class RankShape:
    """Per-rank operator shapes of the heaviest stage, and the rates they run at."""

    layers: int
    moe_layers: int
    hidden: int
    dense_params: float  # GEMM parameters a token multiplies (no embedding, no LM head, no experts)
    dense_bytes: float  # bytes a step reads for them, whatever the batch
    lm_params: float  # LM head on this rank (0 off the last stage)
    lm_bytes: float
    num_experts: int
    top_k: int
    expert_params: float  # one routed expert's parameters on this rank (÷ tp; whole under EP)
    experts_bytes: float  # all routed experts of the stage on this rank
    heads: int  # query heads on this rank
    attn_qk_dim: int
    attn_v_dim: int
    mla_latent: int  # MLA: kv_lora_rank + rope dim (decode runs absorbed over it); 0 otherwise
    mla_v: int  # MLA: kv_lora_rank
    kv_bytes_per_token: float  # this rank's KV bytes per token of context (stage layers)
    gqa_group: int  # query heads per KV head (a kernel without GQA sharing reads KV this often)
    launches: float  # kernels one step launches on this stage (kernels_per_layer summed)
    dense_flops: float  # peak × efficiency of the dense GEMM path
    expert_flops: float  # of the grouped GEMM path
    expert_input_bytes: int  # bytes per value of the grouped GEMM's input (1 on fp8/fp4 paths)
    attn_flops: float  # 16-bit peak (FlashAttention runs 16-bit)
    bandwidth: float  # HBM bytes/s
    link: float  # interconnect bytes/s one direction (0: none in the catalog)
    tp: int
    pp: int
    kernels: KernelFigures
    expert_ranks: int = 1  # ranks the experts are spread over whole (EP; 1: each split by tp)
    # Σ N (output columns) of one routed expert's GEMMs on this rank: each costs K_half more K
    # per routed row (widths.py)
    expert_width: float = 0.0
    # block-scaled fp8 dense GEMMs (DeepGEMM-class fixed tiles, widths.dense_sides): Σ N of the
    # stage's dense GEMMs per token (each output column costs K_half more K), and Σ K of their
    # distinct inputs, each quantised to fp8 in 1×128 groups on the way in; 0 otherwise
    dense_width: float = 0.0
    quant_width: float = 0.0
    # rows of the dense GEMMs' M tile: the MMA tile (kernels.toml gemm_tile_m), or Marlin's
    # 16-row block on the weight-only path (MARLIN_TILE_M)
    dense_tile_m: int = 64
    gemms: float = 0.0  # GEMM kernels one step launches on this stage (stage_gemms)
    # rows of the grouped (MoE) GEMM's M tile: tokens per expert are padded to it (kernels.toml
    # grouped_tile_m, or grouped_tile_m_w4a16 where the weight-only path runs another kernel)
    expert_tile_m: int = 64


def gemm_path(p: Precision, k: KernelFigures, gpu: GpuSpec) -> str:
    """bf16, fp8, w4a16 or fp4: the GEMM a weight format runs as on this GPU (module docstring)."""
    pid = p.id.lower()
    if pid in ("mxfp4", "nvfp4"):
        return "fp4" if k.fp4_units and gpu.fp8_dense_tflops else "w4a16"
    if p.bits >= 16:
        return "bf16"
    if pid.startswith("fp8") and k.gemm_fp8 > 0 and gpu.fp8_dense_tflops:
        return "fp8"
    return "w4a16"


def block_scaled(p: Precision) -> bool:
    """fp8 weights with one scale per 128×128 block (DeepSeek-V3's format): the GEMMs quantise
    their activations per 1×128 group at run time (sglang/vllm per_token_group_quant_fp8) and run
    DeepGEMM-class block-scaled kernels."""
    return p.id.lower().startswith("fp8") and bool(p.group_size)


def _half_peak(gpu: GpuSpec) -> float | None:
    """The 16-bit tensor peak: bf16, or fp16 where the GPU has no bf16 rate (the catalog's
    `half_dense_tflops`)."""
    return getattr(gpu, "half_dense_tflops", None) or gpu.bf16_dense_tflops


def path_flops(path: str, k: KernelFigures, gpu: GpuSpec) -> float:
    """Achieved FLOP/s of a GEMM path: the datasheet dense peak × the kernel efficiency."""
    half = _half_peak(gpu)
    if not half:
        raise GpuplanError(f"{gpu.name} has no dense bf16 FLOPS figure (bf16_dense_tflops)")
    bf16 = half * 1e12
    fp8 = (gpu.fp8_dense_tflops or 0.0) * 1e12
    if path == "fp8":
        return fp8 * k.gemm_fp8
    if path == "fp4":
        fp4 = getattr(gpu, "fp4_dense_tflops", None)
        return (fp4 * 1e12 if fp4 else 2 * fp8) * (k.gemm_fp4 or k.gemm_fp8)
    if path == "w4a16":
        return bf16 * k.gemm_w4a16
    return bf16 * k.gemm_bf16


# Marlin (weight-only int4/fp4) computes M in blocks of 16 rows (up to four per thread block):
# its time is flat from batch 1 to 16 on A100 (vLLM pull request #2497's bench.py table), so a
# decode step is not padded to the 64-row MMA tile
MARLIN_TILE_M = 16

ATTENTION_KERNELS = (
    5  # norm, qkv GEMM, rotary, attention, o GEMM (vllm model_executor/models/llama.py)
)
MLA_KERNELS = (
    11  # norm, q_a, q_a norm, q_b, kv_a, kv_a norm, rotary, q absorb, attention, v absorb,
)
# o GEMM (vllm model_executor/models/deepseek_v2.py, absorbed decode)
MLP_KERNELS = 4  # fused add+norm, gate_up GEMM, SiLU·mul, down GEMM
MOE_KERNELS = 8  # fused add+norm, router GEMM, top-k, align/sort, w13 grouped GEMM, SiLU·mul, w2
# grouped GEMM, weighted sum (vllm fused_moe); shared experts add an MLP's 3
SHARED_KERNELS = 3


def stage_kernels(arch: Architecture, specs: list[LayerSpec]) -> float:
    """Kernels a forward of these layers launches (counts from the vLLM model files named above):
    the fixed per-kernel cost of step.py multiplies them."""
    mla = bool(arch.attention.kv_lora_rank)
    n = 0
    for spec in specs:
        n += MLA_KERNELS if mla else ATTENTION_KERNELS
        if spec.moe:
            n += MOE_KERNELS
            if arch.moe is not None and arch.moe.num_shared_experts:
                n += SHARED_KERNELS
        elif spec.ffn:
            n += MLP_KERNELS
    return float(n)


def stage_gemms(arch: Architecture, specs: list[LayerSpec]) -> float:
    """GEMM kernels among stage_kernels': qkv and o (2; MLA's q_a, q_b, kv_a, the two absorbed
    matmuls and o: 6), a dense MLP's gate_up and down (2), a MoE layer's router and two grouped
    GEMMs (3) and its shared experts' two (2)."""
    mla = bool(arch.attention.kv_lora_rank)
    n = 0
    for spec in specs:
        n += 6 if mla else 2
        if spec.moe:
            n += 3 + (2 if arch.moe is not None and arch.moe.num_shared_experts else 0)
        elif spec.ffn:
            n += 2
    return float(n)


@record
class _StageWeights:
    """What the heaviest stage's GEMMs multiply and read on one rank."""

    layers: int
    moe_layers: int
    dense_params: float
    dense_bytes: float
    lm_params: float
    lm_bytes: float
    experts_bytes: float
    stage: int


def replicated_params(arch: Architecture, layer: int) -> float:
    """Parameters of a layer's GEMMs every tensor-parallel rank runs whole rather than split:
    MLA's down-projections of q and kv (hidden x (q_lora_rank + kv_lora_rank + rope dim): vLLM
    model_executor/models/deepseek_v2.py builds `fused_qkv_a_proj` / `q_a_proj` /
    `kv_a_proj_with_mqa` replicated, SGLang likewise) and a MoE layer's router (hidden x E, vLLM's
    `gate` ReplicatedLinear). Their FLOPs do not shrink with tp."""
    a, n = arch.attention, 0.0
    if a.kv_lora_rank:
        n += arch.hidden_size * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim)
    if arch.layers[layer].moe and arch.moe is not None:
        n += arch.hidden_size * arch.moe.num_experts
    return float(n)


def _stage_weights(arch: Architecture, fmt: WeightFormat, tp: int, pp: int) -> _StageWeights:
    """Parameters and bytes of the heaviest stage on one rank, by operator: the routed experts
    (all of the stage's, ÷ tp), the LM head (last stage; timed on its own unless tied on one
    stage), and the dense rest (weights_per_gpu less embedding, vision tower, experts and head),
    whose replicated GEMMs (`replicated_params`) every rank multiplies whole."""
    w = weights_per_gpu(arch, fmt, tp, pp)
    counts = count_params(arch)
    layers = stage_layers(arch.num_layers, pp)[w.stage]
    moe_layers = sum(1 for i in layers if arch.layers[i].moe)
    e_params = float(expert_params(arch)) if arch.moe is not None else 0.0
    n_exp = arch.moe.num_experts if arch.moe is not None else 0
    experts_bytes = fmt.for_kind("experts").bytes_for(round(n_exp * e_params / tp)) * moe_layers
    emb = fmt.for_kind("embedding").bytes_for(round(counts.embedding / tp))
    vision = fmt.for_kind("vision").bytes_for(round(arch.vision_params / tp))
    head = arch.vocab_size * arch.hidden_size / tp
    last = w.stage == pp - 1
    lm_bytes = fmt.for_kind("lm_head").bytes_for(round(head)) if last else 0
    dense_bytes = w.bytes - (emb + vision if w.embedding_bytes else 0) - experts_bytes
    if last and (not arch.tie_word_embeddings or pp > 1):  # the head is timed on its own
        dense_bytes -= lm_bytes
    moe_total = sum(1 for sp in arch.layers if sp.moe)
    body = float(counts.total - counts.embedding - counts.lm_head - arch.vision_params)
    body -= moe_total * n_exp * e_params
    return _StageWeights(
        layers=len(layers),
        moe_layers=moe_layers,
        dense_params=max(0.0, body * len(layers) / arch.num_layers / tp)
        + sum(replicated_params(arch, i) for i in layers) * (1 - 1 / tp),
        dense_bytes=max(0.0, float(dense_bytes)),
        lm_params=head if last else 0.0,
        lm_bytes=float(lm_bytes),
        experts_bytes=float(experts_bytes),
        stage=w.stage,
    )


@lru_cache(maxsize=2048)
def rank_shape(
    arch: Architecture,
    fmt: WeightFormat,
    kv: Precision,
    gpu: GpuSpec,
    tp: int,
    pp: int,
    context: int,
    expert_parallel: bool = False,
) -> RankShape:
    """The shapes of the heaviest stage of `arch` split tp × pp, KV bytes per token at `context`;
    `expert_parallel`: the routed experts are spread whole over the tp ranks (vLLM
    --enable-expert-parallel, SGLang --ep, TensorRT-LLM ep_size = tp) instead of each being split
    tp ways (same bytes per rank; each rank computes E/tp whole experts on the rows routed to
    them rather than every expert's 1/tp slice on all rows)."""
    if not gpu.memory_bandwidth_bytes_per_s:
        raise GpuplanError(
            f"{gpu.name} has no memory bandwidth (memory_bandwidth_bytes_per_s); cannot time it"
        )
    k = kernel_figures(gpu)
    sw = _stage_weights(arch, fmt, tp, pp)
    layers = stage_layers(arch.num_layers, pp)[sw.stage]
    e_params = float(expert_params(arch)) if arch.moe is not None else 0.0
    n_exp = arch.moe.num_experts if arch.moe is not None else 0
    top_k = arch.moe.experts_per_token if arch.moe is not None else 0
    exp_fmt = fmt.for_kind("experts")
    a = arch.attention
    mla = a.kv_lora_rank or 0
    kv_ctx = max(1, context)
    kv_tok = kv_cache_bytes_per_sequence_per_gpu(arch, kv, kv_ctx, tp, pp, sw.stage) / kv_ctx
    dense_path = gemm_path(fmt.for_kind("attention"), k, gpu)
    exp_path = gemm_path(exp_fmt, k, gpu)
    ep = tp if expert_parallel and n_exp >= tp > 1 else 1
    specs = [arch.layers[i] for i in layers]
    block = dense_path == "fp8" and block_scaled(fmt.for_kind("attention"))
    width, quant = dense_sides(arch, specs, tp) if block else (0.0, 0.0)
    return RankShape(
        layers=sw.layers,
        moe_layers=sw.moe_layers,
        hidden=arch.hidden_size,
        dense_params=sw.dense_params,
        dense_bytes=sw.dense_bytes,
        lm_params=sw.lm_params,
        lm_bytes=sw.lm_bytes,
        num_experts=n_exp,
        top_k=top_k,
        expert_params=e_params / (1 if ep > 1 else tp),
        experts_bytes=sw.experts_bytes,
        heads=max(1, a.num_heads // tp),
        attn_qk_dim=a.head_dim,
        attn_v_dim=a.v_head_dim,
        mla_latent=(mla + a.qk_rope_head_dim) if mla else 0,
        mla_v=mla,
        kv_bytes_per_token=kv_tok,
        gqa_group=1 if mla else max(1, a.num_heads // max(1, a.num_kv_heads)),
        launches=stage_kernels(arch, specs),
        dense_flops=path_flops(dense_path, k, gpu),
        expert_flops=path_flops(exp_path, k, gpu) * k.grouped_gemm / k.gemm_bf16,
        expert_input_bytes=1 if exp_path in ("fp8", "fp4") else 2,
        attn_flops=(_half_peak(gpu) or 0.0) * 1e12 * k.attn_prefill,
        bandwidth=gpu.memory_bandwidth_bytes_per_s,
        link=gpu.interconnect_bytes_per_s_per_dir or 0.0,
        tp=tp,
        pp=pp,
        kernels=k,
        expert_ranks=ep,
        expert_width=expert_widths(arch, tp, ep > 1),
        dense_width=width,
        quant_width=quant,
        dense_tile_m=MARLIN_TILE_M if dense_path == "w4a16" else k.gemm_tile_m,
        gemms=stage_gemms(arch, specs),
        expert_tile_m=(k.grouped_tile_m_w4a16 if exp_path == "w4a16" else 0) or k.grouped_tile_m,
    )
