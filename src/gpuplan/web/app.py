"""The web app: a JSON API over `gpuplan.api` and the static page that draws its answers.

Thin on purpose: parse the request (web/schema.py), check what it may cost (web/limits.py),
have a worker process compute it (web/pool.py running web/compute.py), return the JSON. The
page never computes a byte; everything it shows comes from these responses.

Every response, errors included, carries the security headers, and every error has one shape,
{"detail": one line} (validation errors add "errors": the list): 422 for a request that breaks
the schema or the work budget, 400 for the engine's refusals, 413 for a body over 256 KiB,
503 when the server is busy or a computation ran past its deadline, never a traceback
(web/guard.py wraps it all).

Routers: the engine's routes and the catalogs are APIRouters included in `create_app`; a new
group of routes is one more `app.include_router(...)` line there.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import cache
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError

import gpuplan
from gpuplan.errors import GpuplanError
from gpuplan.web.guard import CSP, LOOPBACK_HOSTS, Guard
from gpuplan.web.limits import AnswerCache, TooMuchWork, cache_key, check_budget, work_units
from gpuplan.web.pool import Busy, Cancelled, TimedOut, WorkerEnded, WorkerPool
from gpuplan.web.schema import (
    MAX_BODY_BYTES,
    MAX_SWEEP_POINTS,
    ServeRequest,
    SweepRequest,
    TrainRequest,
)

__all__ = ["CSP", "MAX_BODY_BYTES", "MAX_SWEEP_POINTS", "create_app"]

DEADLINE_S = 10.0  # wall-clock seconds one computation may run before it is stopped
DISCONNECT_POLL_S = 0.1
LIGHT_UNITS = 16  # web/limits.py work units: a bill or a serving search runs in the light pool


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class Engine:
    """The app's computing side: the worker pool, the answer cache, and how a request uses them."""

    def __init__(self, workers: int, deadline_s: float) -> None:
        # two pools: a cheap request (a bill, a serving search) never waits behind heavy ones
        # (training searches, sweeps), which have their own workers
        self.pool = WorkerPool(workers, deadline_s)
        self.light = WorkerPool(max(1, workers // 2), deadline_s)
        self.cache = AnswerCache()
        self.threads = ThreadPoolExecutor(
            max_workers=workers + self.light.size + self.pool.waiting + self.light.waiting,
            thread_name_prefix="gpuplan-wait",
        )

    async def answer(self, request: Request, kind: str, body: BaseModel) -> Response:
        """Check, look up, compute (in a worker) and cache the answer to one request."""
        try:
            canonical = _canonical_model(body)
            check_budget(kind, body)
            units = work_units(kind, body)[0]
        except TooMuchWork as err:
            return _error(422, str(err))
        except ValidationError as err:  # a sweep's base that is not a body of its mode
            from gpuplan.web.compute import validation_detail

            detail, errors = validation_detail(err.errors(include_url=False), ("base",))
            return JSONResponse({"detail": detail, "errors": errors}, status_code=422)
        except GpuplanError as err:
            return _error(400, str(err))
        key = cache_key(kind, body, canonical)
        hit = self.cache.get(key)
        if hit is not None:
            return Response(hit[1], status_code=hit[0], media_type="application/json")
        pool = self.light if units <= LIGHT_UNITS else self.pool
        status, payload = await self._compute(request, kind, body.model_dump(mode="json"), pool)
        if status in (200, 400, 422):
            self.cache.put(key, status, payload)
        return Response(payload, status_code=status, media_type="application/json")

    async def _compute(
        self, request: Request, kind: str, body: dict, pool: WorkerPool
    ) -> tuple[int, bytes]:
        cancel = threading.Event()
        watcher = asyncio.ensure_future(_watch(request, cancel))
        loop = asyncio.get_running_loop()
        try:
            status, answer = await loop.run_in_executor(self.threads, pool.call, kind, body, cancel)
        except Busy:
            return 503, _json({"detail": "the server is busy; try again in a moment"})
        except TimedOut:
            return 503, _json(
                {
                    "detail": f"stopped after {self.pool.deadline_s:g} s of computation; give gpus,"
                    " sweep fewer values or a smaller model"
                }
            )
        except Cancelled:
            return 503, _json({"detail": "cancelled: the client went away or the server stopped"})
        except WorkerEnded:
            return 500, _json({"detail": "internal error (the computation's process ended)"})
        except asyncio.CancelledError:
            cancel.set()
            raise
        finally:
            watcher.cancel()
        return status, answer

    def close(self) -> None:
        self.pool.close()
        self.light.close()
        self.threads.shutdown(wait=False, cancel_futures=True)


async def _watch(request: Request, cancel: threading.Event) -> None:
    """Set `cancel` as soon as the client disconnects."""
    while not cancel.is_set():
        if await request.is_disconnected():
            cancel.set()
            return
        await asyncio.sleep(DISCONNECT_POLL_S)


def _canonical_model(body: BaseModel) -> str | None:
    """The catalog id a request names (a GpuplanError for an unknown name), None for a config."""
    from gpuplan.web.compute import catalog_model, check_sweep

    base = check_sweep(body) if isinstance(body, SweepRequest) else body
    name = getattr(base, "model", None)
    return None if name is None else catalog_model(name)


def _json(data: Any) -> bytes:
    return json.dumps(data, allow_nan=False).encode()


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


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


catalog_routes = APIRouter(prefix="/api", tags=["catalog"])


@catalog_routes.get("/models")
def models_endpoint() -> dict[str, Any]:
    return {"models": models_catalog()}


@catalog_routes.get("/gpus")
def gpus_endpoint() -> dict[str, Any]:
    return {"gpus": gpus_catalog()}


@catalog_routes.get("/precisions")
def precisions_endpoint() -> dict[str, Any]:
    return {"precisions": precisions_catalog()}


@catalog_routes.get("/features")
def features_endpoint() -> dict[str, Any]:
    return {"version": gpuplan.__version__, "serve": True, "train": True}


# --- the engine's routes -------------------------------------------------------------------

engine_routes = APIRouter(prefix="/api", tags=["engine"])


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


@engine_routes.post("/serve", summary="The per-GPU serving bill")
async def serve_endpoint(body: ServeRequest, request: Request) -> Response:
    return await _engine(request).answer(request, "serve", body)


@engine_routes.post("/plan", summary="Fewest GPUs that serve the model")
async def plan_endpoint(body: ServeRequest, request: Request) -> Response:
    body = body.model_copy(update={"gpus": "auto", "tp": None, "pp": None})
    return await _engine(request).answer(request, "serve", body)


@engine_routes.post("/train", summary="The per-GPU training bill")
async def train_endpoint(body: TrainRequest, request: Request) -> Response:
    return await _engine(request).answer(request, "train", body)


@engine_routes.post("/sweep", summary="Vary one input; the engine's totals per point")
async def sweep_endpoint(body: SweepRequest, request: Request) -> Response:
    return await _engine(request).answer(request, "sweep", body)


# --- the app -------------------------------------------------------------------------------


class _App(FastAPI):
    """FastAPI with web/guard.py outside everything, FastAPI's own error middleware included."""

    guard_hosts: frozenset[str] | None = LOOPBACK_HOSTS

    def build_middleware_stack(self) -> Any:
        return Guard(super().build_middleware_stack(), MAX_BODY_BYTES, self.guard_hosts)


def _static() -> Any:
    return resources.files("gpuplan.web").joinpath("static")


def create_app(
    workers: int | None = None,
    deadline_s: float = DEADLINE_S,
    hosts: Iterable[str] | None = LOOPBACK_HOSTS,
) -> FastAPI:
    """The FastAPI app: /api/* (JSON, described at /openapi.json) and the page at /.

    workers: computations at once (processes); deadline_s: how long one may run; hosts: the
    Host names it answers to (None: any, for a server deliberately exposed beyond loopback).
    """
    engine = Engine(workers or default_workers(), deadline_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=engine.pool.warm, daemon=True).start()
        yield
        engine.close()

    app = _App(
        title="gpuplan",
        version=gpuplan.__version__,
        description="Exact, itemised per-GPU memory bills for LLM serving and training.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.guard_hosts = None if hosts is None else frozenset(hosts)
    app.state.engine = engine

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        from gpuplan.web.compute import validation_detail

        detail, errors = validation_detail(err.errors())
        return JSONResponse({"detail": detail, "errors": errors}, status_code=422)

    @app.exception_handler(GpuplanError)
    async def _refused(request: Request, err: GpuplanError) -> JSONResponse:
        return _error(400, str(err))

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, err: RecursionError) -> JSONResponse:
        return _error(422, "the request body is nested too deeply")

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception) -> JSONResponse:
        return _error(500, f"internal error ({err.__class__.__name__})")

    # routers: one line each
    from gpuplan.web.lesson_api import router as lesson_router

    app.include_router(engine_routes)
    app.include_router(catalog_routes)
    app.include_router(lesson_router)

    static = _static()

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(str(static.joinpath("index.html")), media_type="text/html")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app
