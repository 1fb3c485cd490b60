"""One optimizer step as a timeline of phases, each with the tensors alive at its peak.

Lines from different moments do not add up: the loss's logits are gone before the recomputed
layer appears, and gradients fill up while activations drain. So the step is cut into the
moments where memory can peak, and the bill is the largest of them:

    forward          end of the last micro-batch's forward: model states, every saved
                     activation of the micro-batches in flight, gathered units, buffers
    loss             the cross entropy and its gradient on top of that (last stage only)
    backward_last    the backward of the stage's last layer: every activation still saved, the
                     recomputed layer, the activation gradients, the gradients built so far
    backward_first   the backward of its first layer: all gradients, only the first layer's
                     activations (and those of the other micro-batches in flight)
    optimizer        the step: weights, gradients, master, states and the optimizer's temporaries

Each phase lists its live bytes by category: weights, gradients, master, optimizer (states),
activations (saved so far), transient (loss, recompute, activation gradients, casts), comm
(gathered units, reduce buffers, buckets). `Amounts` holds the numbers (engine/training.py works
them out per pipeline stage); `build_phases` turns them into bill lines.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.engine.bill import LineItem
from gpuplan.engine.frozen import record

PHASES = {
    "forward": "end of forward",
    "loss": "loss and its gradient",
    "backward_last": "backward of the last layer",
    "backward_first": "backward of the first layer",
    "optimizer": "optimizer step",
}
CATEGORIES = ("weights", "gradients", "master", "optimizer", "activations", "transient", "comm")
ALWAYS = ("weights", "gradients", "master", "optimizer", "activations")  # listed even when 0


@record(cache_hash=True)
class Amounts:
    """Bytes on one GPU that the phases are built from (engine/training.py `_amounts`)."""

    weights: int
    gradients: int  # all gradients, as held at the optimizer step
    master: int
    optimizer: int
    grads_before: int  # gradients alive before this micro-batch's backward
    grads_last: int  # ... at the backward of the stage's last layer
    grads_first: int  # ... at the backward of its first layer
    activations: int  # saved by all micro-batches in flight at the end of forward
    forward_peak: int  # the most alive during the forward (a checkpointed layer's working set)
    activations_last: int  # still saved at the last layer's backward peak
    activations_first: int  # ... at the first layer's
    loss: int  # the loss's peak (forward or gradient, its saved tensors included)
    recompute_last: int  # the last layer rebuilt in backward (0 if it is not checkpointed)
    recompute_first: int
    act_grads: int  # activation gradients inside one layer's backward
    new_grad: int  # a weight gradient computed apart before it is added into a held one
    casts: int  # autocast bf16 weight casts saved for backward
    casts_first: int
    gather_forward: int  # all-gathered weights (FSDP2, engine/gathered.py) at the forward peak
    gather_loss: int
    gather_last: int
    gather_first: int
    unit_grads_last: int  # unsharded gradients (and a reduce-scatter input) at the last layer
    unit_grads_first: int
    deferred_grads: int  # FSDP + pipeline: unsharded gradients accumulated over micro-batches
    held: tuple[tuple[str, int], ...]  # buffers held all step: DDP bucket copy, DeepSpeed buckets
    fp8_weights: int  # Transformer Engine's fp8 weight copies and their transposes
    dequant: int  # QLoRA: one linear weight dequantised for its matmul
    step_temp: int  # the optimizer step's temporaries
    optimizer_in_backward: bool = False
    last_stage: bool = True
    kv_cache: int = 0  # a KV cache built in training, held to the end of forward (and the loss)


def phase_parts(a: Amounts) -> dict[str, dict[str, int]]:
    """Line key → bytes, for each phase (module docstring). Built afresh each call (a cache
    keyed by the amounts missed nearly always in a search and churned the collector's oldest
    generation)."""
    states = {"weights": a.weights, "master": a.master, "optimizer": a.optimizer}
    held = {**dict(a.held), "fp8_weights": a.fp8_weights}
    fwd = {
        **states,
        "gradients": a.grads_before,
        "activations": a.forward_peak,
        "autocast_casts": a.casts,
        "gathered_weights": a.gather_forward,
        "deferred_grads": a.deferred_grads,
        **held,
        "dequant_buffer": a.dequant,
        "kv_cache": a.kv_cache,
    }
    step_temp = a.step_temp if a.optimizer_in_backward else 0
    bwd = {
        **states,
        "activation_grads": a.act_grads,
        "new_gradient": a.new_grad,
        "deferred_grads": a.deferred_grads,
        **held,
        "dequant_buffer": a.dequant,
        "optimizer_temporaries": step_temp,
    }
    out = {"forward": fwd}
    if a.last_stage:
        out["loss"] = {
            **fwd,
            "activations": a.activations,
            "gathered_weights": a.gather_loss,
            "dequant_buffer": 0,
            "logits": a.loss,
        }
    out["backward_last"] = {
        **bwd,
        "gradients": a.grads_last,
        "activations": a.activations_last,
        "recompute_buffer": a.recompute_last,
        "unit_grads": a.unit_grads_last,
        "autocast_casts": a.casts,
        "gathered_weights": a.gather_last,
    }
    out["backward_first"] = {
        **bwd,
        "gradients": a.grads_first,
        "activations": a.activations_first,
        "recompute_buffer": a.recompute_first,
        "unit_grads": a.unit_grads_first,
        "autocast_casts": a.casts_first,
        "gathered_weights": a.gather_first,
    }
    if not a.optimizer_in_backward:
        out["optimizer"] = {
            **states,
            "gradients": a.gradients,
            "activations": 0,
            **held,
            "optimizer_temporaries": a.step_temp,
        }
    return out


def phase_totals(a: Amounts) -> dict[str, int]:
    """Each phase's total bytes (fast: no lines built)."""
    return {name: sum(parts.values()) for name, parts in phase_parts(a).items()}


