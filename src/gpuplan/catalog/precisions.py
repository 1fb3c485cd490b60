"""The precision catalog (data/precisions.toml): the table is the engine's own
(engine/precision.py reads it); the catalog offers the same lookups."""

from gpuplan.engine.precision import get_precision, list_precisions, torch_dtype_precision

__all__ = ["get_precision", "list_precisions", "torch_dtype_precision"]
