"""`gpuplan mcp`: gpuplan as tools for an agent, over the Model Context Protocol (stdio).

Tools: serve, train, plan, plan_train, check and inspect, each answering with the JSON object of
docs/json.md (`gpuplan.serve/1`, `gpuplan.train/1`, `gpuplan.plan/1`, `gpuplan.plan-train-goal/1`,
`gpuplan.check/1`, `gpuplan.inspect/1`). Needs the official SDK: `pip install "gpuplan[mcp]"`.
"""

from __future__ import annotations

from typing import Any

import click

from gpuplan.errors import GpuplanError


def build_server() -> Any:
    """The MCP server with gpuplan's tools registered (mcp ≥ 2: `MCPServer`)."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as err:
        raise GpuplanError(
            "gpuplan mcp needs the MCP SDK: pip install 'mcp>=2' (from a clone: pip install '.[mcp]')"
        ) from err

    server = MCPServer("gpuplan")
    _add_bill_tools(server)
    _add_plan_tools(server)
    _add_report_tools(server)
    return server


def _add_bill_tools(server: Any) -> None:
    """serve and train: one memory bill per GPU (`gpuplan.serve/1`, `gpuplan.train/1`)."""

    @server.tool()
    def serve(
        model: str,
        gpu: str = "h100",
        gpus: int | None = None,
        dtype: str | None = None,
        kv_dtype: str | None = None,
        context: int = 4096,
        users: int = 1,
    ) -> dict[str, Any]:
        """Serving memory bill per GPU (gpuplan.serve/1): will MODEL fit, on how many GPUs."""
        from gpuplan.api.serving import serve as run

        return run(
            model,
            gpu,
            gpus=gpus or "auto",
            dtype=dtype,
            kv_dtype=kv_dtype,
            context=context,
            users=users,
        ).to_dict()

    @server.tool()
    def train(
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

        return run(
            model,
            gpu,
            gpus=gpus or "auto",
            zero=zero,
            seq=seq,
            checkpointing=checkpointing,
            lora_rank=lora_rank,
            qlora=qlora,
        ).to_dict()


def _add_plan_tools(server: Any) -> None:
    """plan and plan_train: ranked plans to a goal (`gpuplan.plan/1`,
    `gpuplan.plan-train-goal/1`), shaped by api/plan_data.py as `gpuplan plan --json` prints them."""

    @server.tool()
    def plan(
        model: str,
        users: int = 1,
        context: int = 4096,
        tpot: str | None = None,
        ttft: str | None = None,
        objective: str = "gpus",
        gpus: list[str] | None = None,
        prices: list[str] | None = None,
        top: int = 5,
    ) -> dict[str, Any]:
        """Serving plans to a goal (gpuplan.plan/1): GPU type, format, layout, replicas, speed,
        price; tpot/ttft like "33ms" / "2s"; objective gpus|cost|throughput|latency."""
        from gpuplan.api.plan_data import serving_plan_data

        return serving_plan_data(
            model,
            gpus=tuple(gpus or ()),
            context=context,
            users=users,
            headroom=0.9,
            tpot=tpot,
            ttft=ttft,
            objective=objective,
            prices=tuple(prices or ()),
            top=top,
        )

    @server.tool()
    def plan_train(
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

        ranked = plan_training_goal(
            model, tokens=tokens, days=days, gpus=gpus or ["h100"], objective=objective
        )[: max(1, top)]
        return training_goal_data(ranked, days=days, objective=objective, model=model)


def _add_report_tools(server: Any) -> None:
    """check and inspect: a startup log against the prediction (`gpuplan.check/1`), and what
    gpuplan reads from a model (`gpuplan.inspect/1`)."""

    @server.tool()
    def check(log: str, config: str | None = None, gpu: str | None = None) -> dict[str, Any]:
        """Compare an engine startup log (its text) with gpuplan's prediction (gpuplan.check/1)."""
        from gpuplan.api.engines import check_log
        from gpuplan.catalog.engine_logs import parse_log

        kwargs: dict[str, Any] = {}
        if config:
            kwargs["model"] = config
        if gpu:
            kwargs["gpu"] = gpu
        return check_log(parse_log(log), **kwargs).to_dict()

    @server.tool()
    def inspect(model: str, revision: str | None = None) -> dict[str, Any]:
        """Where MODEL comes from, its family and assumptions, parameters by kind, the
        checkpoint's bytes by dtype from its headers, quantisation and context limit
        (gpuplan.inspect/1). MODEL: a catalog name, a Hugging Face id or a local path."""
        from gpuplan.api.inspection import inspect as run

        return run(model, revision).to_dict()


@click.command("mcp")
def mcp_command() -> None:
    """Serve gpuplan's tools (serve, train, plan, plan_train, check, inspect) to an agent over
    MCP stdio."""
    build_server().run("stdio")
