"""The serving bill per GPU: weights, KV cache, workspace, CUDA context, against a headroom budget.

    memory per GPU = weights ÷ (tp × pp) + KV cache + workspace + CUDA context   (lesson, part 1-3)
    budget         = headroom × GPU memory                                        (90 % by default)
    KV capacity    = (budget − weights − overhead) × GPUs ÷ KV bytes per token    (lesson, step 3.4)
    users          = KV capacity ÷ context

Models with Mamba, linear-attention or short-convolution layers also keep a recurrent state per
sequence that does not grow with context (engine/state_cache.py). It is its own line, and it
shrinks the KV capacity: sequences = free ÷ (KV bytes per sequence + state bytes per sequence).

The defaults for the overheads are the lesson's: a 1.5 GB workspace (activations and library
scratch of the forward pass) and 1 GB of CUDA context per GPU. Both are named, overridable lines.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.bill import Bill, LineItem
from gpuplan.engine.frozen import field, record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.kv_cache import (
    kv_cache_bytes_per_sequence,
    kv_cache_bytes_per_sequence_per_gpu,
    kv_cache_bytes_per_token,
    kv_heads_per_rank,
    layer_kv_elements,
)
from gpuplan.engine.params import ParamCounts, count_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.sharding import tp_problem
from gpuplan.engine.state_cache import (
    ssm_precision,
    state_bytes_per_sequence,
    state_bytes_per_sequence_per_gpu,
)
from gpuplan.engine.weights import WeightFormat, WeightsPerGpu, weights_bytes, weights_per_gpu
from gpuplan.errors import GpuplanError
from gpuplan.units import UNIT_SYSTEMS, format_bytes

DEFAULT_WORKSPACE_BYTES = 1_500_000_000  # the lesson's 1.5 GB workspace
DEFAULT_CUDA_CONTEXT_BYTES = 1_000_000_000  # the lesson's 1 GB of CUDA context
DEFAULT_HEADROOM = 0.9  # the lesson's "at most about 90 % of HBM"


@record
class ServingSetup:
    """Everything a serving bill depends on. Frozen, so bills can be cached and compared."""

    arch: Architecture
    weights: WeightFormat
    kv: Precision
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    context: int = 4096
    users: int = 1
    headroom: float = DEFAULT_HEADROOM
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES
    state: Precision | None = None  # recurrent-state format; None: the weights' base dtype

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def state_precision(self) -> Precision:
        """Engines keep Mamba/linear-attention states in the model dtype (vLLM mamba_cache_dtype
        "auto"), not in the KV-cache dtype."""
        return self.state or self.weights.base


@record
class ServingBill(Bill):
    """The answer: the bill of the most loaded GPU, whether it fits, and what the KV room buys."""

    setup: ServingSetup
    items: tuple[LineItem, ...]
    params: ParamCounts
    weights_bytes: int  # all weights of the model
    kv_bytes_per_token: int  # whole model, one token, all layers
    kv_bytes_per_sequence: int  # whole model, one sequence of `context` tokens
    budget_bytes: int
    kv_capacity_tokens: int
    max_concurrent_sequences: int
    notes: tuple[str, ...] = field(default=())
    state_bytes_per_sequence: int = 0  # whole model, one sequence: recurrent states (any context)

    @property
    def fits(self) -> bool:
        return self.per_gpu_total_bytes <= self.budget_bytes and self.max_concurrent_sequences >= 1

    @property
    def gpus(self) -> int:
        return self.setup.gpus


def validate_serving(setup: ServingSetup) -> None:
    """Reject impossible setups with a one-line reason."""
    for name, value in (
        ("tp", setup.tp),
        ("pp", setup.pp),
        ("context", setup.context),
        ("users", setup.users),
    ):
        if value < 1:
            raise GpuplanError(f"{name} must be at least 1, got {value}")
    if not 0 < setup.headroom <= 1:
        raise GpuplanError(f"headroom must be in (0, 1], got {setup.headroom}")
    problem = tp_problem(setup.arch, setup.tp)
    if problem:
        raise GpuplanError(f"{setup.arch.name}: {problem}")
    if setup.pp > setup.arch.num_layers:
        raise GpuplanError(
            f"pp={setup.pp} is larger than the {setup.arch.num_layers} layers of {setup.arch.name}"
        )
    if setup.workspace_bytes < 0 or setup.cuda_context_bytes < 0:
        raise GpuplanError("overheads must not be negative")


@lru_cache(maxsize=4096)
def _weights_per_gpu(arch: Architecture, fmt: WeightFormat, tp: int, pp: int) -> WeightsPerGpu:
    return weights_per_gpu(arch, fmt, tp, pp)


@lru_cache(maxsize=1024)
def _weights_total(arch: Architecture, fmt: WeightFormat) -> int:
    return weights_bytes(count_params(arch), fmt)


def serving_bill(setup: ServingSetup) -> ServingBill:
    """Build the per-GPU serving bill for `setup` (the heaviest pipeline stage when pp > 1).

    What the model, its formats and the layout fix (weights per GPU, KV and state bytes per
    token and sequence, the weights line, the notes) is worked out once per (arch, weights, kv,
    state, tp, pp) by `_layout_part`; what a request changes (context, sequences, headroom,
    overheads, the GPU) is worked out here.
    """
    validate_serving(setup)
    arch, tp, pp = setup.arch, setup.tp, setup.pp
    state = setup.state_precision
    part = _layout_part(arch, setup.weights, setup.kv, state, tp, pp)
    w = part.weights
    per_seq = kv_cache_bytes_per_sequence(arch, setup.kv, setup.context)
    per_seq_gpu = kv_cache_bytes_per_sequence_per_gpu(
        arch, setup.kv, setup.context, tp, pp, w.stage
    )
    items: tuple[LineItem, ...] = (part.weights_item, _kv_item(setup, part, per_seq_gpu))
    if arch.num_state_layers:
        items += (_state_item(arch, setup, part.state_bytes_per_sequence_per_gpu, len(w.layers)),)
    items += (_workspace_item(setup.workspace_bytes), _cuda_context_item(setup.cuda_context_bytes))

    budget = int(setup.gpu.memory_bytes * setup.headroom)
    free = budget - w.bytes - setup.workspace_bytes - setup.cuda_context_bytes
    per_seq_cache = per_seq_gpu + part.state_bytes_per_sequence_per_gpu
    if free > 0 and per_seq_cache > 0:
        max_seqs = free // per_seq_cache
        capacity = free * setup.context // per_seq_cache
    else:
        max_seqs, capacity = 0, 0
    notes = part.notes
    if free > 0 and max_seqs < setup.users:
        notes += (
            f"the KV cache left after weights and overhead holds {max_seqs} sequence(s) of"
            f" {setup.context} tokens, fewer than the {setup.users} asked for",
        )
    return ServingBill(
        setup=setup,
        items=items,
        params=part.counts,
        weights_bytes=part.total_weights,
        kv_bytes_per_token=part.kv_bytes_per_token,
        kv_bytes_per_sequence=per_seq,
        budget_bytes=budget,
        kv_capacity_tokens=int(capacity),
        max_concurrent_sequences=int(max_seqs),
        notes=notes,
        state_bytes_per_sequence=part.state_bytes_per_sequence,
    )


def _kv_item(setup: ServingSetup, part: _LayoutPart, per_seq_gpu: int) -> LineItem:
    """The KV line: one sequence's KV bytes on this GPU × sequences."""
    return LineItem(
        key="kv_cache",
        label="KV cache",
        bytes=per_seq_gpu * setup.users,
        formula="2 × layers × KV heads × head dim × bytes × context × sequences ÷ GPUs",
        template=part.kv_template,
        inputs={
            **part.kv_inputs_head,
            "context": setup.context,
            "users": setup.users,
            **part.kv_inputs_tail,
        },
        category="kv_cache",
    )


