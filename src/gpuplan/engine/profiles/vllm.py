"""vLLM (V1 engine, read at v0.19.0: upstream main 2026-03-20 … 2026-04-14) memory accounting.

What one worker does at startup (docs/engines-research.md §1 has the line-by-line reading):

    requested   = ceil(total × gpu_memory_utilization)        v1/worker/utils.py::request_memory
    non_kv      = weights + torch peak increase + non-torch    utils/mem_utils.py::memory_profiling
    available   = requested − non_kv                           v1/worker/gpu_worker.py::determine_available_memory
    page        = block_size × kv_heads_per_rank × (d_k + d_v) × kv bytes    v1/kv_cache_interface.py
                  (MLA: block_size × (kv_lora_rank + rope_dim) × kv bytes)
    num_blocks  = min over workers(available // page // layer slots)         v1/core/kv_cache_utils.py
    tokens      = num_blocks // groups × block_size            kv_cache_utils.py::_report_kv_cache_config
    concurrency = num_blocks / blocks one max_model_len request needs

In 0.19 the CUDA-graph pool is captured *after* the KV cache is sized (the estimate is only
subtracted with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, default off until v0.21), so it is a
line outside the budget that must fit in the `1 − utilization` headroom.

Weights, KV layout and the block arithmetic are exact. The torch activation peak and the
non-torch increase are not computable from first principles (they are allocator and library
state); they come from small models calibrated on the 61 vLLM 0.19.0 H100 logs in
tests/data/engine_logs/ (see `activation_peak_bytes`, `non_torch_bytes`), each with a range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.params import count_params
from gpuplan.engine.profiles import (
    GIB,
    EngineBill,
    EngineLaunch,
    Range,
    budget_item,
    gib,
)
from gpuplan.engine.weights import WeightFormat, layer_bytes_per_rank

VERSION = "vLLM 0.19.x (V1 engine; rules read at upstream main 2026-03-20…04-14)"

DEFAULT_UTILIZATION = 0.9  # vllm/config/cache.py: CacheConfig.gpu_memory_utilization
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE; FlashAttention / FLASH_ATTN_MLA on Hopper
VOCAB_PADDING = 64  # vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE
HYBRID_GROUP_RATIO = 1.5  # kv_cache_utils.py::_get_kv_cache_groups_uniform_page_size (#36684)

# The total the CUDA runtime reports (cudaMemGetInfo) is a little below nvidia-smi's total.
# H100 80GB: 79.19 GiB in every log of tests/data/engine_logs/vllm-0.19-h100.json vs 81559 MiB.
CUDA_TOTAL_BYTES = {"h100-sxm": gib(79.19), "h100-pcie": gib(79.19)}
CUDA_RESERVED_BYTES = 81559 * 2**20 - gib(79.19)  # the same gap assumed for other GPUs

# --- calibrated on the 61 H100 logs (bench/engine_accuracy.py --fit reproduces these) ---------
# torch peak increase = c0 + c_logits·(S × V_pad × 4) + c_mlp·(T × 2·I/tp × a)
#                       + c_moe·(T × k × (3·N/tp + h) × a) + c_hidden·(T × h × a)
# (fitted on the 59 logs whose rank 0 runs the sampler; leave-one-out mean |error| 0.07 GiB,
# worst 0.47 GiB; the encoder term is per GiB of its indicator, i.e. +0.17 GiB for a VLM)
ACT_C0 = gib(0.061)
ACT_C_LOGITS = 3.504
ACT_C_MLP = 0.070
ACT_C_MOE = 0.605
ACT_C_HIDDEN = 1.54
ACT_C_ENCODER = 0.174
ACT_SPREAD = gib(0.5)  # about the worst leave-one-out error, either side
# A stage without the sampler (not the last PP stage) peaks in the forward pass:
# 0.2 GiB + 1.5 × gate/up output + 4 hidden-state tensors + fused-MoE caches
# (Llama-3.1-8B PP2/PP4 rank 0: 1.10 GiB logged; one model only, so a wide range)
FWD_C0 = gib(0.2)
FWD_C_MLP = 1.5
FWD_C_HIDDEN = 4.0
FWD_C_MOE = 1.0
# non-torch increase, by layout (all-reduce buffers appear with the first collective)
NON_TORCH_TP1 = gib(0.25)
NON_TORCH_TP = gib(1.99)
NON_TORCH_PER_TP = gib(0.045)
NON_TORCH_PP_FIRST = gib(0.07)
# CUDA graphs ("Graph capturing finished … took X GiB"): median and range of the H100 logs
CUDAGRAPH_NOMINAL = gib(0.91)
CUDAGRAPH_LOW = gib(0.5)
CUDAGRAPH_HIGH = gib(1.9)


def cuda_total_bytes(launch: EngineLaunch) -> int:
    """Total device memory as torch.cuda.mem_get_info reports it (the base of the budget)."""
    g = launch.gpu
    if g.memory_override:
        return g.memory_override
    if g.id in CUDA_TOTAL_BYTES:
        return CUDA_TOTAL_BYTES[g.id]
    return g.memory_bytes - (CUDA_RESERVED_BYTES if g.driver_total_bytes else 0)


def batch_defaults(launch: EngineLaunch, total: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) as engine/arg_utils.py::get_batch_defaults picks
    them for the OpenAI API server: 1024 / 8192 on ≥ 70 GiB GPUs other than A100, else 256 / 2048."""
    big = total >= 70 * GIB and not launch.gpu.id.startswith("a100")
    seqs = launch.max_num_seqs or (1024 if big else 256)
    tokens = launch.max_num_batched_tokens or (8192 if big else 2048)
    return seqs, tokens


