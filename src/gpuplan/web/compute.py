"""What the web API computes: a validated request in, (HTTP status, JSON object) out.

Runs inside the worker processes of web/pool.py, so that a long computation can be stopped
(its process ends) without touching the server. Every outcome is an answer: the engine's
refusals are 400, an unreadable pasted config 422, a bug 500, each as {"detail": one line}.

A `model` is only ever looked up in the catalog (never opened as a path); a pasted config.json
travels in the body as an object.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gpuplan import api
from gpuplan.api.requests import TrainRequest as TrainKnobs
from gpuplan.api.requests import serve_context, speed_tokens
from gpuplan.errors import GpuplanError
from gpuplan.web.schema import (
    MAX_CONFIG_DEPTH,
    SERVE_FIELDS,
    SERVE_SWEEPS,
    TRAIN_SWEEPS,
    ServeRequest,
    SweepRequest,
    TrainRequest,
    _Request,
    depth,
)


class ConfigError(GpuplanError):
    """A pasted config.json that cannot be read as a model configuration."""


HUB_ENV = "GPUPLAN_WEB_HUB"  # "1" (`gpuplan web --hub`): a model may be a Hugging Face repo id


def hub_allowed() -> bool:
    """Whether this server resolves Hugging Face repo ids (the local cache, then the Hub): off
    unless `gpuplan web --hub` turned it on, so by default no web request reads a file."""
    return os.environ.get(HUB_ENV) == "1"


def catalog_model(name: str) -> str:
    """The catalog id for `name`; with `--hub`, a well-formed repo id (org/name: no path, no
    `..`) as given; else a GpuplanError. Never touches the filesystem."""
    from gpuplan.catalog.models import _table
    from gpuplan.catalog.sources.hf_cache import looks_like_repo_id
    from gpuplan.lookup import did_you_mean, normalise

    names = _table()[1]
    key = names.get(normalise(name))
    if key is None and hub_allowed() and looks_like_repo_id(name):
        return name
    if key is None:
        hint = "" if hub_allowed() else " (Hugging Face ids: start the server with --hub)"
        raise GpuplanError(str(did_you_mean("model", name, names)) + hint)
    return key


def _hub_config(repo_id: str) -> dict[str, Any]:
    """A repo's config.json from the Hugging Face cache, else the Hub (config and headers only;
    HF_HUB_OFFLINE keeps it to the cache). Only a repo id reaches here, never a path."""
    from gpuplan.catalog.sources.remote import from_cache, from_hub

    src = from_cache(repo_id, None)
    if src is None and os.environ.get("HF_HUB_OFFLINE"):
        raise GpuplanError(f"{repo_id}: not in the Hugging Face cache (HF_HUB_OFFLINE is set)")
    return dict((src or from_hub(repo_id, None)).config)


def _model_arg(req: _Request) -> Any:
    from gpuplan.catalog.models import _catalog_config, _table

    if req.model is not None:
        key = catalog_model(req.model)
        in_catalog = key in _table()[0]
        if in_catalog and not req.overrides:
            return key
        config = dict(_catalog_config(key)) if in_catalog else _hub_config(key)
        name = f"{key} (modified)" if req.overrides else key
    else:
        config, name = dict(req.config or {}), None
    config.update({str(k): v for k, v in (req.overrides or {}).items()})
    if depth(config) > MAX_CONFIG_DEPTH:
        raise ConfigError(f"config.json is nested deeper than {MAX_CONFIG_DEPTH} levels")
    from gpuplan.catalog import load_architecture

    try:
        return load_architecture(config, name)
    except GpuplanError as err:
        text = str(err)
        raise ConfigError(
            text if text.startswith("config.json") else f"config.json: {text}"
        ) from None
    except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as err:
        detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise ConfigError(
            f"config.json is not a model configuration this tool reads ({detail})"
        ) from None


def serve_kwargs(req: ServeRequest) -> dict[str, Any]:
    kwargs = {name: getattr(req, name) for name in SERVE_FIELDS}
    kwargs["model"] = _model_arg(req)
    return kwargs


def run_serve(req: ServeRequest) -> dict[str, Any]:
    from gpuplan.planner.fixes import overflow, serving_fixes

    kwargs = serve_kwargs(req)
    plan = api.serve(**kwargs)
    data = plan.to_dict(req.units)
    data["view"] = _view(data, req.server_gpus)
    data["fixes"] = (
        [f.to_dict() for f in serving_fixes(kwargs, plan, api.serve)] if req.fixes else []
    )
    data["view"]["overflow"] = overflow(
        data["per_gpu"]["items"], data["gpu"]["memory_bytes"], data["budget_bytes"]
    )
    if req.speed is not None:
        data["speed"] = _speed(req, plan)
    return data


def _speed(req: ServeRequest, plan: Any) -> dict[str, Any]:
    """The layout's `speed` (api/serving_speed.py); prompt / output as given, else 3/4 and the rest
    of the context (api/requests.py speed_tokens)."""
    from gpuplan.api.serving_speed import layout_speed, refuse_unfit

    ask = req.speed
    assert ask is not None
    context = serve_context(req.context)
    prompt, output = speed_tokens(context, ask.prompt, ask.output)
    refuse_unfit(plan.fits, plan.bill.setup)
    return layout_speed(
        plan.bill.setup,
        users=req.users,
        prompt=prompt,
        output=output,
        request_rate=ask.request_rate,
        eager=ask.eager,
    )


def _view(data: dict[str, Any], server_gpus: int) -> dict[str, Any]:
    used = int(data.get("gpus") or 1)
    return {
        "server_gpus": server_gpus,
        "plan_gpus": used,
        "replicas": server_gpus // used if used <= server_gpus else 0,
        "fits_in_server": used <= server_gpus,
    }


def run_train(req: TrainRequest) -> dict[str, Any]:
    """`gpuplan.api.train` with the controls it accepts; `view.ignored_controls` names the rest."""
    from gpuplan.planner.fixes import overflow, training_fixes

    accepted = {k.name for k in TrainKnobs.KNOBS}
    fields = req.model_dump(
        exclude={"model", "config", "overrides", "units", "server_gpus", "fixes"}
    )
    kwargs = {k: v for k, v in fields.items() if v is not None and k in accepted}
    ignored = sorted(
        k
        for k, v in fields.items()
        if v is not None and k not in accepted and k in req.model_fields_set
    )
    if req.dtype is not None:  # not a train() control (listed as ignored), but never any text
        from gpuplan.catalog import get_precision

        get_precision(req.dtype)
    model = _model_arg(req)
    plan = api.train(model, **kwargs)
    data = plan.to_dict(req.units)
    data.setdefault("mode", "train")
    data["view"] = _view(data, req.server_gpus)
    data["view"]["overflow"] = overflow(
        data["per_gpu"]["items"], data["gpu"]["memory_bytes"], data["budget_bytes"]
    )
    if ignored:
        data["view"]["ignored_controls"] = ignored
    fixes = training_fixes({"model": model, **kwargs}, plan, api.train) if req.fixes else []
    data["fixes"] = [f.to_dict() for f in fixes]
    return data


def _sweep_point(value: int, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "value": value,
        "fits": data.get("fits"),
        "gpus": data.get("gpus"),
        "per_gpu_total_bytes": data.get("per_gpu_total_bytes"),
        "budget_bytes": data.get("budget_bytes"),
        "memory_bytes": (data.get("gpu") or {}).get("memory_bytes"),
        "items": {i["key"]: i["bytes"] for i in (data.get("per_gpu") or {}).get("items", [])},
        "categories": {
            i["key"]: i["category"] for i in (data.get("per_gpu") or {}).get("items", [])
        },
        "kv_capacity_tokens": data.get("kv_capacity_tokens"),
        "max_concurrent_sequences": data.get("max_concurrent_sequences"),
        "error": None,
    }


def check_sweep(req: SweepRequest) -> ServeRequest | TrainRequest:
    """The sweep's base body, or a GpuplanError when `vary` is not an input of its mode."""
    allowed = SERVE_SWEEPS if req.mode == "serve" else TRAIN_SWEEPS
    if req.vary not in allowed:
        raise GpuplanError(f"a {req.mode} sweep varies one of {', '.join(allowed)}, not {req.vary}")
    return req.base_request()


