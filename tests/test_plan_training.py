"""`gpuplan plan --train`: ranked training layouts that fit, and the configs engines read.

Expectations are derived from first principles (the lesson's 16 bytes per parameter for bf16
AdamW, Llama-3.1-8B's 8.03 B parameters), not read back from gpuplan.
"""

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from gpuplan.api import plan_training, train
from gpuplan.cli.main import main
from gpuplan.planner.training_export import deepspeed_config, fsdp_config, megatron_args
from gpuplan.planner.training_search import rank_training_layouts

PARAMS_8B = 8.03e9
GB = 1e9


def _speed(option):
    return option.plan.tokens_per_second


def test_options_all_fit_and_are_sorted_by_tokens_per_second():
    options = plan_training("llama-3.1-8b", gpus=8, top=50)
    assert len(options) > 3
    assert all(o.plan.fits for o in options)
    assert [o.rank for o in options] == list(range(1, len(options) + 1))
    for a, b in zip(options, options[1:], strict=False):
        assert _speed(a) >= _speed(b)
        if _speed(a) == _speed(b):
            assert a.plan.per_gpu_total_bytes <= b.plan.per_gpu_total_bytes


def test_8b_on_8_h100_needs_zero_or_checkpointing_not_plain_dp():
    # bf16 AdamW holds 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter: 8.03 B × 16 = 128 GB of model
    # states on every GPU under plain data parallelism, over the 72 GB budget (90 % of 80 GB)
    # before a single activation. Sharded 8 ways (ZeRO-3) the same states are 16 GB.
    budget = 0.9 * 80 * GB
    assert budget < 16 * PARAMS_8B
    options = plan_training("llama-3.1-8b", gpus=8, seq=4096, gpu_memory="80GB", top=500)
    plain_dp = [
        o for o in options if (o.plan.layout.zero, o.plan.layout.tp, o.plan.layout.pp) == (0, 1, 1)
    ]
    assert plain_dp == []
    top = options[0].plan
    assert top.layout.zero >= 1 or top.bill.setup.recompute != "none"
    assert top.model_states_bytes < budget
    if top.layout.zero == 3 and top.layout.tp == top.layout.pp == 1:
        assert top.model_states_bytes == pytest.approx(16 * PARAMS_8B / 8, rel=0.01)


def test_global_batch_is_kept_by_every_option():
    seq, gpus = 2048, 8
    options = plan_training("llama-3.1-8b", gpus=gpus, seq=seq, top=100)
    assert {o.plan.bill.setup.tokens_per_step for o in options} == {gpus * seq * 8}
    custom = plan_training("llama-3.1-8b", gpus=gpus, seq=seq, global_batch_tokens=64 * seq * 4)
    for o in custom:
        s = o.plan.bill.setup
        assert s.micro_batch * s.micro_batches * s.layout.dp * seq == 64 * seq * 4
        assert s.micro_batch & (s.micro_batch - 1) == 0  # a power of two


def test_search_stays_bounded():
    for model, gpus in (("llama-3.1-8b", 8), ("llama-3.1-70b", 64)):
        setup = train(model, gpus=gpus).bill.setup
        found = rank_training_layouts(setup, gpus, gpus * 4096 * 8)
        assert found.bills <= 500, (model, gpus, found.bills)


def test_deepspeed_export_carries_the_layout():
    option = plan_training("llama-3.1-8b", gpus=8, engine="deepspeed")[0]
    bill = option.plan.bill
    s, lo = bill.setup, bill.setup.layout
    assert lo.tp == lo.pp == 1
    ds = deepspeed_config(bill)
    assert ds["zero_optimization"]["stage"] == lo.zero
    assert ds["train_micro_batch_size_per_gpu"] == s.micro_batch
    assert ds["gradient_accumulation_steps"] == s.micro_batches
    assert ds["train_batch_size"] * s.seq == 8 * 4096 * 8
    assert ds["bf16"] == {"enabled": True} and ds["fp16"] == {"enabled": False}
    assert ds["gradient_clipping"] == 1.0
    assert "offload_optimizer" not in ds["zero_optimization"]
    assert option.to_dict(engine="deepspeed")["export"]["config"] == ds


