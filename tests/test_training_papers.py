"""Published tables and formulas: the ZeRO paper's model states, Megatron's activations."""

import pytest

import gpuplan
from gpuplan.catalog.recipes import get_recipe
from gpuplan.engine.activations import (
    ActivationSpec,
    layer_bytes,
    layer_tensors,
    megatron_layer_bytes,
)
from gpuplan.engine.cost import dp_comm_bytes
from gpuplan.engine.model_states import model_states
from gpuplan.engine.sharding import Layout

GB = 10**9


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        # Rajbhandari et al. 2020, Table 1: 7.5B model, K = 12, per-device GB for
        # baseline / P_os / P_os+g / P_os+g+p
        (64, (120, 31.4, 16.6, 1.9)),
        (1024, (120, 30.1, 15.1, 0.1)),
    ],
)
def test_zero_paper_table_1(gpus, expected):
    recipe = get_recipe("adamw-bf16")  # 2Ψ + 2Ψ + KΨ, K = 12
    psi = 7_500_000_000
    got = [model_states(recipe, Layout(dp=gpus, zero=z), psi).total / GB for z in range(4)]
    assert [round(g, 1) for g in got] == list(expected)


def test_zero_paper_communication():
    # ZeRO §7: P_os and P_os+g keep data parallelism's 2Ψ; P_os+g+p costs 3Ψ (1.5×)
    psi, d = 1_000_000, 64
    base = dp_comm_bytes(psi, 2, 2, 0, d)
    assert dp_comm_bytes(psi, 2, 2, 1, d) == base
    assert dp_comm_bytes(psi, 2, 2, 2, d) == base
    assert dp_comm_bytes(psi, 2, 2, 3, d) == pytest.approx(1.5 * base)
    assert base == pytest.approx(2 * 2 * psi * (d - 1) / d)


def test_megatron_distributed_optimizer_bytes():
    # Megatron-LM docs: bf16 params + fp32 grads: 18 bytes/param, 6 + 12/d distributed;
    # fp16: 20 bytes, 4 + 16/d
    for rid, plain, dist in (("megatron", 18, 6 + 12 / 8), ("megatron-fp16", 20, 4 + 16 / 8)):
        r = get_recipe(rid)
        assert r.bytes_per_param == plain
        got = model_states(r, Layout(dp=8, zero=1), 8_000_000).total / 8_000_000
        assert got == pytest.approx(dist)


# Korthikanti et al. 2022, Table 3 GPT configurations: heads a, hidden h, tp t; s = 2048
GPT_CONFIGS = {
    "22B": (64, 6144, 8),
    "175B": (96, 12288, 8),
    "530B": (128, 20480, 8),
    "1T": (160, 25600, 8),
}


@pytest.mark.parametrize("name", list(GPT_CONFIGS))
def test_megatron_activation_formulas(name):
    a, h, t = GPT_CONFIGS[name]
    s, b = 2048, 1
    sbh = s * b * h
    # eq. 1: sbh(34 + 5as/h) without parallelism
    assert megatron_layer_bytes(s, b, h, a) == pytest.approx(sbh * (34 + 5 * a * s / h))
    # eq. 2: tensor parallel divides all but 10 sbh
    assert megatron_layer_bytes(s, b, h, a, t) == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t))
    )
    # eq. 4: with sequence parallelism everything is ÷ t
    assert megatron_layer_bytes(s, b, h, a, t, sp=True) == pytest.approx(
        sbh / t * (34 + 5 * a * s / h)
    )
    # eq. 5: selective recompute leaves 34 sbh / t
    assert megatron_layer_bytes(s, b, h, a, t, sp=True, recompute="selective") == pytest.approx(
        34 * sbh / t
    )
    assert megatron_layer_bytes(s, b, h, a, t, sp=True, recompute="full") == pytest.approx(
        2 * sbh / t
    )


@pytest.mark.parametrize(("name", "saving"), [("175B", 0.70), ("530B", 0.65)])
def test_selective_recompute_savings_quoted_in_the_paper(name, saving):
    # §4.2.1: "for GPT-3 ... reduces the activation memory by 70%"; "65% for MT-NLG"
    a, h, t = GPT_CONFIGS[name]
    full = megatron_layer_bytes(2048, 1, h, a, t, sp=True)
    sel = megatron_layer_bytes(2048, 1, h, a, t, sp=True, recompute="selective")
    assert 1 - sel / full == pytest.approx(saving, abs=0.01)


def _gpt(h, a, layers=2):
    return gpuplan.load_architecture(
        {"model_type": "gpt2", "n_embd": h, "n_head": a, "n_layer": layers, "vocab_size": 50304}
    )


@pytest.mark.parametrize("name", list(GPT_CONFIGS))
def test_per_tensor_model_divides_like_megatron(name):
    # The engine's own per-tensor list divides the way Korthikanti et al. describe: with TP + SP
    # every saved tensor is ÷ t; with TP alone the layer-boundary tensors are not divided.
    a, h, t = GPT_CONFIGS[name]
    arch = _gpt(h, a)
    layer = arch.layers[0]
    one = layer_bytes(arch, layer, ActivationSpec(seq=2048, micro_batch=1, kernel="eager"))
    tp_sp = layer_bytes(
        arch, layer, ActivationSpec(seq=2048, micro_batch=1, kernel="eager", tp=t, sp=True)
    )
    tp = layer_bytes(arch, layer, ActivationSpec(seq=2048, micro_batch=1, kernel="eager", tp=t))
    assert tp_sp * t == pytest.approx(one, rel=1e-6)
    boundary = sum(
        x.bytes
        for x in layer_tensors(arch, layer, ActivationSpec(seq=2048, micro_batch=1, kernel="eager"))
        if "norm" in x.name
    )
    assert tp == pytest.approx(boundary + (one - boundary) / t, rel=1e-6)
    # the s² scores (eager) are the 5as/h-style term: selective recompute removes exactly them
    # (and keeps flash's log-sum-exp, 4 bytes per head and token, to recompute the core)
    sel = layer_bytes(
        arch, layer, ActivationSpec(seq=2048, micro_batch=1, kernel="eager", recompute="selective")
    )
    assert one - sel == 2 * a * 2048 * 2048 - 4 * a * 2048  # GPT-2's softmax output, 2 bytes


def test_pipeline_first_stage_holds_pp_micro_batches(lesson_gpu_memory):
    # Korthikanti et al. 2022 §4.2.3: under 1F1B the first stage stores pp micro-batches of its
    # L/pp layers, i.e. L layers' worth: as much as the whole model without pipelining.
    kw = dict(gpu_memory=lesson_gpu_memory, checkpointing="none", seq=2048)
    pp4 = gpuplan.train("llama-3.1-8b", "h100", gpus=4, pp=4, **kw)
    assert pp4.bill.stage.stage == 0
    assert pp4.bill.in_flight == 4
    whole = gpuplan.train("llama-3.1-8b", "h100", gpus=1, **kw).bill.activation_bytes_per_layer
    layers_first = len(pp4.bill.stage.layers)
    assert pp4.activations_bytes >= layers_first * 4 * whole
    # parameters per GPU = total ÷ (tp × pp), give or take the embedding / LM head stage
    assert pp4.bill.stage.total == pytest.approx(pp4.params_total / 4, rel=0.15)
