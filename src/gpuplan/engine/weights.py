"""Weight bytes: the whole model, and what one GPU holds under tensor and pipeline parallelism.

    weights = parameters × bytes per parameter                       (the lesson, step 1)

For a quantised format ("linear" scope) only the linear weights of attention, MLP and experts
are packed; embeddings, LM head, norms, biases and routers stay at the 16-bit base dtype, as
GPTQ/AWQ/fp8/MXFP4 checkpoints and vLLM's loaders keep them.

Per GPU (Megatron-LM, Shoeybi et al. 2019 §3; vLLM's ColumnParallel/RowParallel/
VocabParallelEmbedding layers): linear layers and the vocabulary are split tp ways; norms and
routers are replicated on every rank; when tp exceeds the KV heads each rank keeps one whole
KV head (k and v projections replicated, as vLLM's QKVParallelLinear does); MLA's low-rank
down-projections (q_a, kv_a) are replicated (vLLM's ReplicatedLinear in deepseek_v2.py).
Layers are split evenly over pp stages (the first stages take the remainder); the token
embedding (and a vision-language model's image encoder) sits on the first stage and the final norm + LM head on the last, so the heaviest
stage sets the per-GPU figure.

A quantised checkpoint whose rules treat layers or projections of one kind differently (Meta's
Llama-3.1-405B-FP8 keeps every layer's attention and the MLPs of layers 0 and 125 in bf16)
carries its plan (engine/module_plan.py `QuantPlan`): each layer's linear bytes are then summed
per (kind, TP split, precision) from the plan, the rest per kind as above.

When the checkpoint's headers were read (engine/checkpoint.py), `WeightFormat.stored` carries
them and every function here answers with the exact stored bytes instead: the same placement
rules applied tensor by tensor. Callers show the architecture math beside it
(`architecture_weights`).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING

from gpuplan.engine.architecture import Architecture, AttentionSpec, LayerSpec
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.params import LINEAR_KINDS, ParamCounts, count_params, layer_params
from gpuplan.engine.precision import Precision

if TYPE_CHECKING:
    from gpuplan.engine.checkpoint import Checkpoint
    from gpuplan.engine.module_plan import QuantPlan


@record(cache_hash=True)  # bills are cached by it: a deep hash of every field, once per object
class WeightFormat:
    """How a model's parameters are stored: a precision for packed linear weights and a base."""

    precision: Precision  # the format asked for (bf16, fp8, gptq-int4-g128, ...)
    base: Precision  # 16-bit format kept for embeddings, norms, biases, routers when scope = linear
    unquantized: tuple[
        str, ...
    ] = ()  # linear kinds a checkpoint leaves unpacked ("attention", ...)
    overrides: tuple[tuple[str, Precision], ...] = ()  # kinds with a layout of their own
    notes: tuple[str, ...] = ()  # what the format assumed (an engine flag's standard layout)
    stored: Checkpoint | None = None  # the checkpoint's headers: exact stored bytes
    plan: QuantPlan | None = None  # per-module precisions, when they differ within a kind

    def for_kind(self, kind: str) -> Precision:
        """The precision of `kind` (with a plan: the one most of its parameters have)."""
        if self.precision.scope == "all":
            return self.precision
        if kind == "lm_head" and self.plan is not None and self.plan.lm_head is not None:
            return self.plan.lm_head
        if kind in LINEAR_KINDS and kind not in self.unquantized:
            for k, p in self.overrides:
                if k == kind:
                    return p
            return self.precision
        return self.base

    def architecture_only(self) -> WeightFormat:
        """The same format without the headers: the architecture math."""
        return replace(self, stored=None) if self.stored is not None else self

    def describe(self) -> str:
        if self.stored is not None and self.stored.format == "gguf":
            return self.stored.describe_stored()  # GGML blocks: the file's types, not the base
        if self.precision.scope == "all":
            return self.precision.describe()
        kept = ", ".join(k for k in self.unquantized if k in LINEAR_KINDS)
        extra = f"; {kept} kept at {self.base.id}" if kept else ""
        own = "".join(f"; {k} {p.id}" for k, p in self.overrides)
        mixed = "; some modules differ by layer (notes)" if self.plan is not None else ""
        return (
            f"{self.precision.describe()} linear weights, others {self.base.id}{extra}{own}{mixed}"
        )


def as_stored(stored: Checkpoint | None, base: Precision) -> Checkpoint | None:
    """The headers, if the engine keeps the weights as stored: a 16-bit checkpoint served in
    16-bit (not an fp32 one cast down), or any GGUF (llama.cpp loads its blocks as they are)."""
    if stored is None or stored.format == "gguf":
        return stored
    floats = {"F32": 32, "F16": 16, "BF16": 16}
    by_dtype = stored.bytes_by_dtype
    dominant = max(by_dtype, key=lambda d: by_dtype[d], default="")
    return stored if floats.get(dominant, 0) == base.bits else None


def weights_bytes(counts: ParamCounts, fmt: WeightFormat) -> int:
    """Bytes of all weights: Σ over kinds of params(kind) × bytes per param of its format;
    with headers, the stored bytes of every tensor the decoder loads."""
    if fmt.stored is not None:
        return fmt.stored.loaded_bytes(len(counts.per_layer))
    if fmt.plan is not None:
        rest = sum(
            fmt.for_kind(kind).bytes_for(n)
            for kind, n in counts.by_kind.items()
            if kind not in LINEAR_KINDS
        )
        return rest + fmt.plan.linear_bytes()
    return sum(fmt.for_kind(kind).bytes_for(n) for kind, n in counts.by_kind.items())


