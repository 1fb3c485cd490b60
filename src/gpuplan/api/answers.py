"""The ways out of a serving plan that does not fit, as the lesson's three answers (fewer bytes,
a bigger GPU, more GPUs; a smaller ask): `planner.fixes` asked of `serve`. Training's are in
api/train_answers.py (a serving answer loads no training code)."""

from __future__ import annotations

from typing import Any

from gpuplan.api.serving import serve
from gpuplan.errors import GpuplanError
from gpuplan.planner.fixes import THREE_ANSWERS, serving_fixes


def serving_answers(kwargs: dict[str, Any], plan: Any) -> list[dict[str, Any]]:
    """The ways out of a serving plan that does not fit (`planner.fixes.serving_fixes`, each asked
    of the engine), as answers: `answer` is the lesson's (fewer bytes, bigger GPU, more GPUs,
    smaller ask), `kind` the fix's own, with its label, change and resulting plan's figures.
    `kwargs` are the `serve` arguments `plan` was made with (`model` included). Empty when it
    fits."""
    return [answer_dict(fix) for fix in serving_fixes(kwargs, plan, serve)]


def answer_dict(fix: Any) -> dict[str, Any]:
    """One fix as an answer: its own fields, its detail, the lesson's answer and its kind."""
    return {**fix.to_dict(), **fix.detail, "answer": THREE_ANSWERS[fix.answer], "kind": fix.answer}


def three_answers(
    model: str | dict[str, Any],
    gpu: str = "h100",
    *,
    gpus: int | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """What to change when serving `model` on `gpus` (default 1) × `gpu` does not fit: the plan
    `serve(model, gpu, gpus=gpus, **kwargs)`, then `serving_answers`. Empty when it fits or the
    engine refuses the request."""
    ask: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus or 1, **kwargs}
    try:
        current = serve(**ask)
    except GpuplanError:
        return []
    return serving_answers(ask, current)
