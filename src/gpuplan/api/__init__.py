"""The Python API: the same answers as the CLI, in three lines from a notebook.

>>> import gpuplan
>>> plan = gpuplan.serve("llama-3.1-8b", gpu="h100", context=4096)
>>> plan.fits, plan.per_gpu_total_bytes
"""

from gpuplan.api.common import (
    model_summaries,
    resolve_gpu,
    resolve_kv,
    resolve_weight_format,
)
from gpuplan.api.engines import (
    ENGINE_ARG_NAMES,
    CheckReport,
    CheckRow,
    EnginePlan,
    check_log,
    engine_kv_precision,
    engine_serve,
    engine_weight_format,
    serve_launch,
)
from gpuplan.api.inspect import INSPECT_SCHEMA_VERSION, ModelReport, inspect
from gpuplan.api.planning import (
    DEFAULT_PLAN_GPUS,
    PLAN_TRAIN_SCHEMA_VERSION,
    PlanOption,
    TrainOption,
    plan,
    plan_training,
)
from gpuplan.api.serving import SCHEMA_VERSION, ServingPlan, serve
from gpuplan.api.training import TRAIN_SCHEMA_VERSION, TrainingPlan, train

__all__ = [
    "CheckReport",
    "CheckRow",
    "DEFAULT_PLAN_GPUS",
    "ENGINE_ARG_NAMES",
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
    "engine_kv_precision",
    "engine_serve",
    "engine_weight_format",
    "inspect",
    "model_summaries",
    "plan",
    "plan_training",
    "resolve_gpu",
    "resolve_kv",
    "resolve_weight_format",
    "serve",
    "serve_launch",
    "train",
]
