"""`gpuplan.plan`: ranked ways to serve a model, with launch commands; `plan_training`: ranked
training layouts of a GPU count, with engine configs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuplan.api.serving import ServingPlan, serve
from gpuplan.api.training import TrainingPlan, train
from gpuplan.catalog import load_architecture
from gpuplan.engine.cost import DEFAULT_MFU
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


PLAN_TRAIN_SCHEMA_VERSION = "gpuplan.plan-train/1"


@dataclass(frozen=True)
class TrainOption:
    """One ranked training layout of a fixed GPU count that fits, with its full bill."""

    rank: int
    plan: TrainingPlan

    def to_dict(self, units: str = "GB", engine: str | None = None) -> dict[str, Any]:
        """One row of `gpuplan.plan-train/1` (docs/json.md); with `engine`, its export."""
        from gpuplan.planner.training_export import fsdp_strategy, training_export

        b = self.plan.bill
        s, lo, t = b.setup, b.setup.layout, b.time
        out: dict[str, Any] = {
            "rank": self.rank,
            "gpus": lo.gpus,
            "dp": lo.dp,
            "tp": lo.tp,
            "pp": lo.pp,
            "sp": lo.sp,
            "zero": lo.zero,
            "fsdp_strategy": None if lo.zero == 1 else fsdp_strategy(lo),  # FSDP has no ZeRO-1
            "hybrid": lo.hybrid,
            "layout": lo.describe(),
            "micro_batch": s.micro_batch,
            "grad_accum": s.micro_batches,
            "tokens_per_step": s.tokens_per_step,
            "checkpointing": s.recompute,
            "offload": s.offload,
            "per_gpu_total_bytes": b.per_gpu_total_bytes,
            "budget_bytes": b.budget_bytes,
            "model_states_bytes": b.model_states_bytes,
            "activations_bytes": b.activations_bytes,
            "host_bytes_per_gpu": b.host_bytes_per_gpu,
            "step_time_s": t.step_s if t else None,
            "tokens_per_second": t.tokens_per_second if t else None,
            "mfu": s.mfu,
        }
        if engine:
            out["export"] = training_export(b, engine).to_dict()
        return out


def plan_training(
    model: str | dict[str, Any],
    *,
    gpu: str = "h100",
    gpus: int = 8,
    seq: int = 4096,
    global_batch_tokens: int | None = None,
    recipe: str = "adamw-bf16",
    lora_rank: int | None = None,
    qlora: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
    top: int = 10,
    engine: str | None = None,
    attention: str = "flash",
    mfu: float = DEFAULT_MFU,
) -> list[TrainOption]:
    """Rank the training layouts of `gpus` × `gpu` that fit, fastest first (estimated tokens/s,
    then less memory per GPU). See planner/training_search.py for what is searched.

    global_batch_tokens: tokens per optimizer step, a whole number of `seq`-token sequences
    (default gpus × seq × 8: eight sequences per GPU). engine: deepspeed, fsdp or megatron
    narrows the search to the layouts that engine runs as exported; with megatron the default
    recipe becomes Megatron-LM's own (bf16 weights, fp32 gradients: 18 bytes/param).
    """
    from gpuplan.planner.training_export import TRAIN_ENGINES, engine_allows
    from gpuplan.planner.training_search import (
        default_global_batch_tokens,
        rank_training_layouts,
    )

    for name, value in (("gpus", gpus), ("seq", seq), ("top", top)):
        if value is None or isinstance(value, bool) or int(value) != value or value < 1:
            raise GpuplanError(f"{name} must be a positive whole number, got {value!r}")
    if global_batch_tokens is not None and (
        isinstance(global_batch_tokens, bool) or global_batch_tokens < 1
    ):
        raise GpuplanError(
            f"global-batch-tokens must be a positive whole number, got {global_batch_tokens!r}"
        )
    if engine is not None and engine not in TRAIN_ENGINES:
        raise GpuplanError(
            f"{engine!r} is not a training engine; export training to one of"
            f" {', '.join(TRAIN_ENGINES)}"
        )
    if engine == "megatron" and recipe == "adamw-bf16":
        recipe = "adamw-bf16-fp32grad"
    start = train(
        model,
        gpu,
        gpus=int(gpus),
        recipe=recipe,
        seq=int(seq),
        lora_rank=lora_rank,
        qlora=qlora,
        headroom=headroom,
        gpu_memory=gpu_memory,
        attention=attention,
        mfu=mfu,
    )
    batch = global_batch_tokens or default_global_batch_tokens(int(gpus), int(seq))
    found = rank_training_layouts(
        start.bill.setup, int(gpus), int(batch), engine_allows(engine), engine
    )
    return [
        TrainOption(i + 1, replace(start, bill=bill))
        for i, bill in enumerate(found.options[: int(top)])
    ]
