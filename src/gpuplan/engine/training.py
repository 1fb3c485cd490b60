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

from collections.abc import Callable
from functools import cached_property, lru_cache
from typing import NamedTuple, overload

from gpuplan.engine.activations import (
    COUNTED,
    ActivationSpec,
    checkpointed_layers,
    layer_bytes,
    layer_kinds,
    parse_recompute,
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
from gpuplan.engine.encdec_activations import training_notes
from gpuplan.engine.frameworks.profile import GENERIC, FrameworkProfile, validate_profile
from gpuplan.engine.frozen import field, record, replace
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.lora import (
    LoraSpec,
    lora_modules_per_layer,
    lora_params,
    paged_share,
    resolve_targets,
    saved_params,
)
from gpuplan.engine.loss import CHUNKED, LossSpec, parse_loss
from gpuplan.engine.mixer_activations import state_kernel_note
from gpuplan.engine.model_states import (
    ModelStates,
    StageParams,
    factored_moment_params,
    held_recipe,
    model_states,
    stage_param_list,
)
from gpuplan.engine.params import ParamCounts, count_params
from gpuplan.engine.phases import (
    Amounts,
    Phase,
    build_phase,
    build_phases,
    needed_lines,
    peak_phase,
    phase_parts,
    phase_totals,
)
from gpuplan.engine.pipeline import forwards_in_flight
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.serving import DEFAULT_CUDA_CONTEXT_BYTES, DEFAULT_HEADROOM
from gpuplan.engine.sharding import Layout, validate_layout
from gpuplan.engine.step_amounts import StateAmounts, bpp, held, state_amounts
from gpuplan.engine.step_amounts import amounts as step_amounts
from gpuplan.engine.train_speed import operator_time
from gpuplan.engine.training_lines import state_lines_and_makers, step_lines
from gpuplan.engine.weights import WeightFormat, weights_bytes
from gpuplan.errors import GpuplanError

OFFLOAD = ("none", "optimizer", "params")


@record
class TrainingSetup:
    """Everything a training bill depends on. Frozen, so bills can be cached and compared."""

    arch: Architecture
    recipe: TrainingRecipe
    gpu: GpuSpec
    layout: Layout = Layout()
    seq: int = 4096
    target_seq: int = 0  # an encoder-decoder's decoder length (0: seq, also the encoder's)
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
    mfu: float | None = None  # None: from operators (engine/train_speed.py); a figure pins it
    network_bytes_per_s: float = DEFAULT_NETWORK_BYTES_PER_S
    framework: FrameworkProfile = GENERIC
    loss: str = ""  # a loss mode (engine/loss.py); "" = the framework's
    stage: int | None = None  # bill this pipeline stage (-1 = the last); None = the heaviest

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def decoder_seq(self) -> int:
        """The decoder's length: an encoder-decoder's --target-seq, else --seq."""
        return self.target_seq or self.seq

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
        fw = self.framework
        default = fw.tp_loss if fw.tp_loss and self.layout.tp > 1 else fw.loss
        if self.arch.encoder is not None and default == "standard":
            default = "plain"  # T5, BART, Whisper: nn.CrossEntropyLoss on the logits as they are
        return _loss_spec(
            self.loss or default,
            fw.keep_logits,
            fw.compile_loss,
            fw.compile_plain_loss,
            fw.loss_shift_copy,
        )


@lru_cache(maxsize=256)
def _loss_spec(
    text: str, keep_logits: bool, compiled: bool, plain_too: bool, shift_copy: bool = False
) -> LossSpec:
    """The loss as run: compiled only where the framework's compile reaches it."""
    spec = parse_loss(text)
    reached = compiled and (plain_too or spec.mode in CHUNKED)
    return replace(spec, keep_logits=keep_logits, compiled=reached, shift_copy=shift_copy)


@record
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
    amounts: Amounts | None = None
    line_makers: dict[str, Callable[[], LineItem]] = field(
        default_factory=dict, compare=False, repr=False
    )
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

    @cached_property
    def phases(self) -> tuple[Phase, ...]:
        """Every phase of the step as bill lines (built on first use: the bill itself is the
        peak phase's lines)."""
        if self.amounts is None:
            return ()
        return build_phases(self.amounts, {k: make() for k, make in self.line_makers.items()})

    @property
    def allocated_bytes(self) -> int:
        """The peak phase's live tensors: what torch.cuda.max_memory_allocated() reports."""
        if self.amounts is None:
            return 0
        return phase_totals(self.amounts)[self.peak_phase]

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
    if a.encoder is not None:
        _validate_encoder_decoder(setup)
    elif setup.target_seq:
        raise GpuplanError(
            f"{a.name}: --target-seq is an encoder-decoder's decoder length; a decoder-only"
            " model trains on --seq alone"
        )
    if setup.target_seq < 0:
        raise GpuplanError(f"target-seq must be at least 1, got {setup.target_seq}")
    _validate_layout(setup.layout, a)
    if setup.grad_accum < 0:
        raise GpuplanError(f"grad-accum must be at least 1, got {setup.grad_accum}")
    for name in ("seq", "micro_batch"):
        value = getattr(setup, name)
        if isinstance(value, bool) or value < 1:
            raise GpuplanError(f"{name.replace('_', '-')} must be at least 1, got {value}")
    if not 0 < setup.headroom <= 1:
        raise GpuplanError(f"headroom must be in (0, 1], got {setup.headroom}")
    if setup.mfu is not None and not 0 < setup.mfu <= 1:
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
    _validate_profile(setup.framework)
    _validate_stage(setup)
    fw = setup.framework
    lo = setup.layout
    if lo.vpp > 1 and setup.micro_batches < lo.pp:
        # Megatron-LM (2024+) runs any count of at least pp: groups of
        # microbatch_group_size_per_vp_stage = pp, the last one shorter (schedules.py
        # get_pp_rank_microbatches); the warm-up count is the same (engine/pipeline.py)
        raise GpuplanError(
            f"interleaved 1F1B (vpp={lo.vpp}) needs at least pp={lo.pp} micro-batches,"
            f" got {setup.micro_batches}"
        )
    if fw.optimizer_in_backward and setup.micro_batches > 1:
        raise GpuplanError(
            "the optimizer step in backward frees each gradient at once: it cannot accumulate"
            f" gradients over {setup.micro_batches} micro-batches (use --grad-accum 1)"
        )


def _validate_encoder_decoder(setup: TrainingSetup) -> None:
    """What gpuplan models of training an encoder-decoder (engine/encdec_activations.py): both
    stacks on every GPU (data parallelism, ZeRO, FSDP: how the HF Trainer runs T5, BART and
    Whisper), eager PyTorch kernels, no recompute or full recompute, full fine-tuning."""
    a, lo = setup.arch, setup.layout
    what = f"{a.name}: training an encoder-decoder ({a.model_type})"
    split = [f"{k}={v}" for k, v in (("tp", lo.tp), ("pp", lo.pp), ("cp", lo.cp), ("ep", lo.ep))]
    split = [s for s in split if not s.endswith("=1")]
    if split:
        raise GpuplanError(
            f"{what} is modelled with data parallelism, ZeRO and FSDP only; {', '.join(split)}"
            " splits its stacks in ways gpuplan does not model"
        )
    if parse_recompute(setup.recompute)[0] not in ("none", "full"):
        raise GpuplanError(
            f"{what}: checkpointing {setup.recompute!r} is not modelled; use none or full"
            " (the HF Trainer's gradient_checkpointing)"
        )
    if setup.lora is not None:
        raise GpuplanError(f"{what} with LoRA is not modelled (its adapters over both stacks)")
    _validate_lengths(setup)
    fw = setup.framework
    if fw.fused != "none" or fw.compile:
        raise GpuplanError(f"{what} under kernel fusion or torch.compile is not modelled")
    if fw.fp8 != "none":
        raise GpuplanError(f"{what} in fp8 ({fw.fp8}) is not modelled")


def _validate_lengths(setup: TrainingSetup) -> None:
    """An encoder-decoder's source and target within its learned position tables (BART's
    max_position_embeddings, Whisper's max_target_positions)."""
    a, enc = setup.arch, setup.arch.encoder
    assert enc is not None
    target = setup.decoder_seq
    for what, n, key in (("source", setup.seq, "max_source"), ("target", target, "max_target")):
        most = enc.shape(key)
        if most and n > most and not (what == "source" and enc.encoder_tokens):
            flag = "--seq" if what == "source" else "--target-seq (default: --seq)"
            raise GpuplanError(
                f"{a.name}: a {what} of {n} tokens is longer than its {most} learned positions;"
                f" set {flag} to at most {most}"
            )


_VALID_LAYOUT: list[tuple[Layout, Architecture]] = []


def _validate_layout(lo: Layout, a: Architecture) -> None:
    """validate_layout, skipped for the layout and architecture last found valid (the same
    frozen objects: a search bills one layout many times)."""
    if _VALID_LAYOUT and _VALID_LAYOUT[0][0] is lo and _VALID_LAYOUT[0][1] is a:
        return
    validate_layout(
        lo,
        a.attention.num_heads,
        a.attention.num_kv_heads,
        a.num_layers,
        a.moe.num_experts if a.moe else 0,
    )
    _VALID_LAYOUT[:] = [(lo, a)]


_VALID_PROFILE: list[FrameworkProfile] = []


def _validate_profile(fw: FrameworkProfile) -> None:
    """validate_profile, skipped for the profile last found valid (the same frozen object)."""
    if _VALID_PROFILE and _VALID_PROFILE[0] is fw:
        return
    validate_profile(fw)
    _VALID_PROFILE[:] = [fw]


def _validate_stage(setup: TrainingSetup) -> None:
    pp = setup.layout.pp
    if setup.stage is not None and not -pp <= setup.stage < pp:
        raise GpuplanError(f"stage {setup.stage} does not exist with pp={pp}")


@lru_cache(maxsize=1024)
def _counts(arch: Architecture) -> ParamCounts:
    return count_params(arch)


@lru_cache(maxsize=1024)
def _lora_total(arch: Architecture, lora: LoraSpec) -> int:
    counts = _counts(arch)
    return lora_params(arch, lora) + saved_params(lora, counts.embedding, counts.lm_head)


@lru_cache(maxsize=1024)
def _base_bytes(arch: Architecture, fmt: WeightFormat) -> int:
    return weights_bytes(_counts(arch), fmt)


def _activation_spec(setup: TrainingSetup) -> ActivationSpec:
    """The activation spec of `setup`, validated (validate_activations)."""
    lo, fw, lora = setup.layout, setup.framework, setup.lora
    return _spec(
        setup.decoder_seq,
        setup.micro_batch,
        setup.recipe,
        setup.kernel,
        setup.recompute,
        lo.tp,
        lo.sp,
        lo.cp,
        setup.capacity_factor,
        lora.rank if lora else 0,
        lora_modules_per_layer(setup.arch, lora) if lora else 0,
        fw,
        kbit_prepared(setup),
        setup.seq if setup.arch.encoder is not None else 0,
    )


def kbit_prepared(setup: TrainingSetup) -> bool:
    """peft's prepare_model_for_kbit_training ran on a quantised (8- or 4-bit) LoRA base: the
    framework says it does (TRL's SFTTrainer, unless the QLoRA is sharded) and the base is
    below 16 bits a parameter."""
    base = setup.base
    return bool(
        setup.framework.kbit_fp32_residual and setup.lora and base and bpp(base.precision) < 2
    )


@lru_cache(maxsize=4096, typed=True)
def _spec(
    seq: int,
    micro_batch: int,
    recipe: TrainingRecipe,
    kernel: str,
    recompute: str,
    tp: int,
    sp: bool,
    cp: int,
    capacity_factor: float,
    lora_rank: int,
    lora_modules: int,
    fw: FrameworkProfile,
    kbit: bool = False,
    source: int = 0,
) -> ActivationSpec:
    """`_activation_spec` by what it depends on (validated once: a frozen spec is returned)."""
    spec = ActivationSpec(
        seq=seq,
        micro_batch=micro_batch,
        act_bytes=2 if recipe.autocast else max(2, int(bpp(recipe.weights))),
        kernel=kernel,
        recompute=recompute,
        tp=tp,
        sp=sp,
        cp=cp,
        capacity_factor=capacity_factor,
        lora_rank=lora_rank,
        lora_modules=lora_modules,
        fused="compile" if fw.compile and fw.fused == "none" else fw.fused,
        dropout=fw.dropout > 0,
        sp_gathered=fw.sp_saves_gathered and sp and tp > 1,
        gqa_expanded=fw.gqa_expanded_kv,
        residual_bytes=4 if kbit else 0,
        source=source,
    )
    validate_activations(spec)
    return spec


def _stage_states(
    setup: TrainingSetup, st: StageParams, base_fraction: float
) -> tuple[ModelStates, int]:
    """Model states of one stage, and its trainable parameter count."""
    fw = setup.framework
    buckets = (fw.reduce_bucket_elems, fw.allgather_bucket_elems)
    return _layout_states(
        setup.arch, held(setup), setup.layout, buckets, setup.lora, st, base_fraction
    )


class _LayoutPart(NamedTuple):
    """What a layout fixes of one stage, whatever the micro-batch or recompute."""

    states: ModelStates
    trainable: int
    amounts: StateAmounts  # the amounts built from the states (step_amounts.state_amounts)


@lru_cache(maxsize=8192, typed=True)
def _layout_part(
    arch: Architecture,
    recipe: TrainingRecipe,
    fw: FrameworkProfile,
    lora: LoraSpec | None,
    lo: Layout,
    offload: str,
    micro_batches: int,
    st: StageParams,
    base_fraction: float,
) -> _LayoutPart:
    """One stage's model states and the amounts they fix, by what they depend on (`micro_batches`
    only as 1 or 2: whether gradients accumulate): one lookup per stage weighed, a planner's
    search weighing each layout's stages at every micro-batch size and recompute mode."""
    buckets = (fw.reduce_bucket_elems, fw.allgather_bucket_elems)
    held_states = held_recipe(recipe, fw.fsdp_fp32_params, fw.reduce_fp32, lo.zero)
    states, trainable = _layout_states(arch, held_states, lo, buckets, lora, st, base_fraction)
    fixed = state_amounts(
        arch, fw, lo, recipe, lora, micro_batches, offload, st, states, base_fraction
    )
    return _LayoutPart(states, trainable, fixed)


@lru_cache(maxsize=8192)
def _layout_states(
    arch: Architecture,
    recipe: TrainingRecipe,
    lo: Layout,
    buckets: tuple[int, int],
    lora: LoraSpec | None,
    st: StageParams,
    base_fraction: float,
) -> tuple[ModelStates, int]:
    """`_stage_states` by what it depends on: a layout fixes it, whatever the micro-batch or
    recompute (a planner's search bills one layout many times)."""
    if lora is None:
        factored = factored_moment_params(arch, st.layers, lo.tp) if recipe.factored else 0
        states = model_states(
            recipe, lo, st.dense, st.experts, st.largest_unit, factored=factored, buckets=buckets
        )
        if recipe.paged:  # every weight matrix is over bitsandbytes' 1e5-element threshold
            states = replace(states, optimizer_paged=recipe.paged_bytes(states.optimizer))
        return states, st.total
    adapters = round(lora_params(arch, lora, st.layers) / lo.tp)
    adapters += saved_params(lora, st.embedding, st.lm_head)
    states = model_states(
        recipe,
        lo,
        adapters,
        0,
        largest_unit=0,
        largest_unit_bytes=round(st.largest_unit * base_fraction),
        frozen_bytes=round(st.total * base_fraction),
        frozen_params=st.total,
        buckets=buckets,
    )
    if recipe.paged:  # only adapter tensors of ≥ paged_min elements are paged
        share = paged_share(arch, lora, recipe.paged_min, st.layers)
        states = replace(states, optimizer_paged=int(recipe.paged_bytes(states.optimizer) * share))
    return states, adapters


def model_states_floor(setup: TrainingSetup) -> int:
    """A floor under the per-GPU bill of `setup`'s layout whatever its micro-batch, recompute and
    activations: every phase of the step holds the weights, fp32 master and optimizer states
    (engine/phases.py), so no bill is below the largest stage's, when none are offloaded (0 with
    LoRA or CPU offload). A planner skips a layout whose floor is over the budget without
    building its bills."""
    if setup.lora is not None or setup.offload != "none":
        return 0
    validate_training(setup)
    lo = setup.layout
    stages = _distinct_stages(setup.arch, lo.tp, lo.pp, lo.ep, lo.etp)
    held_states = (_stage_states(setup, st, 0.0)[0] for st in stages)
    return max(s.weights + s.master + s.optimizer for s in held_states)


class _Stage(NamedTuple):
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
    return _bill_of(_heaviest(setup))


def fitting_training_bill(setup: TrainingSetup) -> TrainingBill | None:
    """`training_bill(setup)` when it fits its budget, else None, and the lines, cost and notes
    of a bill that does not fit are never built: a planner's search keeps only the bills that
    fit and weighs many that do not (its walk up the micro-batches stops at the first). Raises
    GpuplanError as `training_bill` does for a setup it refuses."""
    heaviest = _heaviest(setup, budget_bytes(setup))
    return None if heaviest is None else _bill_of(heaviest)


class _Heaviest(NamedTuple):
    """What a bill is built from: the setup as billed, its activation spec, the model's
    parameter counts, the frozen base's bytes per parameter (LoRA), and the heaviest stage."""

    setup: TrainingSetup
    spec: ActivationSpec
    counts: ParamCounts
    base_fraction: float
    stage: _Stage


@overload
def _heaviest(setup: TrainingSetup, budget: None = None) -> _Heaviest: ...
@overload
def _heaviest(setup: TrainingSetup, budget: int) -> _Heaviest | None: ...


def _heaviest(setup: TrainingSetup, budget: int | None = None) -> _Heaviest | None:
    """Validate `setup` and weigh its pipeline stages (each as its peak phase's total), the
    first of the heaviest kept. With a `budget`: None as soon as one stage's bill is over it,
    the others not weighed (the heaviest is over it too: the per-GPU total grows with the
    peak, `_per_gpu_total`)."""
    validate_training(setup)
    arch, lo = setup.arch, setup.layout
    spec = _activation_spec(setup)
    counts = _counts(arch)
    base_fraction = 0.0
    if setup.lora is not None:
        lora = replace(setup.lora, targets=resolve_targets(arch, setup.lora.targets))
        setup = replace(setup, lora=lora)
        assert setup.base is not None
        base_fraction = _base_bytes(arch, setup.base) / counts.total
    if setup.stage is not None:
        chosen: tuple[StageParams, ...] = (
            stage_param_list(arch, lo.tp, lo.pp, lo.ep, lo.etp)[setup.stage],
        )
    else:
        chosen = _distinct_stages(arch, lo.tp, lo.pp, lo.ep, lo.etp)
    best: _Stage | None = None
    for st in chosen:
        stage = _stage(setup, spec, st, base_fraction)
        if budget is not None and _per_gpu_total(setup, stage.peak, _paged(setup, stage)) > budget:
            return None
        if best is None or stage.peak > best.peak:
            best = stage
    assert best is not None  # a layout has at least one stage
    return _Heaviest(setup, spec, counts, base_fraction, best)


def budget_bytes(setup: TrainingSetup) -> int:
    """The memory a training plan may use on one GPU: its memory × the headroom."""
    return int(setup.gpu.memory_bytes * setup.headroom)


def _allocator_reserve(setup: TrainingSetup, allocated: int) -> int | None:
    """The caching allocator's reserve over `allocated` bytes, or None for the generic profile
    (the lesson's bill has no reserve line)."""
    return reserve_bytes(allocated) if setup.framework.id != "generic" else None


def _per_gpu_total(setup: TrainingSetup, peak: int, paged: int = 0) -> int:
    """The per-GPU total of a bill whose peak phase holds `peak` bytes, without its lines: the
    peak, the allocator reserve, the paged optimizer states and the CUDA context, as
    `_bill_items` lists them."""
    return peak + (_allocator_reserve(setup, peak) or 0) + paged + setup.cuda_context_bytes


def _paged(setup: TrainingSetup, stage: _Stage) -> int:
    """Optimizer-state bytes of `stage` in CUDA unified memory (a paged recipe, states not
    offloaded): outside the allocator's counters, on the device once touched."""
    if setup.offload != "none":
        return 0
    return stage.states.optimizer_paged


def _bill_of(heaviest: _Heaviest) -> TrainingBill:
    """The bill of the heaviest stage: its peak phase as lines, the host bill, the cost."""
    setup, spec, counts, base_fraction, best = heaviest
    arch = setup.arch
    states_lines, makers = state_lines_and_makers(
        setup, held(setup), best.params, best.states, base_fraction
    )
    makers.update(step_lines(setup, spec, best.params, best.in_flight, best.amounts))
    parts = phase_parts(best.amounts)[best.peak_phase]
    peak = build_phase(best.peak_phase, parts, {k: makers[k]() for k in needed_lines(parts)})
    items = _bill_items(setup, peak, _paged(setup, best))
    host = _host_items(setup, states_lines, best)
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
        budget_bytes=budget_bytes(setup),
        activations_bytes=best.amounts.activations,
        activation_bytes_per_layer=per_layer,
        in_flight=best.in_flight,
        flops=flops,
        comm=comm,
        time=time,
        amounts=best.amounts,
        line_makers=makers,
        peak_phase=best.peak_phase,
        model_states_on_gpu=_on_gpu_states(best.amounts),
        notes=_notes(setup, st, best.in_flight),
    )


