"""`gpuplan mcp`: gpuplan as tools for an agent, over the Model Context Protocol (stdio).

Tools: serve, train, plan, plan_train, check and inspect, each answering with the JSON object of
docs/json.md (`gpuplan.serve/1`, `gpuplan.train/1`, `gpuplan.plan/1`, `gpuplan.plan-train-goal/1`,
`gpuplan.check/1`, `gpuplan.inspect/1`). Needs the official SDK: `pip install "gpuplan[mcp]"`.

Errors: a tool's refusal is the one line the CLI prints (a GpuplanError's message, "did you
mean" included), arguments that break a tool's schema are condensed to one line naming the
field, and nothing is logged to stderr unless GPUPLAN_DEBUG is set (then tracebacks too).
Limits: the web API's (web/app.py DEADLINE_S, the work bounds below): each call runs in a
worker thread and is answered with a refusal once DEADLINE_S passes; lists are bounded.
"""

from __future__ import annotations

import os
from typing import Any

import click

from gpuplan.errors import GpuplanError

DEADLINE_S = 10.0  # as the web API's (web/app.py DEADLINE_S)
MAX_LIST = 16  # GPU names or prices in one plan: the catalog's GPU types, not 1,000


def debug() -> bool:
    return bool(os.environ.get("GPUPLAN_DEBUG"))


def _bounded(name: str, items: list[str] | None) -> tuple[str, ...]:
    values = tuple(dict.fromkeys(items or ()))
    if len(values) > MAX_LIST:
        raise GpuplanError(f"{name}: at most {MAX_LIST} distinct values, got {len(values):,}")
    return values


def condensed(err: BaseException) -> str:
    """One line for a tool failure: a GpuplanError's message, a pydantic validation error's
    fields and first problem, anything else as an internal error naming its type."""
    from pydantic import ValidationError

    if isinstance(err, GpuplanError):
        return str(err)
    if isinstance(err, ValidationError):
        problems = err.errors(include_url=False)
        first = problems[0] if problems else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"invalid argument {where}: {first.get('msg', 'invalid')}{more}"
    if isinstance(err, TimeoutError):
        return f"stopped after {DEADLINE_S:g} s of computation; narrow the question"
    return f"internal error ({err.__class__.__name__})"


def _server_class() -> Any:
    """MCPServer whose call_tool turns every failure into a ToolError of one line."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    class Server(MCPServer):
        async def call_tool(
            self, name: str, arguments: dict[str, Any], *args: Any, **kw: Any
        ) -> Any:
            try:
                return await super().call_tool(name, arguments, *args, **kw)
            except ToolError as exc:
                cause = exc.__cause__
                while isinstance(cause, ToolError) and cause.__cause__ is not None:
                    cause = cause.__cause__
                if cause is None or isinstance(cause, ToolError):
                    raise
                if debug():
                    import logging

                    logging.getLogger("gpuplan.mcp").exception("tool %s failed", name)
                raise ToolError(condensed(cause)) from None

    return Server


async def _bounded_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run the blocking tool body in a worker thread; refused once DEADLINE_S passes (the
    thread's work is bounded by the limits above and ends by itself)."""
    import anyio

    with anyio.fail_after(DEADLINE_S):
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)


def build_server() -> Any:
    """The MCP server with gpuplan's tools registered (mcp ≥ 2: `MCPServer`)."""
    try:
        server_class = _server_class()
    except ImportError as err:
        raise GpuplanError(
            "gpuplan mcp needs the MCP SDK: pip install 'mcp>=2' (from a clone: pip install '.[mcp]')"
        ) from err

    server = server_class("gpuplan")
    _add_bill_tools(server)
    _add_plan_tools(server)
    _add_report_tools(server)
    return server


