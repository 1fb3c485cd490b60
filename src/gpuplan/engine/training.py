"""The training bill per GPU: the step as a timeline of phases, its peak, and the budget.

    per GPU = the largest phase of the step (engine/phases.py): model states (ZeRO §3.1),
              the activations saved so far (Korthikanti et al. 2022), the loss, the recomputed
              layer, gathered units and buffers — each as the framework holds them
            + allocator reserve + CUDA context                           (engine/allocator.py)
    budget  = headroom × GPU memory                                      (the lesson: ≤ ~90 %)

The bill is for the heaviest pipeline stage (or the one asked for). Under 1F1B, stage s holds
the activations of min(pp − s, m) micro-batches (Narayanan et al. 2021 §2.2; Korthikanti et al.
2022 §4.2.3: the first stage holds pp of them). What a framework keeps, frees and fuses is its
profile (engine/frameworks/profile.py); the generic profile is the lesson's bill. Offloaded
states and activations leave the GPU and appear on a separate host bill (ZeRO-Offload, Ren et
al. 2021 §4; FSDP CPUOffload).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from gpuplan.engine.activations import (
    COUNTED,
    ActivationSpec,
    backward_released_bytes,
    backward_transient_bytes,
    checkpointed_layers,
    edge_bytes,
    forward_working_set_bytes,
    is_checkpointed,
    layer_bytes,
    parse_recompute,
    recompute_buffer_bytes,
    stage_bytes,
    validate_activations,
)
from gpuplan.engine.allocator import reserve_bytes
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.bill import Bill, LineItem, total_bytes
from gpuplan.engine.cost import (
    DEFAULT_MFU,
    DEFAULT_NETWORK_BYTES_PER_S,
    CommBytes,
    StepFlops,
    StepTime,
    cp_comm_bytes,
    dp_comm_bytes,
    ep_comm_bytes,
    flop_params,
    frozen_gather_bytes,
    pp_comm_bytes,
    step_flops,
    step_time,
    tp_comm_bytes,
)
from gpuplan.engine.frameworks.profile import GENERIC, FrameworkProfile, validate_profile
from gpuplan.engine.gathered import Gathered, Units, fsdp_gathered
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.lora import (
    LoraSpec,
    linear_shapes,
    lora_modules_per_layer,
    lora_params,
    resolve_targets,
)
from gpuplan.engine.loss import LossSpec, loss_memory, parse_loss
from gpuplan.engine.model_states import (
    ModelStates,
    StageParams,
    factored_moment_params,
    held_recipe,
    layer_params_per_rank,
    model_states,
    stage_param_list,
)
from gpuplan.engine.params import ParamCounts, count_params
from gpuplan.engine.phases import Amounts, Phase, build_phases, phase_totals
from gpuplan.engine.precision import Precision
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.serving import DEFAULT_CUDA_CONTEXT_BYTES, DEFAULT_HEADROOM
from gpuplan.engine.sharding import Layout, validate_layout
from gpuplan.engine.training_lines import state_lines, step_lines
from gpuplan.engine.weights import WeightFormat, weights_bytes
from gpuplan.errors import GpuplanError

OFFLOAD = ("none", "optimizer", "params")


@dataclass(frozen=True)
class TrainingSetup:
    """Everything a training bill depends on. Frozen, so bills can be cached and compared."""

    arch: Architecture
    recipe: TrainingRecipe
    gpu: GpuSpec
    layout: Layout = Layout()
    seq: int = 4096
    micro_batch: int = 1
    grad_accum: int = 0  # micro-batches per optimizer step per data-parallel rank (0: = pp)
    recompute: str = "none"
    kernel: str = "flash"
    lora: LoraSpec | None = None
    base: WeightFormat | None = None  # the frozen base's format when `lora` is set
    offload: str = "none"
    offload_activations: bool = False
    capacity_factor: float = 1.0
    headroom: float = DEFAULT_HEADROOM
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES
    mfu: float = DEFAULT_MFU
    network_bytes_per_s: float = DEFAULT_NETWORK_BYTES_PER_S
    framework: FrameworkProfile = GENERIC
    loss: str = ""  # a loss mode (engine/loss.py); "" = the framework's
    stage: int | None = None  # bill this pipeline stage (-1 = the last); None = the heaviest

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step: as given, else pp (enough to fill a 1F1B pipeline)."""
        return self.grad_accum or self.layout.pp

    @property
    def tokens_per_step(self) -> int:
        """Global batch in tokens: micro-batch × sequence × micro-batches × data-parallel ranks."""
        return self.micro_batch * self.seq * self.micro_batches * self.layout.dp

    @property
    def loss_spec(self) -> LossSpec:
        spec = parse_loss(self.loss or self.framework.loss)
        fw = self.framework
        return replace(spec, keep_logits=fw.keep_logits, compiled=fw.compile_loss)