@lru_cache(maxsize=1024)
def _distinct_stages(
    arch: Architecture, tp: int, pp: int, ep: int, etp: int = 0
) -> tuple[StageParams, ...]:
    """The stages that can be the heaviest: of stages with the same layers (by kind), embedding
    and LM head, the earliest holds the most micro-batches in flight under 1F1B (pp − s), so
    only it is billed."""
    seen: dict[object, StageParams] = {}
    for st in stage_param_list(arch, tp, pp, ep, etp):
        key = (layer_kinds(arch, st.layers.start, st.layers.stop), st.embedding, st.lm_head)
        seen.setdefault(key, st)
    return tuple(seen.values())


def _on_gpu_states(a: Amounts) -> int:
    return a.weights + a.gradients + a.master + a.optimizer


def _stage(
    setup: TrainingSetup, spec: ActivationSpec, st: StageParams, base_fraction: float
) -> _Stage:
    lo, m = setup.layout, setup.micro_batches
    part = _layout_part(
        setup.arch,
        setup.recipe,
        setup.framework,
        setup.lora,
        lo,
        setup.offload,
        min(m, 2),
        st,
        base_fraction,
    )
    in_flight = forwards_in_flight(lo.pp, lo.vpp, st.stage, m)
    amounts, host_act = step_amounts(setup, spec, st, part.amounts, in_flight)
    name, peak = peak_phase(amounts)
    return _Stage(st, part.states, part.trainable, in_flight, amounts, host_act, peak, name)


