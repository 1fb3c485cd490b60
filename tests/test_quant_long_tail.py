"""Issue 20, item 3: the quantisation long tail. Each method's module plan is read from real
`quantization_config` blocks, and gpuplan's weight bytes are checked against the checkpoint's own
bytes: the file size of real GPTQ checkpoints (Git LFS pointers, tests/data/configs/SOURCES.md),
or the tensors each packer writes, derived here from the module shapes (AutoGPTQ / AutoAWQ
qweight, qzeros, scales; compressed-tensors weight_packed, weight_scale; Quark / OCP MX blocks).
An engine flag without the checkpoint's config is sized from what the model's name says, or the
method's usual layout, and the bill says which.

`python -m pytest tests/test_quant_long_tail.py -q -rA -k survey` prints the survey table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.api.common import resolve, resolve_weight_format
from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.params import count_params
from gpuplan.engine.profiles.common import engine_weight_format
from gpuplan.engine.quantization import quantization_from_config, standard_layout
from gpuplan.engine.weights import weights_bytes
from gpuplan.errors import GpuplanError

DATA = Path(__file__).parent / "data" / "configs" / "quantized"
GPTQ = json.loads((DATA / "gptq_checkpoints.json").read_text())["checkpoints"]
WIZARD = json.loads((DATA / "TheBloke--Wizard-Vicuna-30B-Uncensored-GPTQ.json").read_text())
DSV3 = json.loads((DATA / "deepseek-ai--DeepSeek-V3.json").read_text())


def _config(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _gpuplan_bytes(cfg: dict[str, Any], name: str = "model") -> int:
    arch = architecture_from_config(cfg, name)
    return weights_bytes(count_params(arch), resolve_weight_format(arch, None))


def _llama_linears(cfg: dict[str, Any]) -> list[tuple[int, int]]:
    """(in, out) of each linear module of one Llama layer, from the config."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads) * (h // heads)
    return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]


def _llama_rest(cfg: dict[str, Any]) -> int:
    """Embedding, LM head and norms of a Llama checkpoint, 16-bit."""
    h, v, n = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    head = 0 if cfg.get("tie_word_embeddings") else v * h
    return (v * h + head + (2 * n + 1) * h) * 2