@dataclass(frozen=True)
class TrainingBill(Bill):
    """The answer: the peak phase of the most loaded GPU, every phase, the host bill, the cost."""

    setup: TrainingSetup
    items: tuple[LineItem, ...]
    host_items: tuple[LineItem, ...]
    params: ParamCounts
    stage: StageParams
    states: ModelStates
    trainable_params: int  # whole model
    budget_bytes: int
    activations_bytes: int  # saved activations on this GPU (all micro-batches in flight)
    activation_bytes_per_layer: int  # one layer, one micro-batch, this GPU
    in_flight: int
    flops: StepFlops
    comm: CommBytes
    time: StepTime | None
    phases: tuple[Phase, ...] = field(default=())
    peak_phase: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def host_bytes_per_gpu(self) -> int:
        return total_bytes(self.host_items)

    model_states_on_gpu: int = 0

    @property
    def model_states_bytes(self) -> int:
        """Weights + gradients + optimizer states (fp32 master included) held on this GPU
        (offloaded states are on the host bill)."""
        return self.model_states_on_gpu

    @property
    def allocated_bytes(self) -> int:
        """The peak phase's live tensors: what torch.cuda.max_memory_allocated() reports."""
        return self.phase(self.peak_phase).total

    @property
    def reserved_bytes(self) -> int:
        """Allocated + the allocator's reserve: torch.cuda.max_memory_reserved()."""
        return self.allocated_bytes + sum(
            i.bytes for i in self.items if i.key == "allocator_reserve"
        )

    @property
    def fits(self) -> bool:
        return self.per_gpu_total_bytes <= self.budget_bytes

    @property
    def gpus(self) -> int:
        return self.setup.gpus

    def phase(self, name: str) -> Phase:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)

    def extra_lines(self) -> tuple[LineItem, ...]:
        return self.host_items


def validate_training(setup: TrainingSetup) -> None:
    """Reject impossible setups with a one-line reason."""
    a = setup.arch
    validate_layout(
        setup.layout,
        a.attention.num_heads,
        a.attention.num_kv_heads,
        a.num_layers,
        a.moe.num_experts if a.moe else 0,
    )
    if setup.grad_accum < 0:
        raise GpuplanError(f"grad-accum must be at least 1, got {setup.grad_accum}")
    for name in ("seq", "micro_batch"):
        value = getattr(setup, name)
        if isinstance(value, bool) or value < 1:
            raise GpuplanError(f"{name.replace('_', '-')} must be at least 1, got {value}")
    if not 0 < setup.headroom <= 1:
        raise GpuplanError(f"headroom must be in (0, 1], got {setup.headroom}")
    if not 0 < setup.mfu <= 1:
        raise GpuplanError(f"MFU must be in (0, 1], got {setup.mfu}")
    if setup.offload not in OFFLOAD:
        raise GpuplanError(f"unknown offload {setup.offload!r}; use none, optimizer or params")
    if setup.offload == "params" and setup.layout.zero != 3:
        raise GpuplanError(
            "offloading parameters needs ZeRO-3 or FSDP FULL_SHARD (--zero 3 or --fsdp full_shard)"
        )
    if setup.offload == "optimizer" and setup.layout.zero == 0:
        raise GpuplanError("offloading the optimizer needs ZeRO 1-3 (ZeRO-Offload) or FSDP")
    if setup.lora is not None:
        if setup.lora.rank < 1:
            raise GpuplanError(f"LoRA rank must be at least 1, got {setup.lora.rank}")
        resolve_targets(a, setup.lora.targets)
    if setup.cuda_context_bytes < 0:
        raise GpuplanError("overheads must not be negative")
    validate_profile(setup.framework)
    _validate_stage(setup)
    fw = setup.framework
    if fw.optimizer_in_backward and setup.micro_batches > 1:
        raise GpuplanError(
            "the optimizer step in backward frees each gradient at once: it cannot accumulate"
            f" gradients over {setup.micro_batches} micro-batches (use --grad-accum 1)"
        )


def _validate_stage(setup: TrainingSetup) -> None:
    pp = setup.layout.pp
    if setup.stage is not None and not -pp <= setup.stage < pp:
        raise GpuplanError(f"stage {setup.stage} does not exist with pp={pp}")


