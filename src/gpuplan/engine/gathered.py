"""FSDP2's working copies: which units are all-gathered, and the unsharded gradients, when.

Under PyTorch FSDP2 (`fully_shard`, torch/distributed/fsdp/_fully_shard) each unit — a decoder
layer, the embedding, the final norm with the LM head — is stored sharded and gathered to run:
an all-gather output buffer receives every rank's shard, is copied out into the unit's unsharded
parameters, and is freed (_fsdp_collectives.py foreach_all_gather / _copy_out). So a gather
holds its unit twice for a moment, and with implicit prefetching the next unit's buffer arrives
while the current one runs: two units at the forward's peak.

    reshard after forward    each unit is freed after its forward; backward re-gathers it
                             (current + prefetched: two units; at the first layer, that layer
                             and the embedding). The loss runs with nothing gathered, except
                             torchtitan's final norm + LM head, which it never reshards after
                             forward (parallelize.py apply_fsdp).
    no reshard               every unit stays gathered from its forward until its backward is
                             done (reshard_after_backward=True frees it then): the whole stage +
                             one all-gather buffer at the end of forward.
    FSDP1 root kept          FullyShardedDataParallel (FSDP1, what accelerate wraps the HF Trainer's
                             model in by default) leaves the root unit — everything outside the
                             wrapped decoder layers: the embedding, final norm and LM head — gathered
                             from its forward to the end of backward: its post-forward does not free
                             the root's unsharded flat parameter (_runtime_utils.py
                             _post_forward_reshard: `not state._is_root`), and a frozen root has no
                             post-backward hook, so it is freed only by the final callback's
                             _catch_all_reshard. The root is one more gathered unit at the forward,
                             the loss and both backward peaks; the layers gather as above.
    pipeline parallel        torch.distributed.pipelining runs every backward but the step's last
                             with reshard-after-backward and gradient sync off (stage.py
                             backward_maybe_with_nosync): the stage stays gathered and its
                             gradients accumulate unsharded in the reduce dtype
                             (_fsdp_param.py to_accumulated_grad_if_needed) for the whole step.

Gradients: a unit's backward produces unsharded gradients in the parameter dtype; its
post-backward copies them into one reduce-scatter input in the reduce dtype (fp32 under
torchtitan's MixedPrecisionPolicy), which is held until the next unit's post-backward
(reduce_scatter_max_input_buffers = 1, _fsdp_param_group.py post_backward).
"""

from __future__ import annotations

from gpuplan.engine.frozen import record


@record
class Units:
    """Parameters of the gathered units on one GPU, and their bytes per parameter."""

    first_layer: int
    largest_layer: int
    embedding: int  # 0 off the first stage
    head: int  # final norm + LM head; 0 off the last stage
    stage: int  # every parameter of the stage
    first_layer_down: int  # the first gradient a layer's backward builds (its MLP's last linear)
    last_layer_down: int
    weight_bytes: float  # gathered (param) dtype: 2 for bf16, 1 for fp8 all-gather
    grad_bytes: float  # the unsharded gradient's dtype (the param dtype)
    reduce_bytes: float  # the reduce-scatter input's dtype
    root: int = 0  # FSDP1's root unit (embedding + head), kept gathered all step; 0 otherwise
    root_bytes: float = 0.0  # its dtype's bytes per parameter


@record
class Gathered:
    """Bytes of gathered weights and unsharded gradients at each phase (module docstring)."""

    forward: int = 0
    loss: int = 0
    last: int = 0
    first: int = 0
    grads_last: int = 0  # unsharded gradients at the last layer's backward peak
    grads_first: int = 0
    deferred: int = 0  # gradients a pipeline accumulates unsharded


def fsdp_gathered(
    u: Units, reshard: bool, keeps_head: bool, pipeline: bool, trainable: bool = True
) -> Gathered:
    """What FSDP2 holds unsharded at each phase (module docstring). `keeps_head`: the final
    norm + LM head are not resharded after forward; `pipeline`: pp > 1 under
    torch.distributed.pipelining; `trainable`: the units have gradients (not a frozen base)."""
    w = u.weight_bytes
    if u.root:
        return _with_root(u, reshard, pipeline, trainable)
    unit = max(u.largest_layer, u.embedding, u.head)
    stage = round(u.stage * w)
    down_last = round(u.last_layer_down * u.grad_bytes) if trainable else 0
    down_first = round(u.first_layer_down * u.grad_bytes) if trainable else 0
    previous_rs = round(u.largest_layer * u.reduce_bytes) if trainable else 0
    first = round((u.first_layer + (u.embedding or u.largest_layer)) * w)
    if pipeline and not reshard:
        deferred = round(u.stage * u.reduce_bytes) if trainable else 0
        return Gathered(
            forward=stage + round(unit * w),
            loss=stage,
            last=stage,
            first=stage,
            grads_last=down_last,
            grads_first=down_first,
            deferred=deferred,
        )
    if reshard:
        return Gathered(
            forward=round(2 * unit * w),
            loss=round(u.head * w) if keeps_head else 0,
            last=round(2 * unit * w),
            first=first,
            grads_last=down_last,
            grads_first=down_first + previous_rs,
        )
    return Gathered(
        forward=stage + round(unit * w),
        loss=stage,
        last=stage - round(u.head * w),
        first=first,
        grads_last=down_last,
        grads_first=down_first + previous_rs,
    )


def _with_root(u: Units, reshard: bool, pipeline: bool, trainable: bool) -> Gathered:
    """FSDP1 with its root unit kept gathered (module docstring): the decoder layers gather as
    FSDP2's do (`fsdp_gathered` without embedding and head, which live in the root), and the
    root's unsharded parameters are added to every phase."""
    layers = Units(
        first_layer=u.first_layer,
        largest_layer=u.largest_layer,
        embedding=0,
        head=0,
        stage=u.stage - u.root,
        first_layer_down=u.first_layer_down,
        last_layer_down=u.last_layer_down,
        weight_bytes=u.weight_bytes,
        grad_bytes=u.grad_bytes,
        reduce_bytes=u.reduce_bytes,
    )
    g = fsdp_gathered(layers, reshard, False, pipeline, trainable)
    root = round(u.root * u.root_bytes)
    first = round(u.first_layer * u.weight_bytes) if reshard else g.first
    return Gathered(
        forward=g.forward + root,
        loss=g.loss + root,
        last=g.last + root,
        first=first + root,
        grads_last=g.grads_last,
        grads_first=g.grads_first,
        deferred=g.deferred,
    )
