"""KServe, SkyPilot and Ray (KubeRay) manifests for a serving plan, and SkyPilot for training.

- KServe (serving.kserve.io/v1beta1 InferenceService): a replica on one node is the predictor's
  own container (min = max replicas: the plan's count, no autoscaling below what the users need);
  a replica over several nodes is KServe's multi-node predictor, the Hugging Face runtime on Ray
  with `workerSpec.tensorParallelSize` (GPUs per node) × `pipelineParallelSize` (nodes), which is
  how KServe places it (tensor parallel inside a node) — so it takes tp = GPUs per node.
- SkyPilot (task YAML): `resources.accelerators: NAME:GPUS`, `num_nodes`, the engine's image as
  `image_id: docker:…`; one node a replica also gets a SkyServe `service` (readiness probe,
  replicas), several nodes a replica run as a cluster job per replica (SkyServe services are
  single-node), ranks from SKYPILOT_NODE_RANK and SKYPILOT_NODE_IPS.
- Ray: a KubeRay RayService whose Serve application is Ray Serve LLM's OpenAI app
  (`ray.serve.llm:build_openai_app`) with the plan's engine arguments as `engine_kwargs`
  (vLLM's own names), `accelerator_type`, and a fixed replica count.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuplan.catalog.launch import parse_launch
from gpuplan.errors import GpuplanError
from gpuplan.planner.deploy.kubernetes import MANAGED, container, pod_spec
from gpuplan.planner.deploy.placement import (
    HTTP_PORT,
    ClusterGpu,
    hf_env,
    image,
    nccl_env,
)
from gpuplan.planner.deploy.serving import ServeDeploy, leader_script, worker_script

RAY_IMAGE = "rayproject/ray-llm:2.52.0-py311-cu128"  # Ray Serve LLM's image (vLLM inside)


def kserve_objects(d: ServeDeploy, gpu: ClusterGpu) -> list[dict[str, Any]]:
    env = hf_env(d.hf_secret) + nccl_env(d.gpu, d.nodes)
    per_node = d.placement.gpus_per_node
    predictor: dict[str, Any] = {
        "minReplicas": d.placement.replicas,
        "maxReplicas": d.placement.replicas,
    }
    if d.nodes == 1:
        main = container(
            "kserve-container",
            image(d.engine, gpu.vendor),
            leader_script(d, ""),
            gpu,
            per_node,
            env,
            True,
        )
        predictor.update(pod_spec([main], gpu))
    else:
        if d.engine != "vllm" or d.placement.gpus_per_replica != d.tp * d.nodes:
            raise GpuplanError(
                "KServe's multi-node predictor runs vLLM with tensor parallel inside a node and"
                f" pipeline stages across nodes; this plan is {d.engine} tp={d.tp} over"
                f" {d.nodes} nodes: export it with --export k8s (LeaderWorkerSet)"
            )
        model: dict[str, Any] = {
            "modelFormat": {"name": "huggingface"},
            "storageUri": f"hf://{d.model}",
            "args": _engine_args(d),
            "env": env,
            "resources": {"limits": {gpu.resource: per_node}, "requests": {gpu.resource: per_node}},
        }
        predictor["model"] = model
        predictor["workerSpec"] = {
            "tensorParallelSize": per_node,
            "pipelineParallelSize": d.nodes,
            "containers": [{"name": "worker-container", "resources": model["resources"]}],
        }
        if gpu.node_label and gpu.node_value:
            predictor["nodeSelector"] = {gpu.node_label: gpu.node_value}
    return [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": d.name, "labels": dict(MANAGED)},
            "spec": {"predictor": predictor},
        }
    ]


def _engine_args(d: ServeDeploy) -> list[str]:
    """The launch line's flags after the model (for a runtime that supplies the entry point)."""
    parsed = parse_launch(d.launch)
    words = d.launch.split()
    start = words.index(parsed.model) + 1 if parsed.model in words else len(words)
    return words[start:]


