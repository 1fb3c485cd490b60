"""Kubernetes objects for a plan.

Serving: a replica on one node is a Deployment's pod (replicas = the plan's replicas) behind a
Service; a replica spanning nodes is one group of a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1,
`spec.replicas` groups of `leaderWorkerTemplate.size` pods; LWS injects LWS_LEADER_ADDRESS and
LWS_WORKER_INDEX into every pod and labels them with the set's name and their role), the Service
selecting the leaders. Training: an Indexed Job of one pod per node (`completionMode: Indexed`,
JOB_COMPLETION_INDEX = the node rank) with a headless Service so pod 0 is reachable as
`<job>-0.<service>` (the Kubernetes docs' pattern for indexed jobs that talk to each other), each
pod running torchrun against that address.
"""

from __future__ import annotations

from typing import Any

from gpuplan.planner.deploy.placement import (
    DEFAULT_SHM,
    HTTP_PORT,
    ClusterGpu,
    hf_env,
    image,
    nccl_env,
)
from gpuplan.planner.deploy.serving import ServeDeploy, leader_script, worker_script

LWS_API = "leaderworkerset.x-k8s.io/v1"
MANAGED = {"app.kubernetes.io/managed-by": "gpuplan"}
STARTUP_MINUTES = 60  # weights download and load, CUDA graph capture: up to an hour


def pod_spec(
    containers: list[dict[str, Any]], gpu: ClusterGpu, restart: str | None = None
) -> dict[str, Any]:
    """A pod of GPU containers: the GPU type's node selector (when known), shared memory."""
    spec: dict[str, Any] = {
        "containers": containers,
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": DEFAULT_SHM}}],
    }
    if gpu.node_label and gpu.node_value:
        spec["nodeSelector"] = {gpu.node_label: gpu.node_value}
    if restart:
        spec["restartPolicy"] = restart
    return spec


def container(
    name: str,
    img: str,
    script: str,
    gpu: ClusterGpu,
    gpus: int,
    env: list[dict[str, Any]],
    probes: bool,
) -> dict[str, Any]:
    """One container running `script` under sh with `gpus` GPUs of the node."""
    c: dict[str, Any] = {
        "name": name,
        "image": img,
        "command": ["/bin/sh", "-c", script],
        "env": env,
        "resources": {"limits": {gpu.resource: gpus}, "requests": {gpu.resource: gpus}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if probes:
        c["ports"] = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
        c.update(_probes())
    return c


def _probes() -> dict[str, Any]:
    """/health as the engines serve it: ready when it answers; startup allowed STARTUP_MINUTES."""
    health = {"httpGet": {"path": "/health", "port": HTTP_PORT}}
    return {
        "startupProbe": {**health, "periodSeconds": 10, "failureThreshold": STARTUP_MINUTES * 6},
        "readinessProbe": {**health, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**health, "periodSeconds": 30, "failureThreshold": 5},
    }


def serving_objects(d: ServeDeploy, gpu: ClusterGpu) -> list[dict[str, Any]]:
    """Deployment + Service (one node a replica) or LeaderWorkerSet + Service (several)."""
    img = image(d.engine, gpu.vendor)
    env = hf_env(d.hf_secret) + nccl_env(d.gpu, d.nodes)
    labels = {"app": d.name, **MANAGED}
    per_node = d.placement.gpus_per_node
    if d.nodes == 1:
        main = container(d.engine, img, leader_script(d, ""), gpu, per_node, env, True)
        workload: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": d.name, "labels": labels},
            "spec": {
                "replicas": d.placement.replicas,
                "selector": {"matchLabels": {"app": d.name}},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec([main], gpu)},
            },
        }
        selector = {"app": d.name}
    else:
        head = "$LWS_LEADER_ADDRESS"
        leader = container(d.engine, img, leader_script(d, head), gpu, per_node, env, True)
        worker = container(
            d.engine, img, worker_script(d, head, "$LWS_WORKER_INDEX"), gpu, per_node, env, False
        )
        workload = {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": {"name": d.name, "labels": labels},
            "spec": {
                "replicas": d.placement.replicas,
                "leaderWorkerTemplate": {
                    "size": d.nodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {
                        "metadata": {"labels": {**labels, "role": "leader"}},
                        "spec": pod_spec([leader], gpu),
                    },
                    "workerTemplate": {
                        "metadata": {"labels": labels},
                        "spec": pod_spec([worker], gpu),
                    },
                },
            },
        }
        selector = {"leaderworkerset.sigs.k8s.io/name": d.name, "role": "leader"}
    return [workload, _service(d.name, selector, labels)]


def _service(name: str, selector: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": HTTP_PORT}],
        },
    }


def training_objects(
    name: str, script: str, gpu: ClusterGpu, nodes: int, per_node: int, env: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """An Indexed Job of `nodes` pods (all must run together: parallelism = completions) and
    the headless Service that names pod 0 for torchrun's rendezvous."""
    labels = {"app": name, **MANAGED}
    main = container("trainer", image("train", gpu.vendor), script, gpu, per_node, env, False)
    spec = pod_spec([main], gpu, restart="Never")
    spec["subdomain"] = name
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterIP": "None", "selector": {"app": name}},
    }
    return [job, service]
