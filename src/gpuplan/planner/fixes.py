"""What to change when a plan does not fit: the ways out, each asked of the engine.

A serving plan that does not fit has three answers (the lesson, part 6, "Serving 405B: three
answers"): fewer bytes per parameter, more memory per GPU, more GPUs — plus a smaller ask (fewer
concurrent users). A training plan can also divide or drop bytes without new hardware: a higher
ZeRO stage (Rajbhandari et al. 2020, §5), activation recompute (Chen et al. 2016), LoRA
(Hu et al. 2021). Every candidate is a real call of the engine (`ask`), never an estimate; the
ones that fit come back as `Fix` records, in the order tried (no new hardware first, then a
bigger GPU, then more GPUs), one per distinct resulting plan.

API (used by the web app and the CLI):

    serving_fixes(kwargs, plan, ask)  -> list[Fix]   (ask: gpuplan.api.serve, passed by the api)
    training_fixes(kwargs, plan, ask) -> list[Fix]   (ask: gpuplan.api.train)
    overflow(items, memory, budget)                     -> where a stack crosses its limits

`kwargs` are the keyword arguments the plan was made with (`model` included); `plan` is what
`ask(**kwargs)` returned. `Fix.change` holds only the arguments to change (a value of None means
"back to the default"), so `ask(**{**kwargs, **fix.change})` is the fitting plan: one click.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gpuplan.catalog import list_gpus
from gpuplan.engine.frozen import asdict, field, record
from gpuplan.errors import GpuplanError

SIXTEEN_BIT = ("bf16", "fp16", "fp32")

# The lesson's three answers (part 6: fewer bytes, a bigger GPU, more GPUs), and which one each
# way out gives: sharding, recompute, adapters and a new split all put fewer bytes on each GPU.
THREE_ANSWERS = {
    "fewer_bytes": "fewer bytes",
    "shard_states": "fewer bytes",
    "recompute": "fewer bytes",
    "lora": "fewer bytes",
    "relayout": "fewer bytes",
    "bigger_gpu": "bigger GPU",
    "more_gpus": "more GPUs",
    "smaller_ask": "smaller ask",
}
ANSWER_TITLES = {
    "fewer_bytes": "Fewer bytes per parameter",
    "bigger_gpu": "More memory per GPU",
    "more_gpus": "More GPUs",
    "smaller_ask": "A smaller ask",
    "shard_states": "Shard the model states",
    "recompute": "Recompute activations",
    "lora": "Train adapters only",
    "relayout": "Split the model differently",
}


@record
class Fix:
    """One way out that fits: what to change, and the plan that results."""

    answer: str  # one of THREE_ANSWERS' keys
    label: str  # one line for a person, e.g. "Serve the weights in fp8"
    change: dict[str, Any]  # keyword arguments to change; None = back to the default
    gpus: int
    gpu: str  # GPU id of the resulting plan
    memory_bytes: int  # the memory per GPU it was measured against
    per_gpu_total_bytes: int
    budget_bytes: int
    detail: dict[str, Any] = field(default_factory=dict)  # layout and mode-specific figures

    @property
    def title(self) -> str:
        return ANSWER_TITLES[self.answer]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "title": self.title}


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


# --- shared steps ---------------------------------------------------------------------------


Candidate = tuple[str, str, dict[str, Any]]  # (answer, label, change)


def _try(ask: Callable[..., Any], kwargs: dict[str, Any], change: dict[str, Any]) -> Any | None:
    """The plan with `change` applied, or None when the engine refuses it or it does not fit."""
    try:
        plan = ask(**{**kwargs, **change})
    except GpuplanError:
        return None
    return plan if plan.fits else None


def _memory_basis(kwargs: dict[str, Any], gpu: Any) -> str | None:
    """How a bigger GPU is measured: the way the current one is. "marketed" when the plan was
    measured at the marketed figure (the lesson's convention), else the catalog's own figure."""
    asked = kwargs.get("gpu_memory")
    if isinstance(asked, str) and asked.strip().lower() == "marketed":
        return "marketed"
    if gpu.memory_override is not None and gpu.memory_override == gpu.marketed_bytes:
        return "marketed"
    return None


def _bigger_gpus(kwargs: dict[str, Any], gpu: Any) -> Iterator[dict[str, Any]]:
    """The changes that select each catalog GPU of the same vendor with more memory than `gpu`,
    smallest first, measured on the same basis as the current GPU."""
    basis = _memory_basis(kwargs, gpu)

    def memory(g: Any) -> int:
        return int(g.marketed_bytes if basis == "marketed" else g.memory_bytes)

    current = int(gpu.memory_bytes)
    bigger = [g for g in list_gpus() if g.vendor == gpu.vendor and memory(g) > current]
    for g in sorted(bigger, key=lambda g: (memory(g), g.id)):
        yield {"gpu": g.id, "gpu_memory": basis}


def _collect(
    candidates: Iterator[Candidate], kwargs: dict[str, Any], ask: Callable[..., Any], gpus: int
) -> list[Fix]:
    """Ask the engine for each candidate; keep the first that fits for each answer (the
    cheapest way to give that answer), and never the same resulting plan twice."""
    found: list[Fix] = []
    seen: set[tuple[Any, ...]] = set()
    answered: set[str] = set()
    for answer, label, change in candidates:
        if answer in answered:
            continue
        plan = _try(ask, kwargs, change)
        if plan is None:
            continue
        key = _identity(plan)
        if key in seen:
            continue
        if change.get("gpus") == "auto" and plan.to_dict()["mode"] == "serve":
            change = {**change, "gpus": plan.gpus}  # the count the search found, explicitly
        answered.add(answer)
        if answer == "more_gpus" and plan.gpus <= gpus:  # the search split the model instead
            answer, label = "relayout", "Split the model as {layout} on {gpus} GPUs"
        seen.add(key)
        found.append(_fix(answer, label, change, plan))
    return found


def _identity(plan: Any) -> tuple[Any, ...]:
    """What makes two fitting plans the same plan (so a fix list never lists one twice)."""
    d = plan.to_dict()
    layout = d.get("layout") or {"tp": d.get("tp"), "pp": d.get("pp")}
    return (
        d["mode"],
        d["gpu"]["id"],
        d["gpu"]["memory_bytes"],
        d["gpus"],
        tuple(sorted(layout.items())) if isinstance(layout, dict) else layout,
        d.get("dtype"),
        d.get("kv_dtype"),
        d.get("users"),
        d.get("checkpointing"),
        str(d.get("lora")),
        d["per_gpu_total_bytes"],
    )


def _fix(answer: str, label: str, change: dict[str, Any], plan: Any) -> Fix:
    d = plan.to_dict()
    if d["mode"] == "serve":
        detail = {
            "layout": f"tp={d['tp']} pp={d['pp']}",
            "tp": d["tp"],
            "pp": d["pp"],
            "dtype": d["dtype"],
            "kv_dtype": d["kv_dtype"],
            "max_concurrent_sequences": d["max_concurrent_sequences"],
        }
    else:
        detail = {
            "layout": d["layout"]["describe"],
            "zero": d["layout"]["zero"],
            "checkpointing": d["checkpointing"],
            "method": "lora" if d["lora"] else "full",
            "tokens_per_second": d["tokens_per_second"],
        }
    return Fix(
        answer=answer,
        label=label.format(gpus=d["gpus"], gpu=d["gpu"]["name"], **detail),
        change=change,
        gpus=int(d["gpus"]),
        gpu=str(d["gpu"]["id"]),
        memory_bytes=int(d["gpu"]["memory_bytes"]),
        per_gpu_total_bytes=int(d["per_gpu_total_bytes"]),
        budget_bytes=int(d["budget_bytes"]),
        detail=detail,
    )


# --- serving --------------------------------------------------------------------------------


def _serving_candidates(kwargs: dict[str, Any], plan: Any) -> Iterator[Candidate]:
    setup = plan.bill.setup
    dtype, kv = setup.weights.precision, setup.kv
    if kv.id in SIXTEEN_BIT:
        yield "fewer_bytes", "Store the KV cache in fp8", {"kv_dtype": "fp8"}
    if dtype.id in SIXTEEN_BIT:
        yield "fewer_bytes", "Serve the weights in fp8", {"dtype": "fp8"}
        if kv.id in SIXTEEN_BIT:
            yield (
                "fewer_bytes",
                "Weights and KV cache in fp8",
                {"dtype": "fp8", "kv_dtype": "fp8"},
            )
    if dtype.bits > 4:
        yield "fewer_bytes", "Serve the weights in int4", {"dtype": "int4"}
    for change in _bigger_gpus(kwargs, setup.gpu):
        yield "bigger_gpu", "Use {gpus} × {gpu} instead", {**change, "gpus": plan.gpus}
    yield (
        "more_gpus",
        "Use {gpus} GPUs (tp {tp} × pp {pp})",
        {"gpus": "auto", "tp": None, "pp": None},
    )
    if plan.max_concurrent_sequences >= 1 and setup.users > 1:
        n = plan.max_concurrent_sequences
        yield "smaller_ask", f"Serve {n} users instead of {setup.users}", {"users": n}


def serving_fixes(kwargs: dict[str, Any], plan: Any, ask: Callable[..., Any]) -> list[Fix]:
    """The ways out of a serving plan that does not fit, at most one per answer, in order:
    fewer bytes (the first that fits of KV fp8, weights fp8, both, int4), the smallest bigger
    GPU of the same vendor at the same GPU count, the fewest GPUs of this type (as an explicit
    count), fewer users. Empty when the plan fits."""
    if plan.fits:
        return []
    return _collect(_serving_candidates(kwargs, plan), kwargs, ask, plan.gpus)


# --- training -------------------------------------------------------------------------------


def _training_candidates(kwargs: dict[str, Any], plan: Any) -> Iterator[Candidate]:
    setup = plan.bill.setup
    lo = setup.layout
    same = {"gpus": lo.gpus, "tp": lo.tp, "pp": lo.pp, "dp": None}
    recompute = setup.recompute != "full"
    if lo.dp > 1 and lo.fsdp is None:
        for stage in range(lo.zero + 1, 4):
            yield "shard_states", f"ZeRO stage {stage}", {**same, "zero": stage}
    if recompute:
        yield "recompute", "Full activation checkpointing", {"checkpointing": "full"}
        if lo.dp > 1 and lo.fsdp is None:
            for stage in range(lo.zero + 1, 4):
                yield (
                    "recompute",
                    f"ZeRO stage {stage} and full activation checkpointing",
                    {**same, "zero": stage, "checkpointing": "full"},
                )
    if setup.lora is None:
        yield (
            "lora",
            "LoRA (rank 16): train adapters, freeze the base",
            {"method": "lora", "lora_rank": 16},
        )
        yield (
            "lora",
            "QLoRA (rank 64): 4-bit frozen base, bf16 adapters",
            {"method": "qlora", "lora_rank": 64},
        )
    for change in _bigger_gpus(kwargs, setup.gpu):
        yield "bigger_gpu", "Use {gpus} × {gpu} instead", {**change, **same}
    yield (
        "more_gpus",
        "Use {gpus} GPUs ({layout})",
        {"gpus": "auto", "tp": None, "pp": None, "dp": None},
    )
    if kwargs.get("zero") is not None:
        yield (
            "more_gpus",
            "Use {gpus} GPUs ({layout})",
            {"gpus": "auto", "tp": None, "pp": None, "dp": None, "zero": None},
        )
    if recompute:  # activations no number of GPUs divides enough (long sequences): recompute too
        yield (
            "more_gpus",
            "Use {gpus} GPUs ({layout}) with full activation checkpointing",
            {
                "gpus": "auto",
                "tp": None,
                "pp": None,
                "dp": None,
                "zero": None,
                "checkpointing": "full",
            },
        )


def training_fixes(kwargs: dict[str, Any], plan: Any, ask: Callable[..., Any]) -> list[Fix]:
    """The ways out of a training plan that does not fit, at most one per answer, in order: the
    lowest ZeRO stage that fits on the same GPUs (the least communication), full recompute
    (alone, else with the lowest ZeRO stage that then fits), LoRA else QLoRA, the smallest
    bigger GPU at the same layout, the fewest GPUs the planner finds (`gpus="auto"`, keeping
    the ZeRO stage, else freeing it, else with full recompute too; "relayout" when that is no
    more GPUs than now, the model split by tensor or pipeline parallelism instead). Empty when
    the plan fits."""
    if plan.fits:
        return []
    return _collect(_training_candidates(kwargs, plan), kwargs, ask, plan.gpus)
