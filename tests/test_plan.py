"""`gpuplan plan`: ranked layouts that fit, and launch commands engines accept."""

import json
import shlex

import gpuplan
from gpuplan.api import plan
from gpuplan.cli.main import main


def test_options_are_ranked_by_gpu_count_and_all_fit():
    options = plan("llama-3.1-70b", gpus=["h100", "h200", "l40s"], users=16)
    counts = [o.plan.gpus for o in options]
    assert counts == sorted(counts)
    assert all(o.plan.fits for o in options)
    assert [o.rank for o in options] == list(range(1, len(options) + 1))


def test_fewest_gpus_for_each_option_matches_serve():
    options = plan("llama-3.1-8b", gpus=["l4"], dtypes=["bf16"], context=8192, users=8)
    direct = gpuplan.serve("llama-3.1-8b", "l4", dtype="bf16", context=8192, users=8)
    assert options[0].plan.gpus == direct.gpus


def test_vllm_export_carries_the_layout():
    option = plan("llama-3.1-70b", gpus=["h100"], dtypes=["bf16"], users=16)[0]
    argv = shlex.split(option.to_dict(engine="vllm")["launch"])
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--tensor-parallel-size"] == str(option.plan.tp)
    assert flags["--max-model-len"] == "4096"
    assert flags["--dtype"] == "bfloat16"


def test_sglang_export_and_fp8_quantization_flag():
    option = plan("llama-3.1-70b", gpus=["h100"], dtypes=["fp8-tensor"])[0]
    argv = shlex.split(option.to_dict(engine="sglang")["launch"])
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--quantization" in argv and argv[argv.index("--quantization") + 1] == "fp8"


def test_plan_cli_json(capsys):
    assert (
        main(["plan", "qwen3-8b", "--gpu", "l4", "--gpu", "h100", "--json", "--export", "vllm"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "gpuplan.plan/1"
    assert data["options"][0]["launch"].startswith("vllm serve Qwen/Qwen3-8B")