class _LayoutPart(NamedTuple):
    """What a serving bill's model, formats and layout fix, whatever the request."""

    counts: ParamCounts
    total_weights: int
    weights: WeightsPerGpu
    weights_item: LineItem
    kv_bytes_per_token: int  # whole model, one token, all layers
    kv_template: str
    kv_inputs_head: dict[str, Any]  # the KV line's inputs before context and users ...
    kv_inputs_tail: dict[str, Any]  # ... and after (their order is the JSON's)
    state_bytes_per_sequence: int  # whole model
    state_bytes_per_sequence_per_gpu: int
    notes: tuple[str, ...]


@lru_cache(maxsize=4096)
def _layout_part(
    arch: Architecture,
    weights: WeightFormat,
    kv: Precision,
    state: Precision,
    tp: int,
    pp: int,
) -> _LayoutPart:
    """The request-independent half of the bill: parameter counts, the weights this GPU holds
    and their line, KV and state bytes per token and sequence, the KV line's fixed inputs and
    the layout's notes (cached: a sweep changes only the request)."""
    counts = count_params(arch)
    total_weights = _weights_total(arch, weights)
    w = _weights_per_gpu(arch, weights, tp, pp)
    weights_item = _stored_weights_item(
        arch, weights, tp, pp, w, total_weights
    ) or _arch_weights_item(weights, tp, pp, w, counts, total_weights)
    per_token = kv_cache_bytes_per_token(arch, kv)
    head, tail = _kv_inputs(arch, kv, tp, pp, w, per_token)
    return _LayoutPart(
        counts=counts,
        total_weights=total_weights,
        weights=w,
        weights_item=weights_item,
        kv_bytes_per_token=per_token,
        kv_template=_kv_template(arch, tp, pp),
        kv_inputs_head=head,
        kv_inputs_tail=tail,
        state_bytes_per_sequence=state_bytes_per_sequence(arch, state),
        state_bytes_per_sequence_per_gpu=state_bytes_per_sequence_per_gpu(
            arch, state, tp, pp, w.stage
        ),
        notes=_layout_notes(arch, weights, tp, pp, w),
    )


