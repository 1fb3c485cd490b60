"""Fewest GPUs for serving, the way serving is really deployed.

Tensor parallelism first, with a degree that divides the attention heads (every engine shards
whole heads: vLLM and SGLang refuse a tp that does not divide num_attention_heads) and stays
within one node (NVLink); pipeline parallelism only to span nodes, in whole nodes of the
largest valid tp. The first count that fits wins, and every smaller count gets its reason.
"""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import asdict, record, replace
from gpuplan.engine.serving import ServingBill, ServingSetup, serving_bill
from gpuplan.engine.sharding import tp_problem
from gpuplan.errors import GpuplanError
from gpuplan.units import format_bytes

MAX_GPUS = 1024


@record
class Attempt:
    """One GPU count the search looked at, and why it was or was not the answer."""

    gpus: int
    tp: int | None
    pp: int | None
    fits: bool
    reason: str
    per_gpu_total_bytes: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def valid_tp(arch: Architecture, node: int) -> list[int]:
    """TP degrees within a node that shard the attention heads evenly (`tp_problem`), ascending."""
    return [t for t in range(1, node + 1) if tp_problem(arch, t) is None]


def layout_for(gpus: int, arch: Architecture, node: int) -> tuple[int, int] | str:
    """(tp, pp) for a GPU count, or the reason there is none.

    Within a node: tp = gpus if it shards the heads evenly. Across nodes: tp = the largest valid
    degree within a node, pp = gpus ÷ tp (pp must divide gpus and not exceed the layers).
    """
    num_layers = arch.num_layers
    if gpus <= node:
        problem = tp_problem(arch, gpus)
        return problem if problem else (gpus, 1)
    tp = max(valid_tp(arch, node))
    if gpus % tp:
        return f"{gpus} GPUs is not a whole number of tp={tp} groups for pipeline stages"
    pp = gpus // tp
    if pp > num_layers:
        return f"pp={pp} exceeds the {num_layers} layers"
    return tp, pp


def _why_not(bill: ServingBill) -> str:
    total, budget = bill.per_gpu_total_bytes, bill.budget_bytes
    if total > budget:
        return f"does not fit: {format_bytes(total)} per GPU > {format_bytes(budget)} budget"
    return (
        f"weights fit but the KV cache does not: room for {bill.max_concurrent_sequences} of"
        f" {bill.setup.users} sequence(s) of {bill.setup.context} tokens"
    )


def fewest_gpus(
    setup: ServingSetup, node: int | None = None, max_gpus: int = MAX_GPUS
) -> tuple[ServingBill, list[Attempt]]:
    """Search GPU counts 1, 2, ... for the first layout whose bill fits; return it and the trail."""
    arch = setup.arch
    node = node or setup.gpu.gpus_per_node
    attempts: list[Attempt] = []
    last: ServingBill | None = None
    for n in range(1, max_gpus + 1):
        layout = layout_for(n, arch, node)
        if isinstance(layout, str):
            if n <= node or n % max(valid_tp(arch, node)) == 0:
                attempts.append(Attempt(n, None, None, False, layout))
            continue
        tp, pp = layout
        bill = serving_bill(replace(setup, tp=tp, pp=pp))
        last = bill
        if bill.fits:
            attempts.append(Attempt(n, tp, pp, True, "fits", bill.per_gpu_total_bytes))
            return bill, attempts
        attempts.append(Attempt(n, tp, pp, False, _why_not(bill), bill.per_gpu_total_bytes))
    reason = _why_not(last) if last else "no valid layout"
    raise GpuplanError(
        f"{arch.name} does not fit on up to {max_gpus} × {setup.gpu.name} ({reason})"
    )


def layout_for_count(setup: ServingSetup, gpus: int, node: int | None = None) -> ServingSetup:
    """The setup for a fixed GPU count the user asked for (tp within the node, pp across)."""
    if gpus < 1:
        raise GpuplanError(f"gpus must be at least 1, got {gpus}")
    node = node or setup.gpu.gpus_per_node
    layout = layout_for(gpus, setup.arch, node)
    if isinstance(layout, str):
        raise GpuplanError(
            f"{gpus} GPUs cannot serve {setup.arch.name}: {layout}; pass --tp and --pp explicitly"
        )
    tp, pp = layout
    return replace(setup, tp=tp, pp=pp)
