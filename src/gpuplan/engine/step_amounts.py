"""What one pipeline stage holds at each moment of the step: the `Amounts` its phases are made of.

engine/training.py builds the setup and the bill; this module works out, for one stage, the
bytes of every line at every phase (engine/phases.py): the model states as the framework holds
them, the saved activations through forward and backward (engine/activations.py), the gradients'
lifetime, FSDP2's gathered units (engine/gathered.py), the buffers a framework keeps all step, the
optimizer step's temporaries, and the casts and copies of autocast, fp8 and QLoRA.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple, cast

from gpuplan.engine.activations import (
    COUNTED,
    ActivationSpec,
    backward_released_bytes,
    backward_transient_bytes,
    edge_bytes,
    forward_working_set_bytes,
    is_checkpointed,
    layer_bytes,
    parse_recompute,
    recompute_buffer_bytes,
    stage_bytes,
    with_recompute,
)
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frameworks.profile import FrameworkProfile
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.gathered import Gathered, Units, fsdp_gathered
from gpuplan.engine.lora import LoraSpec, linear_shapes
from gpuplan.engine.loss import loss_memory
from gpuplan.engine.model_states import ModelStates, StageParams, held_recipe, layer_params_per_rank
from gpuplan.engine.phases import Amounts
from gpuplan.engine.pipeline import last_chunk_forwards
from gpuplan.engine.precision import Precision
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.sharding import Layout

if TYPE_CHECKING:
    from gpuplan.engine.training import TrainingSetup


@lru_cache(maxsize=256)
def bpp(p: Precision) -> float:
    """Bytes per parameter as a float (Fractions are exact but slow in the hot loop)."""
    return float(p.bytes_per_param)


def held(setup: TrainingSetup) -> TrainingRecipe:
    """The recipe as the framework stores it (model_states.held_recipe)."""
    fw = setup.framework
    return held_recipe(setup.recipe, fw.fsdp_fp32_params, fw.reduce_fp32, setup.layout.zero)


def amounts(
    setup: TrainingSetup,
    spec: ActivationSpec,
    st: StageParams,
    held_part: StateAmounts,
    in_flight: int,
) -> tuple[Amounts, int]:
    """The bytes the phases are made of, for one stage (engine/phases.py `Amounts`), from the
    part its layout fixes (`state_amounts`)."""
    arch, lo, fw = setup.arch, setup.layout, setup.framework
    first, last = st.stage == 0, st.stage == lo.pp - 1
    saved = _activations(setup, spec, st, in_flight, first, last)
    casts, casts_first = _autocast_casts(setup, st, in_flight)
    a = spec.act_bytes
    tokens = spec.tokens
    if last:
        vocab = -(-arch.vocab_size // lo.tp)
        loss = loss_memory(setup.loss_spec, tokens, vocab, arch.hidden_size, a)
        loss_peak = max(loss.forward, loss.backward)
    else:
        loss_peak = 0
    amounts = Amounts(
        weights=held_part.weights,
        gradients=held_part.gradients,
        master=held_part.master,
        optimizer=held_part.optimizer,
        grads_before=held_part.grads_before,
        grads_last=held_part.grads_last,
        grads_first=held_part.grads_first,
        activations=saved.end,
        forward_peak=saved.forward_peak,
        activations_last=saved.last,
        activations_first=saved.first,
        loss=loss_peak,
        recompute_last=saved.rebuilt_last,
        recompute_first=saved.rebuilt_first,
        act_grads=saved.act_grads,
        new_grad=held_part.new_grad,
        casts=casts,
        casts_first=casts_first,
        gather_forward=held_part.gather_forward,
        gather_loss=held_part.gather_loss,
        gather_last=held_part.gather_last,
        gather_first=held_part.gather_first,
        unit_grads_last=held_part.unit_grads_last,
        unit_grads_first=held_part.unit_grads_first,
        deferred_grads=held_part.deferred_grads,
        held=held_part.held + _deferred_wgrad(setup, spec, last),
        fp8_weights=held_part.fp8_weights,
        dequant=held_part.dequant,
        step_temp=held_part.step_temp,
        optimizer_in_backward=fw.optimizer_in_backward,
        last_stage=last,
        kv_cache=_training_kv_cache(setup, spec, st, in_flight),
    )
    return amounts, saved.host


class StateAmounts(NamedTuple):
    """`Amounts` fields fixed by the layout (a tuple: a cached value stays immutable)."""

    weights: int
    gradients: int
    master: int
    optimizer: int
    grads_before: int
    grads_last: int
    grads_first: int
    new_grad: int
    gather_forward: int
    gather_loss: int
    gather_last: int
    gather_first: int
    unit_grads_last: int
    unit_grads_first: int
    deferred_grads: int
    held: tuple[tuple[str, int], ...]
    fp8_weights: int
    dequant: int
    step_temp: int


def state_amounts(
    arch: Architecture,
    fw: FrameworkProfile,
    lo: Layout,
    recipe: TrainingRecipe,
    lora: LoraSpec | None,
    micro_batches: int,
    offload: str,
    st: StageParams,
    states: ModelStates,
    base_fraction: float,
) -> StateAmounts:
    """The amounts that do not depend on the sequence, micro-batch or recompute (the model
    states, gradients' lifetime, gathered units, buffers, step temporaries), by what they depend
    on (engine/training.py caches them with the states, per layout and stage: a planner's
    search and a sweep over batch shapes bill one layout many times). Of the micro-batches
    per step its helpers ask only whether there are more than one."""
    setup = cast("TrainingSetup", _Keys(arch, fw, lo, recipe, lora, micro_batches, offload))
    offloaded_states = offload in ("optimizer", "params")
    weights = 0 if offload == "params" else states.weights
    grads = 0 if offloaded_states else states.gradients
    master = 0 if offloaded_states else states.master
    # paged states (bitsandbytes is_paged) live in unified memory, outside the allocator's
    # counters: the phases hold only their block scales (the bill adds the pages apart)
    optimizer = 0 if offloaded_states else states.optimizer - states.optimizer_paged
    g_before, g_last, g_first = _gradient_lifetime(setup, st, states, grads)
    gather = _gathered(setup, st, base_fraction)
    return StateAmounts(
        weights,
        grads,
        master,
        optimizer,
        g_before,
        g_last,
        g_first,
        _accumulating(setup, st, states, states.gradients),
        gather.forward,
        gather.loss,
        gather.last,
        gather.first,
        gather.grads_last,
        gather.grads_first,
        gather.deferred,
        _held_buffers(setup, states),
        2 * _linear_params(arch, st.layers, lo.tp) if fw.fp8 == "te" else 0,
        _dequant(setup, st),
        0 if offloaded_states else _step_temporaries(setup, st, states),
    )


@record
class _Keys:
    """What `state_amounts`'s helpers read of a setup (they take a TrainingSetup's names)."""

    arch: Architecture
    framework: FrameworkProfile
    layout: Layout
    recipe: TrainingRecipe
    lora: LoraSpec | None
    micro_batches: int
    offload: str


@record
class _Saved:
    """Activation bytes at the moments the phases look at (`_activations`)."""

    end: int  # saved by the micro-batches in flight at the end of forward
    forward_peak: int  # the most alive during the last layer's forward (≥ end)
    last: int  # at the last layer's backward peak
    first: int  # at the first layer's backward peak
    rebuilt_last: int  # the last layer rebuilt by recompute, at its peak
    rebuilt_first: int
    host: int  # offloaded to the host
    act_grads: int  # the activation gradients of a layer's backward (not saved: transient)


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
    the input side (ids, RoPE tables), the other micro-batches in flight everything (under
    interleaved 1F1B `in_flight` counts chunk forwards, each 1/vpp of the stage). A
    checkpointed last layer holds its unsaved working set while its forward runs. Activation
    offload (torchtune OffloadActivations, DeepSpeed CPU checkpointing) keeps the layer in use
    and the one being copied on the GPU."""
    return _saved(
        setup.arch, setup.offload_activations, spec, st, in_flight, setup.layout.vpp, first, last
    )


