"""Output widths of a layer's GEMMs on one rank: the fixed cost of each output tile.

A GEMM C[M×N] = A[M×K]·B[K×N] runs as tiles of C, each streaming its K dimension through the
tensor cores and then writing its tile out; the per-tile fixed part (pipeline fill, epilogue:
scales, conversion and the store of C) costs about as much as K_half more K, so a GEMM reaches
the fraction K/(K + K_half) of its large-K rate. DeepGEMM's table of normal FP8 GEMMs at M = 4096
on H800 (deepseek-ai/DeepGEMM pull request #73, base 128x128 tiles) shows it: 591 TFLOPS at
K = 512, 999 at 1536, 1031 at 2048, 1404 at 16384 — K/(K + 760) of 1469 TFLOPS within 4 % at each
(kernels.toml `gemm_k_half`). Summed over a step's GEMMs the time is then
2·M·(Σ N·K + K_half·Σ N) ÷ rate: each GEMM's parameters plus K_half per output column. Narrow-K
GEMMs pay most: tensor parallelism cuts the K of the row-parallel projections (o_proj, down_proj,
an expert's w2) by tp, so DeepSeek-R1's experts at TP8 (w2 K = 2048/8 = 256) run at a quarter of
the large-K rate.

The widths mirror the projections of vLLM's model files (model_executor/models/llama.py:
qkv_proj, o_proj, gate_up_proj, down_proj; deepseek_v2.py: fused q_a / kv_a (replicated), q_b_proj,
kv_b_proj, o_proj, the MoE gate and shared experts; fused_moe: w13 and w2 per expert)."""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture


def attention_widths(arch: Architecture, layer: int, tp: int) -> float:
    """Σ N of the attention block's GEMMs on a rank (0 for a layer without attention)."""
    spec = arch.layers[layer]
    if not spec.has_attention:
        return 0.0
    a = spec.attention or arch.attention
    if a.kv_lora_rank:
        down = (a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim  # replicated
        up = a.num_heads * (a.head_dim + a.qk_nope_head_dim + a.v_head_dim) / tp
        return down + up + arch.hidden_size
    qkv = (a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.head_dim) / tp
    return qkv + arch.hidden_size


def mlp_widths(arch: Architecture, layer: int, tp: int) -> float:
    """Σ N of the dense FFN (or, on a MoE layer, the shared experts and the router) on a rank."""
    spec, h = arch.layers[layer], arch.hidden_size
    if spec.moe and arch.moe is not None:
        m = arch.moe
        shared = 0.0
        if m.num_shared_experts and m.shared_intermediate_size:
            gate = 2 if m.shared_gated else 1
            shared = gate * m.shared_intermediate_size / tp + h
        return shared + m.num_experts
    if not spec.ffn or arch.mlp is None:
        return 0.0
    width = spec.mlp_width or arch.mlp.intermediate_size
    return (2 if arch.mlp.gated else 1) * width / tp + h


def expert_widths(arch: Architecture, tp: int, expert_parallel: bool) -> float:
    """Σ N of one routed expert's w13 and w2 for one routed row (its intermediate split tp ways,
    or whole under expert parallelism)."""
    if arch.moe is None:
        return 0.0
    m = arch.moe
    inter = m.expert_intermediate_size / (1 if expert_parallel else tp)
    return (2 if m.expert_gated else 1) * inter + arch.hidden_size


def dense_widths(arch: Architecture, layers: list[int], tp: int) -> float:
    """Σ N of the dense GEMMs of these layers on a rank."""
    return sum(attention_widths(arch, i, tp) + mlp_widths(arch, i, tp) for i in layers)
