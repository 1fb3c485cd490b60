"""The training numbers of the mission documents, reproduced through the public API.

lesson-gpu-memory-math.txt parts 4-6 and sizing-formulas.txt §1.B: 16 bytes per parameter,
eight times serving, 8B not fitting one 80 GB GPU nor plain data parallelism on eight, ZeRO-1/2/3
on eight GPUs (44 / 30 / 16 GB of statics), 70B × 16 ≈ 1.12 TB and the fewest GPUs for it at 90 %
headroom, activations linear in tokens, and the third more compute of full recompute.
"""

import math

import pytest

import gpuplan
from gpuplan.catalog.recipes import get_recipe

GB = 10**9
TB = 10**12


def _train(lesson_gpu_memory, **kw):
    kw.setdefault("gpus", 1)
    return gpuplan.train("llama-3.1-8b", "h100", gpu_memory=lesson_gpu_memory, **kw)


def test_sixteen_bytes_per_parameter(lesson_gpu_memory):
    # "Full training with Adam in mixed precision costs 16 bytes per parameter
    #  (2 weights + 2 gradients + 12 optimizer)"
    recipe = get_recipe("adamw-bf16")
    assert recipe.bytes_per_param == 16
    plan = _train(lesson_gpu_memory)
    items = {i.key: i.bytes for i in plan.items}
    n = plan.params_total
    assert items["weights"] == 2 * n
    assert items["gradients"] == 2 * n
    assert items["master"] + items["optimizer"] == 12 * n
    assert plan.model_states_bytes == 16 * n


def test_training_is_eight_times_serving(lesson_gpu_memory):
    # "about eight times the memory of serving in bf16"
    plan = _train(lesson_gpu_memory)
    served = gpuplan.serve("llama-3.1-8b", "h100", gpus=1, gpu_memory=lesson_gpu_memory)
    assert plan.model_states_bytes == 8 * served.weights_bytes


def test_8b_needs_128_gb_and_does_not_fit_one_gpu(lesson_gpu_memory):
    # sizing-formulas: 16 × P; 8.03 B × 16 = 128 GB
    plan = _train(lesson_gpu_memory)
    assert round(plan.model_states_bytes / GB) == 128
    assert not plan.fits
    assert plan.model_states_bytes > 80 * GB


def test_plain_data_parallel_adds_speed_not_capacity(lesson_gpu_memory):
    # "Plain data parallelism copies the whole training state onto every GPU."
    one = _train(lesson_gpu_memory)
    eight = _train(lesson_gpu_memory, gpus=8, zero=0)
    assert eight.layout.dp == 8
    assert eight.model_states_bytes == one.model_states_bytes
    assert not eight.fits
    assert eight.tokens_per_second > 7 * one.tokens_per_second  # speed, not capacity


@pytest.mark.parametrize(("zero", "statics_gb"), [(1, 44), (2, 30), (3, 16)])
def test_zero_on_eight_gpus(lesson_gpu_memory, zero, statics_gb):
    # "ZeRO-1 divides the optimizer by the number of data-parallel GPUs, ZeRO-2 also the
    #  gradients, ZeRO-3 / FSDP also the weights": 16 + 16 + 96/8 = 44, 16 + 2 + 12 = 30, 128/8 = 16
    plan = _train(lesson_gpu_memory, gpus=8, zero=zero)
    assert round(plan.model_states_bytes / GB) == statics_gb
    # ZeRO never divides the activations
    assert plan.activations_bytes == _train(lesson_gpu_memory, gpus=8, zero=0).activations_bytes


