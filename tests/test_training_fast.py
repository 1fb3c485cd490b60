"""The training bill's fast paths give what the plain ones give: the peak phase summed field by
field, hashes computed once, and the sub-results memoised by what they depend on."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.engine.activations import ActivationSpec
from gpuplan.engine.model_states import stage_param_list
from gpuplan.engine.phases import Amounts, peak_phase, phase_totals
from gpuplan.engine.sharding import Layout
from gpuplan.engine.training import _distinct_stages, _stage, training_bill

CASES = [
    dict(model="llama-3.1-8b"),
    dict(model="llama-3.1-8b", method="qlora"),
    dict(model="llama-3.1-8b", framework="torchtitan", gpus=8),
    dict(model="llama-3.1-8b", framework="ddp", gpus=2),
    dict(model="llama-3.1-8b", framework="deepspeed", offload="optimizer", zero=2, gpus=4),
    dict(model="llama-3.1-8b", framework="torchtune", optimizer_in_backward=True),
    dict(model="llama-3.1-70b", framework="megatron", tp=8, pp=2, vpp=2, gpus=16, zero=1),
    dict(model="llama-3.1-70b", tp=4, pp=4, gpus=16, zero=1),
    dict(model="mixtral-8x7b", ep=8, gpus=8, zero=3),
    dict(model="llama-3.1-8b", recipe="adamw-fp32", gpus=2, dp=2),
]


def _first_largest(totals: dict[str, int]) -> tuple[str, int]:
    name = max(totals, key=lambda k: totals[k])
    return name, totals[name]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_peak_phase_is_the_first_largest_phase_total(kw):
    kw = dict(kw)
    setup = gpuplan.train(kw.pop("model"), **kw).bill.setup
    for seq, mb, rec in itertools.product((1024, 8192), (1, 4), ("none", "full", "selective")):
        s = replace(setup, seq=seq, micro_batch=mb, recompute=rec)
        bill = training_bill(s)
        assert bill.allocated_bytes == max(phase_totals(bill.amounts).values())
        lo = s.layout
        stages = _distinct_stages(s.arch, lo.tp, lo.pp, lo.ep)
        spec = gpuplan.engine.training._activation_spec(s)
        for stage_params in stages:
            one = _stage(bill.setup, spec, stage_params, 0.0 if s.lora is None else _frac(bill))
            assert (one.peak_phase, one.peak) == _first_largest(phase_totals(one.amounts))


def _frac(bill) -> float:
    from gpuplan.engine.training import _base_bytes

    return _base_bytes(bill.setup.arch, bill.setup.base) / bill.params.total


amount = st.integers(min_value=0, max_value=10**6)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(amount, min_size=29, max_size=29),
    held=st.lists(st.tuples(st.sampled_from(("ddp_buckets", "grad_buffer")), amount), max_size=2),
    in_backward=st.booleans(),
    last=st.booleans(),
)
def test_peak_phase_matches_the_phase_dicts(values, held, in_backward, last):
    names = [f.name for f in fields(Amounts)]
    plain = [n for n in names if n not in ("held", "optimizer_in_backward", "last_stage")]
    kw = dict(zip(plain, values, strict=True))
    a = Amounts(**kw, held=tuple(held), optimizer_in_backward=in_backward, last_stage=last)
    assert peak_phase(a) == _first_largest(phase_totals(a))


def test_cached_hash_is_the_dataclass_hash_and_equality_is_untouched():
    lo = Layout(dp=8, tp=2, zero=3)
    assert hash(lo) == hash(tuple(getattr(lo, f.name) for f in fields(Layout)))
    assert hash(lo) == hash(lo) and lo == Layout(dp=8, tp=2, zero=3)
    assert lo != Layout(dp=8, tp=2, zero=2)
    spec = ActivationSpec(seq=4096, micro_batch=2)
    assert spec == replace(spec) and hash(spec) == hash(replace(spec))
    assert "_hash" not in repr(lo)


def test_memoised_lines_are_equal_across_bills_and_phases_stay_fresh():
    setup = gpuplan.train("llama-3.1-8b", gpus=8, zero=3).bill.setup
    a = training_bill(setup)
    b = training_bill(replace(setup, seq=setup.seq * 2))
    assert a.items[0] == b.items[0]  # the weights line: the same layout, the same line
    assert a.phases is not b.phases
    assert a.notes == training_bill(setup).notes and isinstance(a.notes, tuple)


def test_records_built_per_call_keep_their_defaults_and_repr():
    from gpuplan.engine.bill import LineItem

    line = LineItem("k", "K", 1, "f")
    assert line.inputs == {} and line.inputs is not LineItem("k", "K", 1, "f").inputs
    assert line.category == "other" and line.template == ""
    assert (
        repr(Layout(dp=2))
        == "Layout(dp=2, tp=1, pp=1, cp=1, ep=1, sp=False, zero=0, fsdp=None, hybrid=False, gpus_per_node=8, vpp=1, etp=0)"
    )


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_fitting_bill_is_the_bill_when_it_fits_and_none_when_not(kw):
    from gpuplan.engine.training import fitting_training_bill

    kw = dict(kw)
    setup = gpuplan.train(kw.pop("model"), **kw).bill.setup
    full = training_bill(setup).per_gpu_total_bytes
    budgets = (full - 1, full, full + 1)  # just over, exactly at, just under the budget
    for memory, mb in itertools.product(budgets, (1, 2)):
        s = replace(setup, gpu=setup.gpu.with_memory(memory), headroom=1.0, micro_batch=mb)
        bill = training_bill(s)
        assert fitting_training_bill(s) == (bill if bill.fits else None)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3", "mixtral-8x7b", "gemma-2-9b-it"])
def test_stage_parameters_add_up_to_the_model(model):
    from gpuplan.engine.params import count_params

    arch = gpuplan.train(model, gpus=1).bill.setup.arch
    total = count_params(arch).total
    for pp in (1, 3, 7):
        stages = stage_param_list(arch, 1, pp)
        tied_copy = arch.vocab_size * arch.hidden_size if arch.tie_word_embeddings and pp > 1 else 0
        assert sum(st.dense + st.experts for st in stages) == total + tied_copy
        assert [st.layers for st in stages] == [s.layers for s in stages]
        assert sum(len(st.layers) for st in stages) == arch.num_layers
