"""Deployment manifests of a top plan (planner/deploy: Kubernetes, KServe, SkyPilot, Ray), for
`gpuplan plan --export k8s|kserve|skypilot|ray`. Their own module: the deployment code (YAML, the
training bill) loads only when a manifest is asked for (api/plan_data.py takes the function)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.api.planning import PlanOption
from gpuplan.api.training import TrainingPlan
from gpuplan.errors import GpuplanError
from gpuplan.planner.deploy import serving_manifest, training_manifest


def serving_manifest_for(target: str, engine: str) -> Callable[[PlanOption], dict[str, Any]]:
    """The top serving plan as a `target` manifest running `engine`."""

    def make(option: PlanOption) -> dict[str, Any]:
        c = option.candidate
        return serving_manifest(
            option.plan.bill,
            option.plan.hf_id or option.plan.model_id,
            target,
            engine=engine,
            replicas=c.replicas,
            expert_parallel=c.expert_parallel,
        ).to_dict()

    return make


def training_manifest_for(target: str) -> Callable[[TrainingPlan, str | None], dict[str, Any]]:
    """The top training layout as a `target` manifest running the plan's export engine."""

    def make(plan: TrainingPlan, engine: str | None) -> dict[str, Any]:
        if engine is None:
            raise GpuplanError(
                f"--export {target} with --train needs --engine deepspeed, fsdp or megatron"
            )
        model = plan.hf_id or plan.model_id
        return training_manifest(plan.bill, engine, target, model).to_dict()

    return make
