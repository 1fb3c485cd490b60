"""vLLM's non-torch memory: device memory in use that the torch caching allocator does not hold
(CUDA context growth, cuBLAS/attention workspaces, NCCL and all-reduce buffers), as the version
counts it against the KV budget.

What is counted depends on when the worker takes its first snapshot (versions.toml):

    scope "absolute"   V0 up to 0.6.4 and V1 up to 0.9.1: everything not held by torch at the
                       end of the profile run, the CUDA context included
                       (worker.py / v1 gpu_worker.py::determine_available_memory: total − free − torch)
    scope "increase"   V0 from 0.6.5 (#10511) and V1 from 0.9.2 (#19312): growth since the
                       worker's init snapshot (utils/mem_utils.py::memory_profiling)
    nccl_counted       V1 0.9.2–0.10.x took that snapshot before initialising the process groups
                       (gpu_worker.py::init_device, moved by #25359 in 0.11): the communicators'
                       own memory is then part of the growth

On top of that, tensor parallelism adds the buffers the first collective allocates (NCCL
channels, custom / symmetric-memory all-reduce workspaces), which depend on how the GPUs are
linked (interconnect.toml): large behind an NVSwitch on Hopper and Blackwell (NVLS, multicast
objects), small over PCIe and pre-Hopper NVLink. The per-class amounts are read from logs
(docs/engines-research.md §4.1), one figure per class, with the range they span.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.profiles import gib


@cache
def _classes() -> dict[str, Any]:
    return tomllib.loads(Path(__file__).with_name("interconnect.toml").read_text("utf-8"))


def interconnect_class(gpu: GpuSpec, override: str = "") -> str:
    """ "nvswitch", "nvlink" or "pcie": from the GPU's catalog link (interconnect_kind and
    nvlink_generation: an NVSwitch of NVLink 4+ is where NCCL's NVLS multicast runs; NVSwitch of
    earlier NVLink, NVLink bridges and Infinity Fabric count as "nvlink"; PCIe as "pcie"), else
    interconnect.toml by id (a GPU the user described), PCIe when unknown."""
    if override:
        return override
    kind = gpu.interconnect_kind
    if kind == "nvswitch":
        return "nvswitch" if (gpu.nvlink_generation or 0) >= 4 else "nvlink"
    if kind in ("nvlink-bridge", "xgmi"):
        return "nvlink"
    if kind == "pcie":
        return "pcie"
    data = _classes()
    for cls in ("nvswitch", "nvlink"):
        if gpu.id in data[cls]["gpus"]:
            return cls
    return "pcie"


def comm_bytes(rules: dict[str, Any], cls: str, tp: int, pp: int) -> int:
    """Buffers the first tensor-parallel collective allocates on one rank (versions.toml
    `allreduce_gib`: [base, per rank] by interconnect class; the fused all-reduce workspace is
    off with pipeline parallelism)."""
    if tp <= 1:
        return 0
    base, per_rank = rules["allreduce_gib"][cls]
    if pp > 1:
        base, per_rank = rules["allreduce_gib"]["pcie"]
    nvls = rules.get("nvls_gib", 0.0) if cls == "nvswitch" and tp > 2 else 0.0
    return gib(base + per_rank * tp + nvls)


def communicator_bytes(rules: dict[str, Any], gpu: GpuSpec, cls: str) -> int:
    """One rank's NCCL / RCCL communicator memory (channel buffers, proxy and work FIFOs) where
    the version counts it (`nccl_counted`): NCCL's figure (`nccl_communicator_gib`), or RCCL's
    between AMD Instinct GPUs linked by Infinity Fabric (`rccl_communicator_gib`), which opens
    far more channels per peer; both read from logs (versions.toml names them)."""
    if gpu.vendor == "amd" and cls == "nvlink":
        return gib(rules["rccl_communicator_gib"])
    return gib(rules["nccl_communicator_gib"])


def non_torch_bytes(
    rules: dict[str, Any], gpu: GpuSpec, tp: int, pp: int, interconnect: str = ""
) -> tuple[int, dict[str, Any]]:
    """The non-torch line of one rank and how it was made up."""
    scope = rules["non_torch_scope"]
    base = gib(rules["non_torch_base_gib"])
    if scope == "absolute":  # "init_free" and "increase" start after the CUDA context
        base = gib(rules["cuda_context_gib"]) + base
    cls = interconnect_class(gpu, interconnect)
    comm = comm_bytes(rules, cls, tp, pp)
    nccl = communicator_bytes(rules, gpu, cls) if rules["nccl_counted"] and tp * pp > 1 else 0
    if pp > 1 and tp == 1:
        base = gib(rules["non_torch_pp_gib"])
    total = base + comm + nccl
    return total, {
        "scope": scope,
        "base_bytes": base,
        "interconnect": cls,
        "all_reduce_bytes": comm,
        "nccl_communicator_bytes": nccl,
        "communicator": "rccl" if gpu.vendor == "amd" and cls == "nvlink" else "nccl",
    }
