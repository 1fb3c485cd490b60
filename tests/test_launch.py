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
        "served_model_name": "llama",
        "port": 8000,
        "disable_log_requests": True,
        "trust_remote_code": True,
    }
    assert "--served-model-name" in p.no_effect and "--trust-remote-code" in p.no_effect
    assert p.unmodelled == ()


def test_vllm_multiline_short_flags_and_suffixes():
    p = parse_launch(
        "vllm serve Qwen/Qwen3-8B \\\n  -tp 2 --pipeline-parallel-size 2 \\\n"
        "  --max-model-len 32k --kv-cache-dtype fp8 --dtype bfloat16 --enforce-eager"
        " --quantization fp8 --block-size 32 --max-num-batched-tokens 4096"
    )
    assert p.args["tensor_parallel_size"] == 2 and p.args["pipeline_parallel_size"] == 2
    assert p.args["max_model_len"] == 32000  # human_readable_int: k = 1000, K = 1024
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
    assert s.args == {
        "tp_size": 2,
        "mem_fraction_static": 0.85,
        "context_length": 32768,
        "host": "0.0.0.0",
        "port": 30000,
        "enable_torch_compile": True,
    }
    assert s.unmodelled == ("--enable-torch-compile",)
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
        ("vllm serve llama-3.1-8b --max-model-len lots", "not a whole number"),
        ("vllm serve llama-3.1-8b --max-num-batched-tokens 1.5K", "decimals"),
        ("vllm serve llama-3.1-8b --gpu-memory-utilization 1.5", "at most 1"),
        ("vllm serve llama-3.1-8b --gpu-memory-utilization nan", "finite"),
        ("vllm serve llama-3.1-8b --speculative-config '[1]'", "JSON object"),
        ("vllm serve llama-3.1-8b --max-num-seqs", "needs a value"),
        ("vllm serve 'llama-3.1-8b", "cannot split"),
        ("vllm serve llama-3.1-8b extra-positional", "unexpected argument"),
    ],
)
def test_malformed_lines_get_a_clear_message(line, message):
    with pytest.raises(GpuplanError, match=message):
        parse_launch(line)


def test_serve_launch_reports_what_the_engine_will_log():
    plan = serve_launch(VLLM_LINE, "h100", "79.19GiB", version="0.19.0")
    data = plan.to_dict()
    assert data["kv_capacity_tokens"] == plan.bill.kv_capacity_tokens > 0
    assert data["max_concurrency"] == pytest.approx(plan.bill.max_concurrency, abs=0.01)
    keys = [line["key"] for line in data["engine"]["lines"]]
    assert keys == ["weights", "activation_peak", "non_torch", "kv_cache"]
    assert data["engine"]["outside_budget"][0]["key"] == "cuda_graphs"
    # from 0.21 the CUDA-graph estimate is deducted before the KV cache is sized
    newest = serve_launch(VLLM_LINE, "h100", "79.19GiB").to_dict()
    keys = [line["key"] for line in newest["engine"]["lines"]]
    assert keys == ["weights", "activation_peak", "non_torch", "cuda_graphs", "kv_cache"]
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


def test_vllm_size_suffixes_auto_length_and_unmodelled_flags():
    """vLLM's own value syntax (utils/argparse_utils.py::human_readable_int[_or_auto])."""
    p = parse_launch(
        "vllm serve Qwen/Qwen3-8B --max-num-batched-tokens 16k --kv-cache-memory-bytes 4G"
        " --max-model-len auto --no-enable-prefix-caching --compilation-config '{\"level\": 3}'"
        " --some-future-flag 3 --enable-lora --max-loras 4 --max-lora-rank 64"
    )
    assert p.args["max_num_batched_tokens"] == 16_000
    assert p.args["kv_cache_memory_bytes"] == 4 * 2**30
    assert p.args["max_model_len"] == "auto"
    assert p.args["enable_prefix_caching"] is False
    assert p.args["enable_lora"] is True and p.args["max_loras"] == 4
    assert "--compilation-config" in p.unmodelled and "--some-future-flag" in p.unmodelled
    assert parse_launch("vllm serve m --max-model-len -1").args["max_model_len"] == "auto"
    assert parse_launch("vllm serve m --max_model_len=25.6k").args["max_model_len"] == 25_600


def test_config_file_is_read_only_through_the_callback(tmp_path):
    """`--config serve.yaml` is a file of flags, not the model; it is opened only when the
    caller passes a reader (the CLI, for a file the user named)."""
    line = "vllm serve Qwen/Qwen3-8B --config serve.yaml -tp 2"
    p = parse_launch(line)
    assert p.model == "Qwen/Qwen3-8B" and p.config_file == "serve.yaml"
    assert any("serve.yaml" in u for u in p.unmodelled)
    text = "tensor-parallel-size: 4\nmax_model_len: 32k\nenforce-eager: true\nport: 9000\n"
    read = {"serve.yaml": text}.__getitem__
    q = parse_launch(line, read)
    # command line beats the file, the file beats the defaults
    assert q.args["tensor_parallel_size"] == 2 and q.args["max_model_len"] == 32_000
    assert q.args["enforce_eager"] is True and q.config_file == "serve.yaml"
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("model: Qwen/Qwen3-8B\nmax-model-len: 8192\n")
    assert main(["serve", "--from", f"vllm serve --config {cfg}", "--json"]) == 0


