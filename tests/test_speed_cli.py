"""`gpuplan serve --speed` and `gpuplan.serve_speed` (api/serving_speed.py): the figures against
first principles (step.py's step time derived here without the scheduler), the refusals of a GPU
missing a figure, the JSON shape, the calibration file, and the plan's pinned layout."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest

from gpuplan.api.serving import serve
from gpuplan.api.serving_speed import layout_speed, serve_speed
from gpuplan.catalog.gpus import get_gpu
from gpuplan.cli.main import main
from gpuplan.engine.frozen import replace
from gpuplan.engine.speed.kernels import default_knobs
from gpuplan.engine.speed.schedule import Load
from gpuplan.engine.speed.serving import SpeedSetup, shape_of
from gpuplan.engine.speed.step import stage_step
from gpuplan.errors import GpuplanError

STATS = {"mean", "median", "p99"}


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _bill(model: str = "llama-3.1-8b", gpu: str = "h100", **kw):
    return serve(model, gpu, **kw).bill.setup


def test_one_stream_tpot_is_the_decode_step_time():
    """Concurrency 1, a 16-token prompt: every decode step carries one sequence, so TPOT is
    step.py's one-sequence step (with CUDA graphs) plus the engine's per-step CPU cost, at the
    context the decode passes through (linear in context: its midpoint gives the mean)."""
    s = _bill(context=16 + 129)
    d = layout_speed(s, users=1, prompt=16, output=129)
    knobs = default_knobs()
    sh = shape_of(SpeedSetup(s, Load("concurrency", 16, 129, 1)))
    step = stage_step(sh, knobs, 1, 16 + 65).total + knobs.step_ms * 1e-3
    assert d["tpot_s"]["mean"] == pytest.approx(step, rel=1e-3)
    assert d["breakdown"]["phases_s"]["decode"]["compute"] == 0.0  # one token: memory-bound


def test_steady_state_throughput_is_users_over_tpot():
    """C requests in flight, each emitting a token every TPOT: C ÷ TPOT output tokens/s (short
    prompts: prefill steps are a small share of the run)."""
    d = serve_speed("llama-3.1-8b", "h100", users=32, prompt=8, output=512)
    assert d["output_tokens_per_s"] == pytest.approx(32 / d["tpot_s"]["mean"], rel=0.05)
    assert d["load"]["num_prompts"] == 4 * 32  # vllm bench serve run as the module says


def test_a_rate_above_capacity_queues():
    """Offered load beyond what the GPU serves: requests wait before their prefill (queueing grows
    through the run) and throughput stays at capacity, below the offered rate's."""
    cap = serve_speed("llama-3.1-8b", "h100", users=256, prompt=2000, output=100)
    capacity_rps = cap["output_tokens_per_s"] / 100
    low = serve_speed(
        "llama-3.1-8b", "h100", prompt=2000, output=100, request_rate=capacity_rps / 4
    )
    high = serve_speed(
        "llama-3.1-8b", "h100", prompt=2000, output=100, request_rate=capacity_rps * 4
    )
    assert high["breakdown"]["queueing_s"]["mean"] > 1.0
    assert high["breakdown"]["queueing_s"]["mean"] > 20 * low["breakdown"]["queueing_s"]["mean"]
    assert high["output_tokens_per_s"] < 0.5 * capacity_rps * 4 * 100
    assert high["ttft_s"]["mean"] > high["breakdown"]["queueing_s"]["mean"]


def test_eager_costs_the_launches_cuda_graphs_save():
    """Without CUDA graphs every kernel pays the eager launch cost (kernels.toml [fitted]):
    Llama 3.1 8B launches 32 × (5 + 4) kernels a decode step (shape.py's counts)."""
    kw = {"users": 1, "prompt": 16, "output": 65}
    graphs = serve_speed("llama-3.1-8b", "h100", **kw)
    eager = serve_speed("llama-3.1-8b", "h100", eager=True, **kw)
    k = default_knobs()
    extra = 32 * 9 * (k.kernel_eager_us - k.kernel_graph_us) * 1e-6
    assert eager["tpot_s"]["mean"] - graphs["tpot_s"]["mean"] == pytest.approx(extra, rel=0.02)
    assert eager["cuda_graphs"] is False


