"""The ways out of a training plan that does not fit (`planner.fixes.training_fixes`: ZeRO
stage, recompute, LoRA/QLoRA, a bigger GPU, more GPUs), as the lesson's answers."""

from __future__ import annotations

from typing import Any

from gpuplan.api.answers import answer_dict
from gpuplan.api.training import train
from gpuplan.errors import GpuplanError
from gpuplan.planner.fixes import training_fixes


def training_answers(kwargs: dict[str, Any], plan: Any) -> list[dict[str, Any]]:
    """As `answers.serving_answers`, for a training plan; `kwargs` are the `train` arguments."""
    return [answer_dict(fix) for fix in training_fixes(kwargs, plan, train)]


def training_three_answers(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpus: int = 8,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """The same for training `model` on `gpus` × `gpu` (`train` arguments in `kwargs`): the plan
    `train(...)`, then `training_answers`."""
    ask: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus, **kwargs}
    try:
        current = train(**ask)
    except GpuplanError:
        return []
    return training_answers(ask, current)