def test_cli_accepts_vllm_option_names(capsys):
    argv = [
        "serve",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "16k",
        "--kv-cache-dtype",
        "fp8",
        "--quantization",
        "fp8",
        "--json",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tp"] == 2 and data["engine"]["settings"]["max_model_len"] == 16_000
    assert data["engine"]["settings"]["kv_cache_dtype"] == "fp8"


# --- round trip: every flag of every engine's table, parsed and re-emitted ------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpuplan.engine.profiles import all_adapters  # noqa: E402
from gpuplan.engine.profiles.flags import Flag  # noqa: E402

_WORD = st.text(
    alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="-_./"),
    min_size=1,
    max_size=12,
).filter(lambda w: not w.startswith("-"))


def _value(flag: Flag) -> st.SearchStrategy:
    lo = 1 if flag.minimum is None else int(flag.minimum)
    hi = 1_000_000 if flag.maximum is None else int(flag.maximum)
    if flag.kind in ("int", "count", "size"):
        return st.integers(max(lo, 0), max(hi, lo))
    if flag.kind == "length":
        return st.one_of(st.just("auto"), st.integers(1, 2_000_000))
    if flag.kind == "float":
        low = 0.0 if flag.minimum is None else flag.minimum
        high = 1e6 if flag.maximum is None else flag.maximum
        return st.floats(low, high, allow_nan=False, exclude_min=flag.exclusive_minimum)
    if flag.kind == "bool":
        return st.booleans() if flag.negation else st.just(True)
    if flag.kind == "json":
        return st.dictionaries(_WORD, st.one_of(st.integers(-5, 5), _WORD), max_size=3)
    if flag.kind == "ints":
        return st.lists(st.integers(max(lo, 0), min(hi, 4096)), min_size=1, max_size=4).map(tuple)
    if flag.kind == "words":
        return st.lists(_WORD, min_size=1, max_size=3).map(tuple)
    if flag.choices:
        return st.sampled_from(flag.choices)
    return _WORD


_CASES = [
    (a.name, f.name)
    for a in all_adapters()
    for f in a.flags.flags
    if f.kind != "config" and f.name != a.flags.model_flag
]


@pytest.mark.parametrize("engine, name", _CASES, ids=[f"{e}-{n}" for e, n in _CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_flag_round_trips_through_the_launch_builder(engine, name, data):
    """parse(launch_command(model, {flag: v})) gives back {flag: v}, for every flag of every
    engine's table, with one other random flag of the same table beside it."""
    from gpuplan.engine.profiles import get_adapter

    adapter = get_adapter(engine)
    flag = adapter.flags.get(name)
    args = {name: data.draw(_value(flag))}
    other = data.draw(st.sampled_from([f for f in adapter.flags.flags if f.kind != "config"]))
    if other.name not in args and other.name != adapter.flags.model_flag:
        args[other.name] = data.draw(_value(other))
    line = adapter.launch_command("org/some-model", args)
    parsed = parse_launch(line)
    assert parsed.engine == engine and parsed.model == "org/some-model"
    assert parsed.args == args


def test_trtllm_llm_api_options_file():
    """trtllm-serve's --extra_llm_api_options YAML holds LlmArgs fields: the KV settings map to
    the engine's arguments, the rest is reported as unmodelled."""
    text = "kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n  enable_block_reuse: true\nmax_num_tokens: 4096\n"
    p = parse_launch(
        "trtllm-serve meta-llama/Llama-3.1-8B --tp_size 2 --extra_llm_api_options opts.yaml",
        {"opts.yaml": text}.__getitem__,
    )
    assert p.args == {"tp_size": 2, "free_gpu_memory_fraction": 0.8, "max_num_tokens": 4096}
    assert "kv_cache_config.enable_block_reuse (config file)" in p.unmodelled


def test_cli_engine_version_and_auto_length(capsys):
    argv = ["serve", "llama-3.1-8b", "--engine", "vllm", "--engine-version", "0.10.1", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["version"].startswith("vLLM 0.10.1")
    assert data["engine"]["settings"]["sampler"] == "native"
    assert (
        main(["serve", "llama-3.1-8b", "--engine", "vllm", "--max-model-len", "auto", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["engine"]["max_model_len"] > 0
    assert main(["serve", "llama-3.1-8b", "--engine-version", "0.19.0"]) == 2
    assert "needs --engine" in capsys.readouterr().err
    assert main(["serve", "llama-3.1-8b", "--engine", "vllm", "--engine-version", "0.3.0"]) == 2
    assert "older than" in capsys.readouterr().err


_NUMERIC = [
    (a.name, f)
    for a in all_adapters()
    for f in a.flags.flags
    if f.kind in ("int", "float", "count", "size", "length", "ints")
]


@pytest.mark.parametrize("engine, flag", _NUMERIC, ids=[f"{e}-{f.name}" for e, f in _NUMERIC])
def test_every_numeric_flag_is_bounded_and_refuses_in_one_line(engine, flag):
    """Each numeric flag of each engine's table has a lower and an upper bound; a value outside
    (or a fraction of 0 where the engine needs more) is a one-line GpuplanError, typed or given
    as data."""
    from gpuplan.errors import GpuplanError

    assert flag.minimum is not None and flag.maximum is not None, (engine, flag.name)
    below = flag.minimum if flag.exclusive_minimum else flag.minimum - 1
    above = flag.maximum * 2 + 1
    if flag.kind != "float":
        below, above = int(below), int(above)
    for value in (below, above):
        with pytest.raises(GpuplanError) as typed:
            flag.convert(str(value))
        with pytest.raises(GpuplanError) as given:
            flag.coerce(value)
        assert "\n" not in str(typed.value) + str(given.value)