def pp_layers(num_layers: int, pp: int) -> list[range]:
    """Layers per pipeline stage as distributed/utils.py::get_pp_indices splits them: equal
    parts, the remainder going one each to the stages before the last, from the back."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append(range(start, start + n))
        start += n
    return out


def padded_vocab(vocab: int) -> int:
    """VocabParallelEmbedding pads the vocabulary to a multiple of 64 before the TP split."""
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


@dataclass(frozen=True)
class StageWeights:
    layers: int
    embedding: int
    lm_head: int
    extra: int
    buffers: int = 0  # non-parameter buffers built with the model (RoPE cos/sin tables)

    @property
    def total(self) -> int:
        return self.layers + self.embedding + self.lm_head + self.extra + self.buffers


def rope_tables(arch: Architecture) -> list[tuple[int, int]]:
    """(positions, rotary_dim) of each cos/sin table vLLM builds for the decoder.

    Every attention layer calls rotary_embedding/__init__.py::get_rope, which caches one
    RotaryEmbedding per distinct (head_size, rotary_dim, max_position, rope_parameters, dtype)
    in `_ROPE_DICT`; RotaryEmbeddingBase.__init__ (rotary_embedding/base.py) registers its
    `cos_sin_cache` buffer of [positions, rotary_dim] (cos ‖ sin halves) in the model dtype, on
    the GPU, inside load_model's DeviceMemoryProfiler, so "Model loading took" includes it, on
    every rank (not split by TP). Positions per class (read at upstream 28be48fa9):
    default / llama3 (Llama3RotaryEmbedding): max_position_embeddings; linear
    (linear_scaling_rope.py) and dynamic (dynamic_ntk_scaling_rope.py): max_position × factor;
    yarn (YaRNScalingRotaryEmbedding) and DeepSeek's yarn (DeepseekScalingRotaryEmbedding):
    original_max_position_embeddings × factor. rotary_dim = head_dim × partial_rotary_factor
    (MLA: qk_rope_head_dim). Gemma 3 (gemma3.py::Gemma3Attention) builds two: the configured
    rope for global layers and a default rope at `rope_local_base_freq` for sliding ones.
    Llama 4's NoPE layers build none, its chunked layers share one table. Vision towers' own
    2-D rotary tables are a few MB and not counted."""
    rope = arch.rope
    if rope is None or arch.learned_positions:
        return []
    a = arch.attention
    dim = a.qk_rope_head_dim if a.is_mla else int(a.head_dim * rope.partial_rotary_factor)
    max_pos = arch.max_position_embeddings
    if rope.kind in ("linear", "dynamic"):
        positions = int(max_pos * rope.factor)
    elif rope.kind == "yarn" and rope.original_max_position:
        positions = int(rope.original_max_position * rope.factor)
    else:
        positions = max_pos
    tables = [(positions, dim)]
    if arch.model_type in ("gemma3", "gemma3_text") and rope.kind != "default":
        tables.append((max_pos, dim))  # the sliding layers' unscaled local-base rope
    return tables


def rope_cache_bytes(arch: Architecture, fmt: WeightFormat) -> int:
    """Bytes of vLLM's RoPE cos/sin caches on one rank (see `rope_tables`), in the model dtype."""
    dtype = fmt.for_kind("embedding")
    return sum(dtype.bytes_for(positions * dim) for positions, dim in rope_tables(arch))


