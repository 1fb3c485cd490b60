"""`gpuplan.plan`: ranked ways to serve a model, with launch commands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.api.serving import ServingPlan, serve
from gpuplan.catalog import load_architecture
from gpuplan.engine.serving import (
    DEFAULT_HEADROOM,
)
from gpuplan.errors import GpuplanError

DEFAULT_PLAN_GPUS = ("h100", "h200", "b200", "a100-80gb", "l40s", "mi300x")


@dataclass(frozen=True)
class PlanOption:
    """One ranked way to serve a model: a GPU type, a weight format, and the fewest GPUs for them."""

    rank: int
    plan: ServingPlan

    def to_dict(self, units: str = "GB", engine: str | None = None) -> dict[str, Any]:
        from gpuplan.planner.export import launch_command

        s = self.plan.bill.setup
        out: dict[str, Any] = {
            "rank": self.rank,
            "gpu": s.gpu.id,
            "gpus": s.gpus,
            "tp": s.tp,
            "pp": s.pp,
            "dtype": s.weights.precision.id,
            "kv_dtype": s.kv.id,
            "per_gpu_total_bytes": self.plan.per_gpu_total_bytes,
            "budget_bytes": self.plan.budget_bytes,
            "kv_capacity_tokens": self.plan.kv_capacity_tokens,
            "max_concurrent_sequences": self.plan.max_concurrent_sequences,
            "total_memory_bytes": s.gpus * s.gpu.memory_bytes,
        }
        if engine:
            out["launch"] = launch_command(
                self.plan.bill, self.plan.hf_id or self.plan.model_id, engine
            )
        return out


def plan(
    model: str | dict[str, Any],
    *,
    gpus: tuple[str, ...] | list[str] = DEFAULT_PLAN_GPUS,
    dtypes: tuple[str, ...] | list[str] | None = None,
    kv_dtype: str | None = None,
    context: int = 4096,
    users: int = 1,
    headroom: float = DEFAULT_HEADROOM,
) -> list[PlanOption]:
    """Rank the ways to serve `model`: for each GPU type and weight format, the fewest GPUs that
    fit. Ranked by GPU count, then by total GPU memory bought, then by KV capacity (more is better).

    dtypes default: the checkpoint's own format, plus fp8 weights (as vLLM's `--quantization fp8`
    stores them: linear layers in fp8, the rest in 16-bit) unless the checkpoint is already quantised.
    """
    if not dtypes:
        quantised = load_architecture(model).quantization is not None
        dtypes = ("auto",) if quantised else ("auto", "fp8-tensor")
    found: list[ServingPlan] = []
    seen: set[tuple[str, str]] = set()
    for gpu in gpus:
        for dtype in dtypes:
            try:
                option = serve(
                    model,
                    gpu,
                    dtype=dtype,
                    kv_dtype=kv_dtype,
                    context=context,
                    users=users,
                    headroom=headroom,
                )
            except GpuplanError as err:
                if "does not fit on up to" in str(err):
                    continue
                raise
            key = (option.bill.setup.gpu.id, option.bill.setup.weights.precision.id)
            if key not in seen:
                seen.add(key)
                found.append(option)
    found.sort(
        key=lambda p: (p.gpus, p.gpus * p.bill.setup.gpu.memory_bytes, -p.kv_capacity_tokens)
    )
    return [PlanOption(i + 1, p) for i, p in enumerate(found)]