def _bill_items(setup: TrainingSetup, peak: Phase, paged: int = 0) -> tuple[LineItem, ...]:
    """The peak phase's lines, then what the GPU shows beyond the tensors."""
    items = list(peak.lines)
    reserve = _allocator_reserve(setup, peak.total)
    if reserve is not None:
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
    if paged:
        items.append(_paged_line(paged))
    items.append(_cuda_context_line(setup.cuda_context_bytes))
    return tuple(items)


def _paged_line(n: int) -> LineItem:
    """Paged optimizer states: CUDA unified memory (bitsandbytes functional.get_paged,
    cudaMallocManaged), counted by nvidia-smi once touched, never by PyTorch's allocator."""
    return LineItem(
        "optimizer_paged",
        "Optimizer states (paged, unified memory)",
        n,
        "state payloads of ≥ 1e5 elements allocated with cudaMallocManaged (bitsandbytes"
        " is_paged): on the GPU once touched, paged out to host memory under pressure;"
        " not in torch.cuda.max_memory_allocated/reserved",
        "paged optimizer states = {bytes}",
        {"predicts": "nvidia-smi"},
        "optimizer",
    )


@lru_cache(maxsize=64, typed=True)
def _cuda_context_line(n: int) -> LineItem:
    """The CUDA context line (one per allowance: its `inputs` are shared, read-only)."""
    return LineItem(
        "cuda_context",
        "CUDA context",
        n,
        "CUDA context, kernels and communicator buffers per process (fixed allowance)",
        "CUDA context allowance = {bytes}",
        {"predicts": "nvidia-smi"},
        "overhead",
    )


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
    flops = _step_flops(
        arch,
        _flop_params(setup, counts),
        tokens,
        setup.seq,
        setup.recompute,
        setup.lora is not None,
        share,
    )
    m = setup.micro_batches
    a, h = spec.act_bytes, arch.hidden_size
    t = spec.tokens
    replicas = (lo.dp * lo.cp) // lo.shard_degree if lo.hybrid else 1
    dp = dp_comm_bytes(
        trainable,
        bpp(recipe.weights),
        bpp(recipe.grads),
        lo.zero,
        lo.shard_degree,
        replicas,
        m,
    )
    if setup.lora is not None and lo.zero == 3 and setup.base is not None:
        base_bytes = st.total * _base_bytes(arch, setup.base) / counts.total
        dp += frozen_gather_bytes(base_bytes, lo.shard_degree, m)
    layers = len(st.layers)
    moe_layers = _moe_layers(arch, st.layers)
    full = parse_recompute(setup.recompute)[0] == "full"
    comm = CommBytes(
        dp=dp,
        tp=tp_comm_bytes(lo.tp, a, t, h, layers, m, "full" if full else "none"),
        pp=pp_comm_bytes(lo.pp, a, t, h, m, lo.tp if lo.sp else 1, lo.vpp),
        cp=cp_comm_bytes(arch, lo.cp, lo.tp, a, t, layers, m),
        ep=ep_comm_bytes(arch, lo.ep, a, t, moe_layers, m),
    )
    gpu = setup.gpu
    if not gpu.half_dense_tflops:
        return flops, comm, None
    node = gpu.gpus_per_node
    intra = gpu.interconnect_bytes_per_s_per_dir or setup.network_bytes_per_s
    if setup.mfu is None and gpu.memory_bandwidth_bytes_per_s:
        cross = dp_comm_bytes(trainable, 2, bpp(recipe.grads), 0, 1, replicas) / max(
            1, lo.shard_degree
        )
        sharded = dp - (cross if lo.hybrid else 0.0)
        local = trainable / lo.shard_degree if lo.zero >= 1 else trainable
        n = _flop_params(setup, counts)
        return flops, comm, operator_time(setup, n, share, flops, comm, sharded, local, intra)
    time = step_time(
        flops,
        lo.gpus,
        tokens,
        gpu.half_dense_tflops * 1e12,
        setup.mfu or DEFAULT_MFU,
        comm,
        intra,
        setup.network_bytes_per_s,
        dp_spans_nodes=lo.gpus > node and not lo.hybrid,
        pp_spans_nodes=lo.gpus > node,
        pp=lo.pp,
        micro_batches=m,
        vpp=lo.vpp,
    )
    if setup.mfu is None:  # operators need the HBM bandwidth: said, never silently pinned
        note = f"{DEFAULT_MFU:.0%} MFU assumed: the GPU catalog has no HBM bandwidth for {gpu.name}"
        time = replace(time, assumed=note)
    return flops, comm, time