def test_fsdp_modes_are_zero_stages(lesson_gpu_memory):
    full = _train(lesson_gpu_memory, gpus=8, fsdp="FULL_SHARD")
    grad_op = _train(lesson_gpu_memory, gpus=8, fsdp="shard_grad_op")
    assert full.model_states_bytes == _train(lesson_gpu_memory, gpus=8, zero=3).model_states_bytes
    assert (
        grad_op.model_states_bytes == _train(lesson_gpu_memory, gpus=8, zero=2).model_states_bytes
    )
    # HYBRID_SHARD shards within one node of 8: on 16 GPUs it keeps 8 shards, not 16
    hybrid = _train(lesson_gpu_memory, gpus=16, fsdp="hybrid_shard")
    assert hybrid.layout.shard_degree == 8
    assert hybrid.model_states_bytes == full.model_states_bytes


def test_zero3_costs_one_and_a_half_times_the_traffic(lesson_gpu_memory):
    # "ZeRO-3 trades memory for communication: 1.5 times the data-parallel traffic"
    dp = _train(lesson_gpu_memory, gpus=8, zero=0).bill.comm.dp
    z3 = _train(lesson_gpu_memory, gpus=8, zero=3).bill.comm.dp
    assert z3 / dp == pytest.approx(1.5)
    # ring all-reduce of 2 bytes/param gradients: 2 × (d-1)/d × 2Ψ
    n = _train(lesson_gpu_memory).params_total
    assert dp == pytest.approx(2 * 7 / 8 * 2 * n)


def test_70b_training_state_is_about_1_1_tb_and_the_fewest_gpus(lesson_gpu_memory):
    # "70 billion parameters × 16 bytes is about 1.1 TB"; sizing-formulas: 70 × 16 = 1,120 GB
    plan = gpuplan.train("llama-3.1-70b", "h100", gpus=1, gpu_memory=lesson_gpu_memory)
    assert plan.model_states_bytes == 16 * plan.params_total
    assert plan.model_states_bytes == pytest.approx(1.12 * TB, rel=0.01)
    # "The fewest GPUs = total bytes / usable memory per GPU, rounded up" at 90 % of 80 GB
    auto = gpuplan.train(
        "llama-3.1-70b", "h100", gpus="auto", gpu_memory=lesson_gpu_memory, checkpointing="full"
    )
    assert auto.lower_bound_gpus == math.ceil(1128.8 / 72) == 16
    assert auto.lower_bound_gpus == math.ceil(plan.model_states_bytes / (0.9 * 80 * GB))
    # ...and the real layout that achieves it needs at least that many, and fits
    assert auto.fits and auto.gpus >= 16
    assert auto.per_gpu_total_bytes <= 0.9 * 80 * GB
    assert all(not a.fits for a in auto.search[:-1])
    assert auto.why_this_many()


def test_activations_are_linear_in_sequence_and_micro_batch(lesson_gpu_memory):
    # "double the sequence length or the micro-batch and you double it"
    base = _train(lesson_gpu_memory, seq=4096, micro_batch=1).activations_bytes
    longer = _train(lesson_gpu_memory, seq=8192, micro_batch=1).activations_bytes
    wider = _train(lesson_gpu_memory, seq=4096, micro_batch=2).activations_bytes
    assert longer == 2 * base
    assert wider == pytest.approx(2 * base, rel=1e-3)  # the shared RoPE table does not grow with b


def test_activations_not_divided_by_zero_but_by_tp_with_sp(lesson_gpu_memory):
    # "Only tensor and sequence parallelism divide the activations."
    none = _train(lesson_gpu_memory, gpus=8, zero=3).bill.activation_bytes_per_layer
    tp_sp = _train(lesson_gpu_memory, gpus=8, tp=8, sp=True).bill.activation_bytes_per_layer
    assert tp_sp * 8 == pytest.approx(none, rel=0.02)


