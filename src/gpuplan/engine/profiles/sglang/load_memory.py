"""What SGLang's "Load weight end. ... mem usage=X GB" counts beyond the parameters' bytes.

SGLang measures the weights as device memory, not as torch's allocated bytes
(model_runner.py::load_model): `get_available_gpu_memory` (utils.py; torch.cuda.empty_cache(),
then cudaMemGetInfo, in GiB) before and after get_model(), the difference printed as
"mem usage". Two things sit in that difference beside the parameters themselves:

1. The caching allocator's segments. empty_cache() hands back only segments with no live block,
   so the figure is the segments the parameters were carved from, not the parameters' sum
   (c10/cuda/CUDACachingAllocator.cpp): a request is rounded up to 512 B; one of at most
   1 MiB (kSmallSize) is served from 2 MiB segments (kSmallBuffer), one under 10 MiB
   (kMinLargeAlloc) from 20 MiB segments (kLargeBuffer), a larger one gets a segment of its own
   rounded up to 2 MiB (kRoundLarge); a free block is found best-fit in its pool and split when
   what is left is at least 512 B (small pool) or over 1 MiB (large pool), else handed out
   whole. The model is built with every parameter on the GPU (model_loader/loader.py
   _initialize_model under `torch.device(device)`), module by module, so the parameters are
   allocated in the order of `weight_tensors` and never freed.
2. The RoPE cos/sin table, a buffer built with the model (layers/rotary_embedding.py
   RotaryEmbedding.__init__): kept in float32 on CUDA since #3169 (2025-01-27, "cache needs to
   be in FP32 for numerical stability"; versions.toml `rope_cache_fp32`), in the model dtype on
   ROCm; one table per distinct rope (get_rope's cache), positions as vLLM's (common.rope_tables).
   Its build temporaries (the fp32 frequencies, cos and sin) are freed before the weights after
   it and are not modelled.

The parameter list is written out for the plain decoder (fused qkv_proj and gate_up_proj as
SGLang's QKVParallelLinear / MergedColumnParallelLinear hold them, 16-bit weights, dense MLP);
for other layouts only the RoPE table is added (`weight_tensors` returns None). Checked on the
SGLang logs of tests/data/engine_logs/public-logs-5.json and public-logs.json: Qwen3-14B at TP4
on RTX 4090 (0.5.9) 7.08 GB logged, 6.88 GiB of parameters + 0.18 rounding + 0.02 RoPE;
QwQ-32B at TP4 on L4 (0.4.3) 15.54 against 15.29 + 0.22 + 0.02; Llama-3.1-8B on H100 (0.4.4)
15.02 against 14.96 + 0.00 + 0.06.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuplan.engine.allocator import replay
from gpuplan.engine.model_records import Architecture
from gpuplan.engine.profiles import EngineLaunch
from gpuplan.engine.profiles.common import padded_vocab, rope_tables
from gpuplan.engine.weights import WeightFormat


def reserved_bytes(sizes: Iterable[int]) -> int:
    """Bytes of the segments the caching allocator holds after allocating `sizes` in order,
    none freed (module docstring, point 1; engine/allocator.py replay)."""
    return replay(("alloc", f"t{i}", n) for i, n in enumerate(sizes))[1]


def _plain_decoder(arch: Architecture, fmt: WeightFormat) -> bool:
    """Layers whose parameters `weight_tensors` can list: attention + dense gated MLP, 16-bit."""
    a = arch.attention
    if arch.mlp is None or not arch.mlp.gated or a.is_mla or arch.moe is not None:
        return False
    if a.output_gate or a.head_gate or a.sinks or a.qk_norm_scope != "head":
        return False
    if arch.parallel_block or arch.vision_params or arch.per_layer_input or arch.shared_blocks:
        return False
    kinds = ("attention", "mlp", "embedding", "lm_head")
    if any(fmt.for_kind(k).bits != 16 for k in kinds):
        return False
    return all(
        layer.mixer == "attention"
        and layer.ffn
        and not layer.moe
        and layer.attention is None
        and layer.mlp_width is None
        and not layer.v_from_k
        and not layer.kv_shared
        for layer in arch.layers
    )


def weight_tensors(
    arch: Architecture,
    fmt: WeightFormat,
    tp: int,
    layers: range,
    first: bool,
    last: bool,
    buffers: tuple[int, ...] = (),
) -> list[int] | None:
    """Bytes of each tensor one rank of a stage allocates, in the order SGLang's model classes
    build them (llama.py / qwen2.py / qwen3.py: embed_tokens; per layer q_norm and k_norm,
    qkv_proj (+ bias), o_proj, the attention's rotary `buffers` (first layer only: get_rope
    caches them), gate_up_proj, down_proj, the two layer norms; the final norm and lm_head);
    None for a layout this list does not cover."""
    if not _plain_decoder(arch, fmt):
        return None
    b = 2  # 16-bit
    a, h = arch.attention, arch.hidden_size
    q = a.num_heads // tp * a.head_dim
    kv = max(1, a.num_kv_heads // tp) * a.head_dim
    inter = arch.mlp.intermediate_size // tp if arch.mlp else 0
    vocab = padded_vocab(arch.vocab_size) // tp * h * b
    sizes = [vocab] if first else []
    for i in layers:
        if a.qk_norm:
            sizes += [a.head_dim * b, a.head_dim * b]
        sizes.append((q + 2 * kv) * h * b)
        if a.qkv_bias:
            sizes.append((q + 2 * kv) * b)
        sizes.append(h * q * b)
        if i == layers.start:
            sizes += buffers
        sizes += [2 * inter * h * b, h * inter * b, h * b, h * b]
    if last:
        sizes.append(h * b)
        if not arch.tie_word_embeddings or not first:
            sizes.append(vocab)
    return sizes


def rope_table_sizes(arch: Architecture, fmt: WeightFormat, fp32: bool) -> tuple[int, ...]:
    """Bytes of each RoPE cos/sin table (module docstring, point 2)."""
    per = 4 if fp32 else int(fmt.for_kind("embedding").bytes_for(1))
    return tuple(positions * dim * per for positions, dim in rope_tables(arch))


def load_extra_bytes(
    launch: EngineLaunch, rules: dict[str, Any], layers: range, first: bool, last: bool
) -> tuple[int, int]:
    """(allocator rounding, RoPE tables) one rank of a stage adds to its weights in SGLang's
    "mem usage" (module docstring)."""
    fp32 = bool(rules.get("rope_cache_fp32", False)) and launch.gpu.vendor != "amd"
    rope = rope_table_sizes(launch.arch, launch.weights, fp32)
    sizes = weight_tensors(launch.arch, launch.weights, launch.tp, layers, first, last, rope)
    if sizes is None:
        return 0, sum(rope)
    return reserved_bytes(sizes) - sum(sizes), sum(rope)