@lru_cache(maxsize=256)
def _bpp(p: Precision) -> float:
    """Bytes per parameter as a float (Fractions are exact but slow in the hot loop)."""
    return float(p.bytes_per_param)


@lru_cache(maxsize=1024)
def _counts(arch: Architecture) -> ParamCounts:
    return count_params(arch)


@lru_cache(maxsize=1024)
def _lora_total(arch: Architecture, lora: LoraSpec) -> int:
    return lora_params(arch, lora)


@lru_cache(maxsize=1024)
def _base_bytes(arch: Architecture, fmt: WeightFormat) -> int:
    return weights_bytes(_counts(arch), fmt)


def _held(setup: TrainingSetup) -> TrainingRecipe:
    fw = setup.framework
    return held_recipe(setup.recipe, fw.fsdp_fp32_params, fw.reduce_fp32, setup.layout.zero)


def _activation_spec(setup: TrainingSetup) -> ActivationSpec:
    lo, fw = setup.layout, setup.framework
    lora_modules = lora_modules_per_layer(setup.arch, setup.lora) if setup.lora else 0
    return ActivationSpec(
        seq=setup.seq,
        micro_batch=setup.micro_batch,
        act_bytes=2 if setup.recipe.autocast else max(2, int(_bpp(setup.recipe.weights))),
        kernel=setup.kernel,
        recompute=setup.recompute,
        tp=lo.tp,
        sp=lo.sp,
        cp=lo.cp,
        capacity_factor=setup.capacity_factor,
        lora_rank=setup.lora.rank if setup.lora else 0,
        lora_modules=lora_modules,
        fused="compile" if fw.compile and fw.fused == "none" else fw.fused,
        dropout=fw.dropout > 0,
        sp_gathered=fw.sp_saves_gathered and lo.sp and lo.tp > 1,
        gqa_expanded=fw.gqa_expanded_kv,
    )


def _stage_states(
    setup: TrainingSetup, st: StageParams, base_fraction: float
) -> tuple[ModelStates, int]:
    """Model states of one stage, and its trainable parameter count."""
    lo, arch = setup.layout, setup.arch
    recipe = _held(setup)
    if setup.lora is None:
        factored = factored_moment_params(arch, st.layers, lo.tp) if recipe.factored else 0
        states = model_states(recipe, lo, st.dense, st.experts, st.largest_unit, factored=factored)
        return states, st.total
    adapters = round(lora_params(arch, setup.lora, st.layers) / lo.tp)
    assert setup.base is not None
    states = model_states(
        recipe,
        lo,
        adapters,
        0,
        largest_unit=0,
        largest_unit_bytes=round(st.largest_unit * base_fraction),
        frozen_bytes=round(st.total * base_fraction),
        frozen_params=st.total,
    )
    return states, adapters


@dataclass(frozen=True)
class _Stage:
    """One pipeline stage's states and the amounts its phases are built from."""

    params: StageParams
    states: ModelStates
    trainable: int
    in_flight: int
    amounts: Amounts
    activations_host: int
    peak: int
    peak_phase: str


def training_bill(setup: TrainingSetup) -> TrainingBill:
    """Build the per-GPU training bill for `setup`: every phase of the step, its peak."""
    validate_training(setup)
    arch, lo = setup.arch, setup.layout
    spec = _activation_spec(setup)
    validate_activations(spec)
    counts = _counts(arch)
    base_fraction = 0.0
    if setup.lora is not None:
        lora = replace(setup.lora, targets=resolve_targets(arch, setup.lora.targets))
        setup = replace(setup, lora=lora)
        assert setup.base is not None
        base_fraction = _base_bytes(arch, setup.base) / counts.total
    stages = stage_param_list(arch, lo.tp, lo.pp, lo.ep)
    chosen = [stages[setup.stage]] if setup.stage is not None else stages
    best = max((_stage(setup, spec, st, base_fraction) for st in chosen), key=lambda s: s.peak)
    lines = {
        **state_lines(setup, _held(setup), best.params, best.states, base_fraction),
        **step_lines(setup, spec, best.params, best.in_flight, best.amounts),
    }
    phases = build_phases(best.amounts, lines)
    peak = next(p for p in phases if p.name == best.peak_phase)
    items = _bill_items(setup, peak)
    host = _host_items(setup, lines, best)
    trainable_total = _lora_total(arch, setup.lora) if setup.lora else counts.total
    flops, comm, time = _cost(setup, spec, best.params, best.trainable, counts)
    st = best.params
    per_layer = layer_bytes(arch, arch.layers[st.layers[0]], spec) if st.layers else 0
    return TrainingBill(
        setup=setup,
        items=items,
        host_items=host,
        params=counts,
        stage=st,
        states=best.states,
        trainable_params=trainable_total,
        budget_bytes=int(setup.gpu.memory_bytes * setup.headroom),
        activations_bytes=best.amounts.activations,
        activation_bytes_per_layer=per_layer,
        in_flight=best.in_flight,
        flops=flops,
        comm=comm,
        time=time,
        phases=phases,
        peak_phase=best.peak_phase,
        model_states_on_gpu=_on_gpu_states(best.amounts),
        notes=tuple(_notes(setup, st, best.in_flight, peak)),
    )