def _groups(k: int, group: int) -> int:
    return 1 if group <= 0 else -(-k // group)


def _autogptq(k: int, n: int, bits: int, group: int) -> int:
    """AutoGPTQ's QuantLinear state: qweight int32 [k·bits/32, n], qzeros int32 [groups,
    n·bits/32], scales fp16 [groups, n], g_idx int32 [k], bias fp16 [n] (zeros, always
    registered by the AutoGPTQ versions TheBloke used)."""
    g = _groups(k, group)
    return k * n * bits // 8 + g * n * bits // 8 + g * n * 2 + 4 * k + 2 * n


# --------------------------------------------------------------------------------------
# GPTQ: real checkpoints, 2/3/4/8 bits, group -1/32/64/128, desc_act on and off
# --------------------------------------------------------------------------------------


def _gptq_case(row: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    cfg = _config(row["config"])
    q = row["quantize_config"]
    cfg["quantization_config"] = cfg["quantization_config"] | q | {"quant_method": "gptq"}
    shapes = sum(_autogptq(k, n, q["bits"], q["group_size"]) for k, n in _llama_linears(cfg))
    derived = shapes * cfg["num_hidden_layers"] + _llama_rest(cfg)
    return cfg, derived, row["file_bytes"]


IDS = [
    f"{r['config'].split('--')[1][:10]}-{r['quantize_config']['bits']}bit-g"
    f"{r['quantize_config']['group_size']}"
    for r in GPTQ
]


@pytest.mark.parametrize("row", GPTQ, ids=IDS)
def test_gptq_packing_reproduces_the_checkpoint_file(row: dict[str, Any]) -> None:
    """The reference is understood: AutoGPTQ's tensor shapes add up to the file's size, the
    rest being the safetensors JSON header (≤ 3 MB: one entry per tensor)."""
    _, derived, size = _gptq_case(row)
    assert 0 <= size - derived <= 3_000_000


@pytest.mark.parametrize("row", GPTQ, ids=IDS)
def test_gptq_weights_match_the_checkpoint(row: dict[str, Any]) -> None:
    """gpuplan from config.json alone, against the file: within 0.3 % on all nine (today
    −0.07 to −0.25 %: the int32 g_idx per input row and AutoGPTQ's zero bias vectors, which
    gpuplan's per-parameter layout does not carry)."""
    cfg, _, size = _gptq_case(row)
    assert abs(_gpuplan_bytes(cfg) - size) / size < 0.003


# --------------------------------------------------------------------------------------
# AWQ: GEMM (zero points) and Marlin (none), group 64 / 128, modules_to_not_convert
# --------------------------------------------------------------------------------------


def _autoawq(k: int, n: int, group: int, marlin: bool = False) -> int:
    """AutoAWQ WQLinear_GEMM: qweight int32 [k, n/8], qzeros int32 [k/g, n/8], scales fp16
    [k/g, n]; WQLinear_Marlin: qweight int32 [k/16, n·16/8], scales only."""
    g = _groups(k, group)
    return k * n // 2 + (0 if marlin else g * n // 2) + g * n * 2


@pytest.mark.parametrize(
    "qc",
    [
        {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 128,
            "zero_point": True,
            "version": "gemm",
        },
        {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"},
        {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "marlin"},
    ],
    ids=["gemm-g128", "gemm-g64", "marlin-g128"],
)
def test_awq_layouts_equal_the_packed_tensors(qc: dict[str, Any]) -> None:
    cfg = WIZARD | {"quantization_config": qc}
    g, marlin = qc["group_size"], qc["version"] == "marlin"
    per_layer = sum(_autoawq(k, n, g, marlin) for k, n in _llama_linears(cfg))
    assert _gpuplan_bytes(cfg) == per_layer * cfg["num_hidden_layers"] + _llama_rest(cfg)


def _dsv3_awq_bytes(group: int) -> int:
    """DeepSeek-V3 as AutoAWQ quantises it (awq/models/deepseek_v3.py; a published AWQ index,
    kvcache-ai/sglang_awq, stores qweight/qzeros/scales for q_a, q_b, kv_a, kv_b, o and every
    expert and shared-expert projection): the routers (`gate`, modules_to_not_convert), their
    fp32 score-correction bias, norms, embedding and LM head stay 16-bit."""
    c = DSV3
    h, e, dense, n = c["hidden_size"], c["n_routed_experts"], c["first_k_dense_replace"], 61
    ql, kl, heads = c["q_lora_rank"], c["kv_lora_rank"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    attn = [
        (h, ql),
        (ql, heads * qk),
        (h, kl + c["qk_rope_head_dim"]),
        (kl, heads * (c["qk_nope_head_dim"] + c["v_head_dim"])),
        (heads * c["v_head_dim"], h),
    ]
    mi, i = c["moe_intermediate_size"], c["intermediate_size"]
    total = 0
    for layer in range(n):
        moe = layer >= dense
        ffn = [(h, mi), (h, mi), (mi, h)] * (e + c["n_shared_experts"]) if moe else []
        ffn = ffn or [(h, i), (h, i), (i, h)]
        total += sum(_autoawq(k, o, group) for k, o in attn + ffn)
        total += (2 * h + ql + kl) * 2 + (h * e * 2 + e * 4 if moe else 0)
    return total + (2 * c["vocab_size"] * h + h) * 2


def test_deepseek_v3_awq_keeps_the_routers_and_quantises_mla() -> None:
    cfg = DSV3 | {
        "quantization_config": {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 64,
            "zero_point": True,
            "version": "gemm",
            "modules_to_not_convert": ["gate"],
        }
    }
    assert abs(_gpuplan_bytes(cfg) - _dsv3_awq_bytes(64)) / _dsv3_awq_bytes(64) < 0.0005


# --------------------------------------------------------------------------------------
# compressed-tensors: W8A8 int8, FP8, W4A16 pack-quantized, NVFP4; ignore lists with regexes
# --------------------------------------------------------------------------------------

W8A8_FIRST_LAYER_IGNORED = {
    # a public compressed-tensors config (SOURCES.md): lm_head and all of layer 0 ignored
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head", "re:model\\.layers\\.0\\..*"],
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 8,
                "type": "int",
                "symmetric": True,
                "strategy": "channel",
                "dynamic": False,
            },
            "input_activations": {
                "num_bits": 8,
                "type": "int",
                "symmetric": True,
                "strategy": "token",
                "dynamic": True,
            },
        }
    },
}


def _ct_group(weights: dict[str, Any], fmt: str) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


def test_compressed_tensors_w8a8_regex_ignore_keeps_layer_0() -> None:
    """int-quantized: int8 weight [n, k] + one scale per output channel (bf16 [n, 1]); the
    regex keeps every projection of layer 0 in 16-bit."""
    cfg = WIZARD | {"quantization_config": W8A8_FIRST_LAYER_IGNORED}
    lin = _llama_linears(cfg)
    layers = cfg["num_hidden_layers"]
    derived = (
        (layers - 1) * sum(k * n + 2 * n for k, n in lin)
        + sum(k * n * 2 for k, n in lin)
        + _llama_rest(cfg)
    )
    arch = architecture_from_config(cfg)
    fmt = resolve_weight_format(arch, None)
    assert fmt.plan is not None and any("layer 0" in n for n in fmt.notes)
    got = weights_bytes(count_params(arch), fmt)
    assert abs(got - derived) / derived < 0.0005  # per-channel scales: 2 bytes per row


@pytest.mark.parametrize(
    "weights, fmt, per_module",
    [
        # pack-quantized W4A16: weight_packed int32 [n, k/8], weight_scale bf16 [n, k/g],
        # weight_shape int64 [2]
        (
            {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            "pack-quantized",
            lambda k, n: k * n // 2 + n * (k // 128) * 2 + 16,
        ),
        # asymmetric W4A16 g128: + weight_zero_point int32 [n/8, k/g] (packed along n)
        (
            {
                "num_bits": 4,
                "type": "int",
                "strategy": "group",
                "group_size": 128,
                "symmetric": False,
            },
            "pack-quantized",
            lambda k, n: k * n // 2 + n * (k // 128) * 2 + (n // 8) * (k // 128) * 4 + 16,
        ),
        # nvfp4-pack-quantized: weight_packed uint8 [n, k/2], weight_scale fp8 [n, k/16],
        # weight_global_scale fp32 [1]
        (
            {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
            "nvfp4-pack-quantized",
            lambda k, n: k * n // 2 + n * (k // 16) + 4,
        ),
        # float-quantized FP8 block 128x128: weight fp8 [n, k], weight_scale fp32 per block
        (
            {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
            "float-quantized",
            lambda k, n: k * n + -(-k // 128) * -(-n // 128) * 4,
        ),
    ],
    ids=["w4a16-g128", "w4a16-asym-g128", "nvfp4", "fp8-block"],
)
def test_compressed_tensors_layouts_equal_the_packed_tensors(
    weights: dict[str, Any], fmt: str, per_module: Any
) -> None:
    cfg = WIZARD | {"quantization_config": _ct_group(weights, fmt)}
    derived = sum(per_module(k, n) for k, n in _llama_linears(cfg)) * cfg[
        "num_hidden_layers"
    ] + _llama_rest(cfg)
    assert abs(_gpuplan_bytes(cfg) - derived) / derived < 0.0002


def test_compressed_tensors_regex_ignore_keeps_a_hybrids_mixer() -> None:
    """A published INT8 ignore list for a gated-DeltaNet hybrid (SOURCES.md): the
    `re:.*linear_attn.*` pattern keeps every mixer projection in 16-bit, attention and MLP
    int8."""
    cfg = json.loads(
        (Path(__file__).parent / "data" / "engine_configs" / "Qwen--Qwen3.5-0.8B.json").read_text()
    )
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "config_groups": {
            "INT8": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
            }
        },
        "ignore": [
            "re:.*(vision|visual).*",
            "lm_head",
            "re:.*embed_tokens.*",
            "re:.*norm.*",
            "re:.*conv1d.*",
            "re:.*linear_attn.*",
        ],
    }
    arch = architecture_from_config(cfg)
    fmt = resolve_weight_format(arch, None)
    assert fmt.for_kind("mixer") == fmt.base
    assert fmt.for_kind("attention").id == "int8-channel"
    assert fmt.for_kind("mlp").id == "int8-channel"


# --------------------------------------------------------------------------------------
# AMD Quark, HQQ, EETQ
# --------------------------------------------------------------------------------------


def _quark(weight: dict[str, Any], exclude: list[str]) -> dict[str, Any]:
    return {
        "quant_method": "quark",
        "quant_mode": "eager_mode",
        "global_quant_config": {"weight": weight, "input_tensors": None, "bias": None},
        "layer_quant_config": {},
        "layer_type_quant_config": {},
        "exclude": exclude,
    }


@pytest.mark.parametrize(
    "weight, per_module",
    [
        # FP8 per tensor: fp8 weight [n, k], one fp32 scale
        ({"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}, lambda k, n: k * n),
        # OCP MXFP4: two e2m1 per byte, one e8m0 scale per 32 inputs
        (
            {
                "dtype": "fp4",
                "qscheme": "per_group",
                "group_size": 32,
                "scale_format": "e8m0",
                "is_dynamic": False,
            },
            lambda k, n: k * n // 2 + n * k // 32,
        ),
        # uint4 per group 128 (AWQ-style): fp16 scale and an 8-bit zero per group
        (
            {"dtype": "uint4", "qscheme": "per_group", "group_size": 128},
            lambda k, n: k * n // 2 + n * k // 128 * 3,
        ),
    ],
    ids=["fp8-tensor", "mxfp4", "uint4-g128"],
)
def test_quark_layouts(weight: dict[str, Any], per_module: Any) -> None:
    cfg = WIZARD | {"quantization_config": _quark(weight, ["lm_head"])}
    derived = sum(per_module(k, n) for k, n in _llama_linears(cfg)) * cfg[
        "num_hidden_layers"
    ] + _llama_rest(cfg)
    assert abs(_gpuplan_bytes(cfg) - derived) / derived < 0.0002


def test_quark_exclude_and_layer_config() -> None:
    """`exclude` globs keep modules at the dtype; `layer_quant_config` gives a pattern its own
    spec (vLLM quark.py matches both with fnmatch)."""
    qc = _quark({"dtype": "fp8_e4m3", "qscheme": "per_tensor"}, ["lm_head", "*self_attn*"])
    qc["layer_quant_config"] = {
        "*down_proj": {"weight": {"dtype": "int8", "qscheme": "per_channel"}}
    }
    arch = architecture_from_config(WIZARD | {"quantization_config": qc})
    fmt = resolve_weight_format(arch, None)
    assert fmt.for_kind("attention") == fmt.base
    lin = _llama_linears(WIZARD)
    per_layer = sum(k * n * 2 for k, n in lin[:4]) + sum(k * n for k, n in lin[4:])
    derived = per_layer * WIZARD["num_hidden_layers"] + _llama_rest(WIZARD)
    assert weights_bytes(count_params(arch), fmt) == derived


def test_hqq_and_eetq() -> None:
    """HQQ: packed nbits, fp16 scale and zero per group (HQQLinear); EETQ: int8 per channel."""
    hqq = {
        "quant_method": "hqq",
        "quant_config": {"weight_quant_params": {"nbits": 4, "group_size": 64, "axis": 1}},
        "skip_modules": ["lm_head"],
    }
    lin = _llama_linears(WIZARD)
    layers = WIZARD["num_hidden_layers"]
    derived = sum(k * n // 2 + k * n // 64 * 4 for k, n in lin) * layers + _llama_rest(WIZARD)
    assert _gpuplan_bytes(WIZARD | {"quantization_config": hqq}) == derived
    eetq = {"quant_method": "eetq", "weights": "int8", "modules_to_not_convert": ["lm_head"]}
    derived = sum(k * n for k, n in lin) * layers + _llama_rest(WIZARD)
    assert _gpuplan_bytes(WIZARD | {"quantization_config": eetq}) == derived


def test_auto_round_reads_as_its_packing() -> None:
    """Intel AutoRound checkpoints are packed as AutoGPTQ (or AutoAWQ) writes them."""
    qc = {
        "quant_method": "intel/auto-round",
        "bits": 4,
        "group_size": 128,
        "sym": True,
        "packing_format": "auto_round:auto_gptq",
    }
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    assert _gpuplan_bytes(WIZARD | {"quantization_config": qc}) == _gpuplan_bytes(
        WIZARD | {"quantization_config": gptq}
    )


@pytest.mark.parametrize(
    "qc",
    [
        {"quant_method": "quark"},
        {
            "quant_method": "quark",
            "global_quant_config": {"weight": {"dtype": "int8", "qscheme": "per_group"}},
        },
        {
            "quant_method": "quark",
            "global_quant_config": {"weight": {"dtype": "fp4", "qscheme": "per_tensor"}},
        },
        {"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "int2"}}},
        {"quant_method": "hqq", "quant_config": {}},
    ],
)
def test_incomplete_quark_and_hqq_blocks_are_refused(qc: dict[str, Any]) -> None:
    """No silent default for what the block leaves out."""
    with pytest.raises(GpuplanError):
        quantization_from_config(qc)


@pytest.mark.parametrize("method", ["vptq", "aqlm", "bitnet", "spqr", "higgs"])
def test_unread_methods_are_refused_in_one_line(method: str) -> None:
    with pytest.raises(GpuplanError, match=method):
        quantization_from_config({"quant_method": method, "bits": 2})


# --------------------------------------------------------------------------------------
# A flag without the checkpoint's quantization_config: the name, else the usual layout
# --------------------------------------------------------------------------------------

BASE_8B = json.loads(
    (
        Path(__file__).parent / "data" / "engine_configs" / "meta-llama--Llama-3.1-8B-Instruct.json"
    ).read_text()
)


@pytest.mark.parametrize(
    "flag, model, layout",
    [
        (
            "compressed-tensors",
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
            "int8-channel",
        ),
        ("compressed-tensors", "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "fp8-channel"),
        (
            "compressed-tensors",
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
            "ct-int4-g128",
        ),
        ("compressed-tensors", "RedHatAI/Qwen3-8B-NVFP4", "nvfp4"),
        ("gptq", "TheBloke/Llama-2-7B-GPTQ-4bit-32g-actorder_True", "gptq-int4-g32"),
        ("gptq_marlin", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "gptq-int8-g128"),
        ("awq", "someone/Model-AWQ-g64", "awq-int4-g64"),
        ("modelopt", "nvidia/Llama-3.1-8B-Instruct-FP4", "nvfp4"),
        ("modelopt", "nvidia/Llama-3.1-8B-Instruct-FP8", "fp8-tensor"),
        ("quark", "amd/Llama-3.1-8B-Instruct-FP8-KV", "fp8-tensor"),
        ("quark", "amd/DeepSeek-R1-MXFP4-Preview", "mxfp4"),
    ],
)
def test_a_flag_reads_the_layout_from_the_models_name(flag: str, model: str, layout: str) -> None:
    arch = architecture_from_config(BASE_8B, model)
    fmt = engine_weight_format(arch, None, flag)
    assert fmt.precision.id == layout
    assert any("as the model's name" in n and "not known" in n for n in fmt.notes)


@pytest.mark.parametrize(
    "flag", ["awq", "gptq", "compressed-tensors", "modelopt", "torchao", "quark"]
)
def test_a_flag_without_a_name_hint_says_the_standard_layout(flag: str) -> None:
    spec = standard_layout(flag, "meta-llama/Llama-3.1-8B-Instruct")
    assert spec is not None and "standard layout" in spec.notes[-1]


def test_w8a8_flag_no_longer_sized_as_w4a16() -> None:
    """The issue's pattern: a w8a8 checkpoint served with `--quantization compressed-tensors`
    and no config at hand was sized as W4A16 (−43 % of its weights); the name now says int8."""
    arch = architecture_from_config(BASE_8B, "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8")
    got = weights_bytes(count_params(arch), engine_weight_format(arch, None, "compressed-tensors"))
    cfg = BASE_8B
    lin = _llama_linears(cfg)
    derived = sum(k * n for k, n in lin) * cfg["num_hidden_layers"] + _llama_rest(cfg)
    assert abs(got - derived) / derived < 0.0005


def test_bitsandbytes_in_flight_is_nf4_with_double_quant() -> None:
    """vLLM's in-flight bitsandbytes (`--quantization bitsandbytes` on a 16-bit checkpoint)
    quantises with compress_statistics=True, quant_type="nf4" (bitsandbytes_loader.py): per
    linear module two values per byte, a uint8 absmax per 64 values, an fp32 absmax per 256 of
    those (bitsandbytes QuantState nested)."""
    arch = architecture_from_config(BASE_8B)
    fmt = engine_weight_format(arch, None, "bitsandbytes")
    assert fmt.precision.id == "nf4-dq"
    lin = _llama_linears(BASE_8B)
    per = sum(k * n // 2 + k * n // 64 + -(-(k * n // 64) // 256) * 4 for k, n in lin)
    derived = per * BASE_8B["num_hidden_layers"] + _llama_rest(BASE_8B)
    got = weights_bytes(count_params(arch), fmt)
    assert abs(got - derived) / derived < 0.0002


# --------------------------------------------------------------------------------------
# quantize_config.json / quant_config.json beside a config.json without quantization_config
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "filename, data, layout",
    [
        # the Wizard-Vicuna-30B GPTQ mirror's own quantize_config.json at commit a2b7a0e5
        (
            "quantize_config.json",
            next(r for r in GPTQ if r["commit"].startswith("a2b7a0e5"))["quantize_config"],
            "gptq-int4-g128",
        ),
        # AutoAWQ's quant_config.json keys
        (
            "quant_config.json",
            {"zero_point": True, "q_group_size": 64, "w_bit": 4, "version": "GEMM"},
            "awq-int4-g64",
        ),
    ],
)
def test_a_quantisation_file_beside_config_json_is_read(
    tmp_path: Path, filename: str, data: dict[str, Any], layout: str
) -> None:
    """Checkpoints whose config.json has no quantization_config but whose quantisation sits in
    the file AutoGPTQ / AutoAWQ wrote: read as vLLM's get_quant_config reads it, and said."""
    cfg = {k: v for k, v in WIZARD.items() if k != "quantization_config"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / filename).write_text(json.dumps(data))
    arch = resolve(str(tmp_path)).arch
    fmt = resolve_weight_format(arch, None)
    assert fmt.precision.id == layout
    assert any(filename in n for n in fmt.notes)


# --------------------------------------------------------------------------------------
# The survey, printed (`-rA -k survey`)
# --------------------------------------------------------------------------------------


def test_survey_prints_each_gptq_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for row, name in zip(GPTQ, IDS, strict=True):
        cfg, _, size = _gptq_case(row)
        got = _gpuplan_bytes(cfg)
        rows.append(f"{name:28s} file {size:>15,}  gpuplan {got:>15,}  {(got - size) / size:+.3%}")
    with capsys.disabled():
        print("\n" + "\n".join(rows))
    assert len(rows) == 9
