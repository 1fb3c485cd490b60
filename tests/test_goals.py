"""Plans to a goal (planner/goals.py, api/planning.py): never a plan that misses a target, never
a miss of the cheapest plan a brute-force enumeration finds; the training search tries EP; the
CLI's tables, CSV and JSON; the MCP server answers a tool call through the SDK's client."""

import asyncio
import csv
import io
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.api.common import resolve_gpu, resolve_kv, resolve_weight_format
from gpuplan.catalog import load_architecture
from gpuplan.cli.main import main
from gpuplan.engine.perf import PerfSetup, serving_perf
from gpuplan.engine.serving import ServingSetup, serving_bill
from gpuplan.planner.goals import ServingGoal, meets, plan_to_goal, replica_layouts


def _config(hidden, layers, heads, kv_heads, experts):
    cfg = {
        "model_type": "mixtral" if experts else "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": hidden * 3,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    }
    if experts:
        cfg.update(num_local_experts=experts, num_experts_per_tok=2)
    return cfg


def _brute_force_cheapest(setups, goal):
    """Every replica layout × every replica count, checked directly against the targets."""
    best = math.inf
    for setup in setups:
        price = goal.prices[setup.gpu.id]
        for tp, pp, ep in replica_layouts(setup, goal.max_gpus):
            for r in range(1, goal.max_gpus // (tp * pp) + 1):
                c = math.ceil(goal.users / r)
                try:
                    bill = serving_bill(replace(setup, tp=tp, pp=pp, users=c))
                except Exception:
                    break
                if not bill.fits:
                    continue
                perf = serving_perf(
                    PerfSetup(bill.setup, goal.prompt_tokens, goal.output_tokens, c, r, ep)
                )
                if goal.tpot_s is not None and perf.tpot_s > goal.tpot_s:
                    continue
                if goal.ttft_s is not None and perf.ttft_s > goal.ttft_s:
                    continue
                best = min(best, r * tp * pp * price)
                break  # more replicas of this layout only cost more
    return best


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hidden=st.sampled_from([1024, 2048, 4096]),
    layers=st.sampled_from([8, 16, 32]),
    heads=st.sampled_from([8, 16, 32]),
    kv=st.sampled_from([1, 2, 8]),
    experts=st.sampled_from([0, 0, 8]),
    users=st.integers(1, 300),
    tpot_ms=st.sampled_from([None, 10, 20, 40]),
    ttft_ms=st.sampled_from([None, 100, 1000]),
    gpus=st.sampled_from([("h100", "a100-80gb"), ("l40s",), ("h200", "b200", "l40s")]),
    price=st.floats(0.5, 6.0),
)
def test_planner_meets_targets_and_finds_the_brute_force_cheapest(
    hidden, layers, heads, kv, experts, users, tpot_ms, ttft_ms, gpus, price
):
    kv = min(kv, heads)
    arch = load_architecture(_config(hidden, layers, heads, kv, experts), "random")
    setups = []
    prices = {}
    for i, g in enumerate(gpus):
        fmt = resolve_weight_format(arch, "bf16")
        spec = resolve_gpu(g)
        setups.append(ServingSetup(arch, fmt, resolve_kv(fmt, None), spec, context=2048))
        prices[spec.id] = price * (1 + i)
    goal = ServingGoal(
        users=users,
        prompt_tokens=1536,
        output_tokens=512,
        tpot_s=None if tpot_ms is None else tpot_ms / 1e3,
        ttft_s=None if ttft_ms is None else ttft_ms / 1e3,
        objective="cost",
        prices=prices,
        max_gpus=16,
    )
    found, _ = plan_to_goal(setups, goal)
    for c in found:
        assert meets(c, goal)
        assert c.bill.fits and c.concurrency * c.replicas >= users
        if goal.tpot_s:
            assert c.perf.tpot_s <= goal.tpot_s
        if goal.ttft_s:
            assert c.perf.ttft_s <= goal.ttft_s
    cheapest = _brute_force_cheapest(setups, goal)
    if math.isinf(cheapest):
        assert not found
    else:
        assert found and found[0].usd_per_hour == pytest.approx(cheapest)