def _flop_params(setup: TrainingSetup, counts: ParamCounts) -> int:
    """N of 6ND per token of --seq. An encoder-decoder's encoder runs over the source (its
    fixed length for Whisper) and the rest over the target: N = (N_enc·S + N_rest·L) ÷ seq."""
    arch = setup.arch
    n = flop_params(arch, counts)
    if arch.encoder is None:
        return n
    encoder = arch.encoder.stack("encoder")
    source = arch.encoder.encoder_tokens or setup.seq
    target = setup.decoder_seq
    return round((encoder * source + (n - encoder) * target) / setup.seq)


@lru_cache(maxsize=4096, typed=True)
def _step_flops(
    arch: Architecture, n: int, tokens: int, seq: int, recompute: str, frozen: bool, share: float
) -> StepFlops:
    """step_flops by its arguments: a planner's layouts for one batch share them."""
    return step_flops(arch, n, tokens, seq, recompute, frozen, checkpointed_share=share)


@lru_cache(maxsize=1024)
def _moe_layers(arch: Architecture, layers: range) -> int:
    return sum(1 for i in layers if arch.layers[i].moe)


def _notes(setup: TrainingSetup, st: StageParams, in_flight: int) -> tuple[str, ...]:
    """The bill's notes, by what they depend on (`_note_list`)."""
    return _note_list(
        setup.arch,
        setup.layout,
        st,
        in_flight,
        setup.kernel,
        setup.recompute,
        setup.recipe,
        held(setup) is not setup.recipe,
        setup.capacity_factor,
        setup.lora,
        _activation_spec(setup) if parse_recompute(setup.recompute)[0] in COUNTED else None,
        (setup.seq, setup.decoder_seq),
    )


