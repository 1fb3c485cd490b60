"""Reading a manifest gpuplan wrote back into the plan it carries: the engine's launch line (or the
training launcher and its config files), the GPU type, GPUs per node, nodes and replicas.

Only what the objects themselves say is used: container commands, resource limits, node
selectors, replica counts, LeaderWorkerSet sizes, KServe worker specs, Ray Serve engine
arguments, SkyPilot accelerators and node counts.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpuplan.engine.frozen import field, record
from gpuplan.engine.profiles import get_adapter
from gpuplan.errors import GpuplanError
from gpuplan.planner.deploy.placement import gpu_by_label
from gpuplan.planner.deploy.serving import engine_line

MAX_MANIFEST_CHARS = 2_000_000


@record
class DeployedPlan:
    """What a manifest runs."""

    target: str  # k8s | kserve | skypilot | ray
    line: str  # the engine's launch line (serving) or the node's launcher (training)
    gpu: str | None  # catalog id, from the node selector or SkyPilot accelerator
    gpus_per_node: int
    nodes: int
    replicas: int
    files: dict[str, str] = field(default_factory=dict)  # config files a training node writes

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus_per_node * self.nodes


def read_manifest(text: str) -> DeployedPlan:
    """The plan in a manifest's text (the first workload object it holds)."""
    if len(text) > MAX_MANIFEST_CHARS:
        raise GpuplanError(f"manifest is larger than {MAX_MANIFEST_CHARS:,} characters")
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    for doc in docs:
        kind = doc.get("kind")
        reader = _READERS.get(kind) if kind else (_sky if "resources" in doc else None)
        if reader is not None:
            return reader(doc)
    raise GpuplanError(
        "no Deployment, LeaderWorkerSet, Job, InferenceService, RayService or"
        " SkyPilot task found in the manifest"
    )


def _pod_gpu(spec: dict[str, Any]) -> tuple[str | None, int, str]:
    """(GPU id from the node selector, GPUs of the first container, its script)."""
    c = spec["containers"][0]
    limits = c.get("resources", {}).get("limits", {})
    gpus = next((int(v) for k, v in limits.items() if k.endswith("/gpu")), 0)
    selector = spec.get("nodeSelector", {})
    gpu = next((gpu_by_label(v) for v in selector.values() if gpu_by_label(v)), None)
    command = c.get("command", [])
    return gpu, gpus, command[-1] if command else ""


def _deployment(doc: dict[str, Any]) -> DeployedPlan:
    gpu, per_node, script = _pod_gpu(doc["spec"]["template"]["spec"])
    return DeployedPlan("k8s", engine_line(script), gpu, per_node, 1, doc["spec"]["replicas"])


def _lws(doc: dict[str, Any]) -> DeployedPlan:
    t = doc["spec"]["leaderWorkerTemplate"]
    gpu, per_node, script = _pod_gpu(t["leaderTemplate"]["spec"])
    return DeployedPlan(
        "k8s", engine_line(script), gpu, per_node, t["size"], doc["spec"]["replicas"]
    )


def _job(doc: dict[str, Any]) -> DeployedPlan:
    gpu, per_node, script = _pod_gpu(doc["spec"]["template"]["spec"])
    files, line = _script_files(script)
    return DeployedPlan("k8s", line, gpu, per_node, doc["spec"]["completions"], 1, files)


def _script_files(script: str) -> tuple[dict[str, str], str]:
    """The heredoc files a script writes, and its launcher line (what follows them)."""
    files = dict(re.findall(r"cat > (\S+) <<'GPUPLAN_EOF'\n(.*?)\nGPUPLAN_EOF\n", script, re.S))
    rest = re.sub(r"cat > \S+ <<'GPUPLAN_EOF'\n.*?\nGPUPLAN_EOF\n", "", script, flags=re.S)
    lines = [ln.strip() for ln in rest.splitlines() if ln.strip() and "=$(" not in ln]
    line = lines[-1] if lines else ""
    return files, line.removeprefix("exec ")


def _isvc(doc: dict[str, Any]) -> DeployedPlan:
    p = doc["spec"]["predictor"]
    replicas = p.get("minReplicas", 1)
    if "workerSpec" in p:
        w, m = p["workerSpec"], p["model"]
        model = m["storageUri"].removeprefix("hf://")
        line = " ".join(["vllm", "serve", model, *m.get("args", [])])
        gpu = next((gpu_by_label(v) for v in p.get("nodeSelector", {}).values()), None)
        return DeployedPlan(
            "kserve", line, gpu, w["tensorParallelSize"], w["pipelineParallelSize"], replicas
        )
    gpu, per_node, script = _pod_gpu(p)
    return DeployedPlan("kserve", engine_line(script), gpu, per_node, 1, replicas)


def _rayservice(doc: dict[str, Any]) -> DeployedPlan:
    spec = doc["spec"]
    app = yaml.safe_load(spec["serveConfigV2"])["applications"][0]
    llm = app["args"]["llm_configs"][0]
    replicas = llm["deployment_config"]["autoscaling_config"]["min_replicas"]
    group = spec["rayClusterConfig"]["workerGroupSpecs"][0]
    gpu, per_node, _ = _pod_gpu(group["template"]["spec"])
    flags = get_adapter("vllm").flags.emit(llm["engine_kwargs"])
    model = llm["model_loading_config"]["model_source"]
    line = " ".join(["vllm", "serve", model, *flags])
    return DeployedPlan("ray", line, gpu, per_node, group["replicas"] // replicas, replicas)


def _sky(doc: dict[str, Any]) -> DeployedPlan:
    name, _, count = str(doc["resources"]["accelerators"]).partition(":")
    nodes = int(doc.get("num_nodes", 1))
    replicas = int(doc.get("service", {}).get("replicas", 1))
    run = doc.get("run", "")
    if "vllm serve" in run or "sglang.launch_server" in run:
        files: dict[str, str] = {}
        line = engine_line(run)
    else:
        files, line = _script_files(doc.get("setup", "") + run)
    return DeployedPlan(
        "skypilot", line, gpu_by_label(name), int(count or 1), nodes, replicas, files
    )


_READERS = {
    "Deployment": _deployment,
    "LeaderWorkerSet": _lws,
    "Job": _job,
    "InferenceService": _isvc,
    "RayService": _rayservice,
}