def mxfp4_moe_alignment(gpu: GpuSpec) -> tuple[int, int]:
    """(intermediate, hidden) multiples vLLM pads MXFP4 expert weights to, by the MoE backend
    the GPU gets (fused_moe/oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size,
    read at upstream 28be48fa9): Marlin on Ampere/Ada/Hopper pads the per-rank intermediate width
    to 128 and the hidden width to 256; FlashInfer TRT-LLM on Blackwell and ROCm pad both to 256.
    The H100 logs of gpt-oss-20b (13.64 GiB at TP1, 7.01 GiB at TP2) match the Marlin padding."""
    if gpu.vendor == "amd":
        return 256, 256
    major = int((gpu.compute_capability or "9.0").split(".")[0])
    return (256, 256) if major >= 10 else (128, 256)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def mxfp4_padding_bytes(arch: Architecture, fmt: WeightFormat, tp: int, gpu: GpuSpec) -> int:
    """Extra bytes one MoE layer's experts take on one rank once padded for the MXFP4 kernel."""
    if arch.moe is None or fmt.for_kind("experts").id != "mxfp4":
        return 0
    m, h = arch.moe, arch.hidden_size
    inter_mult, hidden_mult = mxfp4_moe_alignment(gpu)
    inter = m.expert_intermediate_size // tp
    padded_inter, padded_h = _round_up(inter, inter_mult), _round_up(h, hidden_mult)
    packed = fmt.for_kind("experts")
    extra = packed.bytes_for(m.num_experts * 3 * padded_inter * padded_h)
    extra -= packed.bytes_for(m.num_experts * 3 * inter * h)
    if m.expert_bias:
        bias = fmt.for_kind("bias")
        extra += bias.bytes_for(m.num_experts * (2 * padded_inter + padded_h))
        extra -= bias.bytes_for(m.num_experts * (2 * inter + h))
    return extra


