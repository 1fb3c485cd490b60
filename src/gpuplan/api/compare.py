"""Headline figures of plans, side by side, and what changed between two plans.

Pure functions over the `to_dict()` JSON of serving and training plans (docs/json.md): nothing
is re-estimated here. A headline is the handful of figures a reader looks at first (the lesson
puts them in its picture); a comparison sets several plans' headlines against a reference plan
as ratios of the engine's own figures; a change says, line by line, what moved between two plans
("Optimizer states ÷ 8").
"""

from __future__ import annotations

from typing import Any

from gpuplan.lookup import dotted
from gpuplan.units import format_bytes

# The figures whose ratio to the reference plan a comparison reports.
RATIO_FIELDS = (
    "gpus",
    "per_gpu_total_bytes",
    "weights_per_gpu_bytes",
    "kv_cache_per_gpu_bytes",
    "max_concurrent_sequences",
    "model_states_bytes",
    "activations_bytes",
    "comm_bytes_per_step",
    "dp_comm_bytes_per_step",
    "tokens_per_second",
)


def _category_bytes(data: dict[str, Any], category: str) -> int:
    return sum(int(i["bytes"]) for i in data["per_gpu"]["items"] if i["category"] == category)


def why_not_fewer(data: dict[str, Any]) -> dict[str, Any] | None:
    """The largest GPU count the search tried and rejected, and its reason (None without one)."""
    failed = [a for a in data.get("search") or [] if not a.get("fits") and a.get("tried", True)]
    if not failed:
        return None
    last = max(failed, key=lambda a: int(a["gpus"]))
    return {"gpus": int(last["gpus"]), "reason": str(last["reason"])}


def headline(data: dict[str, Any]) -> dict[str, Any]:
    """The figures a reader looks at first, read off one plan's `to_dict()`."""
    gpu = data["gpu"]
    out: dict[str, Any] = {
        "mode": data["mode"],
        "fits": bool(data["fits"]),
        "gpus": int(data["gpus"]),
        "gpu": {k: gpu.get(k) for k in ("id", "name", "memory_bytes", "memory_basis")},
        "per_gpu_total_bytes": int(data["per_gpu_total_bytes"]),
        "budget_bytes": int(data["budget_bytes"]),
        "scale_bytes": max(int(gpu["memory_bytes"]), int(data["per_gpu_total_bytes"])),
        "weights_per_gpu_bytes": _category_bytes(data, "weights"),
        "params_total": data.get("params_total"),
        "lower_bound_gpus": data.get("lower_bound_gpus"),
        "why_not_fewer": why_not_fewer(data),
    }
    if data["mode"] == "serve":
        out.update(
            layout=f"tp {data['tp']} × pp {data['pp']}",
            dtype=data["dtype"],
            kv_dtype=data["kv_dtype"],
            weights_bytes=data["weights_bytes"],
            kv_cache_per_gpu_bytes=_category_bytes(data, "kv_cache"),
            kv_bytes_per_token=data["kv_bytes_per_token"],
            kv_bytes_per_sequence=data["kv_bytes_per_sequence"],
            kv_capacity_tokens=data["kv_capacity_tokens"],
            max_concurrent_sequences=data["max_concurrent_sequences"],
            context=data["context"],
            users=data["users"],
        )
    else:
        by_kind = data.get("comm_bytes_by_kind") or {}
        out.update(
            layout=data["layout"]["describe"],
            zero=data["layout"]["zero"],
            checkpointing=data.get("checkpointing"),
            bytes_per_param=(data.get("recipe") or {}).get("bytes_per_param"),
            model_states_bytes=data.get("model_states_bytes"),
            activations_bytes=data.get("activations_bytes"),
            comm_bytes_per_step=data.get("comm_bytes_per_step"),
            dp_comm_bytes_per_step=by_kind.get("dp"),
            tokens_per_second=data.get("tokens_per_second"),
            step_time_s=data.get("step_time_s"),
            seq=data.get("seq"),
            micro_batch=data.get("micro_batch"),
        )
    return out


