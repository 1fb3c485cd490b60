"""The pipeline schedule (engine/pipeline.py) and interleaved 1F1B in the training bill."""

from __future__ import annotations

from fractions import Fraction

import pytest

import gpuplan
from gpuplan.api.framework_configs import read_framework_config
from gpuplan.cli.main import main
from gpuplan.engine.pipeline import bubble_fraction, forwards_in_flight
from gpuplan.errors import GpuplanError

GRID = [(pp, v, m) for pp in (2, 4, 8) for v in (2, 3, 4) for m in (2 * pp, 4 * pp, 8 * pp)]


@pytest.mark.parametrize(("pp", "vpp", "m"), GRID)
def test_first_rank_holds_pp_plus_pp_minus_one_over_v_micro_batches(pp, vpp, m):
    """Narayanan et al. 2021 §2.2.2 / Korthikanti et al. 2022 §4.2.3: under the interleaved
    schedule the first stage holds the activations of p·(1 + (p − 1)/(p·v)) micro-batches of its
    whole stage (each chunk forward is 1/v of it), the plain schedule p of them."""
    assert Fraction(forwards_in_flight(pp, vpp, 0, m), vpp) == pp * (1 + Fraction(pp - 1, pp * vpp))
    assert forwards_in_flight(pp, 1, 0, m) == pp


@pytest.mark.parametrize(("pp", "vpp", "m"), GRID)
def test_later_ranks_hold_fewer_and_the_last_holds_v_minus_one_rounds(pp, vpp, m):
    held = [forwards_in_flight(pp, vpp, r, m) for r in range(pp)]
    assert held == sorted(held, reverse=True)
    # the last rank warms up (v − 1) rounds of pp forwards, then runs one more (Megatron
    # schedules.py: 2·(pp − r − 1) + (v − 1)·pp warm-up forwards)
    assert held[-1] == (vpp - 1) * pp + 1


def test_with_as_many_micro_batches_as_stages_the_first_rank_runs_every_forward_first():
    # warm-up 2·7 + 8 = 22 forwards, capped at the 16 there are; the last rank warms up 8
    assert forwards_in_flight(8, 2, 0, 8) == 16 and forwards_in_flight(8, 2, 7, 8) == 9


def test_the_bubble_shrinks_by_v():
    assert bubble_fraction(8, 1, 16) == pytest.approx(7 / 16)
    assert bubble_fraction(8, 4, 16) == pytest.approx(7 / 64)
    assert bubble_fraction(1, 1, 16) == 0.0


def _bill(**kw):
    args = dict(gpus=64, tp=8, pp=8, seq=8192, grad_accum=16, checkpointing="full")
    return gpuplan.train("llama-3.1-405b", "h100", **{**args, **kw}).bill


def test_interleaving_holds_more_activations_on_the_first_stage():
    plain, interleaved = _bill(stage=0), _bill(stage=0, vpp=2)
    assert interleaved.in_flight == 2 * 8 + 8 - 1
    ratio = interleaved.activations_bytes / plain.activations_bytes
    assert ratio == pytest.approx((8 + 7 / 2) / 8, rel=0.02)  # edge tensors aside
    assert interleaved.time.bubble == pytest.approx(plain.time.bubble / 2)
    assert interleaved.comm.pp == pytest.approx(2 * plain.comm.pp)
    assert "vpp=2" in interleaved.setup.layout.describe()


@pytest.mark.parametrize(
    ("kw", "word"),
    [
        ({"pp": 1, "vpp": 2}, "needs pp > 1"),
        ({"grad_accum": 4, "vpp": 2}, "at least pp=8"),
        ({"vpp": 16}, "virtual stages exceed"),
        ({"vpp": 0}, "vpp"),
    ],
)
def test_bad_virtual_stages_are_refused(kw, word):
    with pytest.raises(GpuplanError, match=word):
        _bill(**kw)


def test_interleaving_takes_micro_batches_that_are_not_a_multiple_of_pp():
    """Megatron-LM since 2024 (schedules.py get_pp_rank_microbatches): warm-up
    2·(pp − r − 1) + (vpp − 1)·pp forwards, groups of pp micro-batches per chunk, the last
    group shorter; rank 0 of pp = 8, vpp = 2 with 12 micro-batches: 14 + 8 + 1 = 23 ≤ 24."""
    bill = _bill(stage=0, vpp=2, grad_accum=12)
    assert bill.in_flight == 2 * 7 + 8 + 1


def test_virtual_stages_need_a_pipeline_degree():
    with pytest.raises(GpuplanError, match="give --pp"):
        gpuplan.train("llama-3.1-8b", "h100", vpp=2)


def test_fewest_gpus_search_keeps_the_virtual_stages():
    # the lower bound prices one unsharded GPU (pp 1, so no virtual stages); the layouts keep vpp
    layout = gpuplan.train("llama-3.1-8b", "h100", pp=2, vpp=2).to_dict()["layout"]
    assert layout["pp"] == 2 and layout["vpp"] == 2


def test_cli_virtual_stages(capsys):
    code = main(
        ["train", "llama-3.1-70b", "--gpus", "32", "--tp", "4", "--pp", "4"]
        + ["--virtual-stages", "2", "--grad-accum", "8", "--json"]
    )
    out = capsys.readouterr().out
    assert code == 0 and '"vpp": 2' in out and '"chunk_forwards_in_flight": 11' in out


MEGATRON = (
    "pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32"
    " --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1"
    " --global-batch-size 64 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4"
    " --vocab-size 32000 --bf16"
)


def test_megatron_reads_layers_per_virtual_stage():
    read = read_framework_config(MEGATRON + " --num-layers-per-virtual-pipeline-stage 2")
    assert read.kwargs["vpp"] == 4  # 32 layers ÷ pp 4 ÷ 2 per virtual stage
    read = read_framework_config(MEGATRON + " --num-virtual-stages-per-pipeline-rank 2")
    assert read.kwargs["vpp"] == 2
    with pytest.raises(GpuplanError, match="does not split"):
        read_framework_config(MEGATRON + " --num-layers-per-virtual-pipeline-stage 3")


TORCHTITAN = """
[model]
name = "llama3"
flavor = "405B"
[training]
local_batch_size = 32
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 8
tensor_parallel_degree = 8
pipeline_parallel_degree = 8
pipeline_parallel_microbatch_size = 4
pipeline_parallel_schedule = "{schedule}"
"""


def test_torchtitan_reads_the_interleaved_schedule():
    read = read_framework_config(TORCHTITAN.format(schedule="Interleaved1F1B"), "torchtitan")
    assert read.kwargs["vpp"] == 2  # two stages per rank when layers per stage are not set
    text = (
        TORCHTITAN.format(schedule="Interleaved1F1B") + "pipeline_parallel_layers_per_stage = 4\n"
    )
    read = read_framework_config(text, "torchtitan")
    assert read.kwargs["vpp"] == 4  # ⌈(126 + 1 + 1) ÷ 4⌉ = 32 stages over pp 8
    plain = read_framework_config(TORCHTITAN.format(schedule="1F1B"))
    assert plain.kwargs["vpp"] == 1
    with pytest.raises(GpuplanError, match="ZBVZeroBubble"):
        read_framework_config(TORCHTITAN.format(schedule="ZBVZeroBubble"))
