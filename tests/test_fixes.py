"""planner/fixes.py: the ways out of a plan that does not fit, each one asked of the engine.

The lesson (part 6, "Serving 405B: three answers"): lower the bytes per parameter, raise the
memory per GPU, or add GPUs. Training adds a higher ZeRO stage, recompute and LoRA. Every fix
returned must fit when applied, name a distinct plan, and give each answer at most once.
"""

from __future__ import annotations

import json

import pytest

import gpuplan
from gpuplan.catalog import list_gpus
from gpuplan.planner.fixes import Fix, overflow, serving_fixes, training_fixes

MARKETED = "marketed"
# the ways out each mode offers (the lesson, part 6: fewer bytes, a bigger GPU, more GPUs; serving
# also a smaller ask; training fewer bytes by sharding, recompute or adapters, or a new split)
SERVING_ANSWERS = {"fewer_bytes", "bigger_gpu", "more_gpus", "smaller_ask"}
TRAINING_ANSWERS = {"shard_states", "recompute", "lora", "bigger_gpu", "more_gpus", "relayout"}


def _serving(**kw):
    kw.setdefault("gpu_memory", MARKETED)
    plan = gpuplan.serve(**kw)
    return kw, plan, serving_fixes(kw, plan, gpuplan.serve)


def _training(**kw):
    kw.setdefault("gpu_memory", MARKETED)
    plan = gpuplan.train(**kw)
    return kw, plan, training_fixes(kw, plan, gpuplan.train)


def _applied(kind, kwargs, fix: Fix):
    ask = gpuplan.serve if kind == "serve" else gpuplan.train
    return ask(**{**kwargs, **fix.change})


def test_405b_has_the_three_answers_and_each_fits_in_one_click():
    kwargs, plan, fixes = _serving(model="llama-3.1-405b", gpus=8, context=8192)
    assert not plan.fits
    assert [f.answer for f in fixes] == ["fewer_bytes", "bigger_gpu", "more_gpus"]
    for fix in fixes:
        again = _applied("serve", kwargs, fix)
        assert again.fits, fix
        assert again.per_gpu_total_bytes == fix.per_gpu_total_bytes
        assert again.gpus == fix.gpus
    bigger = fixes[1]
    assert bigger.gpu == "h200" and bigger.gpus == 8
    assert bigger.change["gpu_memory"] == MARKETED  # measured the way the H100 was
    assert bigger.memory_bytes == 141 * 10**9
    # the smallest bigger GPU: every same-vendor GPU between the two does not fit
    h100 = plan.bill.setup.gpu
    between = [
        g
        for g in list_gpus()
        if g.vendor == h100.vendor and h100.marketed_bytes < g.marketed_bytes < 141 * 10**9
    ]
    for g in between:
        assert not gpuplan.serve(**{**kwargs, "gpu": g.id}).fits, g.id
    more = fixes[2]
    assert more.change == {"gpus": 16, "tp": None, "pp": None}  # an explicit count


def test_a_driver_measured_plan_gets_a_driver_measured_bigger_gpu():
    kwargs, _, fixes = _serving(model="llama-3.1-405b", gpus=8, context=8192, gpu_memory=None)
    bigger = next(f for f in fixes if f.answer == "bigger_gpu")
    assert bigger.change["gpu_memory"] is None
    assert bigger.memory_bytes == gpuplan.api.common.get_gpu(bigger.gpu).memory_bytes


def test_fixes_never_list_one_plan_twice():
    # weights in fp8 bring the KV cache to fp8 too: "weights fp8" and "both fp8" are one plan
    for kw in (
        dict(model="llama-3.1-70b", gpus=1),
        dict(model="llama-3.1-70b", gpus=2, users=64, context=8192),
        dict(model="llama-3.1-70b", gpus=1, dtype="fp8", users=8),
    ):
        kwargs, _, fixes = _serving(**kw)
        answers = [f.answer for f in fixes]
        assert len(answers) == len(set(answers)), answers
        results = [
            json.dumps(_applied("serve", kwargs, f).to_dict()["per_gpu"], sort_keys=True)
            for f in fixes
        ]
        assert len(results) == len(set(results)), kw
        assert set(answers) <= set(SERVING_ANSWERS)