def test_json_carries_speed_with_breakdown_and_sources():
    code, out, _ = _cli(
        "serve", "llama-3.1-70b", "--tp", "4", "--users", "64", "--prompt", "2000",
        "--output", "200", "--speed", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    sp = data["speed"]
    assert data["context"] == 2200 and data["users"] == 64  # the bill is the run's
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(sp[key]) == STATS
    assert sp["load"] == {
        "mode": "concurrency", "prompt_tokens": 2000, "output_tokens": 200,
        "concurrency": 64, "request_rate": None, "num_prompts": 256,
    }  # fmt: skip
    phases = sp["breakdown"]["phases_s"]
    assert set(phases) == {"prefill", "decode"}
    assert set(phases["decode"]) == {"compute", "memory", "comm", "overhead", "share"}
    assert phases["decode"]["comm"] > 0  # tp = 4 all-reduces
    assert sum(p["share"] for p in phases.values()) == pytest.approx(1.0)
    assert set(sp["breakdown"]["queueing_s"]) == STATS
    from gpuplan.engine.speed.kernels import _table

    keys = sp["sources"]["kernel_source_keys"]
    assert keys and all(k in _table()["sources"] for k in keys)
    assert len(sp["sources"]["kernel_sources"]) == len(keys)
    assert sp["figures"] == dict(default_knobs().__dict__)
    # the API gives the same dict
    api = serve_speed("llama-3.1-70b", "h100", tp=4, users=64, prompt=2000, output=200)
    assert api == sp


def test_the_table_prints_the_speed():
    code, out, _ = _cli("serve", "llama-3.1-8b", "--speed", "--users", "8", "--request-rate", "2")
    assert code == 0
    for word in ("TTFT", "TPOT", "ITL", "Throughput", "queueing", "Kernel figures", "Poisson 2"):
        assert word in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--gpu", "h20", "--tp", "2"), ("H20", "interconnect")),
        (("--gpu", "t4",), ("T4", "kernel figures")),
        (("--gpu", "mi250x",), ("MI250X", "kernel figures")),
        (("--gpu", "h100", "--gpus", "1", "--context", "1000000"), ("does not fit",)),
    ],
)  # fmt: skip
def test_missing_figure_is_a_one_line_refusal(args, words):
    code, out, err = _cli("serve", "llama-3.1-8b", "--speed", "--json", *args)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert all(w.lower() in err.lower() for w in words), err


def test_no_memory_bandwidth_is_refused_naming_it():
    gpu = replace(get_gpu("h100"), memory_bandwidth_bytes_per_s=None)
    with pytest.raises(GpuplanError, match="memory bandwidth.*cannot time"):
        serve_speed("llama-3.1-8b", gpu)


@pytest.mark.parametrize(
    "args",
    [
        ("--prompt", "100"),
        ("--request-rate", "2"),
        ("--eager",),
        ("--speed", "--request-rate", "0"),
        ("--speed", "--engine", "vllm"),
    ],
)
def test_speed_options_misused_are_refused(args):
    code, out, err = _cli("serve", "llama-3.1-8b", "--json", *args)
    assert code == 2 and not out and err.count("\n") == 1, err


def test_calibration_file_replaces_the_fitted_figures(tmp_path):
    k = default_knobs()
    slower = k.step_ms + 5.0
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"schema": "gpuplan.calibration/1", "knobs": {"step_ms": slower}}))
    kw = {"users": 1, "prompt": 16, "output": 65}
    base = serve_speed("llama-3.1-8b", "h100", **kw)
    cal = serve_speed("llama-3.1-8b", "h100", calibration=str(path), **kw)
    # one decode step per token: TPOT grows by the step cost's change exactly
    assert cal["tpot_s"]["mean"] - base["tpot_s"]["mean"] == pytest.approx(5e-3, rel=1e-6)
    assert cal["figures"]["step_ms"] == slower and str(path) in cal["sources"]["fitted"]
    code, out, _ = _cli(
        "serve", "llama-3.1-8b", "--speed", "--json", "--prompt", "16", "--output", "65",
        "--calibration", str(path),
    )  # fmt: skip
    assert code == 0 and json.loads(out)["speed"] == cal


