"""Output widths of a routed expert's GEMMs on one rank: the fixed cost of each output tile.

A GEMM C[M×N] = A[M×K]·B[K×N] runs as tiles of C, each streaming its K dimension through the
tensor cores and then writing its tile out; the per-tile fixed part (pipeline fill, epilogue:
scales, conversion and the store of C) costs about as much as K_half more K, so a GEMM reaches
the fraction K/(K + K_half) of its large-K rate. DeepGEMM's table of normal FP8 GEMMs at M = 4096
on H800 (deepseek-ai/DeepGEMM pull request #73, base 128x128 tiles) shows it: 591 TFLOPS at
K = 512, 999 at 1536, 1031 at 2048, 1404 at 16384 — K/(K + 760) of 1469 TFLOPS within 4 % at each
(kernels.toml `gemm_k_half`). Summed over an expert's two GEMMs the time is then
2·M·(Σ N·K + K_half·Σ N) ÷ rate: its parameters plus K_half per output column. Narrow-K GEMMs
pay most: tensor parallelism cuts an expert's w2 K by tp, so DeepSeek-R1's experts at TP8
(w2 K = 2048/8 = 256) run that GEMM at a quarter of the large-K rate, while under expert
parallelism each rank keeps whole experts (K = 2048).

Only the grouped MoE GEMMs (vLLM / SGLang fused_moe, DeepGEMM's grouped kernels) are timed this
way: they run one fixed tile shape per expert over its few routed rows, where a dense GEMM's
library (cuBLAS, CUTLASS) picks split-K / stream-K tilings for narrow K. Applied to every dense
GEMM as well (an earlier version) it made the A100 LMDeploy TTFTs 10 → 17 % off (README,
Serving speed).

The widths mirror vLLM's fused_moe: w13 (gate and up, 2·I columns for a gated expert) and w2
(h columns), I the expert's intermediate size split tp ways (whole under expert parallelism)."""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture, AttentionSpec, LayerSpec


def expert_widths(arch: Architecture, tp: int, expert_parallel: bool) -> float:
    """Σ N of one routed expert's w13 and w2 for one routed row (its intermediate split tp ways,
    or whole under expert parallelism)."""
    if arch.moe is None:
        return 0.0
    m = arch.moe
    inter = m.expert_intermediate_size / (1 if expert_parallel else tp)
    return (2 if m.expert_gated else 1) * inter + arch.hidden_size


def _attention_sides(arch: Architecture, a: AttentionSpec, tp: int) -> tuple[float, float]:
    """(Σ N, Σ K of distinct inputs) of one attention block's GEMMs on a rank. MLA (vLLM / SGLang
    deepseek_v2.py, prefill run non-absorbed): q_a (N = q_lora, replicated) and kv_a (N = kv_lora
    + rope, replicated) read the hidden state, q_b (N = H·d_qk) reads q_lora, kv_b (N = H·(d_nope
    + d_v)) reads kv_lora, o (N = h) reads H·d_v; otherwise qkv (N = (H + 2·KV)·d) and o."""
    h, heads = arch.hidden_size, a.num_heads / tp
    if a.kv_lora_rank:
        q = a.q_lora_rank or 0
        n = (q + a.kv_lora_rank + a.qk_rope_head_dim) + heads * a.head_dim
        n += heads * (a.qk_nope_head_dim + a.v_head_dim) + h
        return n, h + q + a.kv_lora_rank + heads * a.v_head_dim
    kv = max(1.0, a.num_kv_heads / tp)
    return (heads + 2 * kv) * a.head_dim + h, h + heads * a.v_head_dim


def _ffn_sides(arch: Architecture, spec: LayerSpec, tp: int) -> tuple[float, float]:
    """(Σ N, Σ K of distinct inputs) of one layer's dense FFN GEMMs on a rank: the gated MLP
    (gate_up N = 2·I, down N = h reading I), or a MoE layer's shared experts, whose routed
    experts' input is quantised once more (h)."""
    h = arch.hidden_size
    if spec.moe and arch.moe is not None:
        m = arch.moe
        inter = m.shared_intermediate_size / tp if m.num_shared_experts else 0.0
        if not inter:
            return 0.0, float(h)
        return (2 if m.shared_gated else 1) * inter + h, 2 * h + inter
    if not spec.ffn or arch.mlp is None:
        return 0.0, 0.0
    inter = (spec.mlp_width or arch.mlp.intermediate_size) / tp
    return (2 if arch.mlp.gated else 1) * inter + h, h + inter


def dense_sides(arch: Architecture, layers: list[LayerSpec], tp: int) -> tuple[float, float]:
    """Σ N (output columns) and Σ K (input widths, one per distinct input) of the dense GEMMs of
    `layers` on one rank, per token: with block-scaled fp8 weights each GEMM runs DeepGEMM-class
    fixed tiles (K_half more K per output column, DEEPGEMM-73) and each distinct input is first
    quantised to fp8 in 1×128 groups by its own kernel (step.py)."""
    n_sum = k_sum = 0.0
    for spec in layers:
        if spec.mixer != "attention":
            continue
        n, k = _attention_sides(arch, spec.attention or arch.attention, tp)
        fn, fk = _ffn_sides(arch, spec, tp)
        n_sum, k_sum = n_sum + n + fn, k_sum + k + fk
    return n_sum, k_sum
