"""The Python API: the same answers as the CLI, in three lines from a notebook.

>>> import gpuplan
>>> plan = gpuplan.serve("llama-3.1-8b", gpu="h100", context=4096)
>>> plan.fits, plan.per_gpu_total_bytes
"""

from typing import TYPE_CHECKING, Any

# each name is imported from its module on first use (PEP 562): `gpuplan serve` loads the serving
# API only, never the training, planning or engine-profile code
_LAZY = {
    "model_summaries": "gpuplan.api.common",
    "resolve_gpu": "gpuplan.api.common",
    "resolve_kv": "gpuplan.api.common",
    "resolve_weight_format": "gpuplan.api.common",
    "CheckReport": "gpuplan.api.engines",
    "CheckRow": "gpuplan.api.engines",
    "EnginePlan": "gpuplan.api.engines",
    "check_log": "gpuplan.api.engines",
    "engine_serve": "gpuplan.api.engines",
    "serve_launch": "gpuplan.api.engines",
    "INSPECT_SCHEMA_VERSION": "gpuplan.api.inspection",
    "ModelReport": "gpuplan.api.inspection",
    "inspect": "gpuplan.api.inspection",
    "DEFAULT_PLAN_GPUS": "gpuplan.api.planning",
    "PLAN_TRAIN_SCHEMA_VERSION": "gpuplan.api.plan_data",
    "PlanOption": "gpuplan.api.planning",
    "TrainOption": "gpuplan.api.training_plans",
    "plan": "gpuplan.api.planning",
    "plan_training": "gpuplan.api.training_plans",
    "SCHEMA_VERSION": "gpuplan.api.serving",
    "ServingPlan": "gpuplan.api.serving",
    "serve": "gpuplan.api.serving",
    "serve_speed": "gpuplan.api.serving_speed",
    "TRAIN_SCHEMA_VERSION": "gpuplan.api.training",
    "TrainingPlan": "gpuplan.api.training",
    "train": "gpuplan.api.training",
    "train_from": "gpuplan.api.framework_configs",
}

if TYPE_CHECKING:
    from gpuplan.api.common import (
        model_summaries,
        resolve_gpu,
        resolve_kv,
        resolve_weight_format,
    )
    from gpuplan.api.engines import (
        CheckReport,
        CheckRow,
        EnginePlan,
        check_log,
        engine_serve,
        serve_launch,
    )
    from gpuplan.api.framework_configs import train_from
    from gpuplan.api.inspection import INSPECT_SCHEMA_VERSION, ModelReport, inspect
    from gpuplan.api.plan_data import PLAN_TRAIN_SCHEMA_VERSION
    from gpuplan.api.planning import DEFAULT_PLAN_GPUS, PlanOption, plan
    from gpuplan.api.serving import SCHEMA_VERSION, ServingPlan, serve
    from gpuplan.api.serving_speed import serve_speed
    from gpuplan.api.training import TRAIN_SCHEMA_VERSION, TrainingPlan, train
    from gpuplan.api.training_plans import TrainOption, plan_training


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpuplan.api' has no attribute {name!r}")


__all__ = [
    "CheckReport",
    "CheckRow",
    "DEFAULT_PLAN_GPUS",
    "EnginePlan",
    "INSPECT_SCHEMA_VERSION",
    "ModelReport",
    "PLAN_TRAIN_SCHEMA_VERSION",
    "PlanOption",
    "SCHEMA_VERSION",
    "ServingPlan",
    "TRAIN_SCHEMA_VERSION",
    "TrainOption",
    "TrainingPlan",
    "check_log",
    "engine_serve",
    "inspect",
    "model_summaries",
    "plan",
    "plan_training",
    "resolve_gpu",
    "resolve_kv",
    "resolve_weight_format",
    "serve",
    "serve_launch",
    "serve_speed",
    "train",
    "train_from",
]
