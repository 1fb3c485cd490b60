"""The profile run's torch peak and the non-torch increase (calibrated models, being replaced
by per-version mechanisms: see docs/engines-research.md)."""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.profiles import gib
from gpuplan.engine.profiles.common import padded_vocab
from gpuplan.engine.weights import WeightFormat

ACT_C0 = gib(0.061)
ACT_C_LOGITS = 3.504
ACT_C_MLP = 0.070
ACT_C_MOE = 0.605
ACT_C_HIDDEN = 1.54
ACT_C_ENCODER = 0.174
ACT_SPREAD = gib(0.5)
FWD_C0 = gib(0.2)
FWD_C_MLP = 1.5
FWD_C_HIDDEN = 4.0
FWD_C_MOE = 1.0
NON_TORCH_TP1 = gib(0.25)
NON_TORCH_TP = gib(1.99)
NON_TORCH_PER_TP = gib(0.045)
NON_TORCH_PP_FIRST = gib(0.07)


def activation_features(
    arch: Architecture, fmt: WeightFormat, tp: int, seqs: int, tokens: int, sampler: bool
) -> dict[str, float]:
    """The byte counts the torch activation peak is modelled on (see `activation_peak_bytes`)."""
    a_bytes = 4 if fmt.base.bits >= 32 else 2
    h = arch.hidden_size
    feats = {
        "logits": float(min(seqs, tokens) * padded_vocab(arch.vocab_size) * 4) if sampler else 0.0,
        "mlp": 0.0,
        "moe": 0.0,
        "hidden": float(tokens * h * a_bytes),
    }
    if arch.mlp is not None and any(not layer.moe for layer in arch.layers):
        gate = 2 if arch.mlp.gated else 1
        feats["mlp"] = float(tokens * gate * arch.mlp.intermediate_size / tp * a_bytes)
    if arch.moe is not None:
        n = arch.moe.expert_intermediate_size / tp
        feats["moe"] = float(tokens * arch.moe.experts_per_token * (3 * n + h) * a_bytes)
    return feats


def activation_peak_bytes(feats: dict[str, float]) -> int:
    """vLLM's "torch peak memory increase" of the profile run, a calibrated model.

    profile_run (gpu_model_runner.py) runs the model on `max_num_batched_tokens` dummy tokens
    and, on the last PP stage, the sampler on min(max_num_seqs, max_num_batched_tokens) rows of
    full-vocabulary fp32 logits (gathered, so not ÷ tp). The peak is fitted, not derived:
    0.061 GiB + 3.50 × logits bytes + 0.070 × dense gate/up output + 0.605 × fused-MoE
    intermediate caches + 1.54 × one hidden-state tensor (+0.17 GiB for a VLM's encoder run),
    least squares over the H100 logs (bench/engine_accuracy.py --fit; leave-one-out mean
    |error| 0.07 GiB, worst 0.47 GiB). Stages without the sampler use the forward model."""
    forward = int(
        FWD_C0
        + FWD_C_MLP * feats["mlp"]
        + FWD_C_HIDDEN * feats["hidden"]
        + FWD_C_MOE * feats["moe"]
    )
    if not feats["logits"]:
        return forward
    sampled = int(
        ACT_C0
        + ACT_C_LOGITS * feats["logits"]
        + ACT_C_MLP * feats["mlp"]
        + ACT_C_MOE * feats["moe"]
        + ACT_C_HIDDEN * feats["hidden"]
        + ACT_C_ENCODER * feats.get("encoder", 0.0)
    )
    return max(forward, sampled)


def non_torch_bytes(tp: int, pp: int, first_stage: bool = True) -> int:
    """vLLM's "non-torch forward increase memory", by layout (calibrated, H100 logs §4.1):
    ≈ 0.25 GiB on one GPU; ≈ 2 GiB once tensor parallel (custom all-reduce / NCCL buffers made
    on the first collective of the profile run, not in the init snapshot), growing slowly with
    tp; ≈ 0.07 GiB on a pipeline stage without TP (its NCCL state predates the snapshot)."""
    if tp > 1:
        return NON_TORCH_TP + NON_TORCH_PER_TP * tp
    if pp > 1:
        return NON_TORCH_PP_FIRST if first_stage else NON_TORCH_PP_FIRST
    return NON_TORCH_TP1
