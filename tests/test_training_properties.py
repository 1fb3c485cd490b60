"""Invariants of the training bill, checked over many inputs with hypothesis."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.engine.bill import total_bytes
from gpuplan.engine.sharding import tp_problem

MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v2-lite", "mixtral-8x7b", "gpt2", "phi-4"]
RECIPES = [
    "adamw-bf16",
    "megatron",
    "adamw-pure-bf16",
    "adamw-fp32",
    "adamw-8bit",
    "adafactor",
    "sgd",
]

seqs = st.sampled_from([128, 512, 1000, 2048, 4096, 8192, 32768])
batches = st.integers(min_value=1, max_value=16)
zeros = st.integers(min_value=0, max_value=3)
ckpt = st.sampled_from(["none", "selective", "full"])


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    recipe=st.sampled_from(RECIPES),
    zero=zeros,
    dp=st.integers(1, 256),
    more=st.integers(1, 256),
)
def test_per_gpu_statics_never_grow_with_dp(model, recipe, zero, dp, more):
    a = gpuplan.train(model, "h200", gpus=dp, zero=zero, recipe=recipe, seq=512)
    b = gpuplan.train(model, "h200", gpus=dp + more, zero=zero, recipe=recipe, seq=512)
    assert b.model_states_bytes <= a.model_states_bytes
    if zero == 0:
        assert b.model_states_bytes == a.model_states_bytes


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    seq=seqs,
    extra=st.integers(1, 8192),
    b=batches,
    more=st.integers(1, 8),
    checkpointing=ckpt,
    kernel=st.sampled_from(["flash", "eager"]),
)
def test_activations_monotone_in_sequence_and_micro_batch(
    model, seq, extra, b, more, checkpointing, kernel
):
    def act(s, mb):
        return gpuplan.train(
            model,
            "h200",
            gpus=1,
            seq=s,
            micro_batch=mb,
            checkpointing=checkpointing,
            attention=kernel,
        ).activations_bytes

    base = act(seq, b)
    assert act(seq + extra, b) >= base
    assert act(seq, b + more) >= base


@settings(max_examples=80, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    recipe=st.sampled_from(RECIPES),
    zero=zeros,
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 8]),
    seq=seqs,
    checkpointing=ckpt,
    lora=st.sampled_from([None, 8, 64]),
    qlora=st.booleans(),
    offload=st.sampled_from([None, "optimizer", "params"]),
)
def test_parts_add_up(model, recipe, zero, tp, pp, dp, seq, checkpointing, lora, qlora, offload):
    assume(tp_problem(gpuplan.load_architecture(model), tp) is None)
    if offload == "params":
        zero = 3
    if offload == "optimizer" and zero == 0:
        zero = 1
    plan = gpuplan.train(
        model,
        "h200",
        gpus=dp * tp * pp,
        tp=tp,
        pp=pp,
        zero=zero,
        recipe=recipe,
        seq=seq,
        checkpointing=checkpointing,
        lora_rank=lora,
        qlora=qlora and lora is not None,
        offload=offload,
    )
    data = plan.to_dict()
    assert plan.per_gpu_total_bytes == total_bytes(plan.items)
    assert data["per_gpu_total_bytes"] == sum(i["bytes"] for i in data["per_gpu"]["items"])
    keys = {"weights", "gradients", "master", "optimizer"}
    assert plan.model_states_bytes == sum(i.bytes for i in plan.items if i.key in keys)
    assert data["host"]["per_gpu_bytes"] == sum(i["bytes"] for i in data["host"]["items"])
    assert all(i.bytes >= 0 for i in plan.items)
    assert data["fits"] == (plan.per_gpu_total_bytes <= plan.budget_bytes)


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), zero=st.integers(1, 3), dp=st.integers(2, 64))
def test_offload_moves_states_to_the_host(model, zero, dp):
    on = gpuplan.train(model, "h200", gpus=dp, zero=zero, seq=512)
    off = gpuplan.train(model, "h200", gpus=dp, zero=zero, seq=512, offload="optimizer")
    moved = sum(on.item(k).bytes for k in ("gradients", "master", "optimizer"))
    assert off.bill.host_bytes_per_gpu == moved
    assert off.per_gpu_total_bytes == on.per_gpu_total_bytes - moved
