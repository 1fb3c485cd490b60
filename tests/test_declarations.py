"""One declaration per question (issue 25): every request knob is declared once, in
api/requests.py, and the CLI options, the web request bodies and the MCP tools' input schemas are
generated from it; the CLI's surface is frozen here (a new option must be added on purpose, as
torchtitan's test_no_new_cli_options does)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import click
import pytest

from gpuplan.api import requests
from gpuplan.api.requests import PlanRequest, ServeRequest, TrainRequest
from gpuplan.cli.group import COMMANDS, cli
from gpuplan.engine.frozen import fields
from gpuplan.engine.serving import DEFAULT_HEADROOM
from gpuplan.errors import GpuplanError

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"

# command → the requests whose knobs it takes on the command line
CLI_REQUESTS = {
    "serve": (*requests.SERVE, requests.TIME, *requests.SPEED),
    "train": requests.TRAIN,
    "plan": requests.PLAN,
}
# the CLI's own options (display, modes, a --from config, engine accounting), not request knobs
CLI_ONLY = {
    "serve": {
        "units", "as_json", "explain", "engine", "engine_version", "launch_line",
        "memory_fraction", "max_num_seqs", "max_num_batched_tokens", "block_size",
        "enforce_eager", "gpu_layers", "split_mode", "tensor_split",
    },
    "train": {"units", "as_json", "explain", "config", "config_format", "overrides"},
    "plan": {"units", "as_json", "matrix", "as_csv", "train"},
}  # fmt: skip


def _command(name: str) -> click.Command:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return command


def _options(name: str) -> dict[str, click.Option]:
    return {p.name: p for p in _command(name).params if isinstance(p, click.Option) and p.name}


@pytest.mark.parametrize("name", sorted(CLI_REQUESTS))
def test_cli_options_are_the_declared_knobs(name: str) -> None:
    options = _options(name)
    knobs = [k for k in CLI_REQUESTS[name] if k.cli]
    assert set(options) == {k.name for k in knobs} | CLI_ONLY[name]
    for knob in knobs:
        option = options[knob.name]
        assert tuple(option.opts) == knob.cli and tuple(option.secondary_opts) == knob.off
        assert option.multiple == (knob.kind == "names")
        if knob.choices:
            assert isinstance(option.type, click.Choice)
            assert tuple(option.type.choices) == knob.choices
        default = option.default
        if knob.kind == "names":
            assert default is None and knob.default == ()
        elif isinstance(default, str) and not isinstance(knob.default, str):
            assert int(default) == knob.default, knob.name  # a count read as text (32k)
        elif option.is_flag and knob.default is None:
            assert default in (None, False), knob.name
        else:
            assert default == knob.default, knob.name
        assert option.help == knob.help


def _schema(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    return schema


def _bounds(prop: dict[str, Any]) -> tuple[Any, Any, Any, tuple[str, ...]]:
    """(ge, gt, le, enum) of a JSON schema property, through anyOf."""
    ge = gt = le = None
    enum: tuple[str, ...] = ()
    for part in prop.get("anyOf", [prop]):
        ge = part.get("minimum", ge)
        gt = part.get("exclusiveMinimum", gt)
        le = part.get("maximum", le)
        if "enum" in part:
            enum = tuple(part["enum"])
    return ge, gt, le, enum


@pytest.mark.parametrize(
    ("model_name", "knobs"),
    [
        ("ServeRequest", requests.SERVE),
        ("SpeedAsk", requests.SPEED),
        ("TrainRequest", requests.TRAIN),
    ],
)
def test_web_bodies_are_the_declared_knobs(model_name: str, knobs: tuple) -> None:
    from gpuplan.web import schema as web

    props = _schema(getattr(web, model_name))["properties"]
    declared = {k.name: k for k in knobs}
    own = {"model", "config", "overrides", "units", "server_gpus", "fixes", "speed", "dtype"}
    assert set(props) - own <= set(declared)  # every knob field comes from the declaration
    checked = 0
    for name, prop in props.items():
        knob = declared.get(name)
        if knob is None or (model_name == "TrainRequest" and name == "dtype"):
            continue
        default = list(knob.default) if isinstance(knob.default, tuple) else knob.default
        assert prop.get("default") == default, name
        ge, gt, le, enum = _bounds(prop)
        if knob.kind in ("count", "tokens", "gpus", "number"):  # a size's bounds are its kind's
            assert (ge, gt, le) == (knob.ge, knob.gt, knob.le), name
        assert enum == knob.choices, name
        assert prop.get("description") == (knob.help or None), name
        checked += 1
    fields_of = {
        "ServeRequest": "SERVE_FIELDS",
        "SpeedAsk": "SPEED_FIELDS",
        "TrainRequest": "TRAIN_FIELDS",
    }
    assert checked == len(getattr(web, fields_of[model_name]))


def test_the_openapi_bodies_are_the_models() -> None:
    pytest.importorskip("fastapi")
    from gpuplan.web.app import create_app
    from gpuplan.web.schema import ServeRequest as WebServe

    app = create_app()
    spec = app.openapi()["components"]["schemas"]["ServeRequest"]["properties"]
    assert set(spec) == set(_schema(WebServe)["properties"])
    assert spec["headroom"]["default"] == DEFAULT_HEADROOM


def test_mcp_tool_schemas_are_the_declared_knobs() -> None:
    mcp = pytest.importorskip("mcp")
    from gpuplan.cli.mcp import build_server, tool_knobs

    async def listing() -> Any:
        async with mcp.Client(build_server()) as client:
            return await client.list_tools()

    tools = {t.name: t.input_schema for t in asyncio.run(listing()).tools}
    for name in ("serve", "train", "plan", "plan_train"):
        props = tools[name]["properties"]
        knobs = tool_knobs(name)
        assert list(props) == ["model", *(k.name for k in knobs)]
        for knob in knobs:
            prop = props[knob.name]
            if knob.name in tools[name].get("required", ()):
                continue  # plan_train's tokens
            default = list(knob.default) if isinstance(knob.default, tuple) else knob.default
            assert prop.get("default") == default, (name, knob.name)
            assert _bounds(prop)[3] == knob.choices, (name, knob.name)
            assert prop.get("description") == (knob.help or None), (name, knob.name)


def test_the_api_takes_the_declared_knobs() -> None:
    """api.serve and api.train take exactly their request's knobs (the web passes the train
    controls it has to api.train by these names)."""
    from gpuplan.web.compute import run_train  # noqa: F401  (reads TrainRequest.KNOBS)

    for record, knobs in ((ServeRequest, requests.SERVE), (TrainRequest, requests.TRAIN)):
        assert [f.name for f in fields(record)] == [k.name for k in knobs]
        assert {f.name: f.default for f in fields(record)} == {k.name: k.default for k in knobs}
    with pytest.raises(TypeError):
        ServeRequest(recompute="full")  # one name per knob: checkpointing, not recompute
    with pytest.raises(TypeError):
        TrainRequest(kernel="flash")  # attention, not kernel


def test_one_name_per_knob_and_one_default() -> None:
    for knobs in (requests.SERVE, requests.SPEED, requests.TRAIN, requests.PLAN):
        names = [k.name for k in knobs]
        assert len(names) == len(set(names))
    spellings = [s for k in requests.TRAIN for s in (*k.cli, *k.off)]
    assert len(spellings) == len(set(spellings))
    assert requests.HEADROOM.default == DEFAULT_HEADROOM
    # the 0.9 headroom is written once, in the engine (engine/serving.py DEFAULT_HEADROOM)
    for folder in ("api", "cli", "web"):
        for path in (SRC / folder).glob("*.py"):
            text = path.read_text()
            assert not re.search(r"headroom\W{1,4}0\.9\b", text), path


@pytest.mark.parametrize(
    ("record", "values", "message"),
    [
        (ServeRequest, {"gpus": 0}, "gpus must be a whole number from 1 to 1,048,576, got 0"),
        (ServeRequest, {"gpus": "lots"}, "gpus must be a number or 'auto', got 'lots'"),
        (ServeRequest, {"headroom": 1.5}, "headroom must be in (0, 1], got 1.5"),
        (TrainRequest, {"zero": 4}, "ZeRO stage must be 0, 1, 2 or 3, got 4"),
        (TrainRequest, {"method": "half"}, "method must be full, lora or qlora, got 'half'"),
        (TrainRequest, {"micro_batch": 0}, "micro-batch must be a whole number from 1 to"),
        (TrainRequest, {"mfu": 2}, "MFU must be in (0, 1], got 2"),
        (PlanRequest, {"objective": "fastest"}, "objective must be gpus, cost, token-cost"),
        (PlanRequest, {"top": 0}, "top must be a whole number from 1 to 1,000, got 0"),
    ],
)
def test_a_request_is_checked_once_when_built(record: Any, values: dict, message: str) -> None:
    with pytest.raises(GpuplanError) as err:
        record(**values)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_closed_sets_read_as_the_api_reads_them() -> None:
    """Case, blanks and - / _ aside, as the framework profile normalises them."""
    assert TrainRequest(grads="Set-To-None", optimizer_kernel="FUSED").grads == "Set-To-None"
    assert TrainRequest(dropout=0).dropout == 0  # a bound from 0 includes 0


# every command's option spellings: a new option (or a knob given a new spelling) fails here,
# on purpose; add it to its request in api/requests.py (or to the CLI's own), then here
CLI_SURFACE = {
    "calibrate": "--disable-radix-cache --dtype --eager --engine --engine-version --fit-on"
    " --free-gpu-memory-fraction --gpu --gpu-memory-utilization --json --kv-dtype"
    " --mem-fraction-static --memory-fraction --model --out --pp --tp",
    "check": "--engine-version --gpu --gpu-memory --json --model --units",
    "frameworks": "--json",
    "gpus": "--json --units",
    "inspect": "--json --revision --units",
    "mcp": "",
    "models": "--json",
    "plan": "--calibration --context --csv --days --dtype --engine --ep --export"
    " --global-batch-tokens --gpu --gpu-memory --gpus --headroom --json --kv-dtype --lora-rank"
    " --matrix --max-gpus --mfu --no-ep --objective --output --pipeline-parallel-size --pp"
    " --price --prompt --qlora --recipe --seq --tensor-parallel-size --tokens --top --tp --tpot"
    " --train --ttft --units --users",
    "precisions": "--json",
    "recipes": "--json",
    "serve": "--block-size --calibration --context --cuda-context --dtype --eager --enforce-eager"
    " --engine --engine-version --explain --free-gpu-memory-fraction --from --gpu --gpu-memory"
    " --gpu-memory-utilization --gpus --headroom --json --kv-cache-dtype --kv-dtype"
    " --max-model-len --max-num-batched-tokens --max-num-seqs --mem-fraction-static"
    " --memory-fraction --n-gpu-layers --output --pipeline-parallel-size --pp --prompt"
    " --quantization --request-rate --revision --speed --split-mode --tensor-parallel-size"
    " --tensor-split --tp --units --users --workspace -ngl",
    "train": "--attention --capacity-factor --checkpointing --compile --cp --ep --etp --explain"
    " --format --fp8 --framework --from --fsdp --gpu --gpu-memory --gpus --grad-accum --grads"
    " --headroom --json --lora-base --lora-modules-to-save --lora-rank --lora-targets --loss"
    " --mfu --micro-batch --network --no-compile --no-reshard-after-forward --offload"
    " --offload-activations --optimizer-in-backward --optimizer-kernel --override --pp --qlora"
    " --recipe --reshard-after-forward --seq --sp --stage --target-seq --tp --units"
    " --virtual-stages --zero",
    "web": "--host --hub --open --port",
}


def test_no_new_cli_options() -> None:
    surface = {}
    for name in sorted(COMMANDS):
        params = _command(name).params
        spellings = (
            s for p in params if isinstance(p, click.Option) for s in (*p.opts, *p.secondary_opts)
        )
        surface[name] = " ".join(sorted(spellings))
    assert surface == CLI_SURFACE
