"""vLLM's profile run: the torch peak ("torch peak memory increase" / "PyTorch activation peak
memory") that the KV budget is reduced by.

The worker runs the model once on a dummy batch and reads the caching allocator's peak
(v1/worker/gpu_model_runner.py::profile_run; V0 worker/model_runner.py::profile_run):

    V1   _dummy_run(max_num_batched_tokens), then on the last PP stage _dummy_sampler_run over
         min(max_num_seqs, max_num_batched_tokens) rows of full-vocabulary logits
    V0   max_num_seqs dummy sequences holding max_num_batched_tokens tokens in all (without
         chunked prefill that is max(max_model_len, 2048): the whole context in one batch),
         then the V0 sampler over one row per sequence

The peak is the larger of two moments, each a sum of the tensors alive then:

    forward  = 2 hidden states [T, h] + the widest transient of a layer: the gate/up output and
               its activation (dense MLP: T × (2I + I)/tp), the fused-MoE caches (T × k ×
               (max(2N, h) + N), N = expert width / tp: fused_moe workspace13 + workspace2), or
               the qkv projection
    sampler  = S × V_padded × b + the [T, h] hidden states the runner keeps + the fused-MoE
               workspace (cached between calls) — b is the bytes per logit element alive at the
               sampler's peak, set by the top-k/top-p path the version takes (versions.toml
               `sampler_path`, `sampler_bytes`): the bf16 logits and their fp32 copy, then
               sort values + int64 indices + probabilities (PyTorch-native path), or only
               probabilities and the exponential draw (Triton / FlashInfer kernels)

plus a small constant (allocator rounding, cuBLAS workspace, rotary and norm scratch) and, for
a multimodal model, the encoder's dummy run. Those two and the per-path b are fitted to
logs (bench/engine_accuracy.py --fit prints them with leave-one-GPU-out and
leave-one-version-out errors); everything else is counted from the model's shapes.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.frozen import replace
from gpuplan.engine.profiles.common import (
    FUSED_MOE_CHUNK,
    PeakTerms,
    ProfileBatch,
    activation_bytes,
    layer_terms,
    peak_terms,
)

__all__ = [
    "FUSED_MOE_CHUNK",
    "PeakTerms",
    "ProfileBatch",
    "activation_bytes",
    "layer_terms",
    "moe_workspace_at_sampler",
    "peak_terms",
    "without_moe_workspace_at_sampler",
]


def moe_workspace_at_sampler(rules: dict[str, Any], experts_format: str) -> bool:
    """Whether the fused-MoE caches are still allocated when the V1 profile run samples.

    They are only when the experts run through the modular kernel, whose workspace13 /
    workspace2 live in class-level shared buffers between calls
    (fused_moe/modular_kernel.py::SharedResizableBuffer): the default for unquantized Triton
    experts from #31052 (versions.toml `v1.moe_workspace_cached`). fused_moe.py's
    fused_experts_impl (the path before) allocates its caches per call, and so do the MXFP4
    kernels on Hopper and Ampere (fused_marlin_moe, triton_kernels' matmul_ogs via
    fused_moe/gpt_oss_triton_kernels_moe.py): gpt-oss-20b / 120b on one H100 log 7.38 GiB
    (0.11.0) and 2.87 GiB (0.19.0) torch peaks, the sampler moment without the caches. V0 keeps
    its own accounting (the rule is absent there: True).
    """
    if experts_format == "mxfp4":
        return False
    return bool(rules.get("moe_workspace_cached", True))


def without_moe_workspace_at_sampler(terms: PeakTerms) -> PeakTerms:
    """`terms` with the sampler moment's fused-MoE caches released (moe_workspace_at_sampler):
    the logits buffers and the kept hidden states only."""
    if not terms.moe_workspace or not terms.sampling:
        return terms
    return replace(terms, sampling=terms.sampling - terms.moe_workspace)
