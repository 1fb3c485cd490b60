"""`gpuplan plan --matrix`: budget tables (`gpuplan.plan-matrix/1`): context × users for serving,
memory per GPU vs GPU count per ZeRO stage for training (planner/matrix.py)."""

from __future__ import annotations

from typing import Any

from gpuplan.api.serving import serve
from gpuplan.api.training import train
from gpuplan.engine.serving import DEFAULT_HEADROOM
from gpuplan.errors import GpuplanError
from gpuplan.planner.matrix import (
    DEFAULT_CONTEXTS,
    DEFAULT_TRAIN_GPUS,
    DEFAULT_USERS,
    largest_context,
    serving_matrix,
    training_matrix,
)

PLAN_MATRIX_SCHEMA_VERSION = "gpuplan.plan-matrix/1"


def _cell_dict(c: Any) -> dict[str, Any]:
    return {
        "per_gpu_total_bytes": c.per_gpu_total_bytes,
        "budget_bytes": c.budget_bytes,
        "fits": c.fits,
        "note": c.note,
    }


def serving_budget_matrix(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpus: int | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    contexts: tuple[int, ...] | list[int] | None = None,
    users: tuple[int, ...] | list[int] | None = None,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan-matrix/1` for serving: context × concurrency on `gpus` × `gpu` (default:
    the fewest that fit one sequence of the smallest context), and the largest context that fits
    for each concurrency."""
    ctx = tuple(sorted(set(contexts or DEFAULT_CONTEXTS)))
    us = tuple(sorted(set(users or DEFAULT_USERS)))
    if not ctx or not us or min(ctx) < 1 or min(us) < 1:
        raise GpuplanError("contexts and users must be positive whole numbers")
    base = serve(
        model,
        gpu,
        gpus=gpus if gpus is not None else "auto",
        dtype=dtype,
        kv_dtype=kv_dtype,
        context=ctx[0],
        headroom=headroom,
        gpu_memory=gpu_memory,
    )
    setup = base.bill.setup
    cells = serving_matrix(setup, ctx, us)
    return {
        "schema": PLAN_MATRIX_SCHEMA_VERSION,
        "mode": "serve",
        "model": base.model_id,
        "gpu": setup.gpu.id,
        "gpus": setup.gpus,
        "tp": setup.tp,
        "pp": setup.pp,
        "dtype": setup.weights.precision.id,
        "kv_dtype": setup.kv.id,
        "rows": "context",
        "cols": "users",
        "row_values": list(ctx),
        "col_values": list(us),
        "cells": [{"context": c.rows, "users": c.cols, **_cell_dict(c)} for c in cells],
        "largest_context": {str(u): largest_context(setup, u) for u in us},
    }


def training_budget_matrix(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpu_counts: tuple[int, ...] | list[int] | None = None,
    seq: int = 4096,
    recipe: str = "adamw-bf16",
    checkpointing: str = "none",
    lora_rank: int | None = None,
    qlora: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
) -> dict[str, Any]:
    """`gpuplan.plan-matrix/1` for training: memory per GPU vs GPU count for ZeRO 0-3."""
    counts = tuple(sorted(set(gpu_counts or DEFAULT_TRAIN_GPUS)))
    if not counts or min(counts) < 1:
        raise GpuplanError("GPU counts must be positive whole numbers")
    base = train(
        model,
        gpu,
        gpus=1,
        seq=int(seq),
        recipe=recipe,
        checkpointing=checkpointing,
        lora_rank=lora_rank,
        qlora=qlora,
        headroom=headroom,
        gpu_memory=gpu_memory,
    )
    cells = training_matrix(base.bill.setup, counts)
    return {
        "schema": PLAN_MATRIX_SCHEMA_VERSION,
        "mode": "train",
        "model": base.model_id,
        "gpu": base.bill.setup.gpu.id,
        "seq": base.bill.setup.seq,
        "recipe": base.bill.setup.recipe.id,
        "checkpointing": checkpointing,
        "rows": "gpus",
        "cols": "zero",
        "row_values": list(counts),
        "col_values": [0, 1, 2, 3],
        "cells": [{"gpus": c.rows, "zero": c.cols, **_cell_dict(c)} for c in cells],
    }
