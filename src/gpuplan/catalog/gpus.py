"""The GPU catalog (data/gpus.toml): memory as the driver reports it and as marketed, with sources."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuplan.datafiles import load_data
from gpuplan.engine.gpu import GpuSpec
from gpuplan.lookup import did_you_mean, normalise

_SPEC_FIELDS = (
    "marketed_bytes",
    "driver_total_bytes",
    "memory_bandwidth_bytes_per_s",
    "bf16_dense_tflops",
    "fp8_dense_tflops",
    "fp16_dense_tflops",
    "fp4_dense_tflops",
    "int8_dense_tops",
    "tf32_dense_tflops",
    "interconnect_bytes_per_s_per_dir",
    "interconnect_kind",
    "interconnect_topology",
    "interconnect_domain",
    "nvlink_generation",
    "pcie_generation",
    "pcie_bytes_per_s_per_dir",
    "gpus_per_node",
    "vendor",
    "compute_capability",
)


@cache
def _table() -> tuple[dict[str, GpuSpec], dict[str, str], dict[str, dict[str, Any]]]:
    data = load_data("gpus.toml")
    by_id: dict[str, GpuSpec] = {}
    names: dict[str, str] = {}
    rows: dict[str, dict[str, Any]] = {}
    for row in data["gpu"]:
        spec = GpuSpec(
            id=row["id"], name=row["name"], **{k: row[k] for k in _SPEC_FIELDS if k in row}
        )
        by_id[spec.id] = spec
        rows[spec.id] = row
        for alias in [spec.id, *row.get("aliases", [])]:
            names[normalise(alias)] = spec.id
    return by_id, names, rows


def list_gpus() -> list[GpuSpec]:
    return list(_table()[0].values())


def gpu_record(gpu_id: str) -> dict[str, Any]:
    """The catalog row as written, with its notes and source keys (for `gpuplan gpus --json`)."""
    return _table()[2][gpu_id]


def gpu_figure(gpu: GpuSpec | str, key: str) -> float:
    """A GPU's speed figure by catalog key (see the keys in gpus.toml's header), or a one-line
    GpuplanError naming the GPU and the figure when no source gave it. The speed code calls this
    (or GpuSpec.figure / GpuSpec.peak_flops) instead of falling back to any default."""
    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    return spec.figure(key)


def figure_sources(gpu_id: str, key: str) -> list[str]:
    """The [sources] keys a figure of a catalogued GPU was read in (for a speed figure's sources)."""
    row = gpu_record(gpu_id)
    if key in ("marketed_bytes", "driver_total_bytes"):
        return list(row.get("memory_sources", []))
    return list(row.get("figure_sources", {}).get(key, []))


def get_gpu(name: str) -> GpuSpec:
    """A GPU by id or alias: 'h100', 'H100-SXM', 'a100-40gb', 'mi300x', '4090'."""
    by_id, names, _ = _table()
    key = names.get(normalise(name)) or names.get(normalise(name).replace(" ", "-"))
    if key is None:
        raise did_you_mean("gpu", name, names)
    return by_id[key]
