"""What every deployment manifest shares: where a plan's ranks sit, what the cluster calls its GPU,
the image that runs its engine, and the environment NCCL needs on its interconnect.

Placement: one replica of tp × pp GPUs fills whole nodes once it outgrows one
(`nodes = ⌈tp·pp ÷ gpus_per_node⌉`, each node with tp·pp ÷ nodes GPUs), the rule the planner
already sizes by (tensor parallel inside a node, pipeline stages across nodes): vLLM's multi-node
serving runs one Ray worker per node [vLLM docs, "Distributed inference and serving"], SGLang one
process group per node (`--nnodes`, `--node-rank`, `--dist-init-addr`, python/sglang/srt/
server_args.py), torchrun one agent per node.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from gpuplan.datafiles import load_data
from gpuplan.engine.frozen import record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.errors import GpuplanError

HTTP_PORT = 8000
RAY_PORT = 6379
SGLANG_DIST_PORT = 20000
TORCHRUN_PORT = 29500
DEFAULT_SHM = "16Gi"  # /dev/shm for NCCL's shared-memory transport and the engines' IPC


@cache
def _data() -> dict[str, Any]:
    return load_data("deploy.toml")


@record
class ClusterGpu:
    """How a cluster names one GPU type (catalog/data/deploy.toml)."""

    id: str
    vendor: str
    resource: str  # the device plugin's extended resource: nvidia.com/gpu, amd.com/gpu
    node_label: str | None
    node_value: str | None
    skypilot: str | None


def cluster_gpu(gpu: GpuSpec) -> ClusterGpu:
    """The cluster's names for `gpu`; a vendor without a Kubernetes device plugin is refused."""
    data = _data()
    resource = data["resources"].get(gpu.vendor)
    if resource is None:
        raise GpuplanError(
            f"no deployment manifest for {gpu.name}: gpuplan knows no Kubernetes device plugin"
            f" for vendor {gpu.vendor!r} (NVIDIA and AMD only)"
        )
    row = data["gpu"].get(gpu.id, {})
    return ClusterGpu(
        gpu.id,
        gpu.vendor,
        resource,
        row.get("node_label"),
        row.get("node_value"),
        row.get("skypilot"),
    )


def gpu_by_label(value: str) -> str | None:
    """The catalog id whose node label value (or SkyPilot name) is `value` (reading back)."""
    for gpu_id, row in _data()["gpu"].items():
        if value in (row.get("node_value"), row.get("skypilot")):
            return str(gpu_id)
    return None


def image(engine: str, vendor: str) -> str:
    """The container image that runs `engine` on `vendor`'s GPUs (deploy.toml [images])."""
    try:
        return str(_data()["images"][engine][vendor])
    except KeyError:
        raise GpuplanError(
            f"no {engine} image for {vendor} GPUs in gpuplan's deploy table"
        ) from None


@record
class Placement:
    """One replica's ranks over nodes, and how many replicas."""

    gpus_per_replica: int
    gpus_per_node_cap: int  # GPUs one node holds (the catalog's gpus_per_node)
    replicas: int = 1

    @property
    def nodes(self) -> int:
        """Nodes per replica: ⌈gpus ÷ node size⌉."""
        return -(-self.gpus_per_replica // self.gpus_per_node_cap)

    @property
    def gpus_per_node(self) -> int:
        """GPUs each node of a replica uses (the replica divides evenly over its nodes)."""
        if self.gpus_per_replica % self.nodes:
            raise GpuplanError(
                f"{self.gpus_per_replica} GPUs do not split evenly over {self.nodes} nodes of"
                f" {self.gpus_per_node_cap}"
            )
        return self.gpus_per_replica // self.nodes


def dns_name(text: str, suffix: str = "") -> str:
    """A DNS-1123 label (Kubernetes object names): lower case, [a-z0-9-], ≤ 63 characters."""
    base = re.sub(r"[^a-z0-9-]+", "-", text.lower().rsplit("/", 1)[-1]).strip("-") or "model"
    tail = f"-{suffix}" if suffix else ""
    return (base[: 63 - len(tail)].rstrip("-") + tail).strip("-")


def nccl_env(gpu: GpuSpec, nodes: int) -> list[dict[str, str]]:
    """NCCL settings for the interconnect: an AMD GPU's RCCL reads the same NCCL_* variables;
    a replica spanning nodes logs its transport choice (NCCL_DEBUG=WARN keeps the log short)
    and keeps NVLS off unless one node holds the replica (NVLink SHARP needs NVSwitch in a
    node; NCCL docs, environment variables NCCL_NVLS_ENABLE)."""
    env = [{"name": "NCCL_DEBUG", "value": "WARN"}]
    if nodes > 1:
        env.append({"name": "NCCL_NVLS_ENABLE", "value": "0"})
    if gpu.vendor == "nvidia" and "pcie" in gpu.id:
        env.append(
            {"name": "NCCL_P2P_LEVEL", "value": "PHB"}
        )  # PCIe cards: P2P via the host bridge
    return env


def hf_env(secret: str | None) -> list[dict[str, Any]]:
    """HF_TOKEN from a Kubernetes secret (optional, so public models start without one)."""
    if not secret:
        return []
    return [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "token", "optional": True}},
        }
    ]
