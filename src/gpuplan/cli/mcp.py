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


def _positive_or_auto(gpus: int | None) -> int | str:
    """`gpus`: None is auto (the fewest that fit); 0 or less is refused, never read as auto."""
    if gpus is None:
        return "auto"
    if gpus < 1:
        raise GpuplanError(f"gpus must be a whole number ≥ 1 (or omitted for auto), got {gpus}")
    return gpus


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


def _add_bill_tools(server: Any) -> None:
    """serve and train: one memory bill per GPU (`gpuplan.serve/1`, `gpuplan.train/1`)."""

    @server.tool()
    async def serve(
        model: str,
        gpu: str = "h100",
        gpus: int | None = None,
        tp: int | None = None,
        pp: int | None = None,
        dtype: str | None = None,
        kv_dtype: str | None = None,
        context: int | None = None,
        users: int = 1,
        speed: bool = False,
        prompt: int = 1024,
        output: int = 256,
        request_rate: float | None = None,
        eager: bool = False,
    ) -> dict[str, Any]:
        """Serving memory bill per GPU (gpuplan.serve/1): will MODEL fit, on how many GPUs; with
        speed, the layout's TTFT/TPOT/ITL/throughput under `vllm bench serve` (users in flight,
        or Poisson request_rate req/s; prompt/output tokens; context defaults to their sum),
        where the time goes and the kernel sources, under `speed`."""
        from gpuplan.api.serving import serve as run

        count = _positive_or_auto(gpus)
        ctx = context if context is not None else (prompt + output if speed else 4096)
        ask: dict[str, Any] = {"speed": speed, "prompt": prompt, "output": output}
        ask.update(request_rate=request_rate, eager=eager)

        def answer() -> dict[str, Any]:
            plan = run(model, gpu, gpus=count, tp=tp, pp=pp, dtype=dtype, kv_dtype=kv_dtype,
                       context=ctx, users=users)  # fmt: skip
            return with_speed(plan, users, ask)

        return await _bounded_call(answer)

    @server.tool()
    async def train(
        model: str,
        gpu: str = "h100",
        gpus: int | None = None,
        zero: int | None = None,
        seq: int = 4096,
        checkpointing: str = "none",
        lora_rank: int | None = None,
        qlora: bool = False,
    ) -> dict[str, Any]:
        """Training memory bill per GPU and step time (gpuplan.train/1)."""
        from gpuplan.api.training import train as run

        count = _positive_or_auto(gpus)
        return await _bounded_call(
            lambda: run(
                model,
                gpu,
                gpus=count,
                zero=zero,
                seq=seq,
                checkpointing=checkpointing,
                lora_rank=lora_rank,
                qlora=qlora,
            ).to_dict()
        )


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

    @server.tool()
    async def plan(
        model: str,
        users: int = 1,
        context: int = 4096,
        tpot: str | None = None,
        ttft: str | None = None,
        objective: str = "gpus",
        gpus: list[str] | None = None,
        prices: list[str] | None = None,
        top: int = 5,
        tp: int | None = None,
        pp: int | None = None,
        ep: bool | None = None,
    ) -> dict[str, Any]:
        """Serving plans to a goal (gpuplan.plan/1): GPU type, format, layout, replicas, speed,
        price; tpot/ttft like "33ms" / "2s"; objective gpus|cost|throughput|latency; tp/pp/ep
        pin each replica's layout."""
        from gpuplan.api.plan_data import serving_plan_data

        names, priced = _bounded("gpus", gpus), _bounded("prices", prices)
        return await _bounded_call(
            lambda: serving_plan_data(
                model,
                gpus=names,
                context=context,
                users=users,
                headroom=0.9,
                tpot=tpot,
                ttft=ttft,
                objective=objective,
                prices=priced,
                top=top,
                pin={k: v for k, v in (("tp", tp), ("pp", pp), ("ep", ep)) if v is not None},
            )
        )

    @server.tool()
    async def plan_train(
        model: str,
        tokens: str,
        days: float | None = None,
        gpus: list[str] | None = None,
        objective: str = "gpus",
        top: int = 5,
    ) -> dict[str, Any]:
        """Training plans to a deadline (gpuplan.plan-train-goal/1): tokens like "2T"."""
        from gpuplan.api.plan_data import training_goal_data
        from gpuplan.api.planning import plan_training_goal

        names = list(_bounded("gpus", gpus)) or ["h100"]

        def run() -> dict[str, Any]:
            ranked = plan_training_goal(
                model, tokens=tokens, days=days, gpus=names, objective=objective
            )[: max(1, top)]
            return training_goal_data(ranked, days=days, objective=objective, model=model)

        return await _bounded_call(run)


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