@lru_cache(maxsize=8192)
def _saved(
    arch: Architecture,
    offload_activations: bool,
    spec: ActivationSpec,
    st: StageParams,
    in_flight: int,
    vpp: int,
    first: bool,
    last: bool,
) -> _Saved:
    """`_activations` by what it depends on: not the data-parallel degree or the ZeRO stage, so a
    planner's search works it out once for the layouts that differ only in those."""
    n = len(st.layers)
    one = _one_micro_batch(arch, spec, st.layers, first, last)
    act = (one.saved - one.loss_side) * in_flight // vpp + one.loss_side * last_chunk_forwards(
        vpp, in_flight
    )
    act_last = act - one.loss_side - (0 if one.ck_last else one.freed)
    this = one.saved if vpp == 1 else (one.saved - one.loss_side) // vpp  # being backpropagated
    act_first = act - this + one.first_layer + one.input_side
    act_first = max(0, min(act_last, act_first - (0 if one.ck_first else one.freed)))
    forward_peak = act
    if one.ck_last:
        forward_peak = max(act, act - one.loss_side + one.working)
    saved = _Saved(
        end=act,
        forward_peak=forward_peak,
        last=act_last,
        first=act_first,
        rebuilt_last=one.rebuilt_last,
        rebuilt_first=one.rebuilt_first,
        host=0,
        act_grads=one.act_grads,
    )
    if not offload_activations or n <= 2:
        return saved
    kept = 2 * ((one.saved - one.edge) // n) + one.edge
    return replace(
        saved,
        end=kept,
        forward_peak=min(kept, forward_peak),
        last=min(kept, act_last),
        first=min(kept, act_first),
        host=act - kept,
    )


class _OneMicroBatch(NamedTuple):
    """What one micro-batch saves and rebuilds on a stage, whatever the number in flight."""

    saved: int  # its layers plus the edge tensors (`stage_bytes`)
    edge: int  # the edge tensors
    loss_side: int  # the edge tensors of the loss side (final norm, labels)
    input_side: int  # the edge tensors without the loss side (ids, RoPE tables)
    freed: int  # what a layer's backward frees before its MLP peak
    first_layer: int  # the first layer's saved bytes, as its backward holds them
    working: int  # the forward working set of a checkpointed last layer
    ck_last: bool
    ck_first: bool
    rebuilt_last: int  # the last layer rebuilt by recompute, at its peak
    rebuilt_first: int
    act_grads: int  # `backward_transient_bytes`


@lru_cache(maxsize=4096)
def _one_micro_batch(
    arch: Architecture, spec: ActivationSpec, layers: range, first: bool, last: bool
) -> _OneMicroBatch:
    """`_saved`'s per-micro-batch part, by what it depends on: a search's layouts share it
    across the micro-batch counts (and so the numbers in flight) their data-parallel degrees
    give."""
    n = len(layers)
    one = stage_bytes(arch, spec, layers, first, last)
    edge = edge_bytes(arch, spec, first, last)
    input_side = edge_bytes(arch, spec, first, False)
    rebuilt = recompute_buffer_bytes(arch, spec, layers)
    freed = backward_released_bytes(arch, spec, layers)
    ck_last, ck_first = is_checkpointed(spec, n - 1), is_checkpointed(spec, 0)
    plain = with_recompute(spec, "none") if parse_recompute(spec.recompute)[0] in COUNTED else spec
    first_spec = with_recompute(spec, "full") if ck_first and plain is not spec else plain
    first_layer = layer_bytes(arch, arch.layers[layers[0]], first_spec) if layers else 0
    working = forward_working_set_bytes(arch, spec, layers) if ck_last else 0
    selective = parse_recompute(spec.recompute)[0] == "selective"

    def rebuilt_at(checkpointed: bool) -> int:
        if checkpointed:
            return max(0, rebuilt - freed)
        return rebuilt if selective else 0

    return _OneMicroBatch(
        saved=one,
        edge=edge,
        loss_side=edge - input_side,
        input_side=input_side,
        freed=freed,
        first_layer=first_layer,
        working=working,
        ck_last=ck_last,
        ck_first=ck_first,
        rebuilt_last=rebuilt_at(ck_last),
        rebuilt_first=rebuilt_at(ck_first),
        act_grads=backward_transient_bytes(arch, spec, layers),
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
    last_layer, last_down = layer_params_per_rank(arch, st.layers[-1], lo.tp, lo.ep, lo.etp)
    first_layer, first_down = layer_params_per_rank(arch, st.layers[0], lo.tp, lo.ep, lo.etp)
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
    _, down = layer_params_per_rank(setup.arch, st.layers[-1], lo.tp, lo.ep, lo.etp)
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
    vpp = setup.layout.vpp
    return per * in_flight // vpp, per * (in_flight - 1) // vpp + layer


def _gathered(setup: TrainingSetup, st: StageParams, base_fraction: float) -> Gathered:
    """FSDP2's gathered units and unsharded gradients (engine/gathered.py), for profiles that
    shard with fully_shard (not the DeepSpeed-style generic buffers), under ZeRO-3 over ≥ 2 ranks."""
    lo, fw = setup.layout, setup.framework
    if fw.buckets == "deepspeed" or lo.zero != 3 or lo.shard_degree < 2 or not st.layers:
        return Gathered()
    r = held(setup)
    param = setup.recipe.weights  # the compute (param) dtype of gathered units
    frozen = setup.lora is not None
    first_layer, first_down = layer_params_per_rank(setup.arch, st.layers[0], lo.tp, lo.ep, lo.etp)
    last_layer, last_down = layer_params_per_rank(setup.arch, st.layers[-1], lo.tp, lo.ep, lo.etp)
    units = Units(
        first_layer=first_layer,
        largest_layer=max(first_layer, last_layer),
        embedding=st.embedding,
        head=st.lm_head,
        stage=st.total,
        first_layer_down=first_down,
        last_layer_down=last_down,
        weight_bytes=base_fraction if frozen else (1.0 if fw.fp8_all_gather else bpp(param)),
        grad_bytes=bpp(param),
        reduce_bytes=bpp(r.grads),
        root=st.embedding + st.lm_head if fw.fsdp_keeps_root and lo.fsdp else 0,
        root_bytes=_root_bytes(setup, param, base_fraction),
    )
    reshard = fw.reshard_after_forward == "always" or (
        fw.reshard_after_forward == "unless_pp" and lo.pp == 1
    )
    keeps_head = fw.reshard_after_forward == "unless_pp"
    return fsdp_gathered(units, reshard, keeps_head, lo.pp > 1, trainable=not frozen)


def _root_bytes(setup: TrainingSetup, param: Precision, base_fraction: float) -> float:
    """Bytes per parameter of FSDP1's root unit (engine/gathered.py: the embedding and the LM
    head; the final norm is noise), in the dtype they are stored in: a quantised LoRA base keeps
    them in bf16 (bitsandbytes quantises only the decoder's linear layers), an unquantised one
    has one dtype throughout (its average bytes), trained weights are in the parameter dtype."""
    lora = setup.lora
    if lora is None:
        return bpp(param)
    return 2.0 if lora.quantized else base_fraction


def _training_kv_cache(
    setup: TrainingSetup, spec: ActivationSpec, st: StageParams, in_flight: int
) -> int:
    """A KV cache built while training (profile train_kv_cache "qkv"): transformers 4.48's
    GPTBigCodeModel keeps `use_cache` from the config under gradient checkpointing and each
    attention returns `present = key_value`, a view of the fused c_attn output (q, k and v:
    h + 2·kv_dim per token), kept whole in `presents` until the model's forward returns
    (modeling_gpt_bigcode.py GPTBigCodeModel.forward / GPTBigCodeFlashAttention2.forward). In
    the activation dtype, or fp32 where the norms feeding the projection are (peft's
    prepare_model_for_kbit_training, or nn.LayerNorm under autocast before a bitsandbytes
    layer, which casts its output back to its input's dtype: kbit_fp32_residual)."""
    if setup.framework.train_kv_cache != "qkv" or not st.layers:
        return 0
    arch = setup.arch
    att = arch.attention
    width = att.num_heads * att.head_dim + att.num_kv_heads * (att.head_dim + att.v_head_dim)
    a = 4 if setup.framework.kbit_fp32_residual and setup.lora is not None else spec.act_bytes
    per_layer = -(-width // setup.layout.tp) * spec.tokens * a
    return per_layer * len(st.layers) * in_flight


def _deferred_wgrad(
    setup: TrainingSetup, spec: ActivationSpec, last: bool
) -> tuple[tuple[str, int], ...]:
    """Megatron --defer-embedding-wgrad-compute on the last stage: each micro-batch's LM-head
    input (T·h, all-gathered under sequence parallelism) and output gradient (T·V/tp), in the
    activation dtype, kept until the flush computes the head's weight gradient
    (megatron/core/models/gpt/gpt_model.py embedding_activation_buffer / grad_output_buffer,
    tensor_parallel/layers.py wgrad_deferral_limit; 0 = every micro-batch of the step). Billed
    as held for the whole step: the count reached at the last micro-batch's backward."""
    n = setup.framework.defer_embedding_wgrad
    if n < 0 or not last:
        return ()
    kept = setup.micro_batches if n == 0 else min(n, setup.micro_batches)
    lo, arch = setup.layout, setup.arch
    vocab = -(-arch.vocab_size // lo.tp)
    per = spec.act_bytes * spec.tokens * (arch.hidden_size + vocab)
    return (("deferred_wgrad", kept * per),)


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
    recipe = held(setup)
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
