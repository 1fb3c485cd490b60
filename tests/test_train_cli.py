"""`gpuplan train` on the command line: the JSON schema, the table, and one-line errors."""

import json

import pytest

from gpuplan.cli.main import main


def _run(capsys, *args):
    return _run_cmd(capsys, "train", *args)


def _run_cmd(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_schema(capsys):
    code, out, _ = _run(capsys, "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == "gpuplan.train/1"
    for key in (
        "per_gpu",
        "per_gpu_total_bytes",
        "fits",
        "gpus",
        "model_states_bytes",
        "activations_bytes",
        "step_flops",
        "comm_bytes_per_step",
        "tokens_per_second",
        "budget_bytes",
        "host",
        "layout",
        "recipe",
    ):
        assert key in data, key
    assert data["gpus"] == 8 and data["layout"]["zero"] == 3
    assert data["per_gpu"]["total_bytes"] == sum(i["bytes"] for i in data["per_gpu"]["items"])
    keys = {i["key"] for i in data["per_gpu"]["items"]}
    assert {"weights", "gradients", "master", "optimizer", "activations", "cuda_context"} <= keys


def test_table_and_explain(capsys):
    code, out, _ = _run(capsys, "llama-3.1-8b", "--gpus", "8", "--zero", "1", "--explain")
    assert code == 0
    assert "8.03 B × 8 bytes ÷ 8 shards" in out
    assert "tokens/s" in out


def test_auto_explains_why(capsys):
    code, out, _ = _run(
        capsys, "llama-3.1-70b", "--gpus", "auto", "--gpu-memory", "80GB", "--checkpointing", "full"
    )
    assert code == 0
    assert "Why" in out and "lower bound" in out


def test_lora_and_offload_bills(capsys):
    code, out, _ = _run(capsys, "llama-3.1-8b", "--qlora", "--gpus", "1", "--json")
    data = json.loads(out)
    assert (
        code == 0 and data["lora"]["qlora"] and data["params_trainable"] < data["params_total"] / 20
    )
    code, out, _ = _run(
        capsys, "llama-3.1-70b", "--gpus", "8", "--zero", "3", "--offload", "params", "--json"
    )
    data = json.loads(out)
    assert (
        code == 0
        and data["host"]["per_gpu_bytes"] > 0
        and data["host"]["per_node_bytes"] == 8 * data["host"]["per_gpu_bytes"]
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["llama-3.1-8b", "--zero", "4"], "ZeRO stage must be 0, 1, 2 or 3"),
        (["llama-3.1-8b", "--micro-batch", "0"], "micro-batch"),
        (["llama-3.1-8b", "--seq", "0"], "seq"),
        (["llama-3.1-8b", "--pp", "64", "--gpus", "64"], "pp=64 is larger than the 32 layers"),
        (
            ["llama-3.1-8b", "--lora-rank", "8", "--lora-targets", "qkv_proj"],
            "'qkv_proj' is not a linear module",
        ),
        (["llama-3.1-8b", "--lora-rank", "0"], "lora-rank"),
        (["llama-3.1-8b", "--ep", "2", "--gpus", "2"], "mixture-of-experts"),
        (["qwen3-30b-a3b", "--ep", "3", "--gpus", "3"], "does not divide the 128 experts"),
        (["llama-3.1-8b", "--tp", "3", "--gpus", "3"], "does not divide the 32 attention heads"),
        (["llama-3.1-8b", "--recipe", "adamw-16bit"], "unknown recipe"),
        (["llama-3.1-8b", "--fsdp", "quarter_shard"], "unknown FSDP mode"),
        (
            ["llama-3.1-8b", "--zero", "1", "--fsdp", "full_shard"],
            "either a ZeRO stage or an FSDP mode",
        ),
        (["llama-3.1-8b", "--gpus", "8", "--zero", "1", "--offload", "params"], "needs ZeRO-3"),
        (
            ["llama-3.1-8b", "--gpus", "2", "--offload", "optimizer", "--zero", "0"],
            "needs ZeRO 1-3",
        ),
        (["llama-3.1-8b", "--cp", "3", "--gpus", "3", "--seq", "4096"], "cp=3 does not divide"),
        (["llama-3.1-8b", "--gpus", "6", "--tp", "4"], "not a multiple of tp × pp × cp"),
        (["llama-3.1-8b", "--sp", "--gpus", "1"], "set --tp > 1"),
        (["llama-3.1-8b", "--headroom", "1.5"], "headroom"),
        (["llama-3.1-8b", "--mfu", "0"], "MFU"),
        (["no-such-model"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, fragment):
    code, _, err = _run(capsys, *args)
    assert code == 2
    assert fragment in err
    assert err.count("\n") == 1 and err.startswith("gpuplan: error:")


def test_every_train_field_is_documented(capsys):
    import re
    from pathlib import Path

    code, out, _ = _run(
        capsys, "qwen3-30b-a3b", "--gpus", "16", "--zero", "3", "--offload", "optimizer", "--json"
    )
    assert code == 0
    data = json.loads(out)
    doc = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    section = doc[doc.index("## `gpuplan.train/1`") :]
    documented = set(re.findall(r"`([a-z_]+)`", section))
    for key in data:
        assert key in documented, f"{key} missing from the train section of docs/json.md"
    for item in data["per_gpu"]["items"] + data["host"]["items"]:
        assert isinstance(item["bytes"], int)
        assert item["key"] in documented or item["key"].endswith("_offloaded"), item["key"]


def test_training_plan_has_an_html_repr_for_jupyter():
    import gpuplan

    plan = gpuplan.train("llama-3.1-8b", gpus=8, zero=3)
    html = plan._repr_html_()
    assert "<table>" in html and "Optimizer states" in html


def test_framework_and_phases_in_the_cli(capsys):
    code, out, _ = _run(
        capsys,
        "llama-3.1-8b",
        "--gpus",
        "8",
        "--framework",
        "torchtitan",
        "--checkpointing",
        "op",
        "--loss",
        "chunked:8",
        "--explain",
    )
    assert code == 0
    assert "◀ peak" in out and "backward of the first layer" in out and "optimizer step" in out
    assert "allocated" in out and "reserved" in out and "nvidia-smi" in out
    code, out, _ = _run(capsys, "llama-3.1-8b", "--gpus", "8", "--framework", "megatron", "--json")
    data = json.loads(out)
    assert data["framework"]["id"] == "megatron" and data["loss"]["mode"] == "vocab_parallel"
    assert {p["name"] for p in data["phases"]} >= {"forward", "loss", "optimizer"}
    assert all("predicts" in item for item in data["per_gpu"]["items"])


def test_unknown_framework_is_a_one_line_error(capsys):
    code, _, err = _run(capsys, "llama-3.1-8b", "--gpus", "8", "--framework", "torchtitn")
    assert code == 2 and err.count("\n") == 1 and "torchtitan" in err


def test_frameworks_command(capsys):
    code, out, _ = _run_cmd(capsys, "frameworks", "--json")
    assert code == 0
    ids = {f["id"] for f in json.loads(out)["frameworks"]}
    assert ids >= {
        "generic",
        "torchtitan",
        "torchtune",
        "megatron",
        "deepspeed",
        "hf-trainer",
        "fsdp2",
        "ddp",
    }


def test_train_from_a_config_file(tmp_path, capsys):
    path = tmp_path / "ds_config.json"
    path.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    )
    code, out, _ = _run(capsys, "llama-3.1-8b", "--from", str(path), "--gpus", "8", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["framework"]["id"] == "deepspeed" and data["layout"]["zero"] == 2
    assert data["micro_batch"] == 2


def test_auto_searches_recompute_70b_qlora_fits_one_80gb_gpu():
    # issue 14 item 6: with recompute, 70B QLoRA fits one 80 GB GPU (it used to answer four)
    import gpuplan

    plan = gpuplan.train("llama-3.1-70b", qlora=True, gpus="auto", gpu_memory="80GB")
    assert plan.gpus == 1 and plan.fits
    assert plan.bill.setup.recompute == "full"
    # a recompute the user gave is kept, and the search moves to more GPUs instead
    kept = gpuplan.train(
        "llama-3.1-70b", qlora=True, gpus="auto", gpu_memory="80GB", checkpointing="none"
    )
    assert kept.gpus > 1 and kept.bill.setup.recompute == "none"
