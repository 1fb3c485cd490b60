"""Deployment manifests (planner/deploy): each validates offline against its tool's own schema,
and reading it back gives the plan it was made from.

Schemas (tests/data/deploy/SOURCES.md): Kubernetes' built-in kinds through kubernetes-validate;
the LeaderWorkerSet, KServe InferenceService and KubeRay RayService CRDs' openAPIV3Schema from
their repositories; SkyPilot's task/resources/service schemas and Ray Serve's deploy-config
schema as those packages generate them. Unknown fields are errors (kubectl's strict field
validation), so a misspelt key fails here.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuplan.api import plan, plan_training, serve, serve_launch, train_from
from gpuplan.catalog.launch import parse_launch
from gpuplan.errors import GpuplanError
from gpuplan.planner.deploy import serving_manifest, training_manifest
from gpuplan.planner.deploy.readback import read_manifest

DATA = Path(__file__).parent / "data" / "deploy"
K8S_VERSION = "1.33.0"


@cache
def _schema(name: str) -> Any:
    with gzip.open(DATA / f"{name}.schema.json.gz") as fh:
        return json.loads(fh.read())


def _strict(schema: Any) -> Any:
    """Unknown fields refused wherever the schema lists its fields and keeps no others."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    keeps = out.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in out
    if "properties" in out and not keeps:
        out["additionalProperties"] = False
    return out


def _validate_k8s(doc: dict[str, Any]) -> None:
    crds = {
        "LeaderWorkerSet": "leaderworkerset",
        "InferenceService": "inferenceservice",
        "RayService": "rayservice",
    }
    if doc["kind"] in crds:
        crd = _schema(crds[doc["kind"]])
        version = doc["apiVersion"].split("/")[1]
        assert doc["apiVersion"].split("/")[0] == crd["group"]
        jsonschema.Draft7Validator(_strict(crd["versions"][version])).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _validate_sky(task: dict[str, Any]) -> None:
    sky = _schema("skypilot")
    jsonschema.Draft7Validator(sky["task"]).validate(task)
    jsonschema.Draft7Validator(sky["resources"]).validate(task["resources"])
    if "service" in task:
        jsonschema.Draft7Validator(sky["service"]).validate(task["service"])


