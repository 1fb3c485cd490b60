"""`gpuplan.serve`: the generic serving bill, and the plan object it returns."""

from __future__ import annotations

from typing import Any

from gpuplan.api.common import (
    PlanHeadline,
    _bytes,
    gpu_dict,
    model_dict,
    resolve,
    resolve_gpu,
    resolve_kv,
    resolve_weight_format,
    usable_memory,
)
from gpuplan.api.requests import ServeRequest, serve_context
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import field, record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.serving import (
    DEFAULT_CUDA_CONTEXT_BYTES,
    DEFAULT_WORKSPACE_BYTES,
    ServingBill,
    ServingSetup,
    serving_bill,
)
from gpuplan.errors import GpuplanError
from gpuplan.planner.serving import Attempt, fewest_gpus, layout_for_count
from gpuplan.units import format_bytes, format_count

SCHEMA_VERSION = "gpuplan.serve/1"


@record
class ServingPlan(PlanHeadline):
    """A serving answer: the per-GPU bill, the model and GPU it is for, and how N was chosen."""

    bill: ServingBill
    model_id: str
    hf_id: str | None
    search: tuple[Attempt, ...] = field(default=())

    # --- the headline figures, as attributes -------------------------------------------

    @property
    def tp(self) -> int:
        return self.bill.setup.tp

    @property
    def pp(self) -> int:
        return self.bill.setup.pp

    @property
    def params_active(self) -> int:
        return self.bill.params.active

    @property
    def weights_bytes(self) -> int:
        return self.bill.weights_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.bill.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        return self.bill.kv_capacity_tokens

    @property
    def max_concurrent_sequences(self) -> int:
        return self.bill.max_concurrent_sequences

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        """The stable JSON schema documented in docs/json.md."""
        b, s = self.bill, self.bill.setup
        return {
            "schema": SCHEMA_VERSION,
            "mode": "serve",
            "model": {
                **model_dict(s.arch, self.model_id, self.hf_id),
                "sliding_window_layers": s.arch.num_sliding_layers,
            },
            "params_total": b.params.total,
            "params_active": b.params.active,
            "params_by_kind": dict(b.params.by_kind),
            "dtype": s.weights.precision.id,
            "weights_format": s.weights.describe(),
            "kv_dtype": s.kv.id,
            "weights_bytes": b.weights_bytes,
            "kv_bytes_per_token": b.kv_bytes_per_token,
            "kv_bytes_per_sequence": b.kv_bytes_per_sequence,
            "state_bytes_per_sequence": b.state_bytes_per_sequence,
            "gpu": gpu_dict(s.gpu),
            "gpus": s.gpus,
            "tp": s.tp,
            "pp": s.pp,
            "context": s.context,
            "users": s.users,
            "headroom": s.headroom,
            "per_gpu": {
                "items": [item.to_dict(units) for item in b.items],
                "total_bytes": b.per_gpu_total_bytes,
            },
            "per_gpu_total_bytes": b.per_gpu_total_bytes,
            "budget_bytes": b.budget_bytes,
            "fits": b.fits,
            "kv_capacity_tokens": b.kv_capacity_tokens,
            "max_concurrent_sequences": b.max_concurrent_sequences,
            "search": [attempt.to_dict() for attempt in self.search],
            "notes": list(b.notes),
            "units": units,
        }

    def __repr__(self) -> str:
        s = self.bill.setup
        verdict = "fits" if self.fits else "does NOT fit"
        lines = [
            f"ServingPlan({self.model_id} on {self.gpus} × {s.gpu.name}, tp={s.tp} pp={s.pp}: {verdict})",
        ]
        for item in self.items:
            lines.append(f"  {item.label:<14}{format_bytes(item.bytes):>12}   {item.explain()}")
        lines.append(
            f"  {'total':<14}{format_bytes(self.per_gpu_total_bytes):>12}   of {format_bytes(self.budget_bytes)} budget"
        )
        lines.append(
            f"  KV capacity {self.kv_capacity_tokens:,} tokens = {self.max_concurrent_sequences:,}"
            f" sequences of {s.context:,}"
        )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        s = self.bill.setup
        rows = "".join(
            f"<tr><td>{html.escape(i.label)}</td><td style='text-align:right'>{format_bytes(i.bytes)}</td>"
            f"<td><code>{html.escape(i.explain())}</code></td></tr>"
            for i in self.items
        )
        verdict = "fits" if self.fits else "does <b>not</b> fit"
        return (
            f"<div><b>{html.escape(self.model_id)}</b> ({format_count(self.params_total)} params) on "
            f"{self.gpus} × {html.escape(s.gpu.name)}, tp={s.tp} pp={s.pp}: {verdict}"
            f"<table>{rows}<tr><td><b>total</b></td><td style='text-align:right'><b>"
            f"{format_bytes(self.per_gpu_total_bytes)}</b></td><td>of {format_bytes(self.budget_bytes)} budget"
            f" ({s.headroom:.0%} of {format_bytes(s.gpu.memory_bytes)})</td></tr></table>"
            f"KV capacity: {self.kv_capacity_tokens:,} tokens, {self.max_concurrent_sequences:,} sequences"
            f" of {s.context:,} tokens</div>"
        )