def test_deepseek_v3_training_on_512_gpus_tries_expert_parallelism():
    from gpuplan.api import train
    from gpuplan.planner.training_search import candidate_layouts

    setup = train("deepseek-v3", "h100", gpus=512, zero=3).bill.setup
    eps = {lo.ep for lo in candidate_layouts(setup, 512)}
    assert {1, 8, 16, 64} <= eps


def test_training_time_is_tokens_over_throughput():
    from gpuplan.api.training_plans import plan_training_goal

    option = plan_training_goal("llama-3.1-8b", tokens="100B", days=30, gpus=["h100"])[0]
    t = option.time
    assert t.days <= 30
    per_step = option.plan.bill.setup.tokens_per_step
    assert t.seconds == pytest.approx(math.ceil(100e9 / per_step) * option.plan.bill.time.step_s)
    assert t.gpu_hours == pytest.approx(t.gpus * t.seconds / 3600)
    assert t.cost_usd == pytest.approx(t.gpu_hours * 3.00)  # the price table's H100


def test_plan_cli_goal_json_and_price_override(capsys):
    args = [
        "plan",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--users",
        "64",
        "--tpot",
        "30ms",
        "--ttft",
        "1s",
        "--price",
        "H100=2",
        "--json",
    ]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "gpuplan.plan/1" and data["tpot_s"] == pytest.approx(0.030)
    top = data["options"][0]
    assert top["speed"]["tpot_s"] <= 0.030 and top["speed"]["ttft_s"] <= 1.0
    assert top["usd_per_hour"] == pytest.approx(2 * top["gpus"])
    tps = top["speed"]["tokens_per_s"]
    assert top["usd_per_million_tokens"] == pytest.approx(top["usd_per_hour"] / (tps * 3600) * 1e6)


def test_plan_matrix_table_csv_and_json(capsys):
    assert main(["plan", "llama-3.1-8b", "--matrix"]) == 0
    assert "largest context that fits" in capsys.readouterr().out
    assert main(["plan", "llama-3.1-8b", "--matrix", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and {"context", "users", "per_gpu_total_bytes", "fits"} <= set(rows[0])
    assert main(["plan", "llama-3.1-8b", "--train", "--matrix", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cells = {(c["gpus"], c["zero"]): c["per_gpu_total_bytes"] for c in data["cells"]}
    assert cells[(8, 3)] < cells[(8, 2)] < cells[(8, 1)] < cells[(8, 0)]


def test_three_answers_for_a_model_that_does_not_fit():
    from gpuplan.api.answers import three_answers

    answers = three_answers("llama-3.1-70b", "h100", gpus=1)
    kinds = [a["answer"] for a in answers]
    assert kinds == ["fewer bytes", "bigger GPU", "more GPUs"]


def test_mcp_server_answers_a_tool_call_through_the_sdk_client():
    mcp = pytest.importorskip("mcp")
    from gpuplan.cli.mcp import build_server

    async def call():
        async with mcp.Client(build_server()) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("serve", {"model": "llama-3.1-8b"})
            return tools, result

    tools, result = asyncio.run(call())
    assert {"serve", "train", "plan", "plan_train", "check"} <= tools
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    data = data.get("result", data)
    assert data["schema"] == "gpuplan.serve/1" and data["fits"] is True


def test_mcp_inspect_tool_answers_the_documented_schema():
    mcp = pytest.importorskip("mcp")
    from gpuplan.cli.mcp import build_server

    async def call():
        async with mcp.Client(build_server()) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            result = await client.call_tool("inspect", {"model": "llama-3.1-8b"})
            return tools, result

    tools, result = asyncio.run(call())
    assert "inspect" in tools
    assert "model" in tools["inspect"].input_schema["properties"]
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    data = data.get("result", data)
    assert data["schema"] == "gpuplan.inspect/1"
    # Llama-3.1-8B's config.json: 32 layers, 8 KV heads of 128, a 131,072-token window
    assert data["family"]["layers"] == 32 and data["family"]["kv_heads"] == 8
    assert data["context_limit"] == 131072
    # bf16 KV: 2 (K and V) × 32 layers × 8 heads × 128 × 2 bytes per token
    assert data["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    doc = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    section = doc[doc.index("## `gpuplan.inspect/1`") : doc.index("## `gpuplan.train/1`")]
    for key in data:
        assert f"`{key}`" in section, f"{key} missing from docs/json.md"
