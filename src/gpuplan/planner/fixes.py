"""What to change when a serving plan does not fit: the cheapest alternative that does.

The alternatives are tried in order of what they cost the operator, each asked of the engine
(never estimated): the KV cache in fp8 (no hardware, small quality cost), the weights in fp8
(no hardware, a quantisation), more GPUs (hardware), fewer concurrent users (a smaller ask).
Every alternative that fits is returned; the first is the cheapest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.errors import GpuplanError

SIXTEEN_BIT = ("bf16", "fp16", "fp32")


def overflow(items: list[dict[str, Any]], memory: int, budget: int) -> dict[str, Any]:
    """Where the stacked bill crosses the GPU's memory and the headroom line, and by how much.

    `items` are the bill lines as in `to_dict()` (bottom of the stack first). The result says
    which line crosses each limit (None if the stack stays under it) and the excess in bytes.
    """
    total = sum(int(i["bytes"]) for i in items)

    def crossing(limit: int) -> str | None:
        used = 0
        for item in items:
            used += int(item["bytes"])
            if used > limit:
                return str(item["key"])
        return None

    if total > memory:
        status = "oom"
    elif total > budget:
        status = "over_headroom"
    else:
        status = "fits"
    return {
        "status": status,
        "total_bytes": total,
        "memory_bytes": memory,
        "budget_bytes": budget,
        "over_memory_bytes": max(0, total - memory),
        "over_budget_bytes": max(0, total - budget),
        "crosses_memory_at": crossing(memory),
        "crosses_budget_at": crossing(budget),
    }


def serving_alternatives(
    kwargs: dict[str, Any], result: dict[str, Any], ask: Callable[..., Any]
) -> list[dict[str, Any]]:
    """The alternatives to a serving plan that fit, cheapest first.

    kwargs: what `gpuplan.api.serve` was called with (model first, as `model`).
    result: that plan's `to_dict()`. ask: `gpuplan.api.serve` (passed in to keep this module
    free of an import cycle with the API).
    """
    tried: list[tuple[str, dict[str, Any]]] = []
    if result["kv_dtype"] in SIXTEEN_BIT:
        tried.append(("Store the KV cache in fp8", {"kv_dtype": "fp8"}))
    if result["dtype"] in SIXTEEN_BIT:
        tried.append(("Serve the weights in fp8", {"dtype": "fp8"}))
        if result["kv_dtype"] in SIXTEEN_BIT:
            tried.append(("Weights and KV cache in fp8", {"dtype": "fp8", "kv_dtype": "fp8"}))
    tried.append(("Use more GPUs", {"gpus": "auto", "tp": None, "pp": None}))
    if result["max_concurrent_sequences"] >= 1 and result["users"] > 1:
        tried.append(
            (
                f"Serve {result['max_concurrent_sequences']} users instead of {result['users']}",
                {"users": result["max_concurrent_sequences"]},
            )
        )
    found: list[dict[str, Any]] = []
    for label, change in tried:
        args = {**kwargs, **change}
        try:
            plan = ask(**args)
        except GpuplanError:
            continue
        if not plan.fits:
            continue
        if "gpus" in change:
            label = f"Use {plan.gpus} GPUs (tp {plan.tp} × pp {plan.pp})"
        found.append(
            {
                "label": label,
                "change": {k: v for k, v in change.items() if v is not None},
                "gpus": plan.gpus,
                "tp": plan.tp,
                "pp": plan.pp,
                "per_gpu_total_bytes": plan.per_gpu_total_bytes,
                "budget_bytes": plan.budget_bytes,
                "max_concurrent_sequences": plan.max_concurrent_sequences,
            }
        )
    return found