@lru_cache(maxsize=4096, typed=True)
def _note_list(
    arch: Architecture,
    lo: Layout,
    st: StageParams,
    in_flight: int,
    kernel: str,
    recompute: str,
    recipe: TrainingRecipe,
    fsdp_fp32: bool,
    capacity_factor: float,
    lora: LoraSpec | None,
    spec: ActivationSpec | None,
    lengths: tuple[int, int] = (0, 0),
) -> tuple[str, ...]:
    """What the bill says beside its lines: the layout's (stage, chunks, etp, replication), then
    the methods' (kernels, recompute, optimizer, FSDP, MoE, LoRA)."""
    notes = [*_arch_notes(arch, kernel, lengths), *_layout_notes(arch, lo, st, in_flight)]
    notes += _method_notes(arch, kernel, recompute, recipe, fsdp_fp32)
    notes += _tuning_notes(arch, st, recompute, capacity_factor, lora, spec)
    return tuple(notes)


def _arch_notes(arch: Architecture, kernel: str, lengths: tuple[int, int]) -> list[str]:
    """The architecture's notes; an encoder-decoder's training notes in place of its serving
    one (engine/encdec_activations.py)."""
    if arch.encoder is None:
        return list(arch.notes)
    kept = [n for n in arch.notes if not n.startswith("encoder-decoder: each request")]
    return kept + list(training_notes(arch, kernel, *lengths))


