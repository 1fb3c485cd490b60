"""The web app: a JSON API over `gpuplan.api` and the static page that draws its answers.

Thin on purpose: parse the request (pydantic), call the engine, return its `to_dict()`. The page
never computes a byte; everything it shows comes from these responses.

Safety: a `model` is only ever looked up in the catalog (never opened as a path); a pasted
config.json travels in the body as an object; bodies are capped at MAX_BODY_BYTES.
"""

from __future__ import annotations

import inspect
import json
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator

import gpuplan
from gpuplan import api
from gpuplan.errors import GpuplanError

MAX_BODY_BYTES = 256 * 1024
MAX_SWEEP_POINTS = 64
MAX_CONFIG_DEPTH = 32

Count = Annotated[int, Field(ge=1, le=1024)]
Name = Annotated[str, Field(min_length=1, max_length=120)]
Size = Annotated[str, Field(min_length=1, max_length=32)] | Annotated[int, Field(ge=0, le=10**15)]


OverrideKey = Literal[
    "num_key_value_heads",
    "num_attention_heads",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "head_dim",
]


class ConfigError(GpuplanError):
    """A pasted config.json that cannot be read as a model configuration."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Name | None = Field(
        default=None, description="Catalog name or Hugging Face id in the catalog (never a path)"
    )
    config: dict[str, Any] | None = Field(
        default=None, description="A pasted config.json object, instead of `model`"
    )
    overrides: dict[OverrideKey, Annotated[int, Field(ge=1, le=10**7)]] | None = Field(
        default=None,
        description="Change a few numbers of the model's config (e.g. num_key_value_heads) to see what they cost",
    )
    gpu: Name = Field(default="h100", description="GPU id or alias (see /api/gpus)")
    gpu_memory: Size | None = Field(default=None, description="Override the GPU memory, e.g. 80GB")
    headroom: float = Field(default=0.9, gt=0, le=1)
    units: Literal["GB", "GiB"] = "GB"
    server_gpus: Count = Field(default=8, description="GPUs in the drawn server (display only)")

    @model_validator(mode="after")
    def _one_model(self) -> _Request:
        if self.model is None and self.config is None:
            raise ValueError("give either `model` (a catalog name) or `config` (a config.json)")
        if self.model is not None and self.config is not None:
            raise ValueError("give `model` or `config`, not both")
        return self


class ServeRequest(_Request):
    """The inputs of `gpuplan.api.serve`, plus display options."""

    gpus: Count | Literal["auto"] | None = Field(
        default=None, description="GPU count, 'auto' (fewest that fit), or null (1 if it fits)"
    )
    tp: Count | None = None
    pp: Count | None = None
    dtype: Name | None = Field(default=None, description="Weight format (see /api/precisions)")
    kv_dtype: Name | None = None
    context: Annotated[int, Field(ge=1, le=10_000_000)] = 4096
    users: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    workspace: Size | None = None
    cuda_context: Size | None = None
    fixes: bool = Field(default=True, description="When it does not fit, look for the cheapest fix")


class TrainRequest(_Request):
    """The training controls; passed to `gpuplan.api.train` where it accepts them."""

    gpus: Count | Literal["auto"] | None = None
    tp: Count | None = None
    pp: Count | None = None
    dp: Count | None = None
    dtype: Name | None = None
    zero: Annotated[int, Field(ge=0, le=3)] | None = None
    fsdp: bool | None = None
    micro_batch: Annotated[int, Field(ge=1, le=4096)] | None = None
    seq: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    checkpointing: bool | Name | None = None
    method: Literal["full", "lora", "qlora"] | None = None
    lora_rank: Annotated[int, Field(ge=1, le=4096)] | None = None
    optimizer: Name | None = None
    fixes: bool = Field(default=True, description="When it does not fit, look for the fixes")


SERVE_SWEEPS = ("context", "users", "gpus")
TRAIN_SWEEPS = ("zero", "gpus", "seq", "micro_batch")


class SweepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["serve", "train"] = "serve"
    base: dict[str, Any] = Field(description="A /api/serve or /api/train body")
    vary: Literal["context", "users", "gpus", "zero", "seq", "micro_batch"]
    values: list[Annotated[int, Field(ge=0, le=10_000_000)]] = Field(
        min_length=1, max_length=MAX_SWEEP_POINTS
    )


# --- calling the engine --------------------------------------------------------------------


def _catalog_model(name: str) -> str:
    """The catalog id for `name`, or a GpuplanError. Never touches the filesystem."""
    from gpuplan.catalog.lookup import did_you_mean, normalise
    from gpuplan.catalog.models import _table

    names = _table()[1]
    key = names.get(normalise(name))
    if key is None:
        raise did_you_mean("model", name, names)
    return key


def _depth(value: Any, limit: int = MAX_CONFIG_DEPTH) -> int:
    stack, deepest = [(value, 1)], 0
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


def _model_arg(req: _Request) -> Any:
    if req.model is not None and not req.overrides:
        return _catalog_model(req.model)
    if req.model is not None:
        from gpuplan.catalog.models import _catalog_config

        key = _catalog_model(req.model)
        config = dict(_catalog_config(key))
        name = f"{key} (modified)"
    else:
        config, name = dict(req.config or {}), None
    config.update({str(k): v for k, v in (req.overrides or {}).items()})
    if _depth(config) > MAX_CONFIG_DEPTH:
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


SERVE_KWARGS = (
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dtype",
    "kv_dtype",
    "context",
    "users",
    "headroom",
    "gpu_memory",
    "workspace",
    "cuda_context",
)


def serve_kwargs(req: ServeRequest) -> dict[str, Any]:
    kwargs = {name: getattr(req, name) for name in SERVE_KWARGS}
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
    return data


def _view(data: dict[str, Any], server_gpus: int) -> dict[str, Any]:
    used = int(data.get("gpus") or 1)
    return {
        "server_gpus": server_gpus,
        "plan_gpus": used,
        "replicas": server_gpus // used if used <= server_gpus else 0,
        "fits_in_server": used <= server_gpus,
    }


def train_available() -> bool:
    return callable(getattr(api, "train", None))


def run_train(req: TrainRequest) -> dict[str, Any]:
    from gpuplan.planner.fixes import overflow, training_fixes

    train = getattr(api, "train", None)
    if not callable(train):
        raise NotAvailable("training estimates are not yet available in this version of gpuplan")
    accepted = inspect.signature(train).parameters
    fields = req.model_dump(
        exclude={"model", "config", "overrides", "units", "server_gpus", "fixes"}
    )
    kwargs = {k: v for k, v in fields.items() if v is not None and k in accepted}
    ignored = sorted(
        k
        for k, v in fields.items()
        if v is not None and k not in accepted and k in req.model_fields_set
    )
    model = _model_arg(req)
    plan = train(model, **kwargs)
    try:
        data = plan.to_dict(req.units)
    except TypeError:
        data = plan.to_dict()
    data.setdefault("mode", "train")
    data["view"] = _view(data, req.server_gpus)
    per_gpu = data.get("per_gpu") or {}
    gpu = data.get("gpu") or {}
    if "items" in per_gpu and "memory_bytes" in gpu and "budget_bytes" in data:
        data["view"]["overflow"] = overflow(
            per_gpu["items"], gpu["memory_bytes"], data["budget_bytes"]
        )
    if ignored:
        data["view"]["ignored_controls"] = ignored
    fixes = training_fixes({"model": model, **kwargs}, plan, train) if req.fixes else []
    data["fixes"] = [f.to_dict() for f in fixes]
    return data


class NotAvailable(Exception):
    """A feature this build does not have yet (501)."""


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


def run_sweep(req: SweepRequest) -> dict[str, Any]:
    allowed = SERVE_SWEEPS if req.mode == "serve" else TRAIN_SWEEPS
    if req.vary not in allowed:
        raise GpuplanError(f"a {req.mode} sweep varies one of {', '.join(allowed)}, not {req.vary}")
    base_model = ServeRequest if req.mode == "serve" else TrainRequest
    base = base_model.model_validate({**req.base, "fixes": False})
    points = []
    for value in req.values:
        change: dict[str, Any] = {req.vary: value}
        if req.vary == "gpus":
            change.update(tp=None, pp=None)
        try:
            body = base.model_copy(update=change)
            body = base_model.model_validate(body.model_dump())
            data = run_serve(body) if req.mode == "serve" else run_train(body)  # type: ignore[arg-type]
            points.append(_sweep_point(value, data))
        except (GpuplanError, ValueError) as err:
            points.append({"value": value, "fits": False, "error": _message(err)})
    return {"mode": req.mode, "vary": req.vary, "points": points}


def _message(err: Exception) -> str:
    if isinstance(err, GpuplanError):
        return str(err)
    text = str(err).splitlines()
    return text[1].strip() if len(text) > 1 else (text[0] if text else err.__class__.__name__)


# --- catalogs ------------------------------------------------------------------------------


@cache
def models_catalog() -> list[dict[str, Any]]:
    from gpuplan.api import model_summaries

    return model_summaries()


@cache
def gpus_catalog() -> list[dict[str, Any]]:
    from gpuplan.api.common import gpu_dict
    from gpuplan.catalog import list_gpus

    return [
        {**gpu_dict(g), "vendor": g.vendor, "gpus_per_node": g.gpus_per_node} for g in list_gpus()
    ]


@cache
def precisions_catalog() -> list[dict[str, Any]]:
    from gpuplan.catalog import list_precisions

    return [
        {
            "id": p.id,
            "bits": p.bits,
            "bytes_per_param": float(p.bytes_per_param),
            "kv": p.kv,
            "scope": p.scope,
        }
        for p in list_precisions()
    ]


# --- the app -------------------------------------------------------------------------------


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, before anything parses them."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    await self._refuse(send)
                    return
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps(
            {
                "detail": f"request body larger than {self.limit // 1024} KiB; a config.json is a few KB"
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def _static() -> Any:
    return resources.files("gpuplan.web").joinpath("static")


def create_app() -> FastAPI:
    """The FastAPI app: /api/* (JSON, described at /openapi.json) and the page at /."""
    app = FastAPI(
        title="gpuplan",
        version=gpuplan.__version__,
        description="Exact, itemised per-GPU memory bills for LLM serving and training.",
        docs_url=None,
        redoc_url=None,
    )

    @app.exception_handler(GpuplanError)
    async def _engine_error(request: Request, err: GpuplanError) -> JSONResponse:
        status = 422 if isinstance(err, ConfigError) else 400
        return JSONResponse({"detail": str(err)}, status_code=status)

    @app.exception_handler(NotAvailable)
    async def _not_available(request: Request, err: NotAvailable) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=501)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": e.get("msg", ""),
                "type": e.get("type"),
            }
            for e in err.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(p for p in first["loc"] if p != "body")
        message = f"{where}: {first['msg']}" if where else first["msg"]
        return JSONResponse({"detail": message, "errors": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse(
            {"detail": f"internal error ({err.__class__.__name__})"}, status_code=500
        )

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.post("/api/serve", tags=["engine"], summary="The per-GPU serving bill")
    def serve_endpoint(body: ServeRequest) -> dict[str, Any]:
        return run_serve(body)

    @app.post("/api/plan", tags=["engine"], summary="Fewest GPUs that serve the model")
    def plan_endpoint(body: ServeRequest) -> dict[str, Any]:
        return run_serve(body.model_copy(update={"gpus": "auto", "tp": None, "pp": None}))

    @app.post("/api/train", tags=["engine"], summary="The per-GPU training bill")
    def train_endpoint(body: TrainRequest) -> dict[str, Any]:
        return run_train(body)

    @app.post(
        "/api/sweep", tags=["engine"], summary="Vary one input; the engine's totals per point"
    )
    def sweep_endpoint(body: SweepRequest) -> dict[str, Any]:
        return run_sweep(body)

    @app.get("/api/models", tags=["catalog"])
    def models_endpoint() -> dict[str, Any]:
        return {"models": models_catalog()}

    @app.get("/api/gpus", tags=["catalog"])
    def gpus_endpoint() -> dict[str, Any]:
        return {"gpus": gpus_catalog()}

    @app.get("/api/precisions", tags=["catalog"])
    def precisions_endpoint() -> dict[str, Any]:
        return {"precisions": precisions_catalog()}

    @app.get("/api/features", tags=["catalog"])
    def features_endpoint() -> dict[str, Any]:
        return {"version": gpuplan.__version__, "serve": True, "train": train_available()}

    from gpuplan.web.lesson_api import router as lesson_router

    app.include_router(lesson_router)
    static = _static()

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(str(static.joinpath("index.html")), media_type="text/html")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    return app
