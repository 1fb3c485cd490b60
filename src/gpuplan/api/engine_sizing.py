"""`serve MODEL --engine NAME` without a GPU count: the fewest GPUs on which the engine starts
(as `--gpus auto` promises for the lesson's bill), and, when no layout starts, the ways out, each
one the engine's own bill for the changed launch.

The search walks the layouts an engine is launched with on one node: tensor parallel 1, 2, 4, 8
(up to the GPU type's `gpus_per_node`), then pipeline stages of a full node (tp = node, pp 2, 3,
4, ...) up to `MAX_NODES`. A layout the engine refuses (tp not dividing the heads) is skipped."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.catalog import list_gpus
from gpuplan.errors import GpuplanError

MAX_NODES = 8  # pipeline stages tried beyond one node


def layouts(gpus_per_node: int) -> list[tuple[int, int]]:
    """(tp, pp) in the order a fewest-GPUs search tries them."""
    out, tp = [], 1
    while tp <= gpus_per_node:
        out.append((tp, 1))
        tp *= 2
    node = out[-1][0]
    out += [(node, pp) for pp in range(2, MAX_NODES + 1)]
    return out


def _args_with(args: dict[str, Any], adapter: Any, tp: int, pp: int) -> dict[str, Any]:
    """`args` with the engine's own tensor/pipeline-parallel arguments set to tp, pp."""
    out = dict(args)
    for knob, value in (("tp", tp), ("pp", pp)):
        for name, v in adapter.knob_args(knob, value).items():
            out[name] = adapter.flags.get(name).coerce(v)
    return out


def _try(serve: Any, args: dict[str, Any], errors: list[GpuplanError] | None = None) -> Any:
    """The engine's plan for `args`, or None where it refuses them (the refusal kept in `errors`)."""
    try:
        return serve(args)
    except GpuplanError as err:
        if errors is not None:
            errors.append(err)
        return None


def fewest_gpus(
    serve: Any, adapter: Any, args: dict[str, Any], gpus_per_node: int
) -> tuple[Any, dict[str, Any]]:
    """(plan, its args) on the fewest GPUs whose engine bill starts; when none does, those of
    the smallest layout the engine accepts (its failure and ways out are then shown).
    `serve(args)` → EnginePlan."""
    first = None
    errors: list[GpuplanError] = []
    for tp, pp in layouts(gpus_per_node):
        tried = _args_with(args, adapter, tp, pp)
        plan = _try(serve, tried, errors)
        if plan is None:
            continue
        if plan.fits:
            note = (
                f"--gpus auto: {tp * pp} GPU(s) (tp {tp} × pp {pp}), the fewest on which"
                f" {adapter.title} starts with these settings"
            )
            return replace(plan, bill=replace(plan.bill, notes=(note, *plan.bill.notes))), tried
        first = first or (plan, tried)
    if first is None:
        raise errors[0]  # the settings themselves are refused (the same way on any layout)
    return first


def _answer(kind: str, label: str, plan: Any, change: dict[str, Any]) -> dict[str, Any]:
    b = plan.bill
    return {
        "answer": kind,
        "label": label,
        "kv_cache_bytes": b.kv_cache_bytes,
        "kv_capacity_tokens": b.kv_capacity_tokens,
        "max_concurrency": round(b.max_concurrency, 2),
        "change": change,
    }


def ways_out(serve: Any, adapter: Any, args: dict[str, Any], spec: Any) -> list[dict[str, Any]]:
    """For a launch that does not start: fewer bytes (fp8 weights), more GPUs (the fewest
    layout that starts), a bigger GPU of the same vendor (same layout), each asked of the engine."""
    out = []
    tp, pp, _ = adapter.layout(args)
    if adapter.knob("quantization"):
        fp8 = dict(args)
        for name, v in adapter.knob_args("quantization", "fp8").items():
            fp8[name] = adapter.flags.get(name).coerce(v)
        plan = _try(serve, fp8)
        if plan is not None and plan.fits:
            out.append(_answer("fewer bytes", "Serve the weights in fp8", plan, {"dtype": "fp8"}))
    for t, p in layouts(spec.gpus_per_node):
        if t * p <= tp * pp:
            continue
        plan = _try(serve, _args_with(args, adapter, t, p))
        if plan is not None and plan.fits:
            label = f"Use {t * p} GPUs (tp {t} × pp {p})"
            out.append(_answer("more GPUs", label, plan, {"tp": t, "pp": p if p > 1 else None}))
            break
    out += _bigger_gpu(serve, args, spec)
    return out


def _bigger_gpu(serve: Any, args: dict[str, Any], spec: Any) -> list[dict[str, Any]]:
    bigger = sorted(
        (g for g in list_gpus() if g.vendor == spec.vendor and g.memory_bytes > spec.memory_bytes),
        key=lambda g: g.memory_bytes,
    )
    for g in bigger:
        plan = _try(lambda a, g=g: serve(a, g), args)
        if plan is not None and plan.fits:
            return [_answer("bigger GPU", f"Use {g.name} instead", plan, {"gpu": g.id})]
    return []