def test_full_recompute_costs_a_third_more_compute(lesson_gpu_memory):
    # "Activation checkpointing trades a third more compute for almost all of the activation
    #  memory: about 25 % fewer tokens per second."
    plain = _train(lesson_gpu_memory)
    full = _train(lesson_gpu_memory, checkpointing="full")
    assert full.step_flops / plain.step_flops == pytest.approx(4 / 3)
    assert plain.bill.flops.model == full.bill.flops.model  # 6ND either way
    # at a pinned utilisation the step time is the FLOPs': exactly 3/4 the speed
    pinned = _train(lesson_gpu_memory, mfu=0.4).tokens_per_second
    pinned_full = _train(lesson_gpu_memory, checkpointing="full", mfu=0.4).tokens_per_second
    assert pinned_full / pinned == pytest.approx(0.75)
    # from operators, "about 25 %": the recomputed forward adds a third of the forward and
    # backward's GEMMs and attention, not the optimizer step (engine/train_speed.py)
    assert full.tokens_per_second / plain.tokens_per_second == pytest.approx(0.75, abs=0.04)
    per_layer = full.bill.activation_bytes_per_layer / plain.bill.activation_bytes_per_layer
    assert per_layer < 0.05  # only the layer input survives


def test_six_n_d(lesson_gpu_memory):
    plan = _train(lesson_gpu_memory, seq=4096)
    b = plan.bill
    n = b.params.active - b.params.embedding  # the embedding lookup does no matmul
    arch = b.setup.arch
    attn = 12 * arch.num_layers * arch.attention.num_heads * arch.attention.head_dim * 4096 * 4096
    assert plan.step_flops == 6 * n * 4096 + attn


def test_adamw_states_are_master_momentum_variance(lesson_gpu_memory):
    # sizing-formulas §B: "Master weights (FP32, 4 bytes) + Momentum (FP32, 4 bytes) + Variance
    # (FP32, 4 bytes) = 12 × P bytes"
    plan = _train(lesson_gpu_memory)
    n = plan.params_total
    assert plan.bill.item("master").bytes == 4 * n
    assert plan.bill.item("optimizer").bytes == (4 + 4) * n


def test_parameters_per_gpu_are_total_over_tp_times_pp(lesson_gpu_memory):
    # "Parameters per GPU = total / (tp × pp); ZeRO then divides states by dp."
    plan = _train(lesson_gpu_memory, gpus=8, tp=2, pp=2, zero=1)
    layout = plan.layout
    assert (layout.dp, layout.tp, layout.pp) == (2, 2, 2)
    share = plan.params_total / (layout.tp * layout.pp)
    # the heaviest stage's share: exact up to the norms every tp rank keeps whole
    weights = plan.bill.item("weights").bytes
    assert weights == pytest.approx(2 * share, rel=1e-3)
    held = weights // 2  # the stage's parameters, from its bf16 weights
    assert plan.bill.item("gradients").bytes == 2 * held  # ZeRO-1 keeps whole gradients
    assert plan.bill.item("master").bytes == pytest.approx(4 * held / layout.dp, abs=8)
    assert plan.bill.item("optimizer").bytes == pytest.approx(8 * held / layout.dp, abs=8)


def test_an_oom_fails_fast_or_late(lesson_gpu_memory):
    # "It fails fast when the static states do not fit and late when activations peak on the
    #  longest batch." The training bill as a timeline of phases shows which.
    fast = _train(lesson_gpu_memory, gpus=8, zero=0, seq=8192, micro_batch=4)
    assert fast.model_states_bytes > 80 * GB  # before the first activation is saved
    late = _train(lesson_gpu_memory, gpus=8, zero=3, seq=8192)
    data = late.to_dict()
    phases = {p["name"]: p for p in data["phases"]}
    states = ("weights", "gradients", "master", "optimizer")
    assert sum(phases["forward"]["bytes_by_category"][c] for c in states) < late.budget_bytes
    assert not late.fits  # ...the run dies later, when the activations are all saved
    peak = phases[data["peak_phase"]]
    assert data["peak_phase"] != "optimizer" and peak["total_bytes"] > late.budget_bytes
    assert peak["bytes_by_category"]["activations"] == late.activations_bytes
