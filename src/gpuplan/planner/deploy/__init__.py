"""Deployment manifests for a plan: `gpuplan plan MODEL --export k8s|kserve|skypilot|ray` (serving)
and `gpuplan plan MODEL --train --export k8s|skypilot` (training), and reading one back.

A manifest is built from what the plan decided (GPU type, tp × pp per replica, replicas, expert
parallelism, the engine's launch line as planner/export.py spells it) and the cluster's names
for the GPU (catalog/data/deploy.toml). Reading it back (`read_manifest`) finds the engine's
launch line and the placement in the objects, so a test can check that the manifest carries the
plan it was made from.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.frozen import field, record
from gpuplan.engine.serving import ServingBill
from gpuplan.engine.training import TrainingBill
from gpuplan.errors import GpuplanError
from gpuplan.planner.deploy.clouds import (
    kserve_objects,
    ray_objects,
    skypilot_serving,
    skypilot_training,
)
from gpuplan.planner.deploy.kubernetes import serving_objects, training_objects
from gpuplan.planner.deploy.placement import Placement, cluster_gpu, dns_name
from gpuplan.planner.deploy.serving import ServeDeploy
from gpuplan.planner.deploy.training import TrainDeploy, node_script, sky_run
from gpuplan.planner.export import launch_command
from gpuplan.planner.training_export import training_export

SERVE_TARGETS = ("k8s", "kserve", "skypilot", "ray")
TRAIN_TARGETS = ("k8s", "skypilot")
_SERVE_BUILDERS = {
    "k8s": serving_objects,
    "kserve": kserve_objects,
    "skypilot": skypilot_serving,
    "ray": ray_objects,
}


def dump_yaml(documents: list[dict[str, Any]]) -> str:
    """YAML documents as a person reads them: no anchors/aliases, multi-line strings as literal
    blocks, keys in the order built."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, width=100)


@record
class Manifest:
    """A manifest's documents and what it leaves to the user (YAML comments above it)."""

    target: str
    documents: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = field(default=())

    def text(self) -> str:
        header = "".join(f"# {line}\n" for line in self.notes)
        return header + dump_yaml(list(self.documents))

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "notes": list(self.notes), "text": self.text()}


def serving_manifest(
    bill: ServingBill,
    model: str,
    target: str,
    *,
    engine: str = "vllm",
    replicas: int = 1,
    expert_parallel: bool = False,
    revision: str | None = None,
) -> Manifest:
    """The `target` manifest that runs `replicas` copies of `bill`'s layout with `engine`."""
    if target not in SERVE_TARGETS:
        raise GpuplanError(
            f"unknown deploy target {target!r}; use one of {', '.join(SERVE_TARGETS)}"
        )
    s = bill.setup
    gpu = cluster_gpu(s.gpu)
    placement = Placement(s.tp * s.pp, s.gpu.gpus_per_node, replicas)
    d = ServeDeploy(
        name=dns_name(model),
        model=model,
        engine=engine,
        launch=launch_command(bill, model, engine),
        gpu=s.gpu,
        placement=placement,
        expert_parallel=expert_parallel,
        tp=s.tp,
        revision=revision,
    )
    docs = _SERVE_BUILDERS[target](d, gpu)
    notes = [
        f"gpuplan: {model} on {replicas} × {placement.gpus_per_replica} {s.gpu.name}"
        f" (tp {s.tp} × pp {s.pp}{', expert parallel' if expert_parallel else ''};"
        f" {placement.nodes} node(s) of {placement.gpus_per_node} GPUs per replica), {engine}",
        f"each replica sized for {bill.max_concurrent_sequences} concurrent sequences of"
        f" {s.context} tokens",
        "a private or gated model reads HF_TOKEN from the Secret 'hf-token' (key 'token'):"
        " kubectl create secret generic hf-token --from-literal=token=…"
        if target != "skypilot"
        else "a private or gated model needs HF_TOKEN: sky launch/serve up --secret HF_TOKEN",
    ]
    if not (gpu.node_label and gpu.node_value):
        notes.append(
            f"no node label known for {s.gpu.name}: add a nodeSelector for your cluster's nodes"
        )
    return Manifest(target, tuple(docs), tuple(notes))


def training_manifest(bill: TrainingBill, engine: str, target: str, model: str) -> Manifest:
    """The `target` manifest that launches `bill`'s layout with the `engine` export."""
    if target not in TRAIN_TARGETS:
        raise GpuplanError(
            f"unknown training deploy target {target!r}; use one of {', '.join(TRAIN_TARGETS)}"
        )
    s = bill.setup
    gpu = cluster_gpu(s.gpu)
    export = training_export(bill, engine)
    placement = Placement(s.layout.gpus, s.gpu.gpus_per_node)
    t = TrainDeploy(dns_name(model, "train"), export, placement.nodes, placement.gpus_per_node)
    if target == "k8s":
        env = [{"name": "NCCL_DEBUG", "value": "WARN"}]
        master = f"{t.name}-0.{t.name}"
        script = node_script(t, "$JOB_COMPLETION_INDEX", master)
        docs = training_objects(t.name, script, gpu, t.nodes, t.per_node, env)
    else:
        docs = skypilot_training(t.name, gpu, t.nodes, t.per_node, sky_run(t), t.files())
    notes = [
        f"gpuplan: train {model} on {s.layout.gpus} {s.gpu.name} ({t.nodes} node(s) of"
        f" {t.per_node}); layout {s.layout.describe()}, {engine}",
        "the training script (train.py / pretrain_gpt.py), its data and the model are yours:"
        " bake them into the image or mount them, and set the image",
        *export.notes,
    ]
    return Manifest(target, tuple(docs), tuple(notes))


__all__ = [
    "SERVE_TARGETS",
    "TRAIN_TARGETS",
    "Manifest",
    "serving_manifest",
    "training_manifest",
]