def skypilot_serving(d: ServeDeploy, gpu: ClusterGpu) -> list[dict[str, Any]]:
    task = _sky_task(d.name, gpu, d.placement.gpus_per_node, d.nodes, image(d.engine, gpu.vendor))
    task["resources"]["ports"] = HTTP_PORT
    if d.nodes == 1:
        task["run"] = leader_script(d, "")
        task["service"] = {
            "readiness_probe": {"path": "/health", "initial_delay_seconds": 1800},
            "replicas": d.placement.replicas,
        }
    else:
        if d.placement.replicas > 1:
            raise GpuplanError(
                f"a replica of {d.nodes} nodes runs as one SkyPilot cluster per replica"
                f" (SkyServe replicas are single-node): export {d.placement.replicas} replicas"
                " with --export k8s, or launch this task once per replica"
            )
        head = '"$HEAD_IP"'
        task["run"] = (
            'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
            'if [ "$SKYPILOT_NODE_RANK" = "0" ]; then\n'
            f"  {leader_script(d, head)}\n"
            "else\n"
            f"  {worker_script(d, head, '$SKYPILOT_NODE_RANK')}\n"
            "fi\n"
        )
    return [task]


def _sky_task(name: str, gpu: ClusterGpu, per_node: int, nodes: int, img: str) -> dict[str, Any]:
    if not gpu.skypilot:
        raise GpuplanError(
            f"no SkyPilot accelerator name for GPU {gpu.id!r} in gpuplan's deploy table"
        )
    return {
        "name": name,
        "resources": {"accelerators": f"{gpu.skypilot}:{per_node}", "image_id": f"docker:{img}"},
        "num_nodes": nodes,
        "envs": {"NCCL_DEBUG": "WARN"},
        "secrets": {"HF_TOKEN": None},
    }


def skypilot_training(
    name: str, gpu: ClusterGpu, nodes: int, per_node: int, run: str, files: dict[str, str]
) -> list[dict[str, Any]]:
    task = _sky_task(name, gpu, per_node, nodes, image("train", gpu.vendor))
    setup = "".join(
        f"cat > {path} <<'GPUPLAN_EOF'\n{text}\nGPUPLAN_EOF\n" for path, text in files.items()
    )
    if setup:
        task["setup"] = setup
    task["run"] = run
    return [task]


def ray_objects(d: ServeDeploy, gpu: ClusterGpu) -> list[dict[str, Any]]:
    """A KubeRay RayService: a CPU head, GPU workers (nodes × replicas), one Serve LLM app."""
    if d.engine != "vllm":
        raise GpuplanError("Ray Serve LLM runs vLLM: export SGLang plans with --export k8s")
    if gpu.vendor != "nvidia":
        raise GpuplanError(
            f"Ray Serve LLM's image is built for CUDA; for {d.gpu.name} use --export k8s"
        )
    per_node = d.placement.gpus_per_node
    parsed = parse_launch(d.launch)
    kwargs = dict(parsed.args)
    if d.expert_parallel:
        kwargs["enable_expert_parallel"] = True
    if d.revision:
        kwargs["revision"] = d.revision
    llm = {
        "model_loading_config": {"model_id": d.name, "model_source": d.model},
        "accelerator_type": gpu.skypilot or d.gpu.id.upper(),
        "deployment_config": {
            "autoscaling_config": {
                "min_replicas": d.placement.replicas,
                "max_replicas": d.placement.replicas,
            }
        },
        "engine_kwargs": kwargs,
    }
    serve_config = {
        "applications": [
            {
                "name": "llm",
                "route_prefix": "/",
                "import_path": "ray.serve.llm:build_openai_app",
                "args": {"llm_configs": [llm]},
            }
        ]
    }
    env = hf_env(d.hf_secret) + nccl_env(d.gpu, d.nodes)
    head = {
        "name": "ray-head",
        "image": RAY_IMAGE,
        "env": env,
        "ports": [{"containerPort": HTTP_PORT, "name": "serve"}],
    }
    worker = container("ray-worker", RAY_IMAGE, "", gpu, per_node, env, False)
    del worker["command"]
    workers = d.nodes * d.placement.replicas
    cluster = {
        "headGroupSpec": {
            "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
            "template": {"spec": {"containers": [head]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "gpu",
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": {"spec": pod_spec([worker], gpu)},
            }
        ],
    }
    return [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": d.name, "labels": dict(MANAGED)},
            "spec": {
                "serveConfigV2": yaml.safe_dump(serve_config, sort_keys=False),
                "rayClusterConfig": cluster,
            },
        }
    ]
