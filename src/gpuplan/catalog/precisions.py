"""The precision catalog (data/precisions.toml): the table is the engine's own
(engine/precision.py reads it); the catalog offers the same lookups."""

from gpuplan.datafiles import load_data
from gpuplan.engine.precision import get_precision, list_precisions, torch_dtype_precision

__all__ = ["get_precision", "list_precisions", "precision_aliases", "torch_dtype_precision"]


def precision_aliases(precision_id: str) -> list[str]:
    """The other names `--dtype` takes for a precision, as its row lists them."""
    for row in load_data("precisions.toml")["precision"]:
        if row["id"] == precision_id:
            return [a for a in row.get("aliases", []) if a != precision_id]
    return []