def _arch_weights_item(
    weights: WeightFormat, tp: int, pp: int, w: WeightsPerGpu, counts: ParamCounts, total: int
) -> LineItem:
    """The weights line from the architecture: params × bytes/param ÷ (tp × pp), bytes/param
    the effective figure (mixed formats keep some parts at 16-bit). Where the even split is not
    the sum done (unequal pipeline stages: the embedding on the first, the LM head on the last;
    norms, routers and replicated projections whole on every TP rank), the line shows the sum:
    the heaviest stage's layers ÷ tp, plus its embedding and LM head (engine/weights.py)."""
    bpp = total / counts.total
    layer_bytes = w.bytes - w.embedding_bytes - w.lm_head_bytes
    even = tp * pp == 1 or _shown_equal(total / (tp * pp), w.bytes)
    return LineItem(
        key="weights",
        label="Weights",
        bytes=w.bytes,
        formula=_weights_formula(tp, pp, even),
        template=_weights_template(tp, pp, w, even),
        inputs={
            "params": counts.total,
            "bytes_per_param": round(bpp, 4),
            "precision": weights.describe(),
            "tp": tp,
            "pp": pp,
            "stage": w.stage,
            "stage_layers": len(w.layers),
            "layer_weights_bytes": layer_bytes,
            "embedding_bytes": w.embedding_bytes,
            "lm_head_bytes": w.lm_head_bytes,
            "total_weights_bytes": total,
        },
        category="weights",
    )


def _shown_equal(a: float, b: int) -> bool:
    """Whether two byte figures read the same in every unit a bill is shown in (2 decimals)."""
    return all(format_bytes(a, u) == format_bytes(b, u) for u in UNIT_SYSTEMS)