def _layout_notes(arch: Architecture, lo: Layout, st: StageParams, in_flight: int) -> list[str]:
    notes: list[str] = []
    if lo.pp > 1 and lo.vpp > 1:
        notes.append(
            f"pp={lo.pp} × vpp={lo.vpp}: the bill is for rank {st.stage} ({lo.vpp} chunks of"
            f" {len(st.layers) // lo.vpp} layers{', the embedding' if st.embedding else ''}"
            f"{', the LM head' if st.lm_head else ''}), holding {in_flight} chunk forwards"
            f" ({in_flight / lo.vpp:g} micro-batches' worth) in flight under interleaved 1F1B"
        )
        if len({kind for kind, _ in layer_kinds(arch, 0, arch.num_layers)}) > 1:
            notes.append(
                "virtual stages: a rank's chunks are spread over the model; its layer kinds are"
                " billed as those of the contiguous stage of the same size"
            )
    elif lo.pp > 1:
        notes.append(
            f"pp={lo.pp}: the bill is for stage {st.stage} ({len(st.layers)} layers"
            f"{', the embedding' if st.embedding else ''}{', the LM head' if st.lm_head else ''}),"
            f" holding {in_flight} micro-batch(es) in flight under 1F1B"
        )
    if lo.expert_tp != lo.tp:
        notes.append(
            f"etp={lo.expert_tp}: expert weights and states split etp ways; the experts'"
            " activations are billed as under tp (tokens ÷ tp × the whole expert width carry"
            " the same bytes as all tokens × the width ÷ tp)"
        )
    if lo.zero == 0 and lo.dp > 1:
        notes.append(
            "plain data parallelism copies every model state onto every GPU: it adds speed, never capacity"
        )
    if lo.tp > arch.attention.num_kv_heads and not arch.attention.is_mla:
        notes.append(
            f"tp={lo.tp} > {arch.attention.num_kv_heads} KV heads: k/v projections are replicated"
        )
    return notes