def _on_gpu_states(a: Amounts) -> int:
    return a.weights + a.gradients + a.master + a.optimizer


def _stage(
    setup: TrainingSetup, spec: ActivationSpec, st: StageParams, base_fraction: float
) -> _Stage:
    lo = setup.layout
    states, trainable = _stage_states(setup, st, base_fraction)
    in_flight = min(lo.pp - st.stage, setup.micro_batches) if lo.pp > 1 else 1
    amounts, host_act = _amounts(setup, spec, st, states, in_flight, base_fraction)
    totals = phase_totals(amounts)
    name = max(totals, key=lambda k: totals[k])
    return _Stage(st, states, trainable, in_flight, amounts, host_act, totals[name], name)


def _amounts(
    setup: TrainingSetup,
    spec: ActivationSpec,
    st: StageParams,
    states: ModelStates,
    in_flight: int,
    base_fraction: float,
) -> tuple[Amounts, int]:
    """The bytes the phases are made of, for one stage (engine/phases.py `Amounts`)."""
    arch, lo, fw = setup.arch, setup.layout, setup.framework
    first, last = st.stage == 0, st.stage == lo.pp - 1
    offloaded_states = setup.offload in ("optimizer", "params")
    weights = 0 if setup.offload == "params" else states.weights
    grads = 0 if offloaded_states else states.gradients
    master = 0 if offloaded_states else states.master
    optimizer = 0 if offloaded_states else states.optimizer
    saved = _activations(setup, spec, st, in_flight, first, last)
    g_before, g_last, g_first = _gradient_lifetime(setup, st, states, grads)
    casts, casts_first = _autocast_casts(setup, st, in_flight)
    gather = _gathered(setup, st, base_fraction)
    a = spec.act_bytes
    tokens = spec.tokens
    vocab = -(-arch.vocab_size // lo.tp)
    loss = loss_memory(setup.loss_spec, tokens, vocab, arch.hidden_size, a) if last else None
    amounts = Amounts(
        weights=weights,
        gradients=grads,
        master=master,
        optimizer=optimizer,
        grads_before=g_before,
        grads_last=g_last,
        grads_first=g_first,
        activations=saved.end,
        forward_peak=saved.forward_peak,
        activations_last=saved.last,
        activations_first=saved.first,
        loss=max(loss.forward, loss.backward) if loss else 0,
        recompute_last=saved.rebuilt_last,
        recompute_first=saved.rebuilt_first,
        act_grads=backward_transient_bytes(arch, spec, st.layers),
        new_grad=_accumulating(setup, st, states, states.gradients),
        casts=casts,
        casts_first=casts_first,
        gather_forward=gather.forward,
        gather_loss=gather.loss,
        gather_last=gather.last,
        gather_first=gather.first,
        unit_grads_last=gather.grads_last,
        unit_grads_first=gather.grads_first,
        deferred_grads=gather.deferred,
        held=_held_buffers(setup, states),
        fp8_weights=2 * _linear_params(arch, st.layers, lo.tp) if fw.fp8 == "te" else 0,
        dequant=_dequant(setup, st),
        step_temp=0 if offloaded_states else _step_temporaries(setup, st, states),
        optimizer_in_backward=fw.optimizer_in_backward,
        last_stage=last,
    )
    return amounts, saved.host


@dataclass(frozen=True)
class _Saved:
    """Activation bytes at the moments the phases look at (`_activations`)."""

    end: int  # saved by the micro-batches in flight at the end of forward
    forward_peak: int  # the most alive during the last layer's forward (≥ end)
    last: int  # at the last layer's backward peak
    first: int  # at the first layer's backward peak
    rebuilt_last: int  # the last layer rebuilt by recompute, at its peak
    rebuilt_first: int
    host: int  # offloaded to the host


def _activations(
    setup: TrainingSetup,
    spec: ActivationSpec,
    st: StageParams,
    in_flight: int,
    first: bool,
    last: bool,
) -> _Saved:
    """Saved activations through the step.

    A layer's backward peaks inside its MLP once the last linear's input has been freed
    (`backward_released_bytes`): from the saved tensors, or from the rebuilt ones when the layer
    is checkpointed. Before the last layer's backward the loss side of the stage (final norm,
    labels) is gone; at the first layer's backward this micro-batch keeps only that layer and
    the input side (ids, RoPE tables), the other micro-batches in flight everything. A
    checkpointed last layer holds its unsaved working set while its forward runs. Activation
    offload (torchtune OffloadActivations, DeepSpeed CPU checkpointing) keeps the layer in use
    and the one being copied on the GPU."""
    arch = setup.arch
    n = len(st.layers)
    one = stage_bytes(arch, spec, st.layers, first, last)
    act = one * in_flight
    rebuilt = recompute_buffer_bytes(arch, spec, st.layers)
    freed = backward_released_bytes(arch, spec, st.layers)
    ck_last, ck_first = is_checkpointed(spec, n - 1), is_checkpointed(spec, 0)
    loss_side = edge_bytes(arch, spec, first, last) - edge_bytes(arch, spec, first, False)
    plain = (
        replace(spec, recompute="none") if parse_recompute(spec.recompute)[0] in COUNTED else spec
    )
    first_spec = replace(spec, recompute="full") if ck_first and plain is not spec else plain
    first_layer = layer_bytes(arch, arch.layers[st.layers[0]], first_spec) if st.layers else 0
    act_last = act - loss_side - (0 if ck_last else freed)
    act_first = (in_flight - 1) * one + first_layer + edge_bytes(arch, spec, first, False)
    act_first = max(0, min(act_last, act_first - (0 if ck_first else freed)))
    forward_peak = act
    if ck_last:
        working = forward_working_set_bytes(arch, spec, st.layers)
        forward_peak = max(act, act - loss_side + working)

    def rebuilt_at(checkpointed: bool) -> int:
        if checkpointed:
            return max(0, rebuilt - freed)
        return rebuilt if parse_recompute(spec.recompute)[0] == "selective" else 0

    saved = _Saved(
        end=act,
        forward_peak=forward_peak,
        last=act_last,
        first=act_first,
        rebuilt_last=rebuilt_at(ck_last),
        rebuilt_first=rebuilt_at(ck_first),
        host=0,
    )
    if not setup.offload_activations or n <= 2:
        return saved
    edge = edge_bytes(arch, spec, first, last)
    kept = 2 * ((one - edge) // n) + edge
    return replace(
        saved,
        end=kept,
        forward_peak=min(kept, forward_peak),
        last=min(kept, act_last),
        first=min(kept, act_first),
        host=act - kept,
    )


def _gradient_lifetime(
    setup: TrainingSetup, st: StageParams, states: ModelStates, grads: int
) -> tuple[int, int, int]:
    """Gradient bytes alive (before backward, at its last layer's peak, at its first layer's).

    Persistent buffers hold all of them throughout, and each new gradient is computed apart
    before it is added in place (autograd's AccumulateGrad). zero_grad(set_to_none=True) frees
    them after the step, so the first micro-batch starts without and builds them unit by unit
    (at a layer's peak: the units after it, and its MLP's last linear); later micro-batches
    accumulate into them. An optimizer stepped in backward (torchtune optimizer_in_bwd: one
    optimizer per parameter, run from a post-accumulate-grad hook) frees each gradient as soon
    as it is used: one parameter's at a time, the largest matrix at most."""
    fw, lo, arch = setup.framework, setup.layout, setup.arch
    per_param = grads / max(1, states.trainable)
    if fw.optimizer_in_backward:
        one = round(per_param * _largest_param(setup, st))
        return 0, one, one
    if setup.lora is not None or not st.layers:
        held = grads if fw.grads == "persistent" or setup.micro_batches > 1 else 0
        return held, held, grads
    last_layer, last_down = layer_params_per_rank(arch, st.layers[-1], lo.tp, lo.ep)
    first_layer, first_down = layer_params_per_rank(arch, st.layers[0], lo.tp, lo.ep)
    if lo.zero >= 2:  # the layer's own gradients are unsharded until reduce-scattered
        last_down = first_down = 0
    if fw.grads == "persistent" or setup.micro_batches > 1:
        return grads, grads, grads
    built_last = st.lm_head + last_down
    built_first = st.total - st.embedding - first_layer + first_down
    return 0, round(per_param * built_last), round(per_param * built_first)


def _accumulating(setup: TrainingSetup, st: StageParams, states: ModelStates, grads: int) -> int:
    """Into existing gradients, autograd's AccumulateGrad computes each new gradient apart and
    adds it in place: at a layer's peak, its MLP's last linear's new gradient."""
    fw, lo = setup.framework, setup.layout
    held = fw.grads == "persistent" or setup.micro_batches > 1
    if not held or fw.optimizer_in_backward or lo.zero >= 2 or setup.lora or not st.layers:
        return 0
    _, down = layer_params_per_rank(setup.arch, st.layers[-1], lo.tp, lo.ep)
    return round(grads / max(1, states.trainable) * down)


def _largest_param(setup: TrainingSetup, st: StageParams) -> int:
    """Elements of the largest trainable tensor on this GPU: the embedding, the LM head or a
    layer's largest linear weight (÷ tp); a LoRA adapter's when only adapters train."""
    if setup.lora is not None:
        arch = setup.arch
        shapes = linear_shapes(arch, arch.layers[st.layers[0]]) if st.layers else {}
        sizes = [
            max(i, o) * setup.lora.rank
            for n, g in shapes.items()
            for (i, o) in g
            if n in setup.lora.targets
        ]
        return max(sizes, default=0)
    biggest = max((_largest_linear(setup.arch, i) for i in st.layers[:1]), default=0)
    return max(st.embedding, st.lm_head, round(biggest / setup.layout.tp))


def _autocast_casts(setup: TrainingSetup, st: StageParams, in_flight: int) -> tuple[int, int]:
    """torch.autocast over fp32 weights: each linear weight's bf16 cast is cached for the forward
    and saved by its matmul for backward (2 bytes per linear parameter per micro-batch)."""
    if not setup.recipe.autocast or setup.lora:
        return 0, 0
    per = 2 * _linear_params(setup.arch, st.layers, setup.layout.tp)
    layer = per // max(1, len(st.layers))
    return per * in_flight, per * (in_flight - 1) + layer


def _gathered(setup: TrainingSetup, st: StageParams, base_fraction: float) -> Gathered:
    """FSDP2's gathered units and unsharded gradients (engine/gathered.py), for profiles that
    shard with fully_shard (not the DeepSpeed-style generic buffers), under ZeRO-3 over ≥ 2 ranks."""
    lo, fw = setup.layout, setup.framework
    if fw.buckets == "deepspeed" or lo.zero != 3 or lo.shard_degree < 2 or not st.layers:
        return Gathered()
    r = _held(setup)
    param = setup.recipe.weights  # the compute (param) dtype of gathered units
    frozen = setup.lora is not None
    first_layer, first_down = layer_params_per_rank(setup.arch, st.layers[0], lo.tp, lo.ep)
    last_layer, last_down = layer_params_per_rank(setup.arch, st.layers[-1], lo.tp, lo.ep)
    units = Units(
        first_layer=first_layer,
        largest_layer=max(first_layer, last_layer),
        embedding=st.embedding,
        head=st.lm_head,
        stage=st.total,
        first_layer_down=first_down,
        last_layer_down=last_down,
        weight_bytes=base_fraction if frozen else (1.0 if fw.fp8_all_gather else _bpp(param)),
        grad_bytes=_bpp(param),
        reduce_bytes=_bpp(r.grads),
    )
    reshard = fw.reshard_after_forward == "always" or (
        fw.reshard_after_forward == "unless_pp" and lo.pp == 1
    )
    keeps_head = fw.reshard_after_forward == "unless_pp"
    return fsdp_gathered(units, reshard, keeps_head, lo.pp > 1, trainable=not frozen)


def _held_buffers(setup: TrainingSetup, states: ModelStates) -> tuple[tuple[str, int], ...]:
    """Buffers held for the whole step: DeepSpeed-style buckets and gathered units (the generic
    and DeepSpeed profiles, model_states.py), or DDP's bucket copy of the gradients."""
    lo, fw = setup.layout, setup.framework
    out: list[tuple[str, int]] = []
    if fw.buckets == "deepspeed":
        out += [
            ("allgather_buffer", states.gather_buffer),
            ("grad_buffer", states.grad_buffer),
            ("allgather_bucket", states.allgather_bucket),
        ]
    if fw.ddp_bucket_copy and lo.zero == 0 and lo.dp * lo.cp > 1:
        out.append(("ddp_buckets", states.gradients))
    if fw.workspace_bytes:
        out.append(("gemm_workspace", fw.workspace_bytes))
    return tuple(out)


def _step_temporaries(setup: TrainingSetup, st: StageParams, states: ModelStates) -> int:
    """The optimizer step's temporaries: `foreach` builds one tensor per state tensor of the
    group at once (torch/optim/adam.py _multi_tensor_adam: torch._foreach_sqrt(exp_avg_sqs)),
    so one state's worth; `for-loop` two of the largest parameter's; fused kernels none."""
    kernel = setup.framework.optimizer_kernel
    recipe = _held(setup)
    if kernel == "none" or not recipe.states:
        return 0
    one_state = states.optimizer // len(recipe.states)
    if kernel == "foreach":
        return one_state
    share = st.largest_unit / max(1, st.total)
    return round(2 * one_state * share)


def _dequant(setup: TrainingSetup, st: StageParams) -> int:
    """QLoRA: the largest linear weight dequantised to bf16 for its matmul (bitsandbytes)."""
    if setup.lora is None or not setup.lora.quantized or not st.layers:
        return 0
    biggest = max(_largest_linear(setup.arch, i) for i in (st.layers[0], st.layers[-1]))
    return 2 * round(biggest / setup.layout.tp)


@lru_cache(maxsize=1024)
def _linear_params(arch: Architecture, layers: range, tp: int) -> int:
    """Linear-weight parameters of `layers` on one TP rank (what autocast and fp8 recast)."""
    total = 0
    for i in layers:
        shapes = linear_shapes(arch, arch.layers[i])
        total += sum(a * b for group in shapes.values() for (a, b) in group)
    return round(total / tp)


def _largest_linear(arch: Architecture, layer_index: int) -> int:
    shapes = linear_shapes(arch, arch.layers[layer_index])
    return max(i * o for group in shapes.values() for (i, o) in group)


def _bill_items(setup: TrainingSetup, peak: Phase) -> tuple[LineItem, ...]:
    """The peak phase's lines, then what the GPU shows beyond the tensors."""
    fw = setup.framework
    items = list(peak.lines)
    if fw.id != "generic":
        reserve = reserve_bytes(peak.total)
        items.append(
            LineItem(
                "allocator_reserve",
                "Allocator reserve",
                reserve,
                "peak allocated × f ÷ (1 − f): caching-allocator fragmentation, f = 0.15"
                " (Guo et al. 2024, GMLake)",
                "{allocated_bytes} × f ÷ (1 − f) = {bytes}",
                {"allocated_bytes": peak.total, "predicts": "reserved"},
                "reserve",
            )
        )
    items.append(
        LineItem(
            "cuda_context",
            "CUDA context",
            setup.cuda_context_bytes,
            "CUDA context, kernels and communicator buffers per process (fixed allowance)",
            "CUDA context allowance = {bytes}",
            {"predicts": "nvidia-smi"},
            "overhead",
        )
    )
    return tuple(items)


def _host_items(
    setup: TrainingSetup, lines: dict[str, LineItem], stage: _Stage
) -> tuple[LineItem, ...]:
    """What offload moves to the host: states (ZeRO-Offload / FSDP CPUOffload) and activations."""
    host: list[LineItem] = []
    full = {
        "weights": stage.states.weights,
        "gradients": stage.states.gradients,
        "master": stage.states.master,
        "optimizer": stage.states.optimizer,
    }
    moved = {"params": list(full), "optimizer": ["gradients", "master", "optimizer"]}
    for key in moved.get(setup.offload, []):
        host.append(replace(lines[key], bytes=full[key], label=lines[key].label + " (on host)"))
    if stage.activations_host:
        host.append(
            LineItem(
                "activations_offloaded",
                "Activations (offloaded)",
                stage.activations_host,
                "saved activations beyond the two layers kept on the GPU",
                "offloaded activations = {bytes}",
                {},
                "activations",
            )
        )
    return tuple(host)


def _cost(
    setup: TrainingSetup, spec: ActivationSpec, st: StageParams, trainable: int, counts: ParamCounts
) -> tuple[StepFlops, CommBytes, StepTime | None]:
    arch, lo, recipe = setup.arch, setup.layout, setup.recipe
    tokens = setup.tokens_per_step
    share = checkpointed_layers(spec, len(st.layers)) / max(1, len(st.layers))
    flops = step_flops(
        arch,
        flop_params(arch, counts),
        tokens,
        setup.seq,
        setup.recompute,
        setup.lora is not None,
        checkpointed_share=share,
    )
    m = setup.micro_batches
    a, h = spec.act_bytes, arch.hidden_size
    t = spec.tokens
    replicas = (lo.dp * lo.cp) // lo.shard_degree if lo.hybrid else 1
    dp = dp_comm_bytes(
        trainable,
        _bpp(recipe.weights),
        _bpp(recipe.grads),
        lo.zero,
        lo.shard_degree,
        replicas,
        m,
    )
    if setup.lora is not None and lo.zero == 3 and setup.base is not None:
        base_bytes = st.total * _base_bytes(arch, setup.base) / counts.total
        dp += frozen_gather_bytes(base_bytes, lo.shard_degree, m)
    layers = len(st.layers)
    moe_layers = sum(1 for i in st.layers if arch.layers[i].moe)
    full = parse_recompute(setup.recompute)[0] == "full"
    comm = CommBytes(
        dp=dp,
        tp=tp_comm_bytes(lo.tp, a, t, h, layers, m, "full" if full else "none"),
        pp=pp_comm_bytes(lo.pp, a, t, h, m, lo.tp if lo.sp else 1),
        cp=cp_comm_bytes(arch, lo.cp, lo.tp, a, t, layers, m),
        ep=ep_comm_bytes(arch, lo.ep, a, t, moe_layers, m),
    )
    gpu = setup.gpu
    if not gpu.bf16_dense_tflops:
        return flops, comm, None
    node = gpu.gpus_per_node
    intra = gpu.interconnect_bytes_per_s_per_dir or setup.network_bytes_per_s
    time = step_time(
        flops,
        lo.gpus,
        tokens,
        gpu.bf16_dense_tflops * 1e12,
        setup.mfu,
        comm,
        intra,
        setup.network_bytes_per_s,
        dp_spans_nodes=lo.gpus > node and not lo.hybrid,
        pp_spans_nodes=lo.gpus > node,
        pp=lo.pp,
        micro_batches=m,
    )
    return flops, comm, time


def _notes(setup: TrainingSetup, st: StageParams, in_flight: int, peak: Phase) -> list[str]:
    lo, arch, fw = setup.layout, setup.arch, setup.framework
    notes = list(arch.notes)
    if lo.pp > 1:
        notes.append(
            f"pp={lo.pp}: the bill is for stage {st.stage} ({len(st.layers)} layers"
            f"{', the embedding' if st.embedding else ''}{', the LM head' if st.lm_head else ''}),"
            f" holding {in_flight} micro-batch(es) in flight under 1F1B"
        )
    if lo.zero == 0 and lo.dp > 1:
        notes.append(
            "plain data parallelism copies every model state onto every GPU: it adds speed, never capacity"
        )
    if lo.tp > arch.attention.num_kv_heads and not arch.attention.is_mla:
        notes.append(
            f"tp={lo.tp} > {arch.attention.num_kv_heads} KV heads: k/v projections are replicated"
        )
    if setup.kernel == "flash" and setup.recompute == "selective":
        notes.append(
            "selective recompute (Megatron's core attention) drops only the s² attention scores,"
            " which flash/SDPA never stores: it saves little with this kernel (it does with"
            " --attention eager); --checkpointing op is torchtitan's op-level selective mode"
        )
    if setup.kernel == "eager" and setup.recompute == "none":
        notes.append("eager attention stores the s² softmax probabilities; flash/SDPA does not")
    if setup.recipe.factored:
        notes.append("Adafactor's factored second moment counts rows + columns per matrix (fp32)")
    if _held(setup) is not setup.recipe:
        notes.append(
            "FSDP2 mixed precision: the sharded fp32 parameter is the master copy; bf16 weights"
            " exist only in gathered units"
        )
    if arch.moe is not None and setup.capacity_factor != 1.0:
        notes.append(
            f"MoE capacity factor {setup.capacity_factor:g}: expert activations sized for that many slots"
        )
    if setup.lora is not None:
        notes.append(
            f"LoRA r={setup.lora.rank} on {', '.join(setup.lora.targets)}: activations are those of"
            " full fine-tuning plus the adapters' (an upper bound: frozen layers save a little less)"
        )
    if parse_recompute(setup.recompute)[0] in COUNTED:
        ck = checkpointed_layers(_activation_spec(setup), len(st.layers))
        notes.append(
            f"{setup.recompute}: {ck} of the stage's {len(st.layers)} layers are checkpointed"
        )
    return notes