def test_serve_json_without_speed_loads_no_speed_module():
    code = (
        "import io, sys, contextlib\n"
        "from gpuplan.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['serve', 'llama-3.1-8b', '--json']) == 0\n"
        "bad = [m for m in sys.modules if m.startswith(('gpuplan.engine.speed', 'numpy'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- plan --tp/--pp/--ep: the goal search considers the pinned layout only ---------------------


def test_plan_pins_the_replica_layout():
    code, out, _ = _cli("plan", "llama-3.1-70b", "--users", "16", "--tp", "4", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["pinned"] == {"tp": 4} and data["options"]
    assert all(o["tp"] == 4 for o in data["options"])
    code, out, _ = _cli("plan", "mixtral-8x7b", "--tp", "2", "--pp", "2", "--ep", "--json")
    rows = json.loads(out)["options"]
    assert code == 0 and rows
    assert all((o["tp"], o["pp"], o["expert_parallel"]) == (2, 2, True) for o in rows)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("llama-3.1-70b", "--tp", "3"), "does not divide 64 attention heads"),
        (("llama-3.1-70b", "--ep"), "no experts"),
        (("mixtral-8x7b", "--ep", "--tp", "1"), "must be ≥ 2"),
        (("llama-3.1-70b", "--pp", "3"), "pp=3"),
        (("llama-3.1-8b", "--tp", "16", "--gpu", "h100"), "GPUs of a"),
        (("llama-3.1-8b", "--tp", "4", "--max-gpus", "2"), "--max-gpus 2"),
        (("llama-3.1-405b", "--tp", "1", "--pp", "1", "--gpu", "h100"), "does not fit"),
        (("llama-3.1-8b", "--tp", "2", "--train"), "not with --train"),
        (("llama-3.1-8b", "--tp", "0"), "tp"),
    ],
)
def test_plan_refuses_a_pin_no_layout_takes(args, words):
    code, out, err = _cli("plan", *args)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert words in err


# -- MCP: the serve tool's speed, the plan tool's pins ---------------------------------------


def _mcp(tool: str, args: dict) -> tuple[bool, object]:
    mcp = pytest.importorskip("mcp")
    import asyncio

    from gpuplan.cli.mcp import build_server

    async def call():
        async with mcp.Client(build_server()) as client:
            return await client.call_tool(tool, args)

    result = asyncio.run(call())
    if result.is_error:
        return True, result.content[0].text
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    return False, data.get("result", data)


def test_mcp_serve_tool_returns_the_speed_dict():
    args = {"model": "llama-3.1-70b", "tp": 4, "users": 64, "prompt": 2000, "output": 200}
    failed, data = _mcp("serve", {**args, "speed": True})
    assert not failed, data
    assert data["speed"] == serve_speed(
        "llama-3.1-70b", "h100", **{k: args[k] for k in args if k != "model"}
    )
    failed, data = _mcp("serve", {"model": "llama-3.1-8b"})
    assert not failed and "speed" not in data and data["context"] == 4096


def test_mcp_refuses_speed_on_a_gpu_missing_a_figure_in_one_line():
    failed, text = _mcp("serve", {"model": "llama-3.1-8b", "gpu": "h20", "tp": 2, "speed": True})
    assert failed and "\n" not in text and "interconnect" in text


def test_mcp_plan_tool_takes_the_pins():
    failed, data = _mcp("plan", {"model": "llama-3.1-70b", "users": 8, "tp": 8, "top": 3})
    assert not failed and data["options"] and all(o["tp"] == 8 for o in data["options"])


# -- web: the serve request's speed, within the work budget --------------------------------------


@pytest.fixture(scope="module")
def web():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as c:
        yield c


