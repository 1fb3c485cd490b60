"""Launch lines as users write them: vllm serve, python -m sglang.launch_server, trtllm-serve."""

from __future__ import annotations

import json

import pytest

from gpuplan.api import serve_launch
from gpuplan.catalog.launch import parse_launch
from gpuplan.cli.main import main
from gpuplan.errors import GpuplanError

VLLM_LINE = (
    "CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4"
    " --max-model-len 32768 --gpu-memory-utilization 0.92 --served-model-name llama"
    " --port 8000 --disable-log-requests --trust-remote-code --max-num-seqs=256"
)


def test_vllm_line_with_unknown_flags():
    p = parse_launch(VLLM_LINE)
    assert p.engine == "vllm" and p.model == "meta-llama/Llama-3.1-70B"
    assert p.args == {
        "tensor_parallel_size": 4,
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.92,
        "max_num_seqs": 256,
    }
    assert "--served-model-name" in p.ignored and "--trust-remote-code" in p.ignored


def test_vllm_multiline_short_flags_and_suffixes():
    p = parse_launch(
        "vllm serve Qwen/Qwen3-8B \\\n  -tp 2 --pipeline-parallel-size 2 \\\n"
        "  --max-model-len 32k --kv-cache-dtype fp8 --dtype bfloat16 --enforce-eager"
        " --quantization fp8 --block-size 32 --max-num-batched-tokens 4096"
    )
    assert p.args["tensor_parallel_size"] == 2 and p.args["pipeline_parallel_size"] == 2
    assert p.args["max_model_len"] == 32000
    assert p.args["enforce_eager"] is True
    assert p.args["kv_cache_dtype"] == "fp8" and p.args["quantization"] == "fp8"
    assert p.args["block_size"] == 32 and p.args["max_num_batched_tokens"] == 4096


def test_python_module_entrypoints():
    p = parse_launch("python -m vllm.entrypoints.openai.api_server --model llama-3.1-8b -tp 1")
    assert p.engine == "vllm" and p.model == "llama-3.1-8b"
    s = parse_launch(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --mem-fraction-static 0.85"
        " --context-length 32768 --host 0.0.0.0 --port 30000 --enable-torch-compile"
    )
    assert s.engine == "sglang" and s.model == "Qwen/Qwen3-8B"
    assert s.args == {"tp_size": 2, "mem_fraction_static": 0.85, "context_length": 32768}
    t = parse_launch(
        "trtllm-serve meta-llama/Llama-3.1-8B --tp_size 2 --kv_cache_free_gpu_memory_fraction 0.8"
    )
    assert t.engine == "trtllm" and t.args == {"tp_size": 2, "free_gpu_memory_fraction": 0.8}


@pytest.mark.parametrize(
    "line, message",
    [
        ("", "empty"),
        ("docker run --gpus all image", "no engine found"),
        ("vllm serve", "no model"),
        ("vllm serve llama-3.1-8b --tensor-parallel-size four", "invalid int"),
        ("vllm serve llama-3.1-8b --max-model-len lots", "not a length"),
        ("vllm serve 'llama-3.1-8b", "cannot split"),
        ("vllm serve llama-3.1-8b extra-positional", "unexpected argument"),
    ],
)
def test_malformed_lines_get_a_clear_message(line, message):
    with pytest.raises(GpuplanError, match=message):
        parse_launch(line)


def test_serve_launch_reports_what_the_engine_will_log():
    plan = serve_launch(VLLM_LINE, "h100", "79.19GiB")
    data = plan.to_dict()
    assert data["kv_capacity_tokens"] == plan.bill.kv_capacity_tokens > 0
    assert data["max_concurrency"] == pytest.approx(plan.bill.max_concurrency, abs=0.01)
    keys = [line["key"] for line in data["engine"]["lines"]]
    assert keys == ["weights", "activation_peak", "non_torch", "kv_cache"]
    assert data["engine"]["outside_budget"][0]["key"] == "cuda_graphs"
    assert data["engine"]["ranges"]["kv_capacity_tokens"]["low"] <= data["kv_capacity_tokens"]
    assert data["engine"]["settings"]["gpu_memory_utilization"] == 0.92
    assert data["tp"] == 4 and data["context"] == 32768


def test_cli_from_json_and_errors(capsys):
    assert (
        main(["serve", "--from", VLLM_LINE, "--gpu", "H100", "--gpu-memory", "79.19GiB", "--json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["name"] == "vllm"
    assert main(["serve", "--from", "vllm serve llama-3.1-8b --tensor-parallel-size x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuplan: error: launch line") and err.count("\n") == 1


def test_cli_engine_flags(capsys):
    assert (
        main(
            [
                "serve",
                "llama-3.1-8b",
                "--engine",
                "vllm",
                "--gpu-memory-utilization",
                "0.9",
                "--max-model-len",
                "8192",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["settings"]["max_model_len"] == 8192
    assert main(["serve", "llama-3.1-8b", "--engine", "sglang", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["name"] == "sglang"
    assert main(["serve", "llama-3.1-8b", "--engine", "trtllm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["name"] == "trtllm"
    assert main(["serve", "llama-3.1-8b", "--gpu-memory-utilization", "0.9"]) == 2
    capsys.readouterr()


def test_cli_check(tmp_path, capsys):
    from pathlib import Path

    data = Path(__file__).parent / "data"
    case = json.loads((data / "engine_logs" / "vllm-0.19-h100.json").read_text())["cases"][0]
    log = tmp_path / "vllm.log"
    log.write_text(case["verbatim_excerpt"])
    config = data / "engine_configs" / "codellama--CodeLlama-7b-hf.json"
    assert main(["check", str(log), "--model", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in report["rows"]}
    assert rows["kv_cache_tokens"]["logged"] == case["kv_cache_tokens"]
    assert abs(rows["kv_cache_tokens"]["error"]) < 0.02
    assert main(["check", str(log), "--model", str(config)]) == 0
    assert "KV cache tokens" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "missing.log")]) == 2
    assert "no such log file" in capsys.readouterr().err
    (tmp_path / "other.txt").write_text("nothing to see")
    assert main(["check", str(tmp_path / "other.txt")]) == 2
