"""The precision catalog (data/precisions.toml)."""

from __future__ import annotations

from functools import cache

from gpuplan.catalog.compiled import load_data
from gpuplan.catalog.lookup import did_you_mean, normalise
from gpuplan.engine.precision import Precision

_FIELDS = (
    "bits",
    "group_size",
    "scale_bits",
    "zero_bits",
    "scale_group",
    "scale_scale_bits",
    "block_size",
    "block_bytes",
    "scope",
    "kv",
    "source",
)


@cache
def _table() -> tuple[dict[str, Precision], dict[str, str]]:
    data = load_data("precisions.toml")
    by_id: dict[str, Precision] = {}
    names: dict[str, str] = {}
    for row in data["precision"]:
        p = Precision(id=row["id"], **{k: row[k] for k in _FIELDS if k in row})
        by_id[p.id] = p
        for alias in [p.id, *row.get("aliases", [])]:
            names[normalise(alias)] = p.id
    return by_id, names


def list_precisions() -> list[Precision]:
    return list(_table()[0].values())


def precision_aliases(precision_id: str) -> list[str]:
    """The other names `--dtype` takes for a precision, as its row lists them."""
    for row in load_data("precisions.toml")["precision"]:
        if row["id"] == precision_id:
            return [a for a in row.get("aliases", []) if a != precision_id]
    return []


def get_precision(name: str, for_kv: bool = False) -> Precision:
    """A precision by id or alias ('bf16', 'bfloat16', 'awq', 'nf4-dq', ...)."""
    by_id, names = _table()
    key = names.get(normalise(name))
    if key is None:
        raise did_you_mean("precision", name, names)
    p = by_id[key]
    if for_kv and not p.kv:
        kv_ok = ", ".join(x.id for x in by_id.values() if x.kv)
        from gpuplan.errors import GpuplanError

        raise GpuplanError(f"{p.id} is not a KV-cache dtype; use one of {kv_ok}")
    return p


def torch_dtype_precision(torch_dtype: str) -> Precision:
    """The precision a checkpoint's `torch_dtype` names (float32 → fp32, bfloat16 → bf16...)."""
    mapping = {
        "float32": "fp32",
        "float16": "fp16",
        "bfloat16": "bf16",
        "float": "fp32",
        "half": "fp16",
    }
    return get_precision(mapping.get(torch_dtype, "bf16"))
