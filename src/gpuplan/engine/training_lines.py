"""The words and arithmetic of each training bill line: its label, formula and inputs.

engine/training.py works out how many bytes each line holds in each phase of the step; this
module says what each line is and how its full amount is computed, so that `--explain` can
substitute the numbers. A phase that holds only part of a line (gradients half built,
activations half freed) shows the line's formula without the substituted arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Any

from gpuplan.engine.activations import ActivationSpec, layer_bytes, parse_recompute
from gpuplan.engine.bill import LineItem
from gpuplan.engine.model_states import ModelStates, StageParams
from gpuplan.engine.phases import Amounts
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.sharding import Layout
from gpuplan.engine.weights import WeightFormat

RECOMPUTE_WORDS = {
    "none": "no recompute",
    "selective": "selective recompute (core attention)",
    "op": "op-level selective recompute",
    "full": "full recompute",
    "every": "every k-th layer recomputed",
    "block": "the first n layers of the stage recomputed",
    "uniform": "groups of k layers recomputed",
}


LineMakers = dict[str, Callable[[], LineItem]]


def _shard_text(lo: Layout, stage: int) -> str:
    return f" ÷ {lo.shard_degree} shards" if lo.zero >= stage and lo.shard_degree > 1 else ""


@lru_cache(maxsize=256)
def _f(x: Fraction) -> float:
    return float(x)


def state_lines(
    setup: Any,
    recipe: TrainingRecipe,
    st: StageParams,
    states: ModelStates,
    base_fraction: float,
) -> dict[str, LineItem]:
    """Weights, gradients, fp32 master and optimizer states (ZeRO §3.1), as held on this GPU
    (`recipe`: as the framework stores it)."""
    return state_lines_and_makers(setup, recipe, st, states, base_fraction)[0]


STATE_KEYS = ("weights", "gradients", "master", "optimizer")


def state_lines_and_makers(
    setup: Any,
    recipe: TrainingRecipe,
    st: StageParams,
    states: ModelStates,
    base_fraction: float,
) -> tuple[dict[str, LineItem], LineMakers]:
    """`state_lines`, and for each a maker that returns it (as `step_lines` makes the others)."""
    lines, makers = _state_lines(
        setup.layout,
        recipe,
        recipe is setup.recipe,
        st,
        states,
        base_fraction,
        setup.lora is not None,
        setup.base,
    )
    return dict(zip(STATE_KEYS, lines, strict=True)), dict(zip(STATE_KEYS, makers, strict=True))


@lru_cache(maxsize=4096, typed=True)
def _state_lines(
    lo: Layout,
    recipe: TrainingRecipe,
    as_given: bool,
    st: StageParams,
    states: ModelStates,
    base_fraction: float,
    lora: bool,
    base: WeightFormat | None,
) -> tuple[tuple[LineItem, ...], tuple[Callable[[], LineItem], ...]]:
    """`state_lines` by what they depend on (a layout fixes them whatever the batch shape), and
    their makers. Tuples of frozen lines; their `inputs` are shared by the bills that show them
    (read-only)."""
    common = _state_inputs(lo, st, states)
    lines = (
        _weights_line(lo, recipe, as_given, lora, base, states, base_fraction, common),
        _gradients_line(lo, recipe, states, common),
        _master_line(lo, recipe, states, common),
        _optimizer_line(lo, recipe, states, common),
    )
    return lines, tuple(_constant(line) for line in lines)


def _constant(line: LineItem) -> Callable[[], LineItem]:
    return lambda: line


def _state_inputs(lo: Layout, st: StageParams, states: ModelStates) -> dict[str, Any]:
    """The inputs every model-state line shows: parameter counts, the stage, the layout."""
    return {
        "trainable_params": states.trainable,
        "frozen_params": states.frozen,
        "stage": st.stage,
        "stage_layers": len(st.layers),
        "tp": lo.tp,
        "pp": lo.pp,
        "ep": lo.ep,
        "zero": lo.zero,
        "shard_degree": lo.shard_degree,
    }


def _weights_line(
    lo: Layout,
    recipe: TrainingRecipe,
    as_given: bool,
    lora: bool,
    base: WeightFormat | None,
    states: ModelStates,
    base_fraction: float,
    common: dict[str, Any],
) -> LineItem:
    """Weights: params per GPU × weight bytes (÷ shards at ZeRO-3); under LoRA the frozen base
    in its own format plus the adapters."""
    if lora:
        return LineItem(
            "weights",
            "Weights (frozen base + adapters)",
            states.weights,
            "frozen base params × base bytes + adapter params × weight bytes",
            "{frozen_params} × {base_bytes_per_param} + {trainable_params} adapters ×"
            " {weight_bytes_per_param}" + _shard_text(lo, 3) + " = {bytes}",
            {
                **common,
                "base_format": base.describe() if base else "",
                "base_bytes_per_param": round(base_fraction, 4),
                "weight_bytes_per_param": _f(recipe.weights.bytes_per_param),
            },
            "weights",
        )
    par = f" (tp {lo.tp} × pp {lo.pp}{f' × ep {lo.ep}' if lo.ep > 1 else ''})"
    return LineItem(
        "weights",
        "Weights" if as_given else "Weights (sharded fp32, also the master)",
        states.weights,
        "params per GPU" + par + " × weight bytes" + (" ÷ shards" if lo.zero >= 3 else ""),
        "{trainable_params} × {weight_bytes_per_param} bytes" + _shard_text(lo, 3) + " = {bytes}",
        {**common, "weight_bytes_per_param": _f(recipe.weights.bytes_per_param)},
        "weights",
    )


def _gradients_line(
    lo: Layout, recipe: TrainingRecipe, states: ModelStates, common: dict[str, Any]
) -> LineItem:
    """Gradients: trainable params × grad bytes, ÷ shards from ZeRO-2."""
    return LineItem(
        "gradients",
        "Gradients",
        states.gradients,
        "trainable params × grad bytes" + (" ÷ shards (ZeRO-2+)" if lo.zero >= 2 else ""),
        "{trainable_params} × {grad_bytes_per_param} bytes" + _shard_text(lo, 2) + " = {bytes}",
        {
            **common,
            "grad_dtype": recipe.grads.id,
            "grad_bytes_per_param": _f(recipe.grads.bytes_per_param),
        },
        "gradients",
    )


def _master_line(
    lo: Layout, recipe: TrainingRecipe, states: ModelStates, common: dict[str, Any]
) -> LineItem:
    """fp32 master weights: trainable params × master bytes, ÷ shards from ZeRO-1."""
    return LineItem(
        "master",
        "fp32 master weights",
        states.master,
        "trainable params × master bytes" + (" ÷ shards (ZeRO-1+)" if lo.zero >= 1 else ""),
        "{trainable_params} × {master_bytes_per_param} bytes" + _shard_text(lo, 1) + " = {bytes}",
        {**common, "master_bytes_per_param": _f(recipe.master_bytes_per_param)},
        "master",
    )


def _optimizer_line(
    lo: Layout, recipe: TrainingRecipe, states: ModelStates, common: dict[str, Any]
) -> LineItem:
    """Optimizer states: trainable params × the recipe's state bytes, ÷ shards from ZeRO-1."""
    names = ", ".join(f"{s.name} ({s.format.id})" for s in recipe.states) or "none"
    if recipe.factored:
        names += ", factored second moment (fp32 rows + columns)"
    paged = states.optimizer_paged
    formula = "{trainable_params} × {state_bytes_per_param} bytes" + _shard_text(lo, 1)
    if paged:  # the payload is paged (unified memory): this line is what the allocator holds
        formula = "(" + formula + ") − {paged_bytes} paged"
    return LineItem(
        "optimizer",
        "Optimizer states" + (" (block scales; payload paged)" if paged else ""),
        states.optimizer - paged,
        "trainable params × state bytes" + (" ÷ shards (ZeRO-1+)" if lo.zero >= 1 else ""),
        formula + " = {bytes}",
        {
            **common,
            "states": names,
            "state_bytes_per_param": round(_f(recipe.optimizer_bytes_per_param), 4),
            **({"paged_bytes": paged} if paged else {}),
        },
        "optimizer",
    )