def _validate(text: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        if "apiVersion" in doc:
            _validate_k8s(doc)
        else:
            _validate_sky(doc)
        if doc.get("kind") == "RayService":
            serve_config = yaml.safe_load(doc["spec"]["serveConfigV2"])
            jsonschema.Draft202012Validator(_schema("ray-serve")).validate(serve_config)
    return docs


# ---------------------------------------------------------------- serving

SERVING = {
    # (model, gpu, gpus, engine, replicas, expert_parallel): one node a replica, several
    "70b-tp4": ("llama-3.1-70b", "h100", 4, "vllm", 2, False),
    "405b-2nodes": ("llama-3.1-405b", "h100", 16, "vllm", 1, False),
    "405b-2nodes-sglang": ("llama-3.1-405b", "h100", 16, "sglang", 3, False),
    "moe-ep": ("qwen3-30b-a3b", "h200", 2, "vllm", 1, True),
    "mi300x": ("llama-3.1-70b", "mi300x", 1, "vllm", 4, False),
}


def _serving(case: str) -> tuple[Any, str, int, bool, str]:
    model, gpu, gpus, engine, replicas, ep = SERVING[case]
    p = serve(model, gpu, gpus=gpus)
    return p, p.hf_id or p.model_id, replicas, ep, engine


TARGETS = {
    "70b-tp4": ("k8s", "kserve", "skypilot", "ray"),
    "405b-2nodes": ("k8s", "kserve", "skypilot", "ray"),
    "405b-2nodes-sglang": ("k8s",),  # KServe's multi-node and Ray Serve LLM run vLLM only
    "moe-ep": ("k8s", "kserve", "skypilot", "ray"),
    "mi300x": ("k8s", "kserve", "skypilot"),  # Ray Serve LLM's image is CUDA's
}


@pytest.mark.parametrize(("case", "target"), [(c, t) for c in SERVING for t in TARGETS[c]])
def test_serving_manifest_validates_and_reads_back(case: str, target: str) -> None:
    p, model, replicas, ep, engine = _serving(case)
    m = serving_manifest(
        p.bill, model, target, engine=engine, replicas=replicas, expert_parallel=ep
    )
    _validate(m.text())
    back = read_manifest(m.text())
    s = p.bill.setup
    assert back.target == target
    assert back.gpu == s.gpu.id
    assert back.replicas == replicas
    assert back.gpus_per_replica == s.tp * s.pp
    launched = parse_launch(back.line)
    assert launched.engine == engine and launched.model == model
    # the engine, launched as the manifest launches it, sizes the plan's layout and context
    again = serve_launch(back.line, s.gpu.id).bill
    assert (again.launch.tp, again.launch.pp) == (s.tp, s.pp)
    assert again.max_model_len == s.context
    assert again.fits
    if ep:
        key = "enable_expert_parallel" if engine == "vllm" else "ep_size"
        assert launched.args.get(key) in (True, s.tp)


@pytest.mark.parametrize(
    ("case", "target", "message"),
    [
        ("405b-2nodes-sglang", "kserve", "KServe's multi-node predictor runs vLLM"),
        ("405b-2nodes-sglang", "ray", "Ray Serve LLM runs vLLM"),
        ("405b-2nodes-sglang", "skypilot", "one SkyPilot cluster per replica"),
        ("mi300x", "ray", "CUDA"),
    ],
)
def test_what_a_tool_cannot_run_is_refused(case: str, target: str, message: str) -> None:
    p, model, replicas, ep, engine = _serving(case)
    with pytest.raises(GpuplanError, match=message):
        serving_manifest(p.bill, model, target, engine=engine, replicas=replicas)


def test_multi_node_vllm_starts_ray_and_waits_for_every_node() -> None:
    p, model, replicas, ep, engine = _serving("405b-2nodes")
    docs = _validate(serving_manifest(p.bill, model, "k8s", engine=engine).text())
    lws = docs[0]
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert "ray start --head" in leader["command"][-1] and ">= 2" in leader["command"][-1]
    assert "--distributed-executor-backend ray" in leader["command"][-1]
    assert "ray start --address=$LWS_LEADER_ADDRESS" in worker["command"][-1]
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    service = docs[1]
    assert service["spec"]["selector"]["role"] == "leader"


def test_kserve_multi_node_is_its_huggingface_runtime_over_ray() -> None:
    p, model, *_ = _serving("405b-2nodes")
    isvc = _validate(serving_manifest(p.bill, model, "kserve").text())[0]
    worker = isvc["spec"]["predictor"]["workerSpec"]
    assert (worker["tensorParallelSize"], worker["pipelineParallelSize"]) == (8, 2)


def test_gpu_without_a_device_plugin_is_refused_in_one_line() -> None:
    p = serve("llama-3.1-8b", "gaudi3", gpus=1)
    with pytest.raises(GpuplanError, match="no deployment manifest for .*Gaudi"):
        serving_manifest(p.bill, "meta-llama/Llama-3.1-8B", "k8s")


def test_plan_to_goal_exports_its_top_plan() -> None:
    top = plan("llama-3.1-8b", gpus=["h100"], users=64, tpot="50ms")[0]
    text = serving_manifest(
        top.plan.bill,
        top.plan.hf_id or top.plan.model_id,
        "k8s",
        replicas=top.candidate.replicas,
    ).text()
    back = read_manifest(text)
    assert back.replicas == top.candidate.replicas


# ---------------------------------------------------------------- training


@pytest.mark.parametrize("engine", ["megatron", "deepspeed", "fsdp"])
@pytest.mark.parametrize("target", ["k8s", "skypilot"])
def test_training_manifest_validates_and_reads_back(engine: str, target: str) -> None:
    top = plan_training("llama-3.1-8b", gpu="h100", gpus=16, engine=engine, top=1)[0].plan
    s = top.bill.setup
    m = training_manifest(top.bill, engine, target, top.hf_id or top.model_id)
    _validate(m.text())
    back = read_manifest(m.text())
    assert back.gpu == "h100-sxm" and back.nodes * back.gpus_per_node == s.layout.gpus
    nodes_flag = "--num_machines" if engine == "fsdp" else "--nnodes"
    assert f"{nodes_flag} {back.nodes}" in back.line
    if engine == "megatron":
        again = train_from(back.line, "llama-3.1-8b", gpus=s.layout.gpus, gpu="h100")
        lo = again.bill.setup.layout
        assert (lo.tp, lo.pp, lo.dp) == (s.layout.tp, s.layout.pp, s.layout.dp)
    elif engine == "deepspeed":
        again = train_from(back.files["ds_config.json"], "llama-3.1-8b", gpus=s.layout.gpus)
        assert again.bill.setup.layout.zero == s.layout.zero
    else:
        config = json.loads(back.files["accelerate_fsdp.json"])
        assert config["num_processes"] == s.layout.gpus
        assert config["num_machines"] == back.nodes


# ---------------------------------------------------------------- CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan.cli.main", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_cli_prints_the_manifest_alone_on_stdout() -> None:
    r = _cli("plan", "llama-3.1-70b", "--gpu", "h100", "--export", "k8s", "--top", "1")
    assert r.returncode == 0, r.stderr
    docs = _validate(r.stdout)
    assert docs[0]["kind"] == "Deployment"
    r = _cli(
        "plan",
        "llama-3.1-8b",
        "--train",
        "--gpus",
        "16",
        "--export",
        "skypilot",
        "--engine",
        "megatron",
        "--top",
        "1",
    )
    assert r.returncode == 0, r.stderr
    assert _validate(r.stdout)[0]["num_nodes"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("plan", "llama-3.1-8b", "--export", "vllm", "--engine", "sglang"), "--engine: with"),
        (("plan", "llama-3.1-8b", "--train", "--export", "k8s"), "needs --engine"),
        (("plan", "llama-3.1-8b", "--train", "--export", "kserve", "--engine", "fsdp"), "kserve"),
        (("plan", "llama-3.1-8b", "--export", "k8s", "--engine", "megatron"), "training engine"),
    ],
)
def test_cli_refuses_what_a_manifest_cannot_be(args: tuple[str, ...], message: str) -> None:
    r = _cli(*args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("case", "target", "path"),
    [
        ("70b-tp4", "k8s", ("spec", "replica")),
        ("405b-2nodes", "k8s", ("spec", "leaderWorkerTemplate", "sizee")),
        ("70b-tp4", "kserve", ("spec", "predictor", "minReplica")),
        ("70b-tp4", "ray", ("spec", "rayClusterConfig", "headGroupSpecs")),
        ("70b-tp4", "skypilot", ("num_node",)),
    ],
)
def test_the_schemas_catch_a_misspelt_key(case: str, target: str, path: tuple[str, ...]) -> None:
    """The validation above has teeth: one unknown key anywhere fails it."""
    p, model, replicas, ep, engine = _serving(case)
    doc = yaml.safe_load_all(serving_manifest(p.bill, model, target).text()).__next__()
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = 1
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        _validate(yaml.safe_dump(doc))
