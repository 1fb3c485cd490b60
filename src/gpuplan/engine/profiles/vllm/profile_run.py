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

from gpuplan.engine.allocator import Event, replay
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import replace
from gpuplan.engine.profiles.common import (
    FUSED_MOE_CHUNK,
    PeakTerms,
    ProfileBatch,
    activation_bytes,
    layer_terms,
    padded_vocab,
    peak_terms,
)
from gpuplan.engine.weights import WeightFormat

__all__ = [
    "FUSED_MOE_CHUNK",
    "PeakTerms",
    "ProfileBatch",
    "activation_bytes",
    "layer_terms",
    "moe_workspace_at_sampler",
    "peak_terms",
    "v0_peak_terms",
    "without_moe_workspace_at_sampler",
]


# --- V0 (vLLM 0.5 - 0.8): the eager forward's tensors, allocation by allocation ----------------
#
# V0's profile run is one eager forward (no torch.compile, no CUDA graph): which tensors are
# alive at each moment follows from the model file's Python locals (model_executor/models/
# llama.py, 0.5.x-0.7.x, the layout every Llama-like V0 model shares):
#
#     LlamaModel.forward       embedding output [T, h] = layer 0's residual; layer 0's
#                              input_layernorm writes a new [T, h] (residual is None there)
#     LlamaAttention.forward   qkv = qkv_proj(x) [T, (q + 2kv)/tp]; rotary in place;
#                              attn(q, k, v) -> [T, q/tp]; o_proj -> [T, h] (all-reduce in place:
#                              large inputs go to pynccl / RCCL, not the custom all-reduce);
#                              qkv and the attention output die when the call returns, the
#                              layer's input when the caller rebinds hidden_states
#     fused_add_rms_norm       in place on (hidden, residual) from the second norm on
#     LlamaMLP.forward         gate_up [T, 2I/tp]; x = act_fn(gate_up) [T, I/tp]; down_proj(x)
#                              -> [T, h] while gate_up is still bound: residual + hidden +
#                              gate_up + act + output = 3h + 3I/tp at the MLP's peak
#
# Non-gated MLPs (fc1 -> act -> fc2) hold fc1's output and the activation at the act moment.
# Models with MoE or state layers keep the generic terms of peak_terms.


def v0_dense_forward_events(
    arch: Architecture, fmt: WeightFormat, tp: int, tokens: int
) -> list[Event]:
    """The allocations and frees of V0's eager forward over the embedding and the first three
    decoder layers (the allocator reaches its steady state by the second), in the order the
    model file makes them (see the comment above; vLLM model_executor/models/llama.py)."""
    a = activation_bytes(fmt)
    att = arch.attention
    h = tokens * arch.hidden_size * a
    q = tokens * att.num_heads * att.head_dim // tp * a
    kv = tokens * max(1, att.num_kv_heads // tp) * (att.head_dim + att.v_head_dim) * a
    inter = tokens * (arch.mlp.intermediate_size // tp if arch.mlp else 0) * a
    gated = arch.mlp is not None and arch.mlp.gated
    ev: list[Event] = [("alloc", "residual", h), ("alloc", "x0", h)]
    for i in range(3):
        x, o, d = f"x{i}", f"o{i}", f"x{i + 1}"
        ev += [("alloc", "qkv", q + kv), ("alloc", "attn", q), ("alloc", o, h)]
        ev += [("free", "qkv", 0), ("free", "attn", 0), ("free", x, 0)]
        if gated:
            ev += [("alloc", "gate_up", 2 * inter), ("alloc", "act", inter), ("alloc", d, h)]
            ev += [("free", "gate_up", 0), ("free", "act", 0)]
        else:
            ev += [("alloc", "fc1", inter), ("alloc", "act", inter), ("free", "fc1", 0)]
            ev += [("alloc", d, h), ("free", "act", 0)]
        ev.append(("free", o, 0))
    return ev


def v0_sampler_events(rows: int, vocab: int, sampler_bytes: float) -> list[Event]:
    """The V0 sampler's logit-sized tensors, all alive at its peak (model_executor/layers/
    sampler.py: fp32 logits, sort values and int64 indices, probabilities, the scatter's inverse
    indices): `sampler_bytes` per element of [rows, padded vocab], in tensors of at most 8 B
    per element (the int64 indices), freed together."""
    total = int(rows * padded_vocab(vocab) * sampler_bytes)
    pieces = max(1, -(-int(sampler_bytes * 2) // 16))
    names = [f"sampler{i}" for i in range(pieces)]
    return [("alloc", n, total // pieces) for n in names] + [("free", n, 0) for n in names]


def v0_peak_terms(
    arch: Architecture,
    fmt: WeightFormat,
    tp: int,
    batch: ProfileBatch,
    sampler_bytes: float,
    constant: int,
    encoder: int = 0,
    reserved: bool = False,
) -> PeakTerms:
    """V0's profile-run peak, from its eager forward replayed tensor by tensor
    (v0_dense_forward_events; vLLM worker/model_runner.py::profile_run, models/llama.py) and,
    on the last stage, the sampler. `reserved`: the figure is what the caching allocator holds
    after the run, not its allocated peak — vLLM <= 0.6.3 reads used device memory
    (worker/worker.py::determine_num_available_blocks: init free - free after the run, with no
    empty_cache between), 0.6.4 on torch's allocated peak (#9352). Models with MoE or state
    layers take the generic terms (peak_terms)."""
    generic = peak_terms(arch, fmt, tp, batch, sampler_bytes, constant, encoder)
    if arch.moe is not None or arch.num_state_layers or arch.mlp is None:
        return generic
    events = v0_dense_forward_events(arch, fmt, tp, batch.tokens)
    forward_peak, forward_reserved = replay(events)
    sampling = 0
    if batch.sampler:
        rows = min(batch.seqs, batch.tokens)
        tail = [("free", "residual", 0)] + v0_sampler_events(rows, arch.vocab_size, sampler_bytes)
        total_peak, total_reserved = replay(events + tail)
        sampling = generic.hidden + generic.sampler
        forward_reserved = total_reserved
    forward = forward_reserved if reserved else forward_peak
    if reserved:
        sampling = 0  # the reserve holds both moments' blocks
    return PeakTerms(
        generic.hidden,
        generic.layer_transient,
        generic.moe_workspace,
        generic.sampler,
        forward,
        sampling,
        encoder,
        constant,
    )


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