def step_lines(
    setup: Any, spec: ActivationSpec, st: StageParams, in_flight: int, a: Amounts
) -> LineMakers:
    """Every other line a phase can hold, each at its largest amount (built when asked for:
    a bill shows only its peak phase until its timeline is read). The makers are the bound
    methods of one `_StepLines` (a bill keeps them: closures would cost it three times the
    objects for the garbage collector to walk)."""
    _ = setup.loss_spec  # parsed now: a bad loss is refused by every bill, not by its timeline
    m = _StepLines(setup, spec, st, in_flight, a)
    return {
        "activations": m.activations,
        "logits": m.logits,
        "recompute_buffer": m.recompute_buffer,
        "activation_grads": m.activation_grads,
        "new_gradient": m.new_gradient,
        "autocast_casts": m.autocast_casts,
        "gathered_weights": m.gathered_weights,
        "unit_grads": m.unit_grads,
        "deferred_grads": m.deferred_grads,
        "allgather_buffer": m.allgather_buffer,
        "grad_buffer": m.grad_buffer,
        "allgather_bucket": m.allgather_bucket,
        "ddp_buckets": m.ddp_buckets,
        "deferred_wgrad": m.deferred_wgrad,
        "gemm_workspace": m.gemm_workspace,
        "fp8_weights": m.fp8_weights,
        "dequant_buffer": m.dequant_buffer,
        "kv_cache": m.kv_cache,
        "optimizer_temporaries": m.optimizer_temporaries,
    }


