"""Invariants of the serving bill, checked over many inputs with hypothesis."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.engine.bill import total_bytes
from gpuplan.engine.sharding import tp_problem

MODELS = [
    "llama-3.1-8b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "deepseek-v2-lite",
    "mixtral-8x7b",
    "gpt2",
    "phi-4",
]

contexts = st.integers(min_value=1, max_value=256 * 1024)
users = st.integers(min_value=1, max_value=512)


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), context=contexts, extra=st.integers(1, 8192), n=users)
def test_memory_is_monotone_in_context(model, context, extra, n):
    a = gpuplan.serve(model, "h200", gpus=1, context=context, users=n)
    b = gpuplan.serve(model, "h200", gpus=1, context=context + extra, users=n)
    assert b.per_gpu_total_bytes >= a.per_gpu_total_bytes


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), context=contexts, n=users, extra=st.integers(1, 64))
def test_memory_is_monotone_in_users(model, context, n, extra):
    a = gpuplan.serve(model, "h200", gpus=1, context=context, users=n)
    b = gpuplan.serve(model, "h200", gpus=1, context=context, users=n + extra)
    assert b.per_gpu_total_bytes >= a.per_gpu_total_bytes


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), context=contexts, n=users, tp=st.sampled_from([1, 2, 4, 8]))
def test_parts_add_up_to_the_total(model, context, n, tp):
    assume(tp_problem(gpuplan.load_architecture(model), tp) is None)
    plan = gpuplan.serve(model, "h100", tp=tp, context=context, users=n)
    data = plan.to_dict()
    assert total_bytes(plan.items) == plan.per_gpu_total_bytes
    assert sum(i["bytes"] for i in data["per_gpu"]["items"]) == data["per_gpu_total_bytes"]


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), context=contexts)
def test_more_tensor_parallel_gpus_never_raise_per_gpu_weights(model, context):
    previous = None
    arch = gpuplan.load_architecture(model)
    for tp in (t for t in (1, 2, 4, 8) if tp_problem(arch, t) is None):
        plan = gpuplan.serve(model, "h100", tp=tp, context=context)
        weights = plan.bill.item("weights").bytes
        if previous is not None:
            assert weights <= previous
        previous = weights


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), headroom=st.floats(0.05, 1.0), context=contexts)
def test_fits_means_under_budget(model, headroom, context):
    plan = gpuplan.serve(model, "h100", gpus=1, headroom=headroom, context=context)
    if plan.fits:
        assert plan.per_gpu_total_bytes <= plan.budget_bytes <= plan.bill.setup.gpu.memory_bytes