def ratios(point: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """point ÷ reference for each figure both have (None where the reference is 0 or missing),
    and the same as a signed percentage change."""
    out: dict[str, Any] = {}
    for name in RATIO_FIELDS:
        a, b = point.get(name), reference.get(name)
        if a is None or not b:
            continue
        r = float(a) / float(b)
        out[name] = {"ratio": r, "change_pct": round((r - 1) * 100, 1)}
    return out


def compare(
    points: list[dict[str, Any] | None],
    reference: int = 0,
    current: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Headlines of several plans (`to_dict()`s; None for one the engine refused), each with its
    ratios to `points[reference]`; `current` (the plan on screen) likewise; and `scale_bytes`,
    the largest of every plan's memory and total: one vertical scale that holds them all."""
    heads = [headline(p) if p is not None else None for p in points]
    ref = heads[reference] if 0 <= reference < len(heads) else None
    now = headline(current) if current is not None else None
    scales = [h["scale_bytes"] for h in [*heads, now] if h is not None]
    return {
        "points": [
            None if h is None else {**h, "vs_reference": ratios(h, ref) if ref else {}}
            for h in heads
        ],
        "reference": reference,
        "current": None
        if now is None
        else {**now, "vs_reference": ratios(now, ref) if ref else {}},
        "scale_bytes": max(scales) if scales else None,
    }


# --- what changed ----------------------------------------------------------------------------

_INPUTS: tuple[tuple[str, str], ...] = (
    ("model.id", "model"),
    ("model.kv_heads", "KV heads"),
    ("gpu.name", "GPU"),
    ("gpu.memory_bytes", "memory per GPU"),
    ("gpus", "GPUs"),
    ("tp", "tensor parallel"),
    ("pp", "pipeline parallel"),
    ("layout.zero", "ZeRO stage"),
    ("layout.fsdp", "FSDP"),
    ("layout.dp", "data parallel"),
    ("layout.tp", "tensor parallel"),
    ("layout.pp", "pipeline parallel"),
    ("layout.sp", "sequence parallel"),
    ("dtype", "weights"),
    ("kv_dtype", "KV cache"),
    ("context", "context"),
    ("users", "users"),
    ("seq", "sequence length"),
    ("micro_batch", "micro-batch"),
    ("checkpointing", "checkpointing"),
    ("headroom", "headroom"),
)


def _show(path: str, value: Any, units: str) -> str:
    if value is None:
        return "none"
    if path == "gpu.memory_bytes":
        return format_bytes(value, units)
    if path == "headroom":
        return f"{float(value):.0%}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _factor(before: int, after: int) -> str | None:
    """ "× k" or "÷ k" when one figure is a whole multiple (within 1 %) of the other."""
    if before <= 0 or after <= 0:
        return None
    big, small = max(before, after), min(before, after)
    k = round(big / small)
    if k < 2 or abs(big / small - k) > 0.01 * k:
        return None
    return f"× {k}" if after > before else f"÷ {k}"


def describe_change(
    before: dict[str, Any], after: dict[str, Any], limit: int = 3
) -> dict[str, Any]:
    """What moved from plan `before` to plan `after`: the inputs that differ, the bill lines
    whose bytes changed (largest move first, as "÷ 8" where it is a whole factor), and one
    caption for a person, e.g. "layout dp=8 tp=1 pp=1 → … : Optimizer states ÷ 8"."""
    units = str(after.get("units") or "GB")
    inputs = []
    for path, name in _INPUTS:
        a, b = dotted(before, path), dotted(after, path)
        if a != b:
            inputs.append(
                {"name": name, "before": _show(path, a, units), "after": _show(path, b, units)}
            )
    old = {i["key"]: i for i in before["per_gpu"]["items"]}
    new = {i["key"]: i for i in after["per_gpu"]["items"]}
    lines = []
    for key in [*new, *(k for k in old if k not in new)]:
        a = int(old[key]["bytes"]) if key in old else 0
        b = int(new[key]["bytes"]) if key in new else 0
        if a == b:
            continue
        name = (new.get(key) or old[key])["name"]
        factor = _factor(a, b)
        if not a:
            moved = f"+ {format_bytes(b, units)}"
        elif not b:
            moved = f"{format_bytes(a, units)} → gone"
        else:
            moved = f"{format_bytes(a, units)} → {format_bytes(b, units)}"
        lines.append(
            {
                "key": key,
                "name": name,
                "before_bytes": a,
                "after_bytes": b,
                "factor": factor,
                "text": f"{name} {factor} ({moved})" if factor else f"{name} {moved}",
            }
        )
    lines.sort(key=lambda line: -abs(line["after_bytes"] - line["before_bytes"]))
    said = "; ".join(f"{i['name']} {i['before']} → {i['after']}" for i in inputs)
    moved_text = "; ".join(line["text"] for line in lines[:limit])
    if said and moved_text:
        caption = f"{said}: {moved_text}"
    elif said:
        caption = f"{said}: the bill is unchanged"
    else:
        caption = moved_text
    return {"inputs": inputs, "lines": lines, "caption": caption}
