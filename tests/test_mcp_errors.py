"""MCP tool errors (issues 23 finding 3 and 26 item 5): each failure reaches the agent as the one
line the CLI prints, pydantic's validation dumps condensed to one line, no traceback on stderr
unless GPUPLAN_DEBUG is set, and the web API's bounds (gpus=0 refused, not read as auto; a plan
over 1,000 GPU names refused before any work)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")

from gpuplan.cli.main import main  # noqa: E402
from gpuplan.cli.mcp import MAX_LIST, build_server  # noqa: E402


def _call(tool: str, args: dict[str, Any]) -> Any:
    async def call() -> Any:
        async with mcp.Client(build_server()) as client:
            return await client.call_tool(tool, args)

    return asyncio.run(call())


def _error_text(result: Any) -> str:
    assert result.is_error, result
    text = result.content[0].text
    assert "\n" not in text, text
    return text


def test_unknown_model_carries_the_cli_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "lama-3.1-8b"]) == 2
    cli = capsys.readouterr().err.strip().removeprefix("gpuplan: error: ")
    assert "did you mean" in cli
    text = _error_text(_call("serve", {"model": "lama-3.1-8b"}))
    assert text.endswith(cli), (text, cli)
    assert "Traceback" not in capsys.readouterr().err


def test_schema_errors_are_one_line() -> None:
    text = _error_text(_call("serve", {"model": "llama-3.1-8b", "context": "lots"}))
    assert "context" in text


@pytest.mark.parametrize("tool", ["serve", "train"])
def test_gpus_zero_is_refused_not_auto(tool: str) -> None:
    text = _error_text(_call(tool, {"model": "llama-3.2-1b", "gpus": 0}))
    assert "gpus must be a whole number" in text


def test_a_plan_over_a_thousand_gpu_names_is_refused_before_work() -> None:
    names = [f"gpu{i}" for i in range(1000)]
    text = _error_text(_call("plan", {"model": "llama-3.2-1b", "gpus": names}))
    assert f"at most {MAX_LIST}" in text


def test_inspect_revision_outside_the_cache_is_refused() -> None:
    text = _error_text(
        _call("inspect", {"model": "acme/x", "revision": "../../../../etc/hostname"})
    )
    assert "neither a commit hash nor a branch" in text


def test_plan_tool_refuses_what_plan_refuses() -> None:
    text = _error_text(
        _call("plan", {"model": "llama-3.2-1b", "gpus": ["h100"], "top": 1, "context": 0})
    )
    assert "context" in text
