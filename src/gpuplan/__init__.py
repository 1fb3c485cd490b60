"""gpuplan: will this model fit, and on how many GPUs? Exact, itemised GPU memory bills.

>>> import gpuplan
>>> plan = gpuplan.serve("llama-3.1-8b", gpu="h100")
>>> plan
"""

import importlib
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError

__version__ = "0.1.0"

# where each public name lives; imported on first use (PEP 562), so `import gpuplan` — and the
# CLI, which imports gpuplan.cli — pays only for what it touches
_LAZY = {
    "ServingPlan": "gpuplan.api",
    "TrainingPlan": "gpuplan.api",
    "check_log": "gpuplan.api",
    "engine_serve": "gpuplan.api",
    "inspect": "gpuplan.api",
    "plan": "gpuplan.api",
    "plan_training": "gpuplan.api",
    "serve": "gpuplan.api",
    "serve_launch": "gpuplan.api",
    "serve_speed": "gpuplan.api",
    "train": "gpuplan.api",
    "train_from": "gpuplan.api",
    "get_gpu": "gpuplan.catalog",
    "get_precision": "gpuplan.catalog",
    "list_gpus": "gpuplan.catalog",
    "list_models": "gpuplan.catalog",
    "load_architecture": "gpuplan.catalog",
    "count_params": "gpuplan.engine.params",
}

if TYPE_CHECKING:
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
        serve_speed,
        train,
        train_from,
    )
    from gpuplan.catalog import get_gpu, get_precision, list_gpus, list_models, load_architecture
    from gpuplan.engine.params import count_params


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")


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
    "serve_speed",
    "train",
    "train_from",
]
