"""gpuplan: will this model fit, and on how many GPUs? Exact, itemised GPU memory bills.

>>> import gpuplan
>>> plan = gpuplan.serve("llama-3.1-8b", gpu="h100")
>>> plan
"""

from gpuplan.api import (
    ServingPlan,
    TrainingPlan,
    check_log,
    engine_serve,
    inspect,
    plan,
    plan_training,
    serve,
    serve_launch,
    train,
)
from gpuplan.catalog import get_gpu, get_precision, list_gpus, list_models, load_architecture
from gpuplan.engine.params import count_params
from gpuplan.errors import GpuplanError

__version__ = "0.1.0"

__all__ = [
    "GpuplanError",
    "ServingPlan",
    "TrainingPlan",
    "check_log",
    "count_params",
    "engine_serve",
    "get_gpu",
    "get_precision",
    "inspect",
    "list_gpus",
    "list_models",
    "load_architecture",
    "plan",
    "plan_training",
    "serve",
    "serve_launch",
    "train",
]