def _method_notes(
    arch: Architecture,
    kernel: str,
    recompute: str,
    recipe: TrainingRecipe,
    fsdp_fp32: bool,
) -> list[str]:
    notes: list[str] = []
    if kernel == "flash" and recompute == "selective":
        notes.append(
            "selective recompute (Megatron's core attention) drops only the s² attention scores,"
            " which flash/SDPA never stores: it saves little with this kernel (it does with"
            " --attention eager); --checkpointing op is torchtitan's op-level selective mode"
        )
    if kernel == "eager" and recompute == "none":
        notes.append("eager attention stores the s² softmax probabilities; flash/SDPA does not")
    if arch.num_state_layers:
        notes.append(state_kernel_note(arch, kernel))
    if recipe.factored:
        notes.append("Adafactor's factored second moment counts rows + columns per matrix (fp32)")
    if recipe.paged:
        notes.append(
            "paged optimizer (bitsandbytes): the states' payload is in CUDA unified memory — in the"
            " total (what nvidia-smi shows once the optimizer has run), not in allocated/reserved"
            " (torch.cuda.max_memory_*); under memory pressure it pages out to the host instead of"
            " running out of memory"
        )
    if fsdp_fp32:
        notes.append(
            "FSDP2 mixed precision: the sharded fp32 parameter is the master copy; bf16 weights"
            " exist only in gathered units"
        )
    return notes


def _tuning_notes(
    arch: Architecture,
    st: StageParams,
    recompute: str,
    capacity_factor: float,
    lora: LoraSpec | None,
    spec: ActivationSpec | None,
) -> list[str]:
    notes: list[str] = []
    if arch.moe is not None and capacity_factor != 1.0:
        notes.append(
            f"MoE capacity factor {capacity_factor:g}: expert activations sized for that many slots"
        )
    if lora is not None:
        notes.append(
            f"LoRA r={lora.rank} on {', '.join(lora.targets)}: activations are those of"
            " full fine-tuning plus the adapters' (an upper bound: frozen layers save a little less)"
        )
        if lora.quantized:
            notes.append(
                "quantised base: the blocks the caching allocator keeps after loading bf16"
                " weights and quantising them layer by layer (bitsandbytes) are not modelled;"
                " reserved and nvidia-smi can exceed this bill by up to the bf16 weights of a"
                " few layers"
            )
    if parse_recompute(recompute)[0] in COUNTED:
        assert spec is not None
        ck = checkpointed_layers(spec, len(st.layers))
        notes.append(f"{recompute}: {ck} of the stage's {len(st.layers)} layers are checkpointed")
    return notes