# each tool's arguments: MODEL, then these knobs of its request (api/requests.py), their input
# schema generated from the declaration (type, closed set, default, help); the request record
# checks the values once, when the API builds it
SERVE_TOOL = ("gpu", "gpus", "tp", "pp", "dtype", "kv_dtype", "context", "users")
SPEED_TOOL = ("prompt", "output", "request_rate", "eager")
TRAIN_TOOL = ("gpu", "gpus", "zero", "seq", "target_seq", "checkpointing", "lora_rank", "qlora")
PLAN_TOOL = (
    "users",
    "context",
    "tpot",
    "ttft",
    "objective",
    "gpus",
    "prices",
    "top",
    "tp",
    "pp",
    "ep",
)
PLAN_TRAIN_TOOL = ("tokens", "days", "gpus", "objective", "top")


def tool_knobs(name: str) -> tuple[Any, ...]:
    """The knobs a tool takes after MODEL (tests/test_declarations.py reads them)."""
    from gpuplan.api import requests as rq

    return {
        "serve": (*rq.pick(rq.SERVE, SERVE_TOOL), rq.TIME, *rq.pick(rq.SPEED, SPEED_TOOL)),
        "train": rq.pick(rq.TRAIN, TRAIN_TOOL),
        "plan": rq.pick(rq.PLAN, PLAN_TOOL),
        "plan_train": rq.pick(rq.PLAN, PLAN_TRAIN_TOOL),
    }[name]


def add_tool(server: Any, name: str, doc: str, run: Any, required: tuple[str, ...] = ()) -> None:
    """Register `run(model, **knobs)` as the tool `name`: its arguments MODEL and the tool's
    knobs (tool_knobs), typed from their declaration; `required`: knobs the tool needs given."""
    import inspect
    from typing import Annotated

    from pydantic import Field

    from gpuplan.web.schema import annotation

    params = [inspect.Parameter("model", inspect.Parameter.KEYWORD_ONLY, annotation=str)]
    for knob in tool_knobs(name):
        default = inspect.Parameter.empty if knob.name in required else knob.default
        kind: Any = Annotated[annotation(knob, bounded=False), Field(description=knob.help or None)]
        params.append(
            inspect.Parameter(
                knob.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind
            )
        )

    async def call(**arguments: Any) -> dict[str, Any]:
        return await _bounded_call(run, **arguments)

    call.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    server.add_tool(call, name=name, description=doc)


def _add_bill_tools(server: Any) -> None:
    """serve and train: one memory bill per GPU (`gpuplan.serve/1`, `gpuplan.train/1`)."""
    add_tool(
        server,
        "serve",
        "Serving memory bill per GPU (gpuplan.serve/1): will MODEL fit, on how many GPUs; with"
        " speed, the layout's TTFT/TPOT/ITL/throughput under `vllm bench serve` (users in flight,"
        " or Poisson request_rate req/s; prompt/output tokens, 3/4 and 1/4 of the context unless given; context"
        " defaults to their sum), where the time goes and the kernel sources, under `speed`.",
        serve_answer,
    )
    add_tool(
        server,
        "train",
        "Training memory bill per GPU and step time (gpuplan.train/1).",
        train_answer,
    )


def serve_answer(model: str, **knobs: Any) -> dict[str, Any]:
    """The serve tool: `gpuplan.serve/1`, with the layout's `speed` when asked."""
    from gpuplan.api.requests import serve_context, speed_tokens
    from gpuplan.api.serving import serve

    ask = {k: knobs.pop(k) for k in ("speed", *SPEED_TOOL)}
    if ask["speed"]:
        knobs["context"] = serve_context(knobs["context"], ask["prompt"], ask["output"])
        ask["prompt"], ask["output"] = speed_tokens(knobs["context"], ask["prompt"], ask["output"])
    return with_speed(serve(model, **knobs), knobs["users"], ask)


def train_answer(model: str, **knobs: Any) -> dict[str, Any]:
    from gpuplan.api.training import train

    return train(model, **knobs).to_dict()


def with_speed(plan: Any, users: int, ask: dict[str, Any]) -> dict[str, Any]:
    """The plan's JSON, with its layout's `speed` when `ask["speed"]` (api/serving_speed.py)."""
    data: dict[str, Any] = plan.to_dict()
    if ask.pop("speed"):
        from gpuplan.api.serving_speed import layout_speed, refuse_unfit

        refuse_unfit(plan.fits, plan.bill.setup)
        data["speed"] = layout_speed(plan.bill.setup, users=users, **ask)
    return data