def test_web_serve_request_asks_for_speed(web):
    body = {"model": "llama-3.1-70b", "tp": 4, "users": 64, "context": 2200, "fixes": False}
    r = web.post("/api/serve", json={**body, "speed": {"prompt": 2000, "output": 200}})
    assert r.status_code == 200, r.text
    want = serve_speed("llama-3.1-70b", "h100", tp=4, users=64, prompt=2000, output=200)
    assert r.json()["speed"] == want
    # defaults: 3/4 of the context as prompt, the rest as output
    r = web.post("/api/serve", json={**body, "speed": {}})
    assert r.json()["speed"]["load"]["prompt_tokens"] == 1650
    assert r.json()["speed"]["load"]["output_tokens"] == 550
    assert "speed" not in web.post("/api/serve", json=body).json()


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"gpu": "h20", "tp": 2, "speed": {}}, 400, "interconnect"),
        ({"gpu": "t4", "speed": {}}, 400, "kernel figures"),
        ({"speed": {"request_rate": 0}}, 422, "request_rate"),
        ({"speed": {"prompt": 10, "nope": 1}}, 422, "nope"),
    ],
)
def test_web_speed_refusals_are_4xx(web, body, status, words):
    r = web.post("/api/serve", json={"model": "llama-3.1-8b", **body})
    assert r.status_code == status and words in r.json()["detail"], r.text


def test_speed_costs_a_search_in_the_work_budget():
    from gpuplan.web.limits import POINT_COST, work_units
    from gpuplan.web.schema import ServeRequest

    plain = ServeRequest.model_validate({"model": "llama-3.1-8b", "gpus": 1, "fixes": False})
    timed = ServeRequest.model_validate({**plain.model_dump(), "speed": {}})
    assert (
        work_units("serve", timed)[0] - work_units("serve", plain)[0] == POINT_COST["serve", True]
    )


def test_plan_speed_names_its_sources(tmp_path):
    """Every speed figure carries its sources: the plan's options too (engine/perf.py)."""
    from gpuplan.engine.speed.kernels import _table

    code, out, _ = _cli("plan", "llama-3.1-8b", "--gpu", "h100", "--json", "--top", "1")
    src = json.loads(out)["options"][0]["speed"]["sources"]
    assert code == 0 and src["kernel_architecture"] == "hopper"
    assert src["kernel_source_keys"] and set(src["kernel_source_keys"]) <= set(_table()["sources"])
    assert src["fitted"] == "kernels.toml [fitted]"
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"schema": "gpuplan.calibration/1", "knobs": {"step_ms": 1.5}}))
    code, out, _ = _cli(
        "plan", "llama-3.1-8b", "--gpu", "h100", "--json", "--top", "1", "--calibration", str(path)
    )
    assert (
        code == 0 and "calibration" in json.loads(out)["options"][0]["speed"]["sources"]["fitted"]
    )


def test_one_rule_for_the_timed_load_on_every_surface():
    """`serve --speed`, the MCP serve tool and the web body resolve an unset prompt / output the
    same way (3/4 of the context and the rest: api/requests.py speed_tokens), and a load longer
    than the context the bill is sized for is refused in one line, never timed against it."""
    from fastapi.testclient import TestClient

    from gpuplan.cli.mcp import SPEED_TOOL, serve_answer
    from gpuplan.web.app import create_app

    code, out, _ = _cli("serve", "llama-3.1-8b", "--context", "2048", "--speed", "--json")
    assert code == 0
    cli = json.loads(out)["speed"]["load"]
    unset = dict.fromkeys(SPEED_TOOL)
    mcp = serve_answer("llama-3.1-8b", gpu="h100", context=2048, users=1, speed=True, **unset)
    with TestClient(create_app()) as client:
        body = {"model": "llama-3.1-8b", "context": 2048, "speed": {}}
        web = client.post("/api/serve", json=body).json()["speed"]["load"]
    expected = (2048 * 3 // 4, 2048 - 2048 * 3 // 4)
    for load in (cli, mcp["speed"]["load"], web):
        assert (load["prompt_tokens"], load["output_tokens"]) == expected
    code, _, err = _cli("serve", "llama-3.1-8b", "--context", "512", "--speed", "--prompt", "1024")
    assert code == 2 and "exceed the context (512)" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(GpuplanError, match="exceed the context"):
        serve_speed("llama-3.1-8b", "h100", context=512, prompt=1024, output=256)