def run_sweep(req: SweepRequest) -> dict[str, Any]:
    base = check_sweep(req)
    points = []
    for value in req.values:
        change: dict[str, Any] = {req.vary: value}
        if req.vary == "gpus":
            change.update(tp=None, pp=None)
        try:
            body = type(base).model_validate({**base.model_dump(), **change})
            data = run_serve(body) if isinstance(body, ServeRequest) else run_train(body)
            points.append(_sweep_point(value, data))
        except (GpuplanError, ValidationError) as err:
            points.append({"value": value, "fits": False, "error": message(err)})
    return {"mode": req.mode, "vary": req.vary, "points": points}


def message(err: Exception) -> str:
    """One line for an error: the GpuplanError's text, or a validation error's first problem."""
    if isinstance(err, ValidationError):
        return validation_detail(err.errors(include_url=False))[0]
    return str(err)


def validation_detail(
    errors: Any, prefix: tuple[str, ...] = ()
) -> tuple[str, list[dict[str, Any]]]:
    """pydantic's errors as the API reports them: "where: what" and the list."""
    listed = [
        {
            "loc": [*prefix, *(str(p) for p in e.get("loc", ()))],
            "msg": str(e.get("msg", "")),
            "type": e.get("type"),
        }
        for e in errors
    ]
    loc, msg = (listed[0]["loc"], listed[0]["msg"]) if listed else ([], "invalid request")
    where = ".".join(p for p in loc if p != "body")
    return (f"{where}: {msg}" if where else msg), listed


RUNNERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "serve": lambda body: run_serve(ServeRequest.model_validate(body)),
    "train": lambda body: run_train(TrainRequest.model_validate(body)),
    "sweep": lambda body: run_sweep(SweepRequest.model_validate(body)),
}
# jobs of other routers, as "module:function" taking the request body (a dict) and returning
# the answer; imported in the worker when first asked for
JOBS = {
    "lesson.compare": "gpuplan.web.lesson_api:compare_job",
    "lesson.change": "gpuplan.web.lesson_api:change_job",
    "lesson.check": "gpuplan.web.lesson_api:check_job",
}


def _runner(kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    if kind in RUNNERS:
        return RUNNERS[kind]
    import importlib

    module, _, name = JOBS[kind].partition(":")
    run: Callable[[dict[str, Any]], dict[str, Any]] = getattr(importlib.import_module(module), name)
    return run


def handle(kind: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Answer one request: (HTTP status, JSON object). Never raises."""
    try:
        return 200, _runner(kind)(body)
    except ValidationError as err:  # a sweep's base that is not a valid body of its mode
        detail, errors = validation_detail(err.errors(include_url=False), ("base",))
        return 422, {"detail": detail, "errors": errors}
    except ConfigError as err:
        return 422, {"detail": str(err)}
    except GpuplanError as err:
        return 400, {"detail": str(err)}
    except RecursionError:
        return 422, {"detail": "config.json is nested too deeply"}
    except Exception as err:  # a bug in gpuplan: a line, not a traceback
        if _pastes_config(body):  # most likely a field of the pasted config read unchecked
            return 422, {
                "detail": f"config.json could not be read ({err.__class__.__name__}: {err})"[:400]
            }
        return 500, {"detail": f"internal error ({err.__class__.__name__})"}


def _pastes_config(body: dict[str, Any]) -> bool:
    base = body.get("base")
    base = base if isinstance(base, dict) else body
    return bool(base.get("config") or base.get("overrides"))
