"""The training bill as a timeline of phases: the peak is the largest phase, each phase holds
what the framework keeps at that moment, and the loss and recompute modes follow their sources.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.engine.allocator import CACHING_FRAGMENTATION, predicts, reserve_bytes
from gpuplan.engine.loss import LossSpec, loss_memory, parse_loss
from gpuplan.errors import GpuplanError

GB = 10**9
PHASES = ("forward", "loss", "backward_last", "backward_first", "optimizer")


def _plan(**kw):
    kw.setdefault("gpus", 8)
    return gpuplan.train("llama-3.1-8b", **kw)


def test_the_bill_is_the_largest_phase():
    plan = _plan(framework="torchtitan", seq=8192, micro_batch=2, checkpointing="op")
    phases = {p.name: p for p in plan.bill.phases}
    assert tuple(phases) == PHASES
    peak = max(phases.values(), key=lambda p: p.total)
    assert plan.bill.peak_phase == peak.name
    keys = [i.key for i in plan.items]
    assert keys[-2:] == ["allocator_reserve", "cuda_context"]
    assert plan.bill.allocated_bytes == peak.total == sum(i.bytes for i in plan.items[:-2])
    assert plan.bill.reserved_bytes == peak.total + reserve_bytes(peak.total)
    assert predicts("allocator_reserve") == "reserved" and predicts("weights") == "allocated"
    data = plan.to_dict()
    assert [p["name"] for p in data["phases"]] == list(PHASES)
    for p in data["phases"]:
        assert p["total_bytes"] == sum(p["bytes_by_category"].values())
    assert data["memory_figures"]["nvidia_smi_bytes"] == plan.per_gpu_total_bytes


def test_generic_profile_is_the_lessons_bill():
    # the lesson's statics: all of them in every phase, no allocator reserve (its 90 % headroom)
    plan = _plan(gpus=1)
    n = plan.params_total
    for phase in plan.bill.phases:
        lines = {line.key: line.bytes for line in phase.lines}
        assert (
            lines["weights"] + lines["gradients"] + lines["master"] + lines["optimizer"] == 16 * n
        )
    assert "allocator_reserve" not in {i.key for i in plan.items}


def test_set_to_none_frees_gradients_until_backward():
    kept = _plan(framework="ddp", recipe="adamw-bf16", gpus=1, grads="persistent")
    freed = _plan(framework="ddp", recipe="adamw-bf16", gpus=1, grads="set_to_none")
    grads = freed.bill.states.gradients
    fwd = {p.name: {i.key: i.bytes for i in p.lines} for p in freed.bill.phases}
    assert fwd["forward"]["gradients"] == 0 and fwd["loss"]["gradients"] == 0
    assert 0 < fwd["backward_last"]["gradients"] < fwd["backward_first"]["gradients"] <= grads
    assert fwd["optimizer"]["gradients"] == grads
    for phase in kept.bill.phases:
        assert {i.key: i.bytes for i in phase.lines}["gradients"] == grads
    # accumulating over micro-batches keeps them from the first backward on
    accum = _plan(framework="ddp", recipe="adamw-bf16", gpus=1, grad_accum=4)
    assert {i.key: i.bytes for i in accum.bill.phases[0].lines}["gradients"] == grads


def test_optimizer_in_backward_has_no_optimizer_phase_and_one_gradient():
    plan = _plan(framework="torchtune", gpus=1, optimizer_in_backward=True, grad_accum=1)
    names = [p.name for p in plan.bill.phases]
    assert "optimizer" not in names
    biggest = 128_256 * 4096  # the embedding / LM head matrix
    first = {i.key: i.bytes for i in plan.bill.phase("backward_first").lines}
    assert first["gradients"] == pytest.approx(2 * biggest, rel=1e-4)
    with pytest.raises(GpuplanError, match="accumulate"):
        _plan(framework="torchtune", gpus=1, optimizer_in_backward=True, grad_accum=2)


def test_foreach_optimizer_holds_one_state_more():
    fused = _plan(framework="fsdp2", optimizer_kernel="fused")
    foreach = _plan(framework="fsdp2", optimizer_kernel="foreach")
    step = {i.key: i.bytes for i in foreach.bill.phase("optimizer").lines}
    assert step["optimizer_temporaries"] == foreach.bill.states.optimizer // 2
    assert (
        foreach.bill.phase("optimizer").total - fused.bill.phase("optimizer").total
        == (step["optimizer_temporaries"])
    )


@pytest.mark.parametrize("a", [2, 4])
def test_loss_modes_from_first_principles(a):
    t, v, h = 4096, 128_256, 4096
    tv = t * v
    std = loss_memory(LossSpec("standard"), t, v, h, a)
    # logits + fp32 copy (none in fp32) + saved log-softmax; backward: saved + nll grad + grad
    assert std.forward == (a + (4 if a == 2 else 0) + 4) * tv
    assert std.backward == 12 * tv
    assert loss_memory(LossSpec("standard", keep_logits=True), t, v, h, a).backward == (12 + a) * tv
    chunked = loss_memory(parse_loss("chunked:8"), t, v, h, a)
    assert chunked.saved == 4 * tv and chunked.backward == 4 * tv + 2 * (-(-4 * tv // 8))
    assert loss_memory(LossSpec("vocab_parallel"), t, v, h, a).backward == (4 + a) * tv
    compiled = loss_memory(LossSpec("compiled"), t, v, h, a)
    assert compiled.backward == 2 * a * tv + 4 * t
    plain = loss_memory(LossSpec("plain"), t, v, h, a)
    assert (plain.saved, plain.backward) == (a * tv, 3 * a * tv)
    fused = loss_memory(LossSpec("fused"), t, v, h, a)
    assert fused.forward < chunked.forward <= std.forward
    # DTensor loss parallel: x − max and its exp beside the copy; backward (zeros + exp(x)) × grad
    par = loss_memory(LossSpec("loss_parallel"), t, v, h, a)
    assert par.forward == (a + (4 if a == 2 else 0) + 8) * tv and par.backward == 16 * tv


def test_torchtitan_tensor_parallel_runs_the_loss_parallel():
    kw = dict(gpus=8, seq=4096, framework="torchtitan", checkpointing="full")
    plain = gpuplan.train("llama-3.1-8b", "h100", **kw).bill.setup.loss_spec
    tp = gpuplan.train("llama-3.1-8b", "h100", tp=8, **kw).bill.setup.loss_spec
    assert (plain.mode, tp.mode) == ("standard", "loss_parallel")
    given = gpuplan.train("llama-3.1-8b", "h100", tp=8, loss="standard", **kw)
    assert given.bill.setup.loss_spec.mode == "standard"


def test_torchtune_compile_reaches_only_its_chunked_losses():
    kw = dict(gpus=1, seq=4096, framework="torchtune", compile=True)
    standard = gpuplan.train("llama-3.2-3b", "a100-80gb", loss="standard", **kw)
    chunked = gpuplan.train("llama-3.2-3b", "a100-80gb", loss="chunked:8", **kw)
    assert not standard.bill.setup.loss_spec.compiled and chunked.bill.setup.loss_spec.compiled


def test_bad_loss_and_checkpointing_are_one_line_errors():
    for text in ("chunky", "chunked:0", "standard:4"):
        with pytest.raises(GpuplanError):
            parse_loss(text)
    for value in ("every:0", "sometimes", "block:x"):
        with pytest.raises(GpuplanError, match="checkpointing"):
            _plan(checkpointing=value)


def test_recompute_modes_order_as_the_frameworks_define_them():
    kw = {"framework": "torchtitan", "seq": 8192}
    act = {
        r: _plan(checkpointing=r, **kw).activations_bytes
        for r in ("none", "selective", "op", "every:2", "full", "uniform:2", "block:8")
    }
    # flash attention stores no s² scores: Megatron's selective saves nothing more
    assert act["selective"] == act["none"]
    assert act["full"] < act["op"] < act["every:2"] < act["none"]
    assert act["uniform:2"] < act["full"] < act["block:8"] < act["none"]


def test_op_selective_saves_every_other_matmul():
    from gpuplan.engine.activations import ActivationSpec, mm_outputs, op_sac_tensors

    arch = gpuplan.load_architecture("llama-3.1-8b")
    spec = ActivationSpec(seq=1024, micro_batch=1)
    names = [s.name for s in op_sac_tensors(arch, arch.layers[0], spec)]
    mms = [s.name for s in mm_outputs(arch, arch.layers[0], spec)]
    assert mms == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert names[3:] == ["q_proj", "v_proj", "gate_proj", "down_proj"]


def test_allocator_reserve_is_gmlakes_fraction():
    assert reserve_bytes(85 * GB) == pytest.approx(85 * GB * CACHING_FRAGMENTATION / 0.85)


@settings(max_examples=25, deadline=None)
@given(
    framework=st.sampled_from(["torchtitan", "torchtune", "megatron", "deepspeed", "fsdp2", "ddp"]),
    gpus=st.sampled_from([1, 2, 8]),
    recompute=st.sampled_from(["none", "op", "full", "every:2"]),
    seq=st.sampled_from([512, 2048]),
)
def test_phases_add_up_and_are_never_negative(framework, gpus, recompute, seq):
    plan = gpuplan.train(
        "qwen3-8b", framework=framework, gpus=gpus, checkpointing=recompute, seq=seq
    )
    for phase in plan.bill.phases:
        assert all(line.bytes >= 0 for line in phase.lines)
        assert phase.total == sum(phase.by_category().values())
    assert plan.bill.allocated_bytes == max(p.total for p in plan.bill.phases)