class _StepLines:
    """The lines `step_lines` makes, one method each, from one stage's amounts."""

    __slots__ = ("setup", "spec", "st", "in_flight", "a")

    def __init__(
        self, setup: Any, spec: ActivationSpec, st: StageParams, in_flight: int, a: Amounts
    ) -> None:
        self.setup, self.spec, self.st, self.in_flight, self.a = setup, spec, st, in_flight, a

    # the saved activations (layers × per-layer bytes × micro-batches in flight) and the loss's
    # logits at their largest moment (engine/loss.py)

    def activations(self) -> LineItem:
        setup, spec, st = self.setup, self.spec, self.st
        arch, lo = setup.arch, setup.layout
        mode, k = parse_recompute(setup.recompute)
        per_layer = layer_bytes(arch, arch.layers[st.layers[0]], spec) if st.layers else 0
        return LineItem(
            "activations",
            "Activations (saved)",
            self.a.activations,
            "saved tensors per layer × layers × micro-batches in flight + ids/final norm",
            "{stage_layers} layers × {per_layer_bytes} × {in_flight} in flight + edge = {bytes}",
            {
                "stage_layers": len(st.layers),
                "per_layer_bytes": per_layer,
                "in_flight": self.in_flight,
                "seq": setup.seq,
                "micro_batch": setup.micro_batch,
                "act_elem_size": spec.act_bytes,
                "kernel": setup.kernel,
                "recompute": RECOMPUTE_WORDS[mode]
                + (f" (k={k})" if mode in ("every", "block", "uniform") else ""),
                "fused": spec.fused,
                "tp": lo.tp,
                "sp": lo.sp,
                "cp": lo.cp,
            },
            "activations",
        )

    def logits(self) -> LineItem:
        setup, spec = self.setup, self.spec
        arch, lo = setup.arch, setup.layout
        loss = setup.loss_spec
        return LineItem(
            "logits",
            "Loss (logits and their gradient)",
            self.a.loss,
            f"{loss.describe()}: its largest moment, forward or gradient (engine/loss.py)",
            "{tokens} tokens × {vocab} vocab per rank, {mode} = {bytes}",
            {
                "tokens": spec.tokens,
                "vocab": -(-arch.vocab_size // lo.tp),
                "mode": loss.mode,
                "chunks": loss.chunks,
                "keeps_logits": loss.keep_logits,
            },
            "transient",
        )

    # what the backward pass builds beside the saved activations: the recomputed layer, the
    # activation gradients, a fresh weight gradient, autocast's weight casts

    def recompute_buffer(self) -> LineItem:
        a = self.a
        return _simple(
            "recompute_buffer",
            "Recomputed layer",
            max(a.recompute_last, a.recompute_first),
            "one layer's tensors rebuilt in backward, beyond what the recompute mode kept",
            "transient",
        )

    def activation_grads(self) -> LineItem:
        return _simple(
            "activation_grads",
            "Activation gradients",
            self.a.act_grads,
            "gradients flowing through one layer's backward: its output's + the widest op's",
            "transient",
        )

    def new_gradient(self) -> LineItem:
        return _simple(
            "new_gradient",
            "New weight gradient (accumulating)",
            self.a.new_grad,
            "a layer's freshly computed weight gradient before AccumulateGrad adds it in place",
            "transient",
        )

    def autocast_casts(self) -> LineItem:
        return _simple(
            "autocast_casts",
            "Autocast bf16 weight casts",
            self.a.casts,
            "2 bytes × linear params × micro-batches in flight (saved by each matmul)",
            "transient",
        )

    # communication buffers: FSDP's gathered units and unsharded gradients, ZeRO's all-gather
    # and reduce buckets, DDP's bucket copy

    def gathered_weights(self) -> LineItem:
        a = self.a
        return _simple(
            "gathered_weights",
            "All-gathered weights (FSDP)",
            max(a.gather_forward, a.gather_last),
            "units gathered to run: the current one and the next (prefetched or being copied"
            " out), or every unit of the stage when not resharded after forward",
            "comm",
        )

    def unit_grads(self) -> LineItem:
        a = self.a
        return _simple(
            "unit_grads",
            "Unsharded gradient of one unit",
            max(a.unit_grads_last, a.unit_grads_first),
            "the layer's unsharded gradients so far + the previous unit's reduce-scatter input"
            + (" (fp32)" if self.setup.framework.reduce_fp32 else ""),
            "comm",
        )

    def deferred_grads(self) -> LineItem:
        return _simple(
            "deferred_grads",
            "Unsharded gradients (pipeline defers reduce)",
            self.a.deferred_grads,
            "the stage's gradients accumulated unsharded in the reduce dtype until the last"
            " micro-batch (torch.distributed.pipelining with FSDP)",
            "comm",
        )

    def allgather_buffer(self) -> LineItem:
        return _simple(
            "allgather_buffer",
            "All-gathered units (ZeRO-3/FSDP)",
            _held(self.a, "allgather_buffer"),
            "2 × largest unit (current + prefetched) × weight bytes",
            "comm",
        )

    def grad_buffer(self) -> LineItem:
        return _simple(
            "grad_buffer",
            "Gradient reduce buffer",
            _held(self.a, "grad_buffer"),
            "gradient bucket: min(reduce_bucket_size, params) × grad bytes, or one unit's"
            " unsharded gradient",
            "comm",
        )

    def allgather_bucket(self) -> LineItem:
        return _simple(
            "allgather_bucket",
            "Weight all-gather bucket",
            _held(self.a, "allgather_bucket"),
            "min(allgather_bucket_size, params) × weight bytes (ZeRO-1/2 after the step)",
            "comm",
        )

    def ddp_buckets(self) -> LineItem:
        return _simple(
            "ddp_buckets",
            "DDP gradient buckets",
            _held(self.a, "ddp_buckets"),
            "a second copy of every gradient (gradient_as_bucket_view=False)",
            "comm",
        )

    def deferred_wgrad(self) -> LineItem:
        return _simple(
            "deferred_wgrad",
            "Deferred LM-head wgrad inputs",
            _held(self.a, "deferred_wgrad"),
            "micro-batches × tokens × (hidden + vocab ÷ tp) × activation bytes: the LM head's"
            " input and output gradient kept for its deferred weight gradient (Megatron"
            " --defer-embedding-wgrad-compute)",
            "activations",
        )

    # kernel-side copies and scratch: GEMM workspaces, fp8 weight copies, the NF4 weight
    # dequantised for its matmul, the optimizer step's temporaries

    def gemm_workspace(self) -> LineItem:
        return _simple(
            "gemm_workspace",
            "GEMM workspaces",
            _held(self.a, "gemm_workspace"),
            "cuBLAS (and Transformer Engine) workspaces taken from the caching allocator",
            "transient",
        )

    def fp8_weights(self) -> LineItem:
        return _simple(
            "fp8_weights",
            "fp8 weight copies",
            self.a.fp8_weights,
            "fp8 weight + its transpose per linear parameter (Transformer Engine)",
            "weights",
        )

    def dequant_buffer(self) -> LineItem:
        return _simple(
            "dequant_buffer",
            "NF4 dequantised weight",
            self.a.dequant,
            "largest linear weight dequantised to bf16 for its matmul (bitsandbytes)",
            "transient",
        )

    def kv_cache(self) -> LineItem:
        return _simple(
            "kv_cache",
            "KV cache built in training",
            self.a.kv_cache,
            "use_cache left on: each layer's fused QKV output, kept whole by its K,V view,"
            " until the forward returns (engine/step_amounts.py _training_kv_cache)",
            "activations",
        )

    def optimizer_temporaries(self) -> LineItem:
        return _simple(
            "optimizer_temporaries",
            "Optimizer step temporaries",
            self.a.step_temp,
            f"{self.setup.framework.optimizer_kernel} optimizer: one state's worth (foreach) or"
            " the largest parameter's (for-loop)",
            "transient",
        )


def _held(a: Amounts, key: str) -> int:
    """The bytes the phase amounts hold for a buffer line (0 when it holds none)."""
    return dict(a.held).get(key, 0)


def _simple(key: str, label: str, n: int, formula: str, category: str) -> LineItem:
    return LineItem(key, label, n, formula, "", {}, category)