def test_the_cheapest_fewer_bytes_answer_is_the_kv_cache_when_that_is_enough():
    # 70B on 2 GPUs with 64 users of 8k: the KV cache is the overflow; fp8 KV halves it
    kwargs, plan, fixes = _serving(model="llama-3.1-70b", gpus=2, users=64, context=8192)
    fewer = [f for f in fixes if f.answer == "fewer_bytes"]
    if gpuplan.serve(**{**kwargs, "kv_dtype": "fp8"}).fits:
        assert fewer[0].change == {"kv_dtype": "fp8"}


def test_a_plan_that_fits_has_no_fixes():
    assert _serving(model="llama-3.1-8b", gpus=1)[2] == []
    assert _training(model="llama-3.1-8b", gpus=8, zero=3)[2] == []


def test_training_fixes_zero_recompute_lora_and_more_gpus():
    kwargs, plan, fixes = _training(model="llama-3.1-8b", gpus=8, zero=0)
    assert not plan.fits
    answers = [f.answer for f in fixes]
    assert answers[:3] == ["shard_states", "recompute", "lora"], answers
    # the planner's answer: on no more GPUs than now it splits the model instead
    assert {"more_gpus", "relayout"} & set(answers) and set(answers) <= set(TRAINING_ANSWERS)
    moved = next(f for f in fixes if f.answer in ("more_gpus", "relayout"))
    assert (moved.answer == "relayout") == (moved.gpus <= plan.gpus)
    for fix in fixes:
        assert _applied("train", kwargs, fix).fits, fix
    # the lowest ZeRO stage that fits: the least communication
    stage = fixes[0].change["zero"]
    for lower in range(1, stage):
        assert not gpuplan.train(**{**kwargs, "zero": lower}).fits
    lora = fixes[2]
    assert lora.change == {"method": "lora", "lora_rank": 16}


def test_training_more_gpus_frees_the_zero_stage_when_it_must():
    # 70B on one GPU: nothing but more GPUs, and plain ZeRO-0 needs the planner's choice
    kwargs, plan, fixes = _training(model="llama-3.1-70b", gpus=1, zero=0)
    assert not plan.fits
    more = [f for f in fixes if f.answer == "more_gpus"]
    assert len(more) == 1 and more[0].change["gpus"] == "auto"
    assert _applied("train", kwargs, more[0]).gpus == more[0].gpus


def test_fix_to_dict_is_json():
    _, _, fixes = _serving(model="llama-3.1-405b", gpus=8)
    data = json.loads(json.dumps([f.to_dict() for f in fixes]))
    assert {"answer", "title", "label", "change", "gpus", "gpu", "per_gpu_total_bytes"} <= set(
        data[0]
    )
    assert data[0]["title"] == "Fewer bytes per parameter"


@pytest.mark.parametrize(
    ("items", "memory", "budget", "status", "memory_at", "budget_at"),
    [
        ([10, 20], 100, 90, "fits", None, None),
        ([50, 45], 100, 90, "over_headroom", None, "b"),
        ([80, 30], 100, 90, "oom", "b", "b"),
        ([120, 5], 100, 90, "oom", "a", "a"),
    ],
)
def test_overflow_says_where_the_stack_crosses(items, memory, budget, status, memory_at, budget_at):
    lines = [{"key": k, "bytes": b} for k, b in zip("ab", items, strict=True)]
    out = overflow(lines, memory, budget)
    assert out["status"] == status
    assert out["crosses_memory_at"] == memory_at and out["crosses_budget_at"] == budget_at
    assert out["over_memory_bytes"] == max(0, sum(items) - memory)
