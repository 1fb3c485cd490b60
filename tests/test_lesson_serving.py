"""The serving numbers worked in the mission documents, reproduced through the public API.

Expected values are the documents' own figures (lesson-gpu-memory-math.txt, sizing-formulas.txt),
compared at the precision the documents print them, or derived here from first principles.
"""

import json
from importlib import resources

import pytest

import gpuplan

GB = 10**9
H100 = "h100"


def _config(name: str) -> dict:
    text = resources.files("gpuplan.catalog").joinpath(f"data/models/{name}.json").read_text()
    return json.loads(text)


def test_8b_weights_are_params_times_two_bytes(lesson_gpu_memory):
    # "Llama 3.1 8B has 8.03 billion parameters ... 8.03 B × 2 = 16 GB of weights"
    plan = gpuplan.serve("llama-3.1-8b", H100, gpu_memory=lesson_gpu_memory)
    assert round(plan.params_total / 1e9, 2) == 8.03
    assert plan.weights_bytes == plan.params_total * 2
    assert round(plan.weights_bytes / GB, 2) == 16.06
    assert plan.bill.item("weights").explain() == "8.03 B × 2 bytes = 16.06 GB"


def test_8b_serving_plan_is_19_gb_of_80(lesson_gpu_memory):
    # "Add a 1.5 GB workspace, 1 GB of CUDA context and 0.54 GB of KV cache for one 4,096-token
    #  conversation, and the plan comes to 19 GB of 80."
    plan = gpuplan.serve("llama-3.1-8b", H100, context=4096, users=1, gpu_memory=lesson_gpu_memory)
    items = {i.key: i.bytes for i in plan.items}
    assert items["workspace"] == 1.5 * GB
    assert items["cuda_context"] == 1 * GB
    assert round(items["kv_cache"] / GB, 2) == 0.54
    assert round(plan.per_gpu_total_bytes / GB, 1) == 19.1
    assert plan.bill.setup.gpu.memory_bytes == 80 * GB
    assert plan.fits and plan.gpus == 1


def test_8b_kv_cache_is_0_13_mb_per_token_and_17_gb_at_128k():
    # "An 8B Llama holds 0.13 MB per token: a 128k-token context is 17 GB of cache, larger than
    #  the model's own weights."
    plan = gpuplan.serve("llama-3.1-8b", H100, context=128 * 1024)
    assert (
        plan.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    )  # 2 × layers × KV heads × head dim × bytes
    assert round(plan.kv_bytes_per_token / 1e6, 2) == 0.13
    assert round(plan.bill.kv_bytes_per_sequence / GB) == 17
    assert plan.bill.kv_bytes_per_sequence > plan.weights_bytes


def test_70b_does_not_fit_one_80gb_gpu(lesson_gpu_memory):
    # "A model fits only when every weight is resident on the GPUs serving it"
    plan = gpuplan.serve("llama-3.1-70b", H100, gpus=1, gpu_memory=lesson_gpu_memory)
    assert not plan.fits
    assert plan.bill.item("weights").bytes > 80 * GB


def test_405b_bf16_does_not_fit_8x80_but_fp8_does(lesson_gpu_memory):
    # "total weights must be less than the HBM of all the GPUs together, with room left over"
    bf16 = gpuplan.serve("llama-3.1-405b", H100, gpus=8, gpu_memory=lesson_gpu_memory)
    assert bf16.weights_bytes > 8 * 80 * GB
    assert not bf16.fits
    fp8 = gpuplan.serve("llama-3.1-405b", H100, gpus=8, dtype="fp8", gpu_memory=lesson_gpu_memory)
    assert fp8.weights_bytes == fp8.params_total  # 1 byte per parameter
    assert fp8.fits


def test_precision_dial_bytes_per_param():
    # "Bytes per parameter: fp32 4, bf16 2, fp8 1, 4-bit 0.5"
    for name, expected in (
        ("fp32", 4),
        ("bf16", 2),
        ("fp16", 2),
        ("fp8", 1),
        ("int8", 1),
        ("int4", 0.5),
    ):
        assert gpuplan.get_precision(name).bytes_per_param == expected


def test_without_gqa_the_kv_cache_grows_8x():
    # "64 heads sharing 8 KV heads is an 8× saving"
    config = _config("meta-llama--Llama-3.1-70B")
    no_gqa = dict(config, num_key_value_heads=config["num_attention_heads"])
    with_gqa = gpuplan.serve(config, H100, gpus=8)
    without = gpuplan.serve(no_gqa, H100, gpus=8)
    assert config["num_attention_heads"] // config["num_key_value_heads"] == 8
    assert without.kv_bytes_per_token == 8 * with_gqa.kv_bytes_per_token
    assert without.bill.item("kv_cache").bytes == 8 * with_gqa.bill.item("kv_cache").bytes


def test_weights_fit_but_users_do_not():
    # "Weights at 90 % of HBM is a server with no room for users": the 8B on a 24 GB L4 holds
    # its weights, but not 32 conversations of 4k tokens.
    plan = gpuplan.serve("llama-3.1-8b", "l4", gpus=1, context=4096, users=32)
    weights_and_overhead = sum(i.bytes for i in plan.items if i.key != "kv_cache")
    assert weights_and_overhead < plan.budget_bytes
    assert not plan.fits
    assert 1 <= plan.max_concurrent_sequences < 32