def _add_plan_tools(server: Any) -> None:
    """plan and plan_train: ranked plans to a goal (`gpuplan.plan/1`,
    `gpuplan.plan-train-goal/1`), shaped by api/plan_data.py as `gpuplan plan --json` prints them."""
    add_tool(
        server,
        "plan",
        "Serving plans to a goal (gpuplan.plan/1): GPU type, format, layout, replicas, speed,"
        ' price; tpot/ttft like "33ms" / "2s"; objective gpus|cost|token-cost|throughput|latency;'
        " tp/pp/ep pin each replica's layout.",
        plan_answer,
    )
    add_tool(
        server,
        "plan_train",
        'Training plans to a deadline (gpuplan.plan-train-goal/1): tokens like "2T".',
        plan_train_answer,
        required=("tokens",),
    )


def plan_answer(model: str, **knobs: Any) -> dict[str, Any]:
    """The plan tool: the request checked (api/requests.py PlanRequest), lists bounded."""
    from gpuplan.api.plan_data import serving_plan_data
    from gpuplan.api.requests import PlanRequest

    req = PlanRequest(**knobs)
    names, priced = _bounded("gpus", list(req.gpus)), _bounded("prices", list(req.prices))
    pin = {k: v for k in ("tp", "pp", "ep") if (v := getattr(req, k)) is not None}
    return serving_plan_data(
        model,
        gpus=names,
        context=req.context,
        users=req.users,
        headroom=req.headroom,
        tpot=req.tpot,
        ttft=req.ttft,
        objective=req.objective,
        prices=priced,
        top=req.top,
        pin=pin,
    )


def plan_train_answer(model: str, **knobs: Any) -> dict[str, Any]:
    from gpuplan.api.plan_data import training_goal_data
    from gpuplan.api.requests import PlanRequest
    from gpuplan.api.training_plans import plan_training_goal

    req = PlanRequest(**knobs)
    names = list(_bounded("gpus", list(req.gpus))) or ["h100"]
    ranked = plan_training_goal(
        model, tokens=req.tokens, days=req.days, gpus=names, objective=req.objective
    )[: req.top]
    return training_goal_data(ranked, days=req.days, objective=req.objective, model=model)


def _add_report_tools(server: Any) -> None:
    """check and inspect: a startup log against the prediction (`gpuplan.check/1`), and what
    gpuplan reads from a model (`gpuplan.inspect/1`)."""

    @server.tool()
    async def check(log: str, config: str | None = None, gpu: str | None = None) -> dict[str, Any]:
        """Compare an engine startup log (its text) with gpuplan's prediction (gpuplan.check/1)."""
        from gpuplan.api.engines import check_log
        from gpuplan.catalog.engine_logs import parse_log

        kwargs: dict[str, Any] = {}
        if config:
            kwargs["model"] = config
        if gpu:
            kwargs["gpu"] = gpu
        return await _bounded_call(lambda: check_log(parse_log(log), **kwargs).to_dict())

    @server.tool()
    async def inspect(model: str, revision: str | None = None) -> dict[str, Any]:
        """Where MODEL comes from, its family and assumptions, parameters by kind, the
        checkpoint's bytes by dtype from its headers, quantisation and context limit
        (gpuplan.inspect/1). MODEL: a catalog name, a Hugging Face id or a local path."""
        from gpuplan.api.inspection import inspect as run

        return await _bounded_call(lambda: run(model, revision).to_dict())


@click.command("mcp")
def mcp_command() -> None:
    """Serve gpuplan's tools (serve, train, plan, plan_train, check, inspect) to an agent over
    MCP stdio. Errors reach the agent as one line; GPUPLAN_DEBUG=1 logs tracebacks to stderr."""
    import logging

    if not debug():  # the SDK logs each failed call; a user error is the agent's to read
        logging.getLogger("mcp").setLevel(logging.CRITICAL)
    build_server().run("stdio")
