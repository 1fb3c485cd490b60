"""api/compare.py: headlines side by side, their ratios, and what changed between two plans.

Expected figures follow from the lesson's rules (ZeRO-3 moves 1.5 × the data-parallel traffic,
full recompute costs a third more compute, ZeRO-1 divides the optimizer by dp), not from the
engine's own output.
"""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.api.compare import compare, describe_change, headline, why_not_fewer

M = "marketed"


def _t(**kw):
    kw.setdefault("model", "llama-3.1-8b")
    return gpuplan.train(gpu_memory=M, **kw).to_dict()


def _s(**kw):
    kw.setdefault("model", "llama-3.1-8b")
    return gpuplan.serve(gpu_memory=M, **kw).to_dict()


def test_training_headline_reads_the_plan():
    data = _t(gpus=1)
    h = headline(data)
    n = data["params_total"]
    assert h["model_states_bytes"] == 16 * n  # 2 + 2 + 12 bytes per parameter
    assert h["bytes_per_param"] == 16
    assert h["scale_bytes"] == max(80 * 10**9, data["per_gpu_total_bytes"])
    assert h["gpu"]["memory_basis"] == "marketed"


def test_serving_headline_reads_the_plan():
    h = headline(_s(gpus=4, model="llama-3.1-70b", context=8192))
    assert h["layout"] == "tp 4 × pp 1"
    assert h["kv_cache_per_gpu_bytes"] > 0 and h["max_concurrent_sequences"] >= 1


def test_zero3_traffic_ratio_and_recompute_speed_change():
    stages = compare([_t(gpus=8, zero=0), _t(gpus=8, zero=3)], reference=0)
    ratio = stages["points"][1]["vs_reference"]["dp_comm_bytes_per_step"]["ratio"]
    assert ratio == pytest.approx(1.5)  # reduce-scatter + two all-gathers vs one all-reduce
    pinned = {"gpus": 8, "zero": 3, "seq": 16384, "mfu": 0.4}
    speed = compare([_t(**pinned), _t(**pinned, checkpointing="full")])
    change = speed["points"][1]["vs_reference"]["tokens_per_second"]
    assert change["change_pct"] == pytest.approx(-25.0)  # 4/3 the compute: 3/4 the speed


def test_scale_holds_every_plan_and_refused_points():
    points = [_t(gpus=8, zero=z) for z in range(4)]
    out = compare([*points, None], reference=0, current=points[2])
    assert out["scale_bytes"] == max(
        max(p["per_gpu_total_bytes"], p["gpu"]["memory_bytes"]) for p in points
    )
    assert out["points"][4] is None
    assert out["current"]["zero"] == 2


def test_why_not_fewer_names_the_largest_refused_count():
    data = _s(model="llama-3.1-70b", gpus="auto", context=8192, users=32)
    why = why_not_fewer(data)
    assert why is not None and why["gpus"] == data["gpus"] - 1
    assert why_not_fewer(_s(gpus=1)) is None


def test_zero1_divides_the_optimizer_by_eight():
    out = describe_change(_t(gpus=8, zero=0), _t(gpus=8, zero=1))
    assert {"name": "ZeRO stage", "before": "0", "after": "1"} in out["inputs"]
    optimizer = next(line for line in out["lines"] if line["key"] == "optimizer")
    assert optimizer["factor"] == "÷ 8"
    assert "Optimizer states ÷ 8" in out["caption"]
    assert out["caption"].startswith("ZeRO stage 0 → 1: ")


def test_gqa_shrinks_the_kv_cache_by_the_group_size():
    from gpuplan.catalog.models import _catalog_config

    config = {**_catalog_config("llama-3.1-70b"), "num_key_value_heads": 64}
    mha = gpuplan.serve(
        gpuplan.load_architecture(config, "llama-3.1-70b"), gpu_memory=M, gpus=4, context=8192
    ).to_dict()
    gqa = _s(model="llama-3.1-70b", gpus=4, context=8192)
    out = describe_change(mha, gqa)
    kv = next(line for line in out["lines"] if line["key"] == "kv_cache")
    assert kv["factor"] == "÷ 8"  # 64 query heads share 8 KV heads
    assert {"name": "KV heads", "before": "64", "after": "8"} in out["inputs"]


def test_an_unchanged_bill_says_so_and_new_lines_are_added():
    a = _s(gpus=1)
    assert describe_change(a, a)["caption"] == ""
    b = _s(gpus=1, headroom=0.95)
    assert describe_change(a, b)["caption"] == "headroom 90% → 95%: the bill is unchanged"
    before, after = _t(gpus=8, zero=0), _t(gpus=8, zero=1)
    added = [line for line in describe_change(before, after)["lines"] if line["before_bytes"] == 0]
    for line in added:
        assert f"{line['name']} + " in line["text"]
