"""Issue 23: one consistent CLI. Each test names the finding it holds; the expected values come
from the models' config.json arithmetic, vLLM's rules or the documents themselves, never from
gpuplan's own output."""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from pathlib import Path

import pytest

from gpuplan.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def _gb(text: str) -> float:
    return float(text.replace(",", ""))


# -- finding 1: the weights line's arithmetic is the sum done ---------------------------------


def _shown_sum_matches(explain: str) -> None:
    """The terms the line shows add up to the figure it shows (each rounded to 0.01 GB)."""
    left, result = explain.rsplit("=", 1)
    total = _gb(re.search(r"([\d,.]+) GB", result).group(1))
    m = re.match(r"\s*([\d.]+) ([BM]) × ([\d.]+) bytes ÷ \(tp (\d+) × pp (\d+)\)", left)
    if m:  # the lesson's even split: params × bytes ÷ (tp × pp)
        params = float(m[1]) * (1e9 if m[2] == "B" else 1e6)
        bpp, tp, pp = float(m[3]), int(m[4]), int(m[5])
        assert params * bpp / (tp * pp) / 1e9 == pytest.approx(total, abs=0.011), explain
        return
    terms = [_gb(t) for t in re.findall(r"([\d,.]+) GB", left)]
    assert len(terms) >= 2, explain
    assert sum(terms) == pytest.approx(total, abs=0.006 * len(terms)), explain


@pytest.mark.parametrize(
    ("model", "tp", "pp"),
    [
        ("llama-3.1-8b", 1, 3),
        ("llama-3.1-8b", 8, 1),
        ("llama-3.1-70b", 4, 2),
        ("deepseek-v3", 8, 2),
        ("deepseek-v3", 8, 1),
        ("qwen2.5-0.5b", 2, 1),
    ],
)
def test_weights_explain_shows_the_sum_done(capsys, model, tp, pp):
    data = as_json(capsys, "serve", model, "--tp", str(tp), "--pp", str(pp), "--explain")
    weights = next(i for i in data["per_gpu"]["items"] if i["key"] == "weights")
    _shown_sum_matches(weights["explain"])
    assert weights["explain"].endswith(f"{weights['bytes'] / 1e9:,.2f} GB")


def test_uneven_stages_are_counted_from_the_config(capsys):
    """Llama-3.1-8B on pp=3: 32 layers split 11/11/10; stage 0 holds 11 layers and the
    embedding (config.json: hidden 4096, 8 KV heads × 128, intermediate 14336, vocab 128256)."""
    h, kv, inter, vocab = 4096, 8 * 128, 14336, 128256
    layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h  # q, o, k, v, MLP, two norms
    expected = 2 * (11 * layer + vocab * h)
    data = as_json(capsys, "serve", "llama-3.1-8b", "--tp", "1", "--pp", "3")
    weights = next(i for i in data["per_gpu"]["items"] if i["key"] == "weights")
    assert weights["bytes"] == expected
    assert "11 layers" in weights["explain"] and "embedding" in weights["explain"]


# -- finding 2: bare `gpuplan` ------------------------------------------------------------------


def test_bare_gpuplan_prints_the_help_readably(capsys):
    code, out, err = run(capsys)
    assert code == 0 and err == ""
    assert out.startswith("Usage: gpuplan") and "Commands:" in out
    assert out.count("\n") > 10 and "\\n" not in out and "…" not in out


# -- finding 4: the KV cache follows --kv-dtype only --------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ("--dtype", "fp8"),
        ("--quantization", "fp8"),
        ("--dtype", "int8"),
        ("--dtype", "int4"),
        ("--dtype", "fp8-tensor"),
    ],
)
def test_weight_format_never_changes_the_kv_cache(capsys, flags):
    """vLLM's --kv-cache-dtype "auto" is the model dtype whatever --quantization says: a 16-bit
    KV cache, 2 bytes per element (llama-3.1-8b: 2 × 32 layers × 8 × 128 × 2 = 131,072 B)."""
    serve = as_json(capsys, "serve", "llama-3.1-8b", *flags)
    assert serve["kv_dtype"] == "bf16" and serve["kv_bytes_per_token"] == 131_072
    if flags[1] == "fp8":  # vLLM's own --quantization fp8
        engine = as_json(capsys, "serve", "llama-3.1-8b", "--engine", "vllm", *flags)
        assert engine["engine"]["settings"]["kv_cache_dtype"] == "bf16"
    plan = as_json(capsys, "plan", "llama-3.1-8b", "--gpu", "h100", "--dtype", flags[1])
    assert {row["kv_dtype"] for row in plan["options"]} == {"bf16"}
    asked = as_json(capsys, "serve", "llama-3.1-8b", *flags, "--kv-dtype", "fp8")
    assert asked["kv_dtype"] == "fp8" and asked["kv_bytes_per_token"] == 65_536


def test_the_library_web_and_mcp_share_the_kv_rule():
    import gpuplan

    plan = gpuplan.serve("llama-3.1-8b", "h100", dtype="fp8")  # what web/compute.py and MCP call
    assert plan.to_dict()["kv_dtype"] == "bf16"


