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

from gpuplan.engine.architecture import Architecture


def expert_widths(arch: Architecture, tp: int, expert_parallel: bool) -> float:
    """Σ N of one routed expert's w13 and w2 for one routed row (its intermediate split tp ways,
    or whole under expert parallelism)."""
    if arch.moe is None:
        return 0.0
    m = arch.moe
    inter = m.expert_intermediate_size / (1 if expert_parallel else tp)
    return (2 if m.expert_gated else 1) * inter + arch.hidden_size