def stage_weights(
    arch: Architecture,
    fmt: WeightFormat,
    tp: int,
    stages: list[range],
    extra_params: int,
    moe_padding_bytes: int = 0,
) -> list[StageWeights]:
    """Weights one rank of each stage loads: its layers' TP shards (KV heads replicated when
    tp > kv_heads, MLA down-projections replicated: engine/weights.py), the padded vocabulary
    ÷ tp for the embedding (first stage) and LM head + final norm (last stage; a tied head
    shares the embedding unless pp > 1), and a vision encoder (÷ tp) on the first stage."""
    counts = count_params(arch)
    h = arch.hidden_size
    vocab_rank = padded_vocab(arch.vocab_size) // tp
    emb = fmt.for_kind("embedding").bytes_for(vocab_rank * h)
    emb += fmt.for_kind("positions").bytes_for(counts.by_kind.get("positions", 0))
    head_params = 0 if arch.tie_word_embeddings else arch.vocab_size * h
    final_norm = counts.lm_head - head_params
    head = fmt.for_kind("norm").bytes_for(final_norm)
    if not arch.tie_word_embeddings or len(stages) > 1:
        head += fmt.for_kind("lm_head").bytes_for(vocab_rank * h)
    per_kind = {}
    for i, layer in enumerate(arch.layers):
        if layer not in per_kind:
            padding = moe_padding_bytes if layer.moe else 0
            per_kind[layer] = layer_bytes_per_rank(arch, i, fmt, tp) + padding
    # the encoder stays at the 16-bit base and is split over TP like the decoder (the TP2
    # Mistral-Small-3.1 and Kimi-VL logs match a split, not a replicated, encoder)
    extra = fmt.for_kind("embedding").bytes_for(extra_params // tp)
    out = []
    last = len(stages) - 1
    for s, layers in enumerate(stages):
        body = sum(per_kind[arch.layers[i]] for i in layers)
        out.append(
            StageWeights(
                body,
                emb if s == 0 else 0,
                head if s == last else 0,
                extra if s == 0 else 0,
            )
        )
    return out


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


@dataclass(frozen=True)
class KvLayout:
    """How the KV cache of one worker is cut: page bytes, layer slots, groups."""

    page_bytes: int  # one block of one layer
    slots: int  # layer slots per block (uniform: layers; hybrid: group size)
    groups: int
    group_kinds: tuple[tuple[str, int | None], ...]  # (kind, window) per group
    padding_layers: int = 0


def kv_layout(
    arch: Architecture,
    launch: EngineLaunch,
    block_size: int,
    layers: range,
) -> KvLayout:
    """kv_cache_utils.py::get_kv_cache_groups: one group when every layer has the same spec;
    else (sliding + full attention) layers bucketed by spec, group_size = the smallest bucket
    (or the largest if max < 1.5 × min), each bucket cut into ceil(n / group_size) groups."""
    a = arch.attention
    kv_bytes_elem = launch.kv.bytes_for(1024) / 1024
    if a.is_mla:
        assert a.kv_lora_rank is not None
        per_token_layer = (a.kv_lora_rank + a.qk_rope_head_dim) * kv_bytes_elem
    else:
        heads = max(1, a.num_kv_heads // launch.tp)
        per_token_layer = heads * (a.head_dim + a.v_head_dim) * kv_bytes_elem
    page = int(block_size * per_token_layer)
    kinds: dict[tuple[str, int | None], int] = {}
    for i in range(arch.num_layers):
        w = arch.layers[i].sliding_window
        key: tuple[str, int | None] = (
            ("full", None)
            if w is None or launch.disable_hybrid_kv_cache_manager
            else ("sliding", w)
        )
        kinds[key] = kinds.get(key, 0) + 1
    local = len(layers)
    if len(kinds) == 1:
        return KvLayout(page, local, 1, (next(iter(kinds)),))
    counts = sorted(kinds.values())
    group = counts[0] if counts[-1] >= HYBRID_GROUP_RATIO * counts[0] else counts[-1]
    group_kinds: list[tuple[str, int | None]] = []
    for kind, n in sorted(kinds.items(), key=lambda kv: kv[0][0]):
        group_kinds += [kind] * math.ceil(n / group)
    padding = group * len(group_kinds) - arch.num_layers
    slots = math.ceil(group * local / arch.num_layers) if local < arch.num_layers else group
    return KvLayout(page, slots, len(group_kinds), tuple(group_kinds), padding)


def blocks_per_request(
    layout: KvLayout, max_model_len: int, block_size: int, batched_tokens: int
) -> int:
    """Blocks (of one layer slot) one max_model_len request needs, summed over the groups:
    full attention ceil(L / bs); a sliding window (SlidingWindowSpec.max_memory_usage_bytes)
    ceil(min(window − 1 + max_num_batched_tokens, L) / bs) + 1."""
    n = 0
    for kind, window in layout.group_kinds:
        if kind == "sliding" and window:
            n += math.ceil(min(window - 1 + batched_tokens, max_model_len) / block_size) + 1
        else:
            n += math.ceil(max_model_len / block_size)
    return n


def vllm_bill(launch: EngineLaunch) -> EngineBill:
    """The vLLM 0.19 startup bill of the worker that sets the KV size (min over workers)."""
    arch, fmt, tp, pp = launch.arch, launch.weights, launch.tp, launch.pp
    total = cuda_total_bytes(launch)
    util = launch.gpu_memory_utilization or DEFAULT_UTILIZATION
    requested = math.ceil(total * util)
    seqs, batched = batch_defaults(launch, total)
    block_size = launch.block_size or DEFAULT_BLOCK_SIZE
    max_len = launch.max_model_len or arch.max_position_embeddings or 4096
    stages = pp_layers(arch.num_layers, pp)
    padding = mxfp4_padding_bytes(arch, fmt, tp, launch.gpu)
    weights = stage_weights(arch, fmt, tp, stages, launch.extra_params, padding)
    rope = rope_cache_bytes(arch, fmt)
    weights = [replace(w, buffers=rope) for w in weights]

    per_stage = []
    for s, layers in enumerate(stages):
        feats = activation_features(arch, fmt, tp, seqs, batched, sampler=s == pp - 1)
        feats["encoder"] = float(GIB if launch.is_multimodal and s == 0 else 0)
        act = activation_peak_bytes(feats)
        nt = non_torch_bytes(tp, pp, s == 0)
        w = weights[s].total
        available = (
            launch.kv_cache_memory_bytes
            if launch.kv_cache_memory_bytes is not None
            else requested - (w + act + nt)
        )
        layout = kv_layout(arch, launch, block_size, layers)
        blocks = max(0, available) // layout.page_bytes // max(1, layout.slots)
        if launch.num_gpu_blocks_override:
            blocks = launch.num_gpu_blocks_override
        per_stage.append((blocks, w, act, nt, available, layout, feats))
    # every worker sizes its own blocks; all take the minimum (get_kv_cache_configs)
    limiting = min(range(pp), key=lambda i: per_stage[i][0])
    num_blocks = per_stage[limiting][0]
    layout = per_stage[limiting][5]
    # the log prints rank 0's figures: the lines are stage 0's
    s = 0
    _, w, act, nt, available, _, feats = per_stage[0]
    sw = weights[0]
    tokens = num_blocks // layout.groups * block_size
    per_request = blocks_per_request(layout, max_len, block_size, batched)
    concurrency = num_blocks / per_request if per_request else 0.0
    per_token = layout.page_bytes * layout.slots * layout.groups // block_size

    failure = None
    if min(p[4] for p in per_stage) <= 0:
        failure = (
            "No available memory for the cache blocks: weights + activation peak + non-torch"
            f" exceed gpu_memory_utilization {util} × total"
        )
    elif concurrency < 1:
        failure = (
            f"not enough KV cache for one request of max_model_len {max_len:,} tokens"
            f" ({tokens:,} tokens available)"
        )
    graph = 0 if launch.enforce_eager else CUDAGRAPH_NOMINAL
    items = (
        budget_item(
            "weights",
            "Weights",
            w,
            "layers ÷ tp + padded vocab ÷ tp (embedding, LM head) + encoder + RoPE tables",
            {
                "layers_bytes": sw.layers,
                "embedding_bytes": sw.embedding,
                "lm_head_bytes": sw.lm_head,
                "encoder_bytes": sw.extra,
                "rope_cache_bytes": sw.buffers,
                "precision": fmt.describe(),
                "tp": tp,
                "pp": pp,
                "stage": s,
                "stage_layers": len(stages[s]),
                "padded_vocab": padded_vocab(arch.vocab_size),
            },
            "weights",
        ),
        budget_item(
            "activation_peak",
            "Activation peak",
            act,
            "profile run of max_num_batched_tokens + sampler over max_num_seqs × vocab (fitted)",
            {
                "max_num_batched_tokens": batched,
                "max_num_seqs": seqs,
                "sampler": s == pp - 1,
                **{f"{k}_bytes": int(v) for k, v in feats.items()},
            },
            "activations",
        ),
        budget_item(
            "non_torch",
            "Non-torch memory",
            nt,
            "CUDA/NCCL memory grown during profiling (by layout, fitted)",
            {"tp": tp, "pp": pp},
            "overhead",
        ),
        budget_item(
            "kv_cache",
            "KV cache",
            available,
            "requested − weights − activation peak − non-torch",
            {
                "requested_bytes": requested,
                "page_bytes": layout.page_bytes,
                "layer_slots": layout.slots,
                "groups": layout.groups,
                "block_size": block_size,
                "num_blocks": num_blocks,
            },
            "kv_cache",
        ),
    )
    outside = (
        budget_item(
            "cuda_graphs",
            "CUDA graphs",
            graph,
            "graph pool captured after KV sizing (outside the budget in 0.19)",
            {"enforce_eager": launch.enforce_eager},
            "overhead",
        ),
    )
    headroom = total - requested
    notes = [
        f"budget = ceil({util} × {total / GIB:.2f} GiB) = {requested / GIB:.2f} GiB per GPU",
        f"max_num_seqs {seqs}, max_num_batched_tokens {batched}, block_size {block_size}",
    ]
    if pp > 1:
        notes.append(
            f"lines are rank 0's (stage 0, as the log prints them); stage {limiting} has the"
            " fewest blocks and sets the KV size (vLLM takes the minimum over workers)"
        )
    if layout.groups > 1:
        notes.append(
            f"hybrid KV cache: {layout.groups} groups of {layout.slots} layer slots"
            + (f" ({layout.padding_layers} padding layers)" if layout.padding_layers else "")
            + "; the logged token figure charges every slot, sliding windows show in concurrency"
        )
    if tp > arch.attention.num_kv_heads and not arch.attention.is_mla:
        notes.append(f"tp {tp} > {arch.attention.num_kv_heads} KV heads: KV heads replicated")
    if graph > headroom:
        notes.append(
            "CUDA graphs may not fit in the 1 − utilization headroom: lower"
            " --gpu-memory-utilization or use --enforce-eager"
        )
    spread_act = ACT_SPREAD
    spread_nt = gib(0.21) if tp == 1 and pp == 1 else gib(0.1)
    low_kv = available - spread_act - spread_nt
    high_kv = available + spread_act
    ranges = {
        "activation_peak": Range(
            act,
            max(0, act - spread_act),
            act + spread_act,
            "--max-num-batched-tokens, --max-num-seqs",
        ),
        "non_torch": Range(
            nt, max(0, nt - gib(0.05)), nt + spread_nt, "tp/pp layout, driver, NCCL"
        ),
        "cuda_graphs": Range(
            graph,
            0 if launch.enforce_eager else CUDAGRAPH_LOW,
            0 if launch.enforce_eager else CUDAGRAPH_HIGH,
            "--max-num-seqs (capture sizes), --enforce-eager",
        ),
        "kv_capacity_tokens": Range(
            tokens,
            _tokens_for(low_kv, layout, block_size),
            _tokens_for(high_kv, layout, block_size),
            "activation peak and non-torch memory (allocator, driver version)",
        ),
    }
    return EngineBill(
        launch=launch,
        engine="vllm",
        version=VERSION,
        total_bytes=total,
        budget_bytes=requested,
        items=items,
        kv_cache_bytes=available,
        kv_capacity_tokens=tokens,
        max_concurrency=concurrency,
        max_model_len=max_len,
        kv_bytes_per_token=per_token,
        block_size=block_size,
        num_blocks=num_blocks,
        fits=failure is None,
        failure=failure,
        outside_budget=outside,
        ranges=ranges,
        notes=tuple(notes),
        settings={
            "gpu_memory_utilization": util,
            "max_num_seqs": seqs,
            "max_num_batched_tokens": batched,
            "block_size": block_size,
            "max_model_len": max_len,
            "kv_cache_dtype": launch.kv.id,
        },
    )


def _tokens_for(available: int, layout: KvLayout, block_size: int) -> int:
    blocks = max(0, available) // layout.page_bytes // max(1, layout.slots)
    return blocks // layout.groups * block_size
