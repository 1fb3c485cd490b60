"""The --json output carries the documented fields (docs/json.md), with integer bytes."""

import json
import re
from pathlib import Path

from gpuplan.cli.main import main

REQUIRED = [
    "params_total",
    "params_active",
    "weights_bytes",
    "kv_bytes_per_token",
    "per_gpu",
    "per_gpu_total_bytes",
    "budget_bytes",
    "fits",
    "gpus",
    "tp",
    "pp",
    "kv_capacity_tokens",
    "max_concurrent_sequences",
]


def serve_json(capsys, *args):
    assert main(["serve", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_serve_json_has_the_documented_fields(capsys):
    data = serve_json(capsys, "llama-3.1-70b", "--gpu", "h100", "--users", "4")
    for key in REQUIRED:
        assert key in data, key
    assert data["schema"] == "gpuplan.serve/1"
    for item in data["per_gpu"]["items"]:
        assert {"name", "bytes", "formula", "explain", "category", "key"} <= set(item)
        assert isinstance(item["bytes"], int)
    assert sum(i["bytes"] for i in data["per_gpu"]["items"]) == data["per_gpu_total_bytes"]
    assert data["gpus"] == data["tp"] * data["pp"]


def test_every_top_level_field_is_documented(capsys):
    data = serve_json(capsys, "qwen3-30b-a3b")
    doc = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    documented = set(re.findall(r"`([a-z_]+)`", doc))
    for key in data:
        assert key in documented, f"{key} missing from docs/json.md"


def test_gib_units_change_only_the_explanations(capsys):
    gb = serve_json(capsys, "llama-3.1-8b")
    gib = serve_json(capsys, "llama-3.1-8b", "--units", "GiB")
    assert gb["per_gpu_total_bytes"] == gib["per_gpu_total_bytes"]
    assert gib["per_gpu"]["items"][0]["explain"].endswith("GiB")
    assert gb["per_gpu"]["items"][0]["explain"].endswith(" GB")


def test_human_output_shows_bar_and_explanations(capsys):
    assert main(["serve", "llama-3.1-8b", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "8.03 B × 2 bytes = 16.06 GB" in out
    assert "fits" in out and "KV capacity" in out


def test_python_api_repr_and_html():
    import gpuplan

    plan = gpuplan.serve("llama-3.1-8b", gpu="h100")
    assert "ServingPlan(llama-3.1-8b" in repr(plan)
    assert "<table>" in plan._repr_html_()
