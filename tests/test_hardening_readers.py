"""Issue 26, one regression test per numbered finding: the readers added since the last hardening
round (framework configs, GGUF, the HF cache, MCP, the web body) as safe as the old ones.

Each case runs the CLI in-process and expects exit 2 with one clean line (never exit 70, never a
traceback), or the right answer. Bombs are refused by the code's own limits (safe_read, the
header bounds), never by a timer in the test.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from fuzz_support import (
    LONG_INT,
    assert_refused,
    deep_json,
    deep_toml,
    deep_yaml,
    gguf_bytes,
    llama_gguf_meta,
    run_cli,
    yaml_laughs,
)
from gpuplan.errors import GpuplanError

TUNE = (
    "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n"
    "tokenizer:\n  max_seq_len: 2048\n"
)
MEGATRON = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 1024"


def _refused(argv: list[str], needle: str = "") -> str:
    return assert_refused(argv, *run_cli(argv), needle)


def _write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


# --- 1. memory and time bombs in readers ---------------------------------------------------


def test_yaml_laughs_in_torchtune_and_vllm_config_are_refused(tmp_path: Path) -> None:
    tune = _write(tmp_path, "t.yaml", TUNE + yaml_laughs())
    _refused(["train", "--from", tune], "aliases")
    serve_cfg = _write(tmp_path, "serve.yaml", yaml_laughs())
    _refused(["serve", "--from", f"vllm serve llama-3.2-1b --config {serve_cfg}"], "aliases")


def test_megatron_layer_count_goes_through_the_bounds_table() -> None:
    line = MEGATRON.replace("--num-layers 2", "--num-layers 1000000000000")
    _refused(["train", "--from", line, "--gpus", "8"], "--num-layers must be a whole number in")


def test_train_from_a_file_over_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    from gpuplan.safe_read import MAX_TEXT_BYTES

    big = tmp_path / "big.toml"
    with big.open("wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)  # sparse: the size is what is checked
    _refused(["train", "--from", str(big), "llama-3.2-1b"], "larger than")


def test_a_million_tensor_safetensors_header_is_refused_before_parsing(tmp_path: Path) -> None:
    from gpuplan.catalog.sources.bounds import MAX_FILE_TENSORS

    entry = b'"t%d":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},'
    body = b"{" + b"".join(entry % i for i in range(MAX_FILE_TENSORS + 10)) + b'"z":{}}'
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body)
    _refused(["inspect", str(folder)], f"more than {MAX_FILE_TENSORS:,} tensors")


def test_check_on_millions_of_empty_lines_is_bounded(tmp_path: Path) -> None:
    from gpuplan.catalog.engine_logs import _lines

    blank = "\n" * 5_000_000
    assert _lines("vLLM\n" + blank + "x") == ["vLLM", "x"]
    log = _write(tmp_path, "empty.log", blank)
    _refused(["check", log], "empty")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_fifos_are_refused_without_opening_them(tmp_path: Path) -> None:
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)  # opening it for a blocking read would hang this test forever
    _refused(["check", str(fifo)], "FIFO")
    _refused(["serve", "--from", f"vllm serve llama-3.2-1b --config {fifo}"], "FIFO")
    _refused(["train", "--from", str(fifo), "llama-3.2-1b"], "FIFO")
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    _refused(["inspect", str(folder)])


# --- 2. files outside what was named ---------------------------------------------------------


def test_a_revision_cannot_leave_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "hub"
    (root / "models--acme--x" / "refs").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for bad in ("../../../../etc/hostname", "/etc/hostname", "a/../b", "main\n", ".hidden"):
        _refused(["inspect", "acme/x", "--revision", bad], "neither a commit hash")


@pytest.mark.parametrize(
    "content", [b"../../../../../tmp", b"\x00\xff\xfe binary", b"a" * 41, b"f" * 39 + b"/"]
)
def test_a_damaged_cached_ref_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    root = tmp_path / "hub"
    refs = root / "models--acme--x" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_bytes(content)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _refused(["inspect", "acme/x"], "not a commit hash")


def test_tensor_names_reach_the_terminal_escaped(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "intermediate_size": 64,
        "vocab_size": 100,
    }
    (folder / "config.json").write_text(json.dumps(config))
    header = {
        "\x1b[31mred[bold]x[/bold]": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]},
        "\u202eevil[link=file:///etc/passwd]y": {
            "dtype": "F16",
            "shape": [1],
            "data_offsets": [2, 4],
        },
    }
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    code, out, err = run_cli(["inspect", str(folder)])
    assert code == 0, err
    assert "\x1b" not in out and "\u202e" not in out
    assert "red[bold]x[/bold]" in out and "[link=file:///etc/passwd]y" in out  # markup as text


# --- 3. crashes (were exit 70) ---------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2.5])
def test_gguf_layer_counts_that_are_not_whole_numbers(tmp_path: Path, value: float) -> None:
    meta = llama_gguf_meta(block_count=("f32", value))
    path = _write(tmp_path, "m.gguf", gguf_bytes(meta, [("token_embd.weight", [64, 256], 0)]))
    _refused(["serve", path, "--gpus", "1"], "whole number")


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("ds.json", '{"train_micro_batch_size_per_gpu": Infinity}', "not a finite number"),
        ("ds.json", '{"train_micro_batch_size_per_gpu": ' + LONG_INT + "}", "digits"),
        ("tt.toml", "[training]\nlocal_batch_size = inf\n", "not a finite number"),
        ("tt.toml", "[training]\nlocal_batch_size = " + LONG_INT + "\n", "digits"),
        ("t.yaml", TUNE + "batch_size: .inf\n", "not a finite number"),
        ("t.yaml", TUNE + "batch_size: " + LONG_INT + "\n", "digits"),
        ("ds.json", '{"zero_optimization": ' + deep_json() + "}", "nested"),
        ("tt.toml", deep_toml(), "nested"),
        ("t.yaml", deep_yaml(), "nested"),
        ("ds.json", '{"zero_optimization": [2]}', "zero_optimization must be a mapping"),
        ("ds.json", '{"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}', "mapping"),
        ("args.json", '{"fsdp": ["full_shard", 3]}', "fsdp must be a list of names"),
    ],
)
def test_config_files_that_crashed_now_refuse_in_one_line(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    path = _write(tmp_path, name, text)
    _refused(["train", "--from", path, "llama-3.2-1b", "--gpus", "8"], needle)


def test_config_json_with_long_integers_inf_and_deep_nesting(tmp_path: Path) -> None:
    for i, text in enumerate(
        [
            '{"model_type": "llama", "hidden_size": ' + LONG_INT + "}",
            '{"model_type": "llama", "rope_scaling": ' + deep_json(5000) + "}",
            '{"model_type": "llama", "rope_theta": Infinity}',
        ]
    ):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "config.json").write_text(text)
        _refused(["serve", str(folder)])


def test_torchtune_lora_modules_as_an_int_and_an_override_alias(tmp_path: Path) -> None:
    bad = TUNE.replace("lora_llama3_2_1b\n", "lora_llama3_2_1b\n  lora_attn_modules: 3\n")
    _refused(["train", "--from", _write(tmp_path, "t.yaml", bad)], "lora_attn_modules")
    tune = _write(tmp_path, "ok.yaml", TUNE)
    _refused(["train", "--from", tune, "--override", "batch_size=*a"], "not valid YAML")


def test_an_unresolvable_hf_home_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", "~no-such-user-gpuplan/x")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _refused(["serve", "acme/not-cached"], "HF_HOME")


# --- 4. silently wrong -> refused or right -----------------------------------------------------


def test_megatron_top_k_above_the_expert_count_is_refused() -> None:
    line = f"{MEGATRON} --num-experts 8 --moe-router-topk 100"
    _refused(["train", "--from", line, "--gpus", "8"], "exceeds --num-experts 8")


def test_megatron_hidden_size_1e30_is_refused(tmp_path: Path) -> None:
    yaml_text = (
        "MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 1.0e+30\n"
        "  --num-attention-heads: 4\n  --seq-length: 1024\n"
    )
    _refused(["train", "--from", _write(tmp_path, "model_config.yaml", yaml_text), "--gpus", "8"])


def test_gguf_tensor_dimensions_are_bounded(tmp_path: Path) -> None:
    from gpuplan.catalog.sources.bounds import MAX_TENSOR_ELEMENTS

    dims = [2**32] * 4  # each dimension within MAX_DIM (2^34), their product 2^128 is not
    blob = gguf_bytes(llama_gguf_meta(), [("token_embd.weight", dims, 0)])
    err = _refused(["inspect", _write(tmp_path, "m.gguf", blob)], "elements")
    assert f"{MAX_TENSOR_ELEMENTS:.3g}" in err


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"bf16": "yes"}, "bf16 must be an object"),
        ({"fp16": [1]}, "fp16 must be an object"),
        (
            {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": ["cpu"]}}},
            "device must be none, cpu or nvme",
        ),
    ],
)
def test_deepspeed_values_of_the_wrong_type_are_refused(doc: dict, needle: str) -> None:
    from gpuplan.engine.frameworks import deepspeed

    with pytest.raises(GpuplanError, match=needle):
        deepspeed.read(json.dumps(doc))


def test_deepspeed_bf16_as_deepspeed_reads_it() -> None:
    from gpuplan.engine.frameworks import deepspeed

    assert deepspeed.read('{"bf16": {"enabled": true}}').kwargs["recipe"] == "adamw-bf16"
    assert deepspeed.read('{"bf16": {"enabled": false}}').kwargs["recipe"] == "adamw-fp32"
    cpu = '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}'
    assert deepspeed.read(cpu).kwargs["offload"] == "optimizer"


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        (["--headroom", "1.5"], "headroom must be in (0, 1]"),
        (["--max-gpus", "0"], "max_gpus"),
        (["--prompt", "0"], "--prompt: prompt must be a token count from 1"),
        (["--output", "0"], "--output: output must be a token count from 1"),
    ],
)
def test_plan_refuses_what_it_used_to_ignore(flag: list[str], needle: str) -> None:
    _refused(["plan", "llama-3.2-1b", "--json", *flag], needle)


def test_plan_headroom_as_serve_reads_it() -> None:
    argv = ["serve", "llama-3.2-1b", "--headroom", "1.5"]
    serve_err = assert_refused(argv, *run_cli(argv), "headroom")
    plan_err = _refused(["plan", "llama-3.2-1b", "--headroom", "1.5"], "headroom")
    assert "(0, 1]" in serve_err and "(0, 1]" in plan_err


def test_web_api_strict_counts_and_training_dtype() -> None:
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app

    with TestClient(create_app(workers=1), raise_server_exceptions=False) as client:
        serve = {"model": "llama-3.2-1b", "gpus": 1, "fixes": False}
        assert client.post("/api/serve", json={**serve, "gpu_memory": True}).status_code == 422
        assert client.post("/api/serve", json={**serve, "gpus": True}).status_code == 422
        r = client.post("/api/train", json={**serve, "dtype": "fp9"})
        assert r.status_code == 400 and "unknown precision" in r.json()["detail"]
        r = client.post("/api/train", json={**serve, "dtype": "bf16"})
        assert r.status_code == 200 and "dtype" in r.json()["view"]["ignored_controls"]
