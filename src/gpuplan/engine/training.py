"""The training bill per GPU: model states, activations, transient buffers, against a budget.

    per GPU = weights + gradients + fp32 master + optimizer states        (model states, ZeRO §3.1)
            + activations × micro-batches in flight + loss peak           (Korthikanti et al. 2022)
            + all-gather / reduce buffers + CUDA context
    budget  = headroom × GPU memory                                        (the lesson: ≤ ~90 %)

The bill is for the heaviest pipeline stage. Under 1F1B, stage s holds the activations of
min(pp − s, m) micro-batches (Narayanan et al. 2021 §2.2; Korthikanti et al. 2022 §4.2.3: the
first stage holds pp of them). Offloaded states and activations leave the GPU and appear on
a separate host bill (ZeRO-Offload, Ren et al. 2021 §4; FSDP CPUOffload).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from gpuplan.engine.activations import (
    ActivationSpec,
    edge_bytes,
    layer_bytes,
    logits_peak_bytes,
    recompute_buffer_bytes,
    stage_bytes,
    validate_activations,
)
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
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.lora import LoraSpec, lora_modules_per_layer, lora_params, resolve_targets
from gpuplan.engine.model_states import (
    ModelStates,
    StageParams,
    factored_moment_params,
    model_states,
    stage_param_list,
)
from gpuplan.engine.params import ParamCounts, count_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.serving import DEFAULT_CUDA_CONTEXT_BYTES, DEFAULT_HEADROOM
from gpuplan.engine.sharding import Layout, validate_layout
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


@dataclass(frozen=True)
class TrainingBill(Bill):
    """The answer: the bill of the most loaded GPU, the host bill, and what the step costs."""

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
    notes: tuple[str, ...] = field(default=())

    @property
    def host_bytes_per_gpu(self) -> int:
        return total_bytes(self.host_items)

    @property
    def model_states_bytes(self) -> int:
        """Weights + gradients + optimizer states (fp32 master included) on this GPU."""
        return sum(
            i.bytes for i in self.items if i.key in ("weights", "gradients", "master", "optimizer")
        )

    @property
    def fits(self) -> bool:
        return self.per_gpu_total_bytes <= self.budget_bytes

    @property
    def gpus(self) -> int:
        return self.setup.gpus

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


@lru_cache(maxsize=256)
def _bpp(p: Precision) -> float:
    """Bytes per parameter as a float (Fractions are exact but slow in the hot loop)."""
    return float(p.bytes_per_param)


@lru_cache(maxsize=256)
def _recipe_floats(recipe: TrainingRecipe) -> tuple[float, float]:
    """(master, optimizer-state) bytes per parameter as floats."""
    return float(recipe.master_bytes_per_param), round(float(recipe.optimizer_bytes_per_param), 4)


@lru_cache(maxsize=1024)
def _counts(arch: Architecture) -> ParamCounts:
    return count_params(arch)


@lru_cache(maxsize=1024)
def _lora_total(arch: Architecture, lora: LoraSpec) -> int:
    return lora_params(arch, lora)


@lru_cache(maxsize=1024)
def _base_bytes(arch: Architecture, fmt: WeightFormat) -> int:
    return weights_bytes(_counts(arch), fmt)


def _activation_spec(setup: TrainingSetup) -> ActivationSpec:
    lo = setup.layout
    lora_modules = lora_modules_per_layer(setup.arch, setup.lora) if setup.lora else 0
    return ActivationSpec(
        seq=setup.seq,
        micro_batch=setup.micro_batch,
        act_bytes=max(2, int(_bpp(setup.recipe.weights))),
        kernel=setup.kernel,
        recompute=setup.recompute,
        tp=lo.tp,
        sp=lo.sp,
        cp=lo.cp,
        capacity_factor=setup.capacity_factor,
        lora_rank=setup.lora.rank if setup.lora else 0,
        lora_modules=lora_modules,
    )


@lru_cache(maxsize=4096)
def _stages_states(
    arch: Architecture,
    recipe: TrainingRecipe,
    lo: Layout,
    lora: LoraSpec | None,
    base_fraction: float,
) -> tuple[tuple[ModelStates, int], ...]:
    """Model states and trainable parameter count of every pipeline stage: what a layout fixes
    whatever the micro-batch or recompute (computed once per layout for a planner's search)."""
    return tuple(
        _stage_states(arch, recipe, lo, lora, st, base_fraction)
        for st in stage_param_list(arch, lo.tp, lo.pp, lo.ep)
    )


@lru_cache(maxsize=4096)
def _stages_activations(
    arch: Architecture, spec: ActivationSpec, tp: int, pp: int, ep: int
) -> tuple[int, ...]:
    """Saved activation bytes of one micro-batch on every pipeline stage (independent of dp and
    ZeRO: computed once per activation spec and stage split)."""
    return tuple(
        stage_bytes(arch, spec, st.layers, st.stage == 0, st.stage == pp - 1)
        for st in stage_param_list(arch, tp, pp, ep)
    )


def model_states_floor(setup: TrainingSetup) -> int:
    """A floor under the per-GPU bill of `setup`'s layout whatever its micro-batch, recompute
    and activations: the heaviest stage's model states, when they all stay on the GPU (full
    training without CPU offload; 0 otherwise). The bill's stage is the one with the most
    states + activations, so its total is at least every stage's states. A planner skips a
    layout whose floor is over the budget without building its bills."""
    if setup.lora is not None or setup.offload != "none":
        return 0
    validate_training(setup)
    held = _stages_states(setup.arch, setup.recipe, setup.layout, None, 0.0)
    return max(states.total for states, _ in held)


def _stage_states(
    arch: Architecture,
    recipe: TrainingRecipe,
    lo: Layout,
    lora: LoraSpec | None,
    st: StageParams,
    base_fraction: float,
) -> tuple[ModelStates, int]:
    """Model states of one stage, and its trainable parameter count."""
    if lora is None:
        factored = factored_moment_params(arch, st.layers, lo.tp) if recipe.factored else 0
        states = model_states(recipe, lo, st.dense, st.experts, st.largest_unit, factored=factored)
        return states, st.total
    adapters = round(lora_params(arch, lora, st.layers) / lo.tp)
    frozen_bytes = round(st.total * base_fraction)
    unit_bytes = round(st.largest_unit * base_fraction)
    states = model_states(
        recipe,
        lo,
        adapters,
        0,
        largest_unit=0,
        largest_unit_bytes=unit_bytes,
        frozen_bytes=frozen_bytes,
        frozen_params=st.total,
    )
    return states, adapters


def training_bill(setup: TrainingSetup) -> TrainingBill:
    """Build the per-GPU training bill for `setup` (the heaviest pipeline stage when pp > 1)."""
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
    held = _stages_states(arch, setup.recipe, lo, setup.lora, base_fraction)
    saved = _stages_activations(arch, spec, lo.tp, lo.pp, lo.ep)
    m = setup.micro_batches
    best: tuple[int, StageParams, ModelStates, int, int, int] | None = None
    for st, (states, trainable), one_micro in zip(stages, held, saved, strict=True):
        in_flight = min(lo.pp - st.stage, m) if lo.pp > 1 else 1
        act = one_micro * in_flight
        total = states.total + act
        if best is None or total > best[0]:
            best = (total, st, states, trainable, act, in_flight)
    assert best is not None
    _, st, states, trainable, act, in_flight = best
    first, last = st.stage == 0, st.stage == lo.pp - 1
    items, host = _items(setup, spec, st, states, act, in_flight, first, last, base_fraction)
    trainable_total = _lora_total(arch, setup.lora) if setup.lora else counts.total
    flops, comm, time = _cost(setup, spec, st, trainable, counts)
    budget = int(setup.gpu.memory_bytes * setup.headroom)
    notes = _notes(setup, st, in_flight)
    per_layer = layer_bytes(arch, arch.layers[st.layers[0]], spec) if st.layers else 0
    return TrainingBill(
        setup=setup,
        items=items,
        host_items=host,
        params=counts,
        stage=st,
        states=states,
        trainable_params=trainable_total,
        budget_bytes=budget,
        activations_bytes=sum(i.bytes for i in items if i.key == "activations"),
        activation_bytes_per_layer=per_layer,
        in_flight=in_flight,
        flops=flops,
        comm=comm,
        time=time,
        notes=tuple(notes),
    )


def _shard_text(lo: Layout, stage: int) -> str:
    return f" ÷ {lo.shard_degree} shards" if lo.zero >= stage and lo.shard_degree > 1 else ""


@lru_cache(maxsize=4096)
def _state_lines(
    recipe: TrainingRecipe,
    lo: Layout,
    adapters: bool,
    base: WeightFormat | None,
    offload: str,
    st: StageParams,
    states: ModelStates,
    base_fraction: float,
) -> tuple[tuple[LineItem, ...], tuple[LineItem, ...]]:
    """The model-state lines (weights, gradients, fp32 master, optimizer states) on the GPU and,
    when offloaded, on the host: fixed by the layout and the recipe, so built once per layout."""
    gpu: list[LineItem] = []
    host: list[LineItem] = []
    par = f" (tp {lo.tp} × pp {lo.pp}{f' × ep {lo.ep}' if lo.ep > 1 else ''})"
    trainable = states.trainable
    common = {
        "trainable_params": trainable,
        "frozen_params": states.frozen,
        "stage": st.stage,
        "stage_layers": len(st.layers),
        "tp": lo.tp,
        "pp": lo.pp,
        "ep": lo.ep,
        "zero": lo.zero,
        "shard_degree": lo.shard_degree,
    }
    params_offloaded = offload == "params"
    optim_offloaded = offload in ("optimizer", "params")
    if adapters:
        assert base is not None
        weights_formula = "frozen base params × base bytes + adapter params × weight bytes"
        weights_template = (
            "{frozen_params} × {base_bytes_per_param} + {trainable_params} adapters ×"
            " {weight_bytes_per_param}" + _shard_text(lo, 3) + " = {bytes}"
        )
        w_inputs = {
            **common,
            "base_format": base.describe(),
            "base_bytes_per_param": round(base_fraction, 4),
            "weight_bytes_per_param": _bpp(recipe.weights),
        }
    else:
        weights_formula = (
            "params per GPU"
            + par
            + " × weight bytes"
            + (" ÷ shards (ZeRO-3)" if lo.zero >= 3 else "")
        )
        weights_template = (
            "{trainable_params} × {weight_bytes_per_param} bytes"
            + _shard_text(lo, 3)
            + " = {bytes}"
        )
        w_inputs = {**common, "weight_bytes_per_param": _bpp(recipe.weights)}
    weights = LineItem(
        "weights",
        "Weights (frozen base + adapters)" if adapters else "Weights",
        states.weights,
        weights_formula,
        weights_template,
        w_inputs,
        "weights",
    )
    grads = LineItem(
        "gradients",
        "Gradients",
        states.gradients,
        "trainable params × grad bytes" + (" ÷ shards (ZeRO-2+)" if lo.zero >= 2 else ""),
        "{trainable_params} × {grad_bytes_per_param} bytes" + _shard_text(lo, 2) + " = {bytes}",
        {**common, "grad_dtype": recipe.grads.id, "grad_bytes_per_param": _bpp(recipe.grads)},
        "gradients",
    )
    master = LineItem(
        "master",
        "fp32 master weights",
        states.master,
        "trainable params × master bytes" + (" ÷ shards (ZeRO-1+)" if lo.zero >= 1 else ""),
        "{trainable_params} × {master_bytes_per_param} bytes" + _shard_text(lo, 1) + " = {bytes}",
        {**common, "master_bytes_per_param": _recipe_floats(recipe)[0]},
        "optimizer",
    )
    state_names = ", ".join(f"{s.name} ({s.format.id})" for s in recipe.states) or "none"
    if recipe.factored:
        state_names += ", factored second moment (fp32 rows + columns)"
    optimizer = LineItem(
        "optimizer",
        "Optimizer states",
        states.optimizer,
        "trainable params × state bytes" + (" ÷ shards (ZeRO-1+)" if lo.zero >= 1 else ""),
        "{trainable_params} × {state_bytes_per_param} bytes" + _shard_text(lo, 1) + " = {bytes}",
        {**common, "states": state_names, "state_bytes_per_param": _recipe_floats(recipe)[1]},
        "optimizer",
    )
    for item, offloaded in (
        (weights, params_offloaded),
        (grads, optim_offloaded),
        (master, optim_offloaded),
        (optimizer, optim_offloaded),
    ):
        if offloaded:
            host.append(replace(item, label=item.label + " (on host)"))
            gpu.append(
                replace(item, bytes=0, formula=item.formula + "; offloaded to host", template="")
            )
        else:
            gpu.append(item)

    return tuple(gpu), tuple(host)


def _items(
    setup: TrainingSetup,
    spec: ActivationSpec,
    st: StageParams,
    states: ModelStates,
    act: int,
    in_flight: int,
    first: bool,
    last: bool,
    base_fraction: float,
) -> tuple[tuple[LineItem, ...], tuple[LineItem, ...]]:
    lo, arch, lora = setup.layout, setup.arch, setup.lora
    state_gpu, state_host = _state_lines(
        setup.recipe,
        lo,
        setup.lora is not None,
        setup.base,
        setup.offload,
        st,
        states,
        base_fraction,
    )
    gpu: list[LineItem] = list(state_gpu)
    host: list[LineItem] = list(state_host)

    # activations
    layers_act = act
    edge = edge_bytes(arch, spec, first, last) * in_flight
    host_act = 0
    if setup.offload_activations and len(st.layers) > 2:
        per_layer = (act - edge) // (len(st.layers) * in_flight)
        kept = 2 * per_layer + edge  # the layer in use and the one being copied
        host_act = act - kept
        layers_act = kept
    rec = {"none": "no recompute", "selective": "selective recompute", "full": "full recompute"}
    gpu.append(
        LineItem(
            "activations",
            "Activations",
            layers_act,
            "saved tensors per layer × layers × micro-batches in flight + ids/final norm/log-softmax",
            "{stage_layers} layers × {per_layer_bytes} × {in_flight} in flight + {edge_bytes} = {bytes}",
            {
                "stage_layers": len(st.layers),
                "per_layer_bytes": layer_bytes(arch, arch.layers[st.layers[0]], spec)
                if st.layers
                else 0,
                "in_flight": in_flight,
                "edge_bytes": edge,
                "seq": setup.seq,
                "micro_batch": setup.micro_batch,
                "act_elem_size": spec.act_bytes,
                "kernel": setup.kernel,
                "recompute": rec[setup.recompute],
                "tp": lo.tp,
                "sp": lo.sp,
                "cp": lo.cp,
            },
            "activations",
        )
    )
    if host_act:
        host.append(
            LineItem(
                "activations_offloaded",
                "Activations (offloaded)",
                host_act,
                "saved activations beyond the two layers kept on the GPU",
                "offloaded activations = {bytes}",
                {},
                "activations",
            )
        )
    if last:
        gpu.append(
            LineItem(
                "logits",
                "Logits and loss peak",
                logits_peak_bytes(arch, spec),
                "(activation bytes + 4) × tokens × vocab ÷ tp (logits and their fp32 upcast)",
                "({act_elem_size} + 4) bytes × {tokens} tokens × {vocab} vocab ÷ tp {tp} = {bytes}",
                {
                    "act_elem_size": spec.act_bytes,
                    "tokens": spec.tokens,
                    "vocab": arch.vocab_size,
                    "tp": lo.tp,
                },
                "activations",
            )
        )
    buffer = recompute_buffer_bytes(arch, spec, st.layers)
    if buffer:
        gpu.append(
            LineItem(
                "recompute_buffer",
                "Recomputed layer",
                buffer,
                "one layer's saved tensors, rebuilt during its backward (full recompute)",
                "one layer, one micro-batch = {bytes}",
                {},
                "activations",
            )
        )
    if states.gather_buffer:
        gpu.append(
            LineItem(
                "allgather_buffer",
                "All-gathered units (ZeRO-3/FSDP)",
                states.gather_buffer,
                "2 × largest unit (current + prefetched) × weight bytes",
                "2 × {unit_params} × weight bytes = {bytes}",
                {"unit_params": st.largest_unit},
                "overhead",
            )
        )
    if states.grad_buffer:
        fsdp_like = lo.fsdp is not None or lo.zero == 3
        gpu.append(
            LineItem(
                "grad_buffer",
                "Gradient reduce buffer",
                states.grad_buffer,
                "one unit's unsharded gradient before reduce-scatter"
                if fsdp_like and lo.zero >= 2
                else "gradient bucket: min(reduce_bucket_size 5e8, params) × grad bytes",
                "reduce buffer = {bytes}",
                {},
                "overhead",
            )
        )
    if states.allgather_bucket:
        gpu.append(
            LineItem(
                "allgather_bucket",
                "Weight all-gather bucket",
                states.allgather_bucket,
                "min(allgather_bucket_size 5e8, params) × weight bytes (ZeRO-1/2 after the step)",
                "all-gather bucket = {bytes}",
                {},
                "overhead",
            )
        )
    if lora is not None and lora.quantized and st.layers:
        biggest = max(_largest_linear(arch, i) for i in (st.layers[0], st.layers[-1]))
        gpu.append(
            LineItem(
                "dequant_buffer",
                "NF4 dequantised weight",
                2 * round(biggest / lo.tp),
                "largest linear weight dequantised to bf16 for its matmul (bitsandbytes)",
                "{params} × 2 bytes = {bytes}",
                {"params": round(biggest / lo.tp)},
                "overhead",
            )
        )
    gpu.append(
        LineItem(
            "cuda_context",
            "CUDA context",
            setup.cuda_context_bytes,
            "CUDA context, kernels and communicator buffers per process (fixed allowance)",
            "CUDA context allowance = {bytes}",
            {},
            "overhead",
        )
    )
    return tuple(gpu), tuple(host)


def _largest_linear(arch: Architecture, layer_index: int) -> int:
    from gpuplan.engine.lora import linear_shapes

    shapes = linear_shapes(arch, arch.layers[layer_index])
    return max(i * o for group in shapes.values() for (i, o) in group)


def _cost(
    setup: TrainingSetup, spec: ActivationSpec, st: StageParams, trainable: int, counts: ParamCounts
) -> tuple[StepFlops, CommBytes, StepTime | None]:
    arch, lo, recipe = setup.arch, setup.layout, setup.recipe
    tokens = setup.tokens_per_step
    flops = step_flops(
        arch, flop_params(arch, counts), tokens, setup.seq, setup.recompute, setup.lora is not None
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
    comm = CommBytes(
        dp=dp,
        tp=tp_comm_bytes(lo.tp, a, t, h, layers, m, setup.recompute),
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


def _notes(setup: TrainingSetup, st: StageParams, in_flight: int) -> list[str]:
    lo, arch = setup.layout, setup.arch
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
            "selective recompute drops only the s² attention scores, which flash/SDPA never"
            " stores: it saves no memory with this kernel (it does with --attention eager)"
        )
    if setup.kernel == "eager" and setup.recompute == "none":
        notes.append("eager attention stores the s² softmax probabilities; flash/SDPA does not")
    if setup.recipe.factored:
        notes.append("Adafactor's factored second moment counts rows + columns per matrix (fp32)")
    if arch.moe is not None and setup.capacity_factor != 1.0:
        notes.append(
            f"MoE capacity factor {setup.capacity_factor:g}: expert activations sized for that many slots"
        )
    if setup.lora is not None:
        notes.append(
            f"LoRA r={setup.lora.rank} on {', '.join(setup.lora.targets)}: activations are those of"
            " full fine-tuning plus the adapters' (an upper bound: frozen layers save a little less)"
        )
    return notes
