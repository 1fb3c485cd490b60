"""Quantised formats: bytes per parameter derived from bits and scales, and checkpoints sized as quantised."""

import json
from fractions import Fraction
from importlib import resources

import pytest

import gpuplan
from gpuplan.engine.params import count_params

GB = 10**9


def test_derived_bytes_per_param_of_real_formats():
    # Derived here from each format's definition: payload bits + scale (and zero) bits per group.
    expected = {
        "gptq": Fraction(4 * 128 + 16 + 4, 128 * 8),  # int4 + fp16 scale + int4 zero per 128
        "awq": Fraction(4 * 128 + 16 + 4, 128 * 8),
        "mxfp4": Fraction(4 * 32 + 8, 32 * 8),  # OCP MX: E8M0 scale per 32
        "nvfp4": Fraction(4 * 16 + 8, 16 * 8),  # fp8 scale per 16
        "nf4": Fraction(4 * 64 + 32, 64 * 8),  # fp32 absmax per 64
        "nf4-dq": Fraction(4, 8) + Fraction(8, 64 * 8) + Fraction(32, 64 * 256 * 8),  # QLoRA §3
        "fp8-block128": Fraction(8 * 16384 + 32, 16384 * 8),  # fp32 scale per 128×128
    }
    for name, value in expected.items():
        assert gpuplan.get_precision(name).bytes_per_param == value, name


def _config(name):
    return json.loads(
        resources.files("gpuplan.catalog").joinpath(f"data/models/{name}.json").read_text()
    )


def test_gpt_oss_mxfp4_checkpoints_fit_where_openai_says():
    # openai/gpt-oss README: 120b "fit[s] into a single 80GB GPU", 20b runs "within 16GB of memory"
    big = gpuplan.serve("gpt-oss-120b", "h100", gpus=1)
    assert big.weights_bytes < 80 * GB and big.fits
    small = gpuplan.serve("gpt-oss-20b", "h100", gpus=1)
    assert small.weights_bytes < 16 * GB


def test_gpt_oss_keeps_attention_router_embeddings_in_bf16():
    plan = gpuplan.serve("gpt-oss-20b", "h100", gpus=1)
    counts = count_params(gpuplan.load_architecture("gpt-oss-20b"))
    mx = gpuplan.get_precision("mxfp4")
    expected = mx.bytes_for(counts.by_kind["experts"]) + 2 * (
        counts.total - counts.by_kind["experts"]
    )
    assert plan.weights_bytes == expected


def test_awq_checkpoint_packs_linear_weights_only():
    cfg = dict(
        _config("meta-llama--Llama-3.1-8B"),
        quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128},
    )
    plan = gpuplan.serve(cfg, "h100", gpus=1)
    counts = plan.bill.params
    awq = gpuplan.get_precision("awq")
    expected = awq.bytes_for(counts.linear) + 2 * (counts.total - counts.linear)
    assert plan.weights_bytes == pytest.approx(expected, abs=8)  # per-kind rounding to whole bytes


def test_deepseek_v3_fp8_checkpoint_is_about_one_byte_per_param():
    plan = gpuplan.serve("deepseek-v3", "h200", gpus=8)
    assert plan.params_total / GB == pytest.approx(671, abs=0.5)  # README: 671B main model
    assert plan.params_active / GB == pytest.approx(37, abs=1)  # README: 37B activated
    assert plan.params_total < plan.weights_bytes < 1.03 * plan.params_total


def test_bitsandbytes_nf4_double_quant_config():
    cfg = dict(
        _config("meta-llama--Llama-3.1-8B"),
        quantization_config={
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
        },
    )
    arch = gpuplan.load_architecture(cfg)
    assert arch.quantization is not None and arch.quantization.precision == "nf4-dq"


def test_dtype_override_beats_checkpoint_quantization():
    plan = gpuplan.serve("gpt-oss-20b", "h100", gpus=1, dtype="bf16")
    assert plan.weights_bytes == 2 * plan.params_total