def test_offload_only_when_nothing_fits_without_and_exported():
    # one 80 GB GPU cannot hold 128 GB of model states: only ZeRO-Offload fits full training
    options = plan_training("llama-3.1-8b", gpus=1, gpu_memory="80GB", engine="deepspeed")
    assert options and all(o.plan.bill.setup.offload != "none" for o in options)
    for o in options:
        zero = deepspeed_config(o.plan.bill)["zero_optimization"]
        assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
        assert ("offload_param" in zero) == (o.plan.bill.setup.offload == "params")
    # with 8 GPUs something fits on the GPUs alone, so nothing offloads
    assert all(o.plan.bill.setup.offload == "none" for o in plan_training("llama-3.1-8b", gpus=8))


def test_fsdp_export_maps_stages_and_offload():
    options = plan_training("llama-3.1-8b", gpus=8, engine="fsdp", top=100)
    assert all(o.plan.layout.zero != 1 and o.plan.layout.tp == 1 for o in options)
    names = {0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
    for o in options:
        cfg = fsdp_config(o.plan.bill)
        assert cfg["distributed_type"] == "FSDP" and cfg["num_processes"] == 8
        assert cfg["mixed_precision"] == "bf16"
        f = cfg["fsdp_config"]
        assert f["fsdp_sharding_strategy"] == names[o.plan.layout.zero]
        assert f["fsdp_activation_checkpointing"] == (o.plan.bill.setup.recompute == "full")
        assert f["fsdp_offload_params"] is False
        assert f["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    one = plan_training("llama-3.1-8b", gpus=1, gpu_memory="80GB", engine="fsdp")[0]
    assert fsdp_config(one.plan.bill)["fsdp_config"]["fsdp_offload_params"] is True
    assert "--num_processes 1" in one.to_dict(engine="fsdp")["export"]["command"]


def test_megatron_flags_carry_the_layout():
    option = plan_training("llama-3.1-70b", gpus=32, engine="megatron")[0]
    bill = option.plan.bill
    s, lo = bill.setup, bill.setup.layout
    assert s.recipe.id == "adamw-bf16-fp32grad"  # Megatron-LM's own gradients are fp32
    argv = megatron_args(bill)
    flags = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    assert flags["--tensor-model-parallel-size"] == str(lo.tp)
    assert flags["--pipeline-model-parallel-size"] == str(lo.pp)
    assert flags["--micro-batch-size"] == str(s.micro_batch)
    assert int(flags["--global-batch-size"]) * 4096 == 32 * 4096 * 8
    assert flags["--seq-length"] == "4096"
    assert ("--sequence-parallel" in argv) == lo.sp
    assert ("--use-distributed-optimizer" in argv) == (lo.zero == 1)
    assert "--bf16" in argv and lo.zero <= 1
    if s.recompute == "full":
        assert flags["--recompute-granularity"] == "full"
    command = shlex.split(option.to_dict(engine="megatron")["export"]["command"])
    assert command[0] == "torchrun" and "pretrain_gpt.py" in command


def test_model_parallel_layouts_say_deepspeed_needs_megatron():
    from gpuplan.planner.training_export import training_export

    options = plan_training("llama-3.1-8b", gpus=8, top=200)
    tp = next(o for o in options if o.plan.layout.tp > 1)
    notes = training_export(tp.plan.bill, "deepspeed").notes
    assert any("Megatron" in n for n in notes)


def _run(capsys, *args):
    code = main(["plan", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_table_and_export(capsys):
    code, out, _ = _run(
        capsys, "llama-3.1-8b", "--train", "--gpus", "8", "--top", "3", "--export", "deepspeed"
    )
    assert code == 0
    assert "tokens/s" in out and "ZeRO-" in out and "micro × accum" in out
    assert '"zero_optimization"' in out and "deepspeed --num_gpus 8" in out


def test_cli_json_schema_is_documented(capsys):
    code, out, _ = _run(capsys, "llama-3.1-8b", "--train", "--json", "--export", "fsdp")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == "gpuplan.plan-train/1"
    assert data["global_batch_tokens"] == 8 * 4096 * 8
    doc = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    section = doc[doc.index("## `gpuplan.plan-train/1`") :]
    documented = set(re.findall(r"`([a-z_]+)`", section))
    for key in list(data) + list(data["options"][0]) + list(data["options"][0]["export"]):
        assert key in documented, f"{key} missing from the plan-train section of docs/json.md"
    for row in data["options"]:
        assert isinstance(row["per_gpu_total_bytes"], int)
        assert row["per_gpu_total_bytes"] <= row["budget_bytes"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--train", "--export", "vllm"], "serving engine"),
        (["--export", "deepspeed"], "add --train"),
        (["--train", "--gpus", "0"], "gpus must be a positive"),
        (["--train", "--seq", "0"], "seq must be a token count from 1"),
        (["--train", "--global-batch-tokens", "1000"], "whole number of sequences"),
        (["--seq", "2048"], "only with --train"),
        (["--train", "--gpu", "h100", "--gpu", "h200"], "single --gpu"),
        (["--train", "--gpus", "1", "--gpu", "l4", "--seq", "131072"], "no layout of 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, fragment):
    code, _, err = _run(capsys, "llama-3.1-8b", *args)
    assert code == 2
    assert fragment in err
    assert err.count("\n") == 1 and err.startswith("gpuplan: error:")


def _brute_force(setup, gpus, batch):
    """Every candidate of every layout billed, no shortcut taken (no floor, no stop at the
    first micro-batch that does not fit, no ceiling), ranked by the search's own key and then
    by the order of the walk."""
    from gpuplan.engine.training import training_bill
    from gpuplan.errors import GpuplanError
    from gpuplan.planner import training_search as ts

    found = []
    for cell in ts._cells(setup, gpus, batch, ("none",), lambda layout, offload: True):
        for r, recompute in enumerate(ts._recomputes(setup)):
            for m, micro in enumerate(ts._micro_batches(cell.per_rank)):
                candidate = replace(
                    setup,
                    layout=cell.layout,
                    offload=cell.offload,
                    recompute=recompute,
                    micro_batch=micro,
                    grad_accum=cell.per_rank // micro,
                )
                try:
                    bill = training_bill(candidate)
                except GpuplanError:
                    continue
                if bill.fits:
                    found.append((ts._rank_key(bill) + (cell.order, r, m), bill))
    return [bill for _, bill in sorted(found, key=lambda kb: kb[0])]


def _plan_signature(bill):
    s = bill.setup
    return (s.layout, s.offload, s.recompute, s.micro_batch, s.grad_accum)


@pytest.mark.parametrize(
    ("model", "gpus", "kernel", "seq", "memory"),
    [
        ("llama-3.2-1b", 8, "flash", 4096, "16GB"),  # dense: tp, pp, ZeRO, micro-batches
        ("qwen3-30b-a3b", 8, "flash", 4096, None),  # MoE: expert parallelism
        ("llama-3.2-1b", 4, "eager", 8192, "24GB"),  # selective recompute, context parallelism
    ],
)
def test_pruned_search_ranks_the_same_top_plans_as_brute_force(model, gpus, kernel, seq, memory):
    # the search's shortcuts (model-states floor, a walk up the micro-batches that stops at the
    # first that does not fit, the branch and bound's speed ceiling) change how many bills are
    # built, never which plans rank first: compared with billing every candidate, on GPUs
    # small enough that memory prunes (some candidates of every case do not fit)
    setup = replace(train(model, gpus=gpus, seq=seq, gpu_memory=memory).bill.setup, kernel=kernel)
    batch = gpus * seq * 8
    brute = _brute_force(setup, gpus, batch)
    assert len(brute) >= 10
    exhaustive = rank_training_layouts(setup, gpus, batch)
    pruned = rank_training_layouts(setup, gpus, batch, top=5)
    assert [_plan_signature(b) for b in exhaustive.options] == [_plan_signature(b) for b in brute]
    assert [_plan_signature(b) for b in pruned.options[:5]] == [
        _plan_signature(b) for b in brute[:5]
    ]


def test_search_restores_the_garbage_collector_as_it_was():
    import gc

    setup = train("llama-3.1-8b", "h100", gpus=8, zero=3).bill.setup
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            rank_training_layouts(setup, 8, 8 * 8 * setup.seq, top=3)
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