def _weights_formula(tp: int, pp: int, even: bool) -> str:
    if tp * pp == 1:
        return "params × bytes/param"
    if even:
        return "params × bytes/param ÷ (tp × pp)"
    return (
        "heaviest stage: its layers ÷ tp + embedding ÷ tp (first stage) + LM head ÷ tp (last stage)"
    )


def _weights_template(tp: int, pp: int, w: WeightsPerGpu, even: bool) -> str:
    """The weights line's arithmetic: the lesson's even split where it is the sum done, else
    the heaviest stage's terms, each shown, adding up to the line."""
    if tp * pp == 1:
        return "{params} × {bytes_per_param} bytes = {bytes}"
    if even:
        return "{params} × {bytes_per_param} bytes ÷ (tp {tp} × pp {pp}) = {bytes}"
    where = ["stage {stage} of {pp}"] if pp > 1 else []
    where += ["÷ tp {tp}"] if tp > 1 else []
    terms = ["{stage_layers} layers {layer_weights_bytes}"]
    if w.embedding_bytes:
        terms.append("embedding {embedding_bytes}")
    if w.lm_head_bytes:
        terms.append("LM head {lm_head_bytes}")
    return ", ".join(where) + ": " + " + ".join(terms) + " = {bytes}"


def _kv_inputs(
    arch: Architecture, kv: Precision, tp: int, pp: int, w: WeightsPerGpu, per_token: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The KV line's inputs that the request does not change: those shown before context and
    users, and those after (their order is the JSON's)."""
    a = arch.attention
    head = {
        "layers": _kv_layers(arch),
        "kv_heads": a.num_kv_heads,
        "head_dim": a.head_dim,
        "kv_elem_size": kv.bytes_per_element,
        "latent_dim": (a.kv_lora_rank or 0) + a.qk_rope_head_dim,
        "kv_dtype": kv.id,
    }
    tail = {
        "per_token_bytes": per_token,
        "tp": tp,
        "pp": pp,
        "kv_heads_per_gpu": _whole(kv_heads_per_rank(arch, tp)),
        "stage_layers": _kv_layers(arch, w.layers),
    }
    return head, tail


def _layout_notes(
    arch: Architecture, weights: WeightFormat, tp: int, pp: int, w: WeightsPerGpu
) -> tuple[str, ...]:
    notes = list(arch.notes) + list(weights.notes)
    a = arch.attention
    if not a.is_mla and tp > a.num_kv_heads:
        notes.append(
            f"tp={tp} > {a.num_kv_heads} KV heads: each GPU keeps one whole KV head, so the KV cache"
            f" is replicated {tp // a.num_kv_heads}× across GPUs"
        )
    if a.is_mla:
        notes.append(
            "MLA: the KV cache holds the compressed latent (kv_lora_rank + rope dims), replicated on every TP rank"
        )
    if arch.num_state_layers:
        notes.append(
            f"{arch.num_state_layers} of {arch.num_layers} layers keep a recurrent state"
            " (Mamba, linear attention, RG-LRU, mLSTM, RWKV or a short convolution) instead of a"
            " KV cache: a fixed amount per sequence, whatever the context"
        )
    if arch.num_sliding_layers:
        notes.append(
            f"{arch.num_sliding_layers} of {arch.num_layers} layers use sliding-window attention;"
            " their KV cache is capped at the window"
        )
    if pp > 1:
        notes.append(
            f"pp={pp}: layers split {len(w.layers)} per stage at most; the embedding is on the first"
            " stage and the LM head on the last; the bill is for the heaviest stage"
            f" (stage {w.stage})"
        )
    return tuple(notes)


@lru_cache(maxsize=64)
def _workspace_item(nbytes: int) -> LineItem:
    return LineItem(
        key="workspace",
        label="Workspace",
        bytes=nbytes,
        formula="activations and library scratch of the forward pass (fixed allowance)",
        template="workspace allowance = {bytes}",
        category="overhead",
    )


@lru_cache(maxsize=64)
def _cuda_context_item(nbytes: int) -> LineItem:
    return LineItem(
        key="cuda_context",
        label="CUDA context",
        bytes=nbytes,
        formula="CUDA context, kernels and communicator buffers per process (fixed allowance)",
        template="CUDA context allowance = {bytes}",
        category="overhead",
    )


def _state_item(
    arch: Architecture, setup: ServingSetup, per_seq_gpu: int, stage_layers: int
) -> LineItem:
    """The recurrent-state line: fixed bytes per sequence, whatever the context."""
    state = setup.state_precision
    ssm = ssm_precision(arch, state)
    kinds = sorted({spec.mixer for spec in arch.layers if spec.has_state})
    return LineItem(
        key="state_cache",
        label="State cache",
        bytes=per_seq_gpu * setup.users,
        formula="Σ state layers (conv state + SSM state) × bytes × sequences ÷ tp (constant in context)",
        template="{state_layers} state layers ({mixers}): {per_sequence_bytes}/sequence/GPU"
        " × {users} sequences = {bytes}",
        inputs={
            "state_layers": arch.num_state_layers,
            "mixers": ", ".join(kinds),
            "per_sequence_bytes": per_seq_gpu,
            "users": setup.users,
            "state_dtype": state.id,
            "ssm_dtype": ssm.id,
            "tp": setup.tp,
            "stage_layers": stage_layers,
        },
        category="kv_cache",
    )


def _kv_layers(arch: Architecture, layers: range | None = None) -> int:
    """Layers that keep their own KV cache (attention layers, not state or KV-sharing ones)."""
    return sum(n for spec, n in arch.layer_groups(layers) if layer_kv_elements(arch, spec))


def _stored_weights_item(
    arch: Architecture, weights: WeightFormat, tp: int, pp: int, w: WeightsPerGpu, total: int
) -> LineItem | None:
    """The weights line from the checkpoint's headers: the exact stored bytes this GPU holds,
    with the architecture math beside it (engine/weights.py, engine/checkpoint.py)."""
    stored = weights.stored
    if stored is None:
        return None
    math = _weights_per_gpu(arch, weights.architecture_only(), tp, pp)
    split = "; on this GPU (stage {stage} of {pp}, ÷ tp {tp})" if tp * pp > 1 else ""
    return LineItem(
        key="weights",
        label="Weights",
        bytes=w.bytes,
        formula="Σ stored tensor bytes (checkpoint headers) on this GPU",
        template=(
            "{tensors} tensors, {total_weights_bytes} stored"
            + split
            + " = {bytes} (architecture math {architecture_bytes})"
        ),
        inputs={
            "source": "checkpoint headers",
            "tensors": len(stored.tensors),
            "total_weights_bytes": total,
            "architecture_bytes": math.bytes,
            "precision": weights.describe(),
            "tp": tp,
            "pp": pp,
            "stage": w.stage,
            "stage_layers": len(w.layers),
            "embedding_bytes": w.embedding_bytes,
            "lm_head_bytes": w.lm_head_bytes,
        },
        category="weights",
    )


def _whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _kv_template(arch: Architecture, tp: int, pp: int) -> str:
    """The KV line's arithmetic as one GPU sees it: its stage's layers, its share of the KV heads."""
    layers = "{stage_layers} layers" if pp > 1 else "{layers} layers"
    if arch.attention.is_mla:
        text = "({latent_dim}) × {kv_elem_size} bytes × " + layers
    elif tp > 1:
        text = (
            "2 × "
            + layers
            + " × {kv_heads_per_gpu} KV heads/GPU × {head_dim} × {kv_elem_size} bytes"
        )
    else:
        text = "2 × " + layers + " × {kv_heads} KV heads × {head_dim} × {kv_elem_size} bytes"
    text += " × {context} tokens × {users} sequences"
    if arch.num_sliding_layers:
        text += " (sliding-window layers capped at their window)"
    return text + " = {bytes}"