def _attention_rank_counts(
    arch: Architecture, c: Counter[str], tp: int, a: AttentionSpec
) -> dict[str, float]:
    """Attention params one TP rank holds (KV-head replication and MLA down-projections)."""
    h = arch.hidden_size
    total = c["attention"]
    if a.is_mla:
        assert a.kv_lora_rank is not None
        replicated = h * (a.q_lora_rank or 0) + h * (a.kv_lora_rank + a.qk_rope_head_dim)
        return {"attention": replicated + (total - replicated) / tp}
    kv = h * a.num_kv_heads * (a.head_dim + a.v_head_dim)
    kv_heads_per_rank = max(1, a.num_kv_heads // tp) if tp > a.num_kv_heads else a.num_kv_heads / tp
    kv_rank = h * kv_heads_per_rank * (a.head_dim + a.v_head_dim)
    return {"attention": (total - kv) / tp + kv_rank}


def layer_bytes_per_rank(arch: Architecture, layer_index: int, fmt: WeightFormat, tp: int) -> int:
    """Bytes of one decoder layer on one tensor-parallel rank."""
    if fmt.stored is not None:
        return fmt.stored.layer_bytes(arch, layer_index, tp)
    layer = arch.layers[layer_index]
    c = layer_params(arch, layer)
    per_rank: dict[str, float] = {}
    planned = fmt.plan is not None
    if c["attention"] and not planned:
        per_rank.update(_attention_rank_counts(arch, c, tp, arch.attention_of(layer)))
    for kind in ("mlp", "experts", "shared_experts", "bias", "sinks", "mixer", "ssm"):
        if c[kind] and not (planned and kind in LINEAR_KINDS):
            per_rank[kind] = c[kind] / tp
    for kind in ("norm", "router"):
        if c[kind]:
            per_rank[kind] = c[kind]
    rest = sum(fmt.for_kind(k).bytes_for(round(n)) for k, n in per_rank.items())
    if fmt.plan is None:
        return rest
    kv_heads = arch.attention_of(layer).num_kv_heads
    return rest + fmt.plan.layer_bytes(fmt.plan.index[layer_index], tp, kv_heads)


def per_layer_bytes(arch: Architecture, fmt: WeightFormat, tp: int) -> list[int]:
    """Bytes of each decoder layer on one TP rank, computed once per distinct layer (layers of
    one kind with one quantisation plan weigh the same)."""
    plan = fmt.plan
    seen: dict[tuple[LayerSpec, int], int] = {}
    out = []
    for i, layer in enumerate(arch.layers):
        key = (layer, plan.index[i] if plan is not None else 0)
        if key not in seen:
            seen[key] = layer_bytes_per_rank(arch, i, fmt, tp)
        out.append(seen[key])
    return out


@lru_cache(maxsize=1024)
def stage_layers(num_layers: int, pp: int) -> tuple[range, ...]:
    """Split layers into pp contiguous stages, the first stages taking one extra when uneven."""
    base, extra = divmod(num_layers, pp)
    stages, start = [], 0
    for s in range(pp):
        size = base + (1 if s < extra else 0)
        stages.append(range(start, start + size))
        start += size
    return tuple(stages)


@record
class WeightsPerGpu:
    """The weight bytes of the heaviest GPU, and where that GPU sits."""

    bytes: int
    stage: int
    layers: range
    embedding_bytes: int
    lm_head_bytes: int


def weights_per_gpu(
    arch: Architecture, fmt: WeightFormat, tp: int = 1, pp: int = 1
) -> WeightsPerGpu:
    """Weight bytes on the most loaded GPU: its stage's layers ÷ tp, plus embedding / LM head."""
    if fmt.stored is not None:
        p = fmt.stored.placement(arch, tp, pp)
        return WeightsPerGpu(p.bytes, p.stage, p.layers, p.embedding_bytes, p.lm_head_bytes)
    counts = count_params(arch)
    h = arch.hidden_size
    emb = fmt.for_kind("embedding").bytes_for(round(counts.embedding / tp))
    # a vision encoder sits with the embedding on the first stage, split over TP like the decoder
    emb += fmt.for_kind("vision").bytes_for(round(arch.vision_params / tp))
    head_params = 0 if arch.tie_word_embeddings else arch.vocab_size * h
    final_norm = counts.lm_head - head_params
    head = fmt.for_kind("lm_head").bytes_for(round(head_params / tp)) + fmt.for_kind(
        "norm"
    ).bytes_for(final_norm)
    if arch.tie_word_embeddings and pp > 1:
        # the last stage keeps its own copy of the tied embedding matrix to compute logits
        head += fmt.for_kind("lm_head").bytes_for(round(arch.vocab_size * h / tp))
    by_index = per_layer_bytes(arch, fmt, tp)
    best: WeightsPerGpu | None = None
    for s, layers in enumerate(stage_layers(arch.num_layers, pp)):
        total = sum(by_index[i] for i in layers)
        e = emb if s == 0 else 0
        lm = head if s == pp - 1 else 0
        candidate = WeightsPerGpu(total + e + lm, s, layers, e, lm)
        if best is None or candidate.bytes > best.bytes:
            best = candidate
    assert best is not None
    return best