def serve(
    model: str | dict[str, Any] | Architecture, gpu: str | GpuSpec = "h100", **knobs: Any
) -> ServingPlan:
    """Size serving `model` on `gpu`: the per-GPU bill, whether it fits, and on how many GPUs.

    The knobs are `ServeRequest`'s (api/requests.py SERVE: the one declaration the CLI, the web
    and the MCP tools are generated from), checked once when the request is built:
    gpus: a count, "auto" (fewest that fit), or None: one GPU if it fits, else "auto".
    tp/pp: an explicit layout (then gpus = tp × pp). dtype: weight format (default: the
    checkpoint's). kv_dtype: KV-cache format (default: the weights' 16-bit or fp8 dtype).
    context (default 4096), users (1), headroom (a fraction of the memory), gpu_memory,
    workspace, cuda_context.
    revision: the branch, tag or commit of a Hugging Face model (cache or Hub).
    When the checkpoint's headers were read, the weights line is their exact stored bytes.
    """
    req = ServeRequest(gpu=gpu, **knobs)
    ref = resolve(model, req.revision)
    arch, model_id, hf_id = ref.arch, ref.model_id, ref.hf_id
    spec = resolve_gpu(gpu, req.gpu_memory)
    headroom = usable_memory(spec, req.headroom)
    fmt = resolve_weight_format(arch, req.dtype, ref.stored)
    tp, pp, gpus = req.tp, req.pp, req.gpus
    setup = ServingSetup(
        arch=arch,
        weights=fmt,
        kv=resolve_kv(fmt, req.kv_dtype),
        gpu=spec,
        tp=tp or 1,
        pp=pp or 1,
        context=int(serve_context(req.context)),
        users=int(req.users),
        headroom=float(headroom),
        workspace_bytes=DEFAULT_WORKSPACE_BYTES if req.workspace is None else _bytes(req.workspace),
        cuda_context_bytes=DEFAULT_CUDA_CONTEXT_BYTES
        if req.cuda_context is None
        else _bytes(req.cuda_context),
    )
    if tp is not None or pp is not None:
        if isinstance(gpus, int) and gpus != setup.tp * setup.pp:
            raise GpuplanError(f"--gpus {gpus} disagrees with tp={setup.tp} × pp={setup.pp}")
        return ServingPlan(serving_bill(setup), model_id, hf_id)
    if isinstance(gpus, int):
        return ServingPlan(serving_bill(layout_for_count(setup, gpus)), model_id, hf_id)
    if gpus not in (None, "auto"):
        raise GpuplanError(f"gpus must be a number or 'auto', got {gpus!r}")
    bill, attempts = fewest_gpus(setup)
    return ServingPlan(bill, model_id, hf_id, tuple(attempts))
