"""Catalogs: models, GPUs and precisions, read from the data files shipped in the package.

This is the only place (with the CLI and web layers) that reads files; the engine is pure.
"""

from gpuplan.catalog.gpus import get_gpu, list_gpus
from gpuplan.catalog.models import ModelEntry, list_models, load_architecture
from gpuplan.catalog.precisions import get_precision, list_precisions

__all__ = [
    "ModelEntry",
    "get_gpu",
    "get_precision",
    "list_gpus",
    "list_models",
    "list_precisions",
    "load_architecture",
]