def test_70b_fp16_serving_example_from_the_formula_sheet(lesson_gpu_memory):
    # "Weights: 70 × 2 = 140 GB. KV Cache (batch 16, 4k tokens): ~21.5 GB ... Requires 4 × 80GB"
    plan = gpuplan.serve(
        "llama-3.1-70b", H100, dtype="fp16", context=4096, users=16, gpu_memory=lesson_gpu_memory
    )
    assert plan.weights_bytes == pytest.approx(140 * GB, rel=0.01)
    assert round(16 * plan.bill.kv_bytes_per_sequence / GB, 1) == 21.5
    assert plan.gpus == 4 and plan.tp == 4 and plan.fits
    reasons = dict((a.gpus, a.reason) for a in plan.search)
    assert "does not fit" in reasons[1] and "does not fit" in reasons[2]
    assert reasons[3] == "tp=3 does not divide 64 attention heads"


def test_70b_fits_two_80gb_gpus_in_fp8(lesson_gpu_memory):
    # "... or 2 × 80GB with FP8"
    plan = gpuplan.serve(
        "llama-3.1-70b", H100, dtype="fp8", context=4096, users=16, gpu_memory=lesson_gpu_memory
    )
    assert plan.gpus == 2 and plan.fits


def test_kv_capacity_of_four_gpus_follows_the_lesson_formula(lesson_gpu_memory):
    # "KV capacity in tokens = (HBM budget − weights − overhead) × GPUs / KV bytes per token.
    #  Divide it by the context length to get concurrent users."
    plan = gpuplan.serve("llama-3.1-70b", H100, gpus=4, context=4096, gpu_memory=lesson_gpu_memory)
    budget = 0.9 * 80 * GB
    weights_per_gpu = plan.bill.item("weights").bytes
    overhead = 1.5 * GB + 1 * GB
    expected = (budget - weights_per_gpu - overhead) * 4 / plan.kv_bytes_per_token
    assert plan.kv_capacity_tokens == pytest.approx(expected, abs=4)
    assert plan.max_concurrent_sequences == int(expected // 4096)


def test_headroom_is_90_percent_by_default(lesson_gpu_memory):
    # "Round a plan up until it uses at most about 90 % of HBM."
    plan = gpuplan.serve("llama-3.1-8b", H100, gpu_memory=lesson_gpu_memory)
    assert plan.budget_bytes == 72 * GB


def test_405b_three_answers(lesson_gpu_memory):
    # "lower the bytes per parameter, raise the memory per GPU, or add GPUs"
    base = gpuplan.serve("llama-3.1-405b", H100, gpus=8, gpu_memory=lesson_gpu_memory)
    assert not base.fits
    assert gpuplan.serve(
        "llama-3.1-405b", H100, gpus=8, dtype="fp8", gpu_memory=lesson_gpu_memory
    ).fits
    assert gpuplan.serve("llama-3.1-405b", "h200", gpus=8).fits
    more = gpuplan.serve("llama-3.1-405b", H100, gpu_memory=lesson_gpu_memory)
    assert more.fits and more.gpus > 8 and more.pp > 1


def test_tensor_parallelism_divides_the_weights_by_tp(lesson_gpu_memory):
    # "Tensor parallelism divides the weights by tp": 405B in bf16 is 812 GB, an eighth of it on
    # each of eight GPUs (the lesson's step 4: 812 GB ÷ 8 = 101.47 GB, more than an H100 has)
    plan = gpuplan.serve("llama-3.1-405b", H100, gpus=8, gpu_memory=lesson_gpu_memory)
    assert plan.tp == 8 and round(plan.weights_bytes / GB) == 812
    per_gpu = plan.bill.item("weights").bytes
    # the norms are whole on every rank: a few MB above an exact eighth
    assert per_gpu == pytest.approx(plan.weights_bytes / 8, rel=1e-3)
    assert round(per_gpu / GB, 2) == 101.47 and per_gpu > 80 * GB


def test_kv_cache_is_per_token_times_context_times_sequences(lesson_gpu_memory):
    # "KV cache = 2 × layers × KV heads × head dim × bytes per token, times context length,
    #  times concurrent sequences"
    for context, users in ((4096, 1), (8192, 3), (131072, 2)):
        plan = gpuplan.serve(
            "llama-3.1-8b", H100, gpus=1, context=context, users=users, gpu_memory="1TB"
        )
        expected = 2 * 32 * 8 * 128 * 2 * context * users
        assert plan.bill.item("kv_cache").bytes == expected


def test_70b_fp16_total_from_the_formula_sheet(lesson_gpu_memory):
    # "Activation overhead: ~5 GB. Total: ~166.5 GB VRAM": the sheet's activation buffer is
    # gpuplan's workspace line (activations and scratch of the forward pass), 1.5 GB on each of
    # the plan's 4 GPUs = 6 GB, within the sheet's "~"; its total (140 + 21.5 + 5) is gpuplan's
    # weights + KV cache + workspace over the 4 GPUs, 1.3 % above it (70.55 B parameters, not
    # 70 B, and 6 GB of workspace). gpuplan also bills the 1 GB CUDA context per GPU, which the
    # sheet leaves out.
    plan = gpuplan.serve(
        "llama-3.1-70b", H100, dtype="fp16", context=4096, users=16, gpu_memory=lesson_gpu_memory
    )
    items = {i.key: i.bytes * plan.gpus for i in plan.items}
    assert items["workspace"] == 4 * 1.5 * GB
    assert items["workspace"] == pytest.approx(5 * GB, abs=1 * GB)
    sheet_total = items["weights"] + items["kv_cache"] + items["workspace"]
    assert sheet_total == pytest.approx(166.5 * GB, rel=0.02)
    assert plan.per_gpu_total_bytes * plan.gpus == sheet_total + items["cuda_context"]