def peak_phase(a: Amounts) -> tuple[str, int]:
    """The largest phase and its total: the first of the largest in `phase_parts` order. The
    sums of `phase_parts`'s dicts, added up field by field (no dicts built: a bill weighs every
    pipeline stage it might bill and builds the lines of one phase of one)."""
    states = a.weights + a.master + a.optimizer
    held = sum(dict(a.held).values()) + a.fp8_weights
    forward = (
        states
        + a.grads_before
        + a.forward_peak
        + a.casts
        + a.gather_forward
        + a.deferred_grads
        + held
        + a.dequant
        + a.kv_cache
    )
    best, peak = "forward", forward
    if a.last_stage:  # forward's activations, gathered weights and dequant buffer replaced
        loss = forward - a.forward_peak - a.gather_forward - a.dequant
        loss += a.activations + a.gather_loss + a.loss
        if loss > peak:
            best, peak = "loss", loss
    backward = states + a.act_grads + a.new_grad + a.deferred_grads + held + a.dequant
    if a.optimizer_in_backward:
        backward += a.step_temp
    last = (
        backward
        + a.grads_last
        + a.activations_last
        + a.recompute_last
        + a.unit_grads_last
        + a.casts
        + a.gather_last
    )
    if last > peak:
        best, peak = "backward_last", last
    first = (
        backward
        + a.grads_first
        + a.activations_first
        + a.recompute_first
        + a.unit_grads_first
        + a.casts_first
        + a.gather_first
    )
    if first > peak:
        best, peak = "backward_first", first
    if not a.optimizer_in_backward:
        step = states + a.gradients + held + a.step_temp
        if step > peak:
            best, peak = "optimizer", step
    return best, peak


@record
class Phase:
    """One moment of the step and what is alive then."""

    name: str
    label: str
    lines: tuple[LineItem, ...]

    @property
    def total(self) -> int:
        return sum(line.bytes for line in self.lines)

    def by_category(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for line in self.lines:
            out[line.category] = out.get(line.category, 0) + line.bytes
        return out

    def to_dict(self, units: str = "GB") -> dict[str, object]:
        return {
            "name": self.name,
            "label": self.label,
            "bytes_by_category": self.by_category(),
            "total_bytes": self.total,
            "items": [line.to_dict(units) for line in self.lines],
        }


def needed_lines(parts: dict[str, int]) -> set[str]:
    """The line keys a phase shows: those holding bytes, and always the states and activations."""
    return {key for key, n in parts.items() if n or key in ALWAYS}


def build_phase(name: str, parts: dict[str, int], lines: Mapping[str, LineItem]) -> Phase:
    """One phase as bill lines: each line of `lines` (its formula and inputs, at its full
    amount) with the bytes it has in that phase — the substituted arithmetic only where the
    phase holds the full amount; lines at zero are left out except states and activations."""
    chosen = [_at(lines[key], n, PHASES[name]) for key, n in parts.items() if n or key in ALWAYS]
    return Phase(name, PHASES[name], tuple(chosen))


def build_phases(a: Amounts, lines: Mapping[str, LineItem]) -> tuple[Phase, ...]:
    """Every phase of the step as bill lines (`build_phase`)."""
    return tuple(build_phase(name, parts, lines) for name, parts in phase_parts(a).items())


def _at(line: LineItem, n: int, phase: str) -> LineItem:
    if n == line.bytes:
        return line
    formula = f"{line.formula} (part held at the {phase})"  # replace(), spelt out: faster
    return LineItem(line.key, line.label, n, formula, "", line.inputs, line.category)
