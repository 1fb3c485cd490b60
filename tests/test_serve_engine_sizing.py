"""`serve MODEL --engine NAME` as a new user runs it (issue 20's bugs): no GPU count means
--gpus auto (the fewest GPUs on which the engine starts, as --help says), a launch that cannot
start exits 1 with its ways out, and a KV range never goes below zero."""

from __future__ import annotations

import json

import pytest

from gpuplan.api.engine_sizing import layouts
from gpuplan.api.engines import engine_serve
from gpuplan.cli.main import main

MODEL = "llama-3.1-70b"


def _json(capsys, args: list[str]) -> tuple[int, dict]:
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_layouts_walk_tp_within_a_node_then_pipeline_stages():
    assert layouts(8)[:5] == [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2)]
    assert layouts(4)[:3] == [(1, 1), (2, 1), (4, 1)]


def test_no_gpu_count_is_the_fewest_gpus_the_engine_starts_on(capsys):
    code, data = _json(capsys, ["serve", MODEL, "--engine", "vllm"])
    assert code == 0 and data["fits"]
    chosen = data["tp"] * data["pp"]
    # every smaller tensor-parallel layout fails to start under the engine's own rules
    for tp in (n for n in (1, 2, 4, 8) if n < chosen):
        plan = engine_serve(MODEL, "h100", engine="vllm", args={"tensor_parallel_size": tp})
        assert not plan.fits, tp
    assert any("--gpus auto" in n for n in data["engine"]["notes"])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_launch_that_cannot_start_exits_1_with_ways_out(capsys, engine):
    """Before: exit 0, negative KV, 'will not start' and nothing to do about it."""
    code, data = _json(capsys, ["serve", MODEL, "--engine", engine, "--gpus", "1"])
    assert code == 1 and not data["fits"] and data["engine"]["failure"]
    kinds = {f["answer"] for f in data["fixes"]}
    assert "more GPUs" in kinds
    for fix in data["fixes"]:
        assert fix["kv_capacity_tokens"] > 0
    assert main(["serve", MODEL, "--engine", engine, "--gpus", "1"]) == 1
    out = capsys.readouterr().out
    assert "will not start" in out and "Ways out" in out and "--tp " in out


def test_sglang_token_range_never_goes_below_zero(capsys):
    """Before: 'GPU KV cache size: 0 tokens (range 0–-215,277 …)'."""
    _, data = _json(capsys, ["serve", MODEL, "--engine", "sglang", "--gpus", "1"])
    r = data["engine"]["ranges"]["kv_capacity_tokens"]
    assert 0 <= r["low"] <= r["high"]
    main(["serve", MODEL, "--engine", "sglang", "--gpus", "1"])
    assert "–-" not in capsys.readouterr().out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])  # TRT-LLM takes no --quantization
def test_a_quantisation_without_its_config_says_what_was_assumed(capsys, engine):
    """Issue 20 item 3: a method named for a 16-bit config (no quantization_config at hand) is
    sized as the method's standard layout, and the engine's answer says so."""
    _, data = _json(capsys, ["serve", "llama-3.1-8b", "--engine", engine, "--quantization", "awq"])
    notes = " ".join(data["engine"]["notes"])
    assert "without a quantization_config" in notes and "group 128" in notes


def test_a_launch_line_that_cannot_start_exits_1_with_ways_out(capsys):
    """`--from` pins the launch; when the engine would not start, the answer still comes with
    the changed launches that do (each the engine's bill) and exit 1."""
    line = "vllm serve meta-llama/Llama-3.1-70B"
    code, data = _json(capsys, ["serve", "--from", line])
    assert code == 1 and not data["fits"]
    assert any(f["answer"] == "more GPUs" for f in data["fixes"])
    code, data = _json(capsys, ["serve", "--from", line + " --tensor-parallel-size 4"])
    assert code == 0 and data["fits"] and "fixes" not in data