def test_the_kv_rule_is_stated_in_help(capsys):
    code, out, _ = run(capsys, "serve", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "never the KV cache" in text and "--kv-dtype" in text


# -- finding 5: an unknown name points to a command that exists --------------------------------


def test_unknown_precision_points_to_a_command_that_exists(capsys):
    from gpuplan.cli.group import COMMANDS

    code, _, err = run(capsys, "serve", "llama-3.1-8b", "--dtype", "fp9")
    assert code == 2
    pointed = re.search(r"see `gpuplan (\w+)`", err).group(1)
    assert pointed in COMMANDS
    code, out, _ = run(capsys, pointed)
    assert code == 0 and "fp8" in out
    rows = as_json(capsys, "precisions")["precisions"]
    fp8 = next(r for r in rows if r["id"] == "fp8")
    assert fp8["bytes_per_param"] == 1.0 and fp8["kv"]


@pytest.mark.parametrize("kind", ["model", "gpu", "precision", "recipe", "framework"])
def test_every_did_you_mean_points_to_a_command(kind):
    from gpuplan.cli.group import COMMANDS
    from gpuplan.lookup import did_you_mean

    message = str(did_you_mean(kind, "zzz", ["aaa"]))
    assert re.search(r"see `gpuplan (\w+)`", message).group(1) in COMMANDS


# -- finding 6: one option grammar ---------------------------------------------------------------


def test_plan_reads_token_counts_as_serve_does(capsys):
    """vLLM's human_readable_int: lower-case suffixes decimal (32k = 32,000), upper-case binary
    (16M = 16 × 2^20)."""
    assert as_json(capsys, "serve", "llama-3.1-8b", "--context", "32k")["context"] == 32_000
    assert (
        as_json(capsys, "plan", "llama-3.1-8b", "--gpu", "h100", "--context", "32k")["context"]
        == 32_000
    )
    train = as_json(
        capsys, "plan", "llama-3.1-8b", "--train", "--top", "1", "--global-batch-tokens", "16M"
    )
    assert train["global_batch_tokens"] == 16 * 2**20
    assert (
        as_json(capsys, "plan", "llama-3.1-8b", "--train", "--top", "1", "--seq", "8K")["seq"]
        == 8192
    )


@pytest.mark.parametrize("flag", ["--tpot", "--ttft"])
def test_a_time_needs_its_unit(capsys, flag):
    code, _, err = run(capsys, "plan", "llama-3.1-8b", flag, "33")
    assert code == 2 and "needs a unit" in err and "33ms" in err
    code, out, _ = run(capsys, "plan", "llama-3.1-8b", "--gpu", "h100", flag, "330ms", "--json")
    assert code == 0


@pytest.mark.parametrize("command", ["serve", "plan"])
def test_an_out_of_range_count_is_echoed_as_typed(capsys, command):
    code, _, err = run(capsys, command, "llama-3.1-8b", "--context", "10T")
    assert code == 2 and "'10T'" in err and "10995116277760" not in err


# -- finding 7: expert parallelism has its own column and field ---------------------------------


def test_plan_train_shows_expert_parallel(capsys):
    data = as_json(capsys, "plan", "mixtral-8x7b", "--train", "--gpus", "16", "--top", "20")
    rows = data["options"]
    for r in rows:
        assert r["ep"] == (
            int(re.search(r"ep=(\d+)", r["layout"])[1]) if "ep=" in r["layout"] else 1
        )
        assert r["dp"] * r["cp"] * r["tp"] * r["pp"] == r["gpus"]
    assert {r["ep"] for r in rows} != {1}
    code, out, _ = run(capsys, "plan", "mixtral-8x7b", "--train", "--gpus", "16", "--top", "20")
    header = next(line for line in out.splitlines() if "layout" in line)
    assert " ep " in header
    shown = [line.split()[1:] for line in out.splitlines() if re.match(r"\s*\d+\s+dp=", line)]
    keys = {(r["dp"], r["tp"], r["pp"], r["ep"], r["zero"], r["micro_batch"]) for r in rows}
    # each layout reads apart: the columns up to micro-batch × accumulation
    assert len({tuple(s[: s.index("×") + 2]) for s in shown}) >= len(keys)


# -- finding 8: the ranking says what it ranks by -----------------------------------------------


@pytest.mark.parametrize(
    ("objective", "field"), [("cost", "usd_per_hour"), ("token-cost", "usd_per_million_tokens")]
)
def test_cost_objectives_rank_by_their_figure(capsys, objective, field):
    data = as_json(capsys, "plan", "llama-3.1-8b", "--objective", objective, "--top", "12")
    figures = [float("inf") if r[field] is None else r[field] for r in data["options"]]
    assert figures == sorted(figures) and figures[0] < float("inf")
    code, out, _ = run(capsys, "plan", "llama-3.1-8b", "--objective", objective)
    assert "$" in out.splitlines()[0] and f"ranked by {objective} (" in out.splitlines()[0]


def test_matrix_csv_says_which_layout(capsys):
    code, out, _ = run(capsys, "plan", "llama-3.1-8b", "--matrix", "--csv", "--dtype", "fp8")
    header, first = out.splitlines()[:2]
    row = dict(zip(header.split(","), first.split(","), strict=True))
    assert row["model"] == "llama-3.1-8b" and row["dtype"] == "fp8" and row["tp"] == "1"
    assert {"gpu", "gpus", "pp", "kv_dtype"} <= set(row)


# -- finding 9: help and README tell the truth --------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "train"])
def test_help_names_every_model_source(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    text = " ".join(out.split())
    for source in (".safetensors", ".gguf", "Hugging Face cache", "Hub", "config.json"):
        assert source in text, source


def test_readme_command_table_lists_every_command():
    from gpuplan.cli.group import COMMANDS

    readme = (ROOT / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `gpuplan ")]
    for name in COMMANDS:
        assert any(f"`gpuplan {name}" in line for line in table), name


def test_install_hint_works_from_a_clone(monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    assert '"gpuplan[mcp]"' not in readme and ".[mcp]" in readme
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # the SDK not installed
    code, _, err = run(capsys, "mcp")
    assert code == 2 and "'.[mcp]'" in err and "gpuplan[mcp]" not in err


def test_readme_on_snapshot_hash_matches_inspect(tmp_path, monkeypatch, capsys):
    from model_files import fake_cache, write_checkpoint

    write_checkpoint(tmp_path / "src")
    commit = "ab" * 20
    fake_cache(tmp_path / "hub", "acme/tiny", tmp_path / "src", commit=commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code, out, _ = run(capsys, "inspect", "acme/tiny")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "never the snapshot hash" not in readme
    assert (commit in out) == ("`gpuplan inspect` prints the snapshot's commit" in readme)


def test_the_lesson_is_introduced_before_it_is_named():
    readme = (ROOT / "README.md").read_text()
    first = readme.index("lesson")
    assert "the lesson" in readme[: first + 200]
    intro = readme[: readme.index("\n\n", first)]
    assert "lesson.json" in intro or "GPU memory" in intro  # what the lesson is, where it lives


def test_a_gguf_is_labelled_by_its_stored_types(tmp_path, capsys):
    from model_files import write_gguf

    types = {"attn": "Q8_0", "ffn": "Q8_0", "embd": "Q8_0", "out": "Q8_0"}
    write_gguf(tmp_path / "q8.gguf", types=types)
    data = as_json(capsys, "serve", str(tmp_path / "q8.gguf"))
    assert "Q8_0" in data["weights_format"] and "fp16" not in data["weights_format"]
    code, out, _ = run(capsys, "serve", str(tmp_path / "q8.gguf"))
    # 4 layers × 2 KV heads × 64 × 2 (K and V) × 2 bytes = 2,048 bytes per token
    assert data["kv_bytes_per_token"] == 2048
    assert "0.00 MB" not in out and "2.05 kB of KV cache per token" in out


def test_a_silent_hub_is_said_on_stderr(tmp_path, monkeypatch, capsys):
    from gpuplan.catalog.sources import hub

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts, never answers
    stop = threading.Event()
    monkeypatch.setattr(hub, "DEADLINE_S", 1.0)
    monkeypatch.setattr(hub, "READ_TIMEOUT_S", 1.0)
    monkeypatch.setattr(hub, "NOTICE_AFTER_S", 0.05)
    monkeypatch.setattr(hub, "_noticed", [])
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        code, _, err = run(capsys, "serve", "acme/silent-7b")
    finally:
        stop.set()
        listener.close()
    lines = err.splitlines()
    assert code == 2 and lines[-1].startswith("gpuplan: error:")
    assert any("waiting for the Hugging Face Hub" in line for line in lines[:-1]), err


# -- finding 10: the answers load only what they need -------------------------------------------


@pytest.mark.parametrize(
    ("args", "absent"),
    [
        (["serve", "llama-3.1-8b", "--json"], ("click", "rich", "torch", "gpuplan.api.training")),
        (["train", "llama-3.1-8b", "--json"], ("click", "rich", "torch")),
        (["plan", "llama-3.1-8b", "--json"], ("click", "rich", "torch")),
        (["precisions", "--json"], ("click", "rich", "torch")),
        (["serve", "llama-3.1-8b"], ("click", "torch", "gpuplan.api.training")),
        (["plan", "llama-3.1-8b"], ("click", "torch", "gpuplan.api.training")),
    ],
)
def test_answers_do_not_import_what_they_do_not_use(args, absent):
    import subprocess

    code = (
        "import sys; from gpuplan.cli.main import main; rc = main(sys.argv[1:]);"
        " sys.stdout.flush(); print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr);"
        " sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    loaded = set(done.stderr.split("MODULES", 1)[1].split())
    for name in absent:
        assert not any(m == name or m.startswith(name + ".") for m in loaded), name
