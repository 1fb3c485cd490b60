"""Every quantisation format: the layout each config declares, packed checkpoints whose headers
unpack to the architecture's parameter count, and engine flags without a quantization_config."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gpuplan.api import engine_serve  # noqa: E402
from gpuplan.api.common import resolve, resolve_weight_format  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.quantization import (  # noqa: E402
    quantization_from_config,
    standard_layout,
)
from gpuplan.errors import GpuplanError  # noqa: E402
from model_files import TINY, llama_shapes, save  # noqa: E402


def _bits(qc: dict[str, Any]) -> Fraction:
    spec = quantization_from_config(qc)
    assert spec is not None
    fmt = resolve_weight_format(_arch(qc), None)
    assert fmt.precision.id == spec.precision
    return fmt.for_kind("mlp").bits_per_param


def _arch(qc: dict[str, Any]) -> Any:
    from gpuplan.engine.architecture import architecture_from_config

    return architecture_from_config(TINY | {"quantization_config": qc})


@pytest.mark.parametrize(
    "qc, bits",
    [
        # payload + (scale + zero) / group, from each method's packing
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, 4 + Fraction(16 + 4, 128)),
        ({"quant_method": "gptq", "bits": 8, "group_size": 32}, 8 + Fraction(16 + 8, 32)),
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, Fraction(4)),
        ({"quant_method": "awq", "w_bit": 4, "q_group_size": 64}, 4 + Fraction(20, 64)),
        ({"quant_method": "fp8"}, Fraction(8)),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, 8 + Fraction(32, 128 * 128)),
        ({"quant_method": "fp8", "weight_block_size": [64, 64]}, 8 + Fraction(32, 64 * 64)),
        ({"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]}, Fraction(8)),
        ({"quant_method": "mxfp4"}, 4 + Fraction(8, 32)),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, 8 + Fraction(32, 4096)),
        (
            {
                "quant_method": "bitsandbytes",
                "load_in_4bit": True,
                "bnb_4bit_quant_type": "nf4",
                "bnb_4bit_use_double_quant": True,
            },
            4 + Fraction(8, 64) + Fraction(32, 64 * 256),
        ),
        (
            {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
            4 + Fraction(8, 16),
        ),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, Fraction(8)),
        (
            {"quant_method": "modelopt", "quant_algo": "W4A16_AWQ", "group_size": 128},
            4 + Fraction(16, 128),
        ),
        (
            {
                "quant_method": "torchao",
                "quant_type": {
                    "default": {"_type": "Int4WeightOnlyConfig", "_data": {"group_size": 64}}
                },
            },
            4 + Fraction(32, 64),
        ),
        ({"quant_method": "torchao", "quant_type": "int8_weight_only"}, Fraction(8)),
        ({"quant_method": "torchao", "quant_type": "float8_weight_only"}, Fraction(8)),
    ],
)
def test_layouts(qc: dict[str, Any], bits: Fraction) -> None:
    assert _bits(qc) == bits


def _ct(weights: dict[str, Any], targets: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    group = {"targets": targets or ["Linear"], "weights": weights}
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}, **extra}


@pytest.mark.parametrize(
    "qc, bits",
    [
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}),
            4 + Fraction(16, 128),
        ),
        (
            _ct(
                {
                    "num_bits": 4,
                    "type": "int",
                    "strategy": "group",
                    "group_size": 32,
                    "symmetric": False,
                }
            ),
            4 + Fraction(16 + 4, 32),  # zero points packed to 4 bits (pack_to_int32)
        ),
        (_ct({"num_bits": 8, "type": "int", "strategy": "channel"}), Fraction(8)),
        (_ct({"num_bits": 8, "type": "float", "strategy": "tensor"}), Fraction(8)),
        (
            _ct(
                {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}
            ),
            8 + Fraction(32, 128 * 128),
        ),
        (
            _ct(
                {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                format="nvfp4-pack-quantized",
            ),
            4 + Fraction(8, 16),
        ),
    ],
)
def test_compressed_tensors_schemes(qc: dict[str, Any], bits: Fraction) -> None:
    assert _bits(qc) == bits


def test_compressed_tensors_targets_and_ignore() -> None:
    """Two groups: int4 for the MLP, int8 for attention; an ignore list keeps the LM head."""
    qc = {
        "quant_method": "compressed-tensors",
        "ignore": ["lm_head", "re:.*mlp.gate$"],
        "config_groups": {
            "mlp": {
                "targets": ["re:.*mlp.*proj"],
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            },
            "attn": {
                "targets": ["re:.*self_attn.*"],
                "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
            },
        },
    }
    fmt = resolve_weight_format(_arch(qc), None)
    assert fmt.for_kind("mlp").bits_per_param == 4 + Fraction(16, 128)
    assert fmt.for_kind("attention").bits == 8
    assert fmt.for_kind("lm_head").id == "bf16"
    qc2 = _ct(
        {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
        ignore=["re:.*self_attn.*"],
    )
    assert resolve_weight_format(_arch(qc2), None).for_kind("attention").id == "bf16"


def test_fbgemm_keeps_listed_modules() -> None:
    qc = {
        "quant_method": "fbgemm_fp8",
        "modules_to_not_convert": [
            "model.layers.0.mlp.down_proj",
            "model.layers.*.self_attn",
            "lm_head",
        ],
    }
    spec = quantization_from_config(qc)
    assert spec is not None and spec.rules[0].key == "modules_to_not_convert"
    fmt = resolve_weight_format(_arch(qc), None)
    assert fmt.for_kind("attention").id == "bf16" and fmt.for_kind("mlp").id == "fp8-channel"
    assert fmt.plan is not None  # layer 0's down_proj differs from the other layers'
    assert any(
        "attention of all 4 layers and mlp.down_proj of layer 0 kept in bf16" in n
        for n in fmt.notes
    )


def test_unknown_and_bad_configs_fail_in_one_line() -> None:
    for qc in (
        {"quant_method": "hqq"},
        {"quant_method": "gptq", "bits": 5},
        {"quant_method": "gptq", "bits": "four"},
        {"quant_method": "fp8", "weight_block_size": [0, 128]},
        {"quant_method": "bitsandbytes"},
        {"quant_method": "compressed-tensors", "config_groups": {}},
        {"quant_method": "modelopt", "quant_algo": "W2"},
        {"quant_method": "torchao", "quant_type": "uint1"},
    ):
        with pytest.raises(GpuplanError):
            quantization_from_config(qc, "m")


@pytest.mark.parametrize(
    "flag",
    [
        "awq",
        "awq_marlin",
        "gptq",
        "gptq_marlin",
        "compressed-tensors",
        "fbgemm_fp8",
        "modelopt",
        "modelopt_fp4",
        "mxfp4",
        "torchao",
    ],
)
def test_engine_flag_without_config_sizes_the_standard_layout(flag: str) -> None:
    assert standard_layout(flag) is not None
    plan = engine_serve("llama-3.1-8b", engine="vllm", args={"quantization": flag})
    fmt = plan.bill.launch.weights
    assert fmt.precision.scope == "linear"
    assert any("standard layout" in n for n in plan.to_dict()["notes"])


# --------------------------------------------------------------------------------------
# Packed checkpoints: the headers unpack to the architecture's parameters
# --------------------------------------------------------------------------------------


def _packed(folder: Path, qc: dict[str, Any], pack: Any) -> tuple[Any, int]:
    folder.mkdir()
    cfg = TINY | {"quantization_config": qc}
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors: dict[str, Any] = {}
    for name, shape in llama_shapes(cfg).items():
        if len(shape) == 2 and "layers" in name:
            tensors |= pack(name.removesuffix(".weight"), *shape)
        else:
            tensors[name] = torch.zeros(shape, dtype=torch.bfloat16)
    written = save(folder / "model.safetensors", tensors)
    return resolve(str(folder)), written


def _z(*shape: int, dtype: Any = torch.uint8) -> Any:
    return torch.zeros(shape, dtype=dtype)


PACKINGS = {
    "awq": (
        {"quant_method": "awq", "bits": 4, "group_size": 32},
        lambda b, o, i: {
            b + ".qweight": _z(i, o // 8, dtype=torch.int32),
            b + ".qzeros": _z(i // 32, o // 8, dtype=torch.int32),
            b + ".scales": _z(i // 32, o, dtype=torch.float16),
        },
    ),
    "fp8-block": (
        {"quant_method": "fp8", "weight_block_size": [32, 32]},
        lambda b, o, i: {
            b + ".weight": _z(o, i, dtype=torch.float8_e4m3fn),
            b + ".weight_scale_inv": _z(o // 32, i // 32, dtype=torch.float32),
        },
    ),
    "bnb-nf4": (
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
        lambda b, o, i: {
            b + ".weight": _z(o * i // 2, 1),
            b + ".weight.absmax": _z(o * i // 64, dtype=torch.float32),
            b + ".weight.quant_map": _z(16, dtype=torch.float32),
            b + ".weight.quant_state.bitsandbytes__nf4": _z(100),
        },
    ),
    "nvfp4": (
        {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
        lambda b, o, i: {
            b + ".weight": _z(o, i // 2),
            b + ".weight_scale": _z(o, i // 16, dtype=torch.float8_e4m3fn),
            b + ".weight_scale_2": _z(1, dtype=torch.float32),
            b + ".input_scale": _z(1, dtype=torch.float32),
        },
    ),
    "ct-w4a16": (
        {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "strategy": "group",
                        "group_size": 32,
                    },
                }
            },
        },
        lambda b, o, i: {
            b + ".weight_packed": _z(o, i // 8, dtype=torch.int32),
            b + ".weight_scale": _z(o, i // 32, dtype=torch.bfloat16),
            b + ".weight_shape": _z(2, dtype=torch.int64),
        },
    ),
    "mxfp4-blocks": (
        {"quant_method": "mxfp4"},
        lambda b, o, i: {b + "_blocks": _z(o, i // 32, 16), b + "_scales": _z(o, i // 32)},
    ),
}


@pytest.mark.parametrize("name", sorted(PACKINGS))
def test_packed_headers_unpack_to_the_architecture(tmp_path: Path, name: str) -> None:
    qc, pack = PACKINGS[name]
    ref, written = _packed(tmp_path / name, qc, pack)
    assert ref.stored is not None and ref.stored.total_bytes == written
    assert ref.stored.params_total == count_params(ref.arch).total
    assert ref.stored.params_by_kind == count_params(ref.arch).by_kind
    import gpuplan

    assert gpuplan.serve(str(tmp_path / name), gpus=1).bill.item("weights").bytes == written
