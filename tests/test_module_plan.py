"""The quantisation plan per module (engine/module_plan.py): every linear module named as its
checkpoint names it, each config's rules resolved per layer and projection, and the weight bytes
summed per layer, TP shard and pipeline stage. Expected bytes are built here from the modules'
shapes (transformers' parameter names and shapes, tests/model_files.py `llama_shapes`) times
each format's bytes per parameter, derived from its definition."""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.api.common import resolve_weight_format
from gpuplan.catalog import list_models, load_architecture
from gpuplan.engine.architecture import architecture_from_config
from gpuplan.engine.module_plan import layer_linears, layer_ranges
from gpuplan.engine.params import LINEAR_KINDS, count_params, layer_params
from gpuplan.engine.quantization import quantization_from_config
from gpuplan.engine.weights import stage_layers, weights_bytes, weights_per_gpu
from gpuplan.errors import GpuplanError
from model_files import llama_shapes

DATA = Path(__file__).parent / "data"
BF16 = Fraction(2)
FP8 = Fraction(1)


def _cfg(**over: Any) -> dict[str, Any]:
    """A small Llama whose widths are multiples of every group size used below."""
    base = {
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    return base | over


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[2]) if parts[1:2] == ["layers"] else None


def _expected(cfg: dict[str, Any], per_param: Callable[[str], Fraction]) -> int:
    """Σ over the checkpoint's tensors of elements × bytes per element of the tensor's format
    (norms and embeddings stay bf16 whatever the rule)."""
    total = Fraction(0)
    for name, shape in llama_shapes(cfg).items():
        n = 1
        for d in shape:
            n *= d
        linear = len(shape) == 2 and _layer(name) is not None
        total += n * (per_param(name.removesuffix(".weight")) if linear else BF16)
    assert total.denominator == 1
    return int(total)


def _weights(cfg: dict[str, Any]) -> int:
    arch = architecture_from_config(cfg)
    return weights_bytes(count_params(arch), resolve_weight_format(arch, None))


def _bits(bits: int, group: int = 0, per_group: int = 0) -> Fraction:
    """Bytes per element: payload bits + per-group scale/zero bits."""
    return (Fraction(bits) + (Fraction(per_group, group) if group else 0)) / 8


# --------------------------------------------------------------------------------------
# Module names
# --------------------------------------------------------------------------------------


def _archs() -> dict[str, Any]:
    from family_configs import BUILT, real_configs

    out = {n: architecture_from_config(c, n) for n, c in {**real_configs(), **BUILT}.items()}
    out |= {m.id: load_architecture(m.id) for m in list_models()}
    return out


def test_named_linears_add_up_to_the_parameter_counts() -> None:
    """Every family's named projections hold exactly the linear parameters params.py counts;
    only Gemma 3n / Gemma 4's per-layer and LAuReL projections, Zamba 2's shared transformer
    blocks, JetMoE's attention experts and Mllama's cross-attention layers are left to a module
    named by its kind (their quantised checkpoints' module names are not in module_names.toml)."""
    unnamed = set()
    for name, arch in _archs().items():
        for spec in set(arch.layers):
            linears = layer_linears(arch, spec)
            counts = layer_params(arch, spec)
            for kind in LINEAR_KINDS:
                assert sum(x.params * x.copies for x in linears if x.kind == kind) == counts[kind]
                named = sum(x.params * x.copies for x in linears if x.kind == kind != x.name)
                assert named <= counts[kind], (name, kind)
            if any(x.name == x.kind for x in linears):
                unnamed.add(arch.model_type)
    named_by_kind = {"gemma3n_text", "gemma4_text", "zamba2", "jetmoe", "mllama_text_model"}
    # an encoder-decoder's decoder layer (self- and cross-attention, FFN) is counted from its
    # record (engine/encoder_decoder.py); its quantised checkpoints are refused, none is named
    named_by_kind |= {"t5", "mt5", "bart", "mbart", "m2m_100", "whisper"}
    assert unnamed <= named_by_kind, unnamed


def test_family_names() -> None:
    names = {
        "mixtral-8x7b": "block_sparse_moe.experts.{e}.w2",
        "gpt-oss-20b": "mlp.experts.gate_up_proj",
        "deepseek-v3": "self_attn.kv_a_proj_with_mqa",
        "qwen1.5-moe-a2.7b": "mlp.shared_expert.down_proj",
        "llama-4-scout": "feed_forward.shared_expert.up_proj",
    }
    for model, module in names.items():
        arch = load_architecture(model)
        assert any(x.name == module for s in set(arch.layers) for x in layer_linears(arch, s))


def test_layer_ranges() -> None:
    assert layer_ranges([0, 125]) == "layers 0 and 125"
    assert layer_ranges([3, 0, 1, 2, 7, 125]) == "layers 0-3, 7 and 125"
    assert layer_ranges([5]) == "layer 5"
    assert layer_ranges([4, 5, 6]) == "layers 4-6"


# --------------------------------------------------------------------------------------
# fbgemm_fp8: Meta's Llama-3.1-405B-Instruct-FP8
# --------------------------------------------------------------------------------------


def _405b(listed: list[str]) -> dict[str, Any]:
    cfg = json.loads((DATA / "engine_configs" / "meta-llama--Llama-3.1-405B.json").read_text())
    return cfg | {
        "quantization_config": {"quant_method": "fbgemm_fp8", "modules_to_not_convert": listed}
    }


def _meta_list() -> list[str]:
    names = ["lm_head"]
    for i in range(126):
        names += [f"model.layers.{i}.self_attn.{p}_proj" for p in "kovq"]
    names += [f"model.layers.{i}.mlp.{p}_proj" for i in (0, 125) for p in ("down", "gate", "up")]
    return names


def _405b_kept(name: str) -> bool:
    return "self_attn" in name or _layer(name) in (0, 125)


def test_fbgemm_405b_keeps_attention_and_the_first_and_last_mlp() -> None:
    cfg = _405b(_meta_list())
    expected = _expected(cfg, lambda n: BF16 if _405b_kept(n) else FP8)
    assert _weights(cfg) == expected
    # the same rule written as transformers' example writes it: whole layers and blocks
    prefixes = ["model.layers.0", "model.layers.125", "lm_head"]
    prefixes += [f"model.layers.{i}.self_attn" for i in range(1, 125)]
    assert _weights(_405b(prefixes)) == expected
    plan = gpuplan.serve(cfg, "h100", gpus=8)
    assert plan.weights_bytes == expected
    assert (
        "attention of all 126 layers and the MLP of layers 0 and 125 kept in bf16"
        " (modules_to_not_convert)"
    ) in plan.to_dict()["notes"]


@pytest.mark.parametrize("tp, pp", [(8, 1), (4, 2), (1, 3)])
def test_fbgemm_405b_per_tp_shard_and_pp_stage(tp: int, pp: int) -> None:
    """Per GPU: linear modules ÷ tp (8 KV heads: one per rank at tp 8), norms whole, the
    embedding on the first stage, final norm and LM head on the last; the heaviest stage."""
    cfg = _405b(_meta_list())
    arch = architecture_from_config(cfg)
    fmt = resolve_weight_format(arch, None)
    shapes = llama_shapes(cfg)
    stages = stage_layers(126, pp)

    def rank_bytes(name: str, shape: tuple[int, ...]) -> Fraction:
        n = Fraction(shape[0] * (shape[1] if len(shape) > 1 else 1))
        if len(shape) == 1:
            return n * BF16  # norms: replicated
        per = BF16 if _layer(name) is None or _405b_kept(name) else FP8
        return n / tp * per

    best = 0
    for s, layers in enumerate(stages):
        total = Fraction(0)
        for name, shape in shapes.items():
            layer = _layer(name)
            here = (
                layer in layers
                if layer is not None
                else (s == 0 if "embed" in name else s == pp - 1)
            )
            if here:
                total += rank_bytes(name.removesuffix(".weight"), shape)
        best = max(best, int(total))
    assert weights_per_gpu(arch, fmt, tp, pp).bytes == best


# --------------------------------------------------------------------------------------
# compressed-tensors: regex ignores, several config groups, match precedence
# --------------------------------------------------------------------------------------

W4_G128 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
W8_CHANNEL = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
FP8_TENSOR = {"num_bits": 8, "type": "float", "strategy": "tensor"}


def _ct(groups: dict[str, Any], ignore: list[str]) -> dict[str, Any]:
    return _cfg(
        quantization_config={
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": groups,
            "ignore": ignore,
        }
    )


def test_compressed_tensors_groups_and_regex_ignores() -> None:
    """Attention at w8a8 (int8 per channel), the MLP at w4a16 (int4, fp16 scale per 128);
    ignored: the LM head, every module of layer 0, every down_proj."""
    cfg = _ct(
        {
            "attention": {"targets": [r"re:.*self_attn\.(q|k|v|o)_proj$"], "weights": W8_CHANNEL},
            "mlp": {"targets": [r"re:.*mlp\.(gate|up|down)_proj$"], "weights": W4_G128},
        },
        ["lm_head", "re:model.layers.0.*", "re:.*down_proj$"],
    )

    def per_param(name: str) -> Fraction:
        if _layer(name) == 0 or name.endswith("down_proj"):
            return BF16
        return _bits(8) if "self_attn" in name else _bits(4, 128, 16)

    assert _weights(cfg) == _expected(cfg, per_param)
    notes = resolve_weight_format(architecture_from_config(cfg), None).notes
    assert notes[:2] == (
        "attention of layer 0, the MLP of layer 0 and mlp.down_proj of layers 1-3 kept in bf16"
        " (ignore)",
        "mlp.gate_proj, mlp.up_proj of layers 1-3 stored as ct-int4-g128 (config_groups.mlp)",
    )


def test_compressed_tensors_exact_name_beats_regex_beats_linear() -> None:
    cfg = _ct(
        {
            "all": {"targets": ["Linear"], "weights": W4_G128},
            "o": {"targets": ["re:.*o_proj$"], "weights": W8_CHANNEL},
            "one": {"targets": ["model.layers.1.mlp.down_proj"], "weights": FP8_TENSOR},
        },
        ["lm_head"],
    )

    def per_param(name: str) -> Fraction:
        if name.endswith("o_proj") or name == "model.layers.1.mlp.down_proj":
            return Fraction(1)
        return _bits(4, 128, 16)

    assert _weights(cfg) == _expected(cfg, per_param)


def test_compressed_tensors_untargeted_modules_stay_16_bit() -> None:
    cfg = _ct({"mlp": {"targets": ["re:.*mlp.*"], "weights": W8_CHANNEL}}, [])
    assert _weights(cfg) == _expected(cfg, lambda n: _bits(8) if ".mlp." in n else BF16)


# --------------------------------------------------------------------------------------
# GPTQ: dynamic overrides, modules_in_block_to_quantize, lm_head
# --------------------------------------------------------------------------------------


def test_gptq_dynamic_overrides_first_match_wins() -> None:
    """vLLM / GPTQModel `dynamic`: '-:' skips, '+:' (or no prefix) overrides bits/group_size."""
    cfg = _cfg(
        quantization_config={
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 128,
            "dynamic": {
                r"-:model\.layers\.0\..*": {},
                r"+:.*down_proj": {"bits": 8, "group_size": 64},
                r".*\.1\.self_attn\.q_proj": {"bits": 8},
            },
        }
    )

    def per_param(name: str) -> Fraction:
        if _layer(name) == 0:
            return BF16
        if name.endswith("down_proj"):
            return _bits(8, 64, 16 + 8)  # int8, fp16 scale + packed int8 zero per 64
        if name == "model.layers.1.self_attn.q_proj":
            return _bits(8, 128, 16 + 8)
        return _bits(4, 128, 16 + 4)

    assert _weights(cfg) == _expected(cfg, per_param)


def test_gptq_modules_in_block_and_quantised_lm_head() -> None:
    cfg = _cfg(
        quantization_config={
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 128,
            "lm_head": True,
            "modules_in_block_to_quantize": [
                ["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"],
                ["mlp.up_proj", "mlp.gate_proj"],
            ],
        }
    )
    int4 = _bits(4, 128, 16 + 4)
    expected = _expected(cfg, lambda n: BF16 if n.endswith(("o_proj", "down_proj")) else int4)
    vocab, h = cfg["vocab_size"], cfg["hidden_size"]
    expected += int(vocab * h * (int4 - BF16))  # the LM head packed too
    assert _weights(cfg) == expected


# --------------------------------------------------------------------------------------
# bitsandbytes, ModelOpt, mxfp4
# --------------------------------------------------------------------------------------


def test_bitsandbytes_skip_modules() -> None:
    """NF4 (QLoRA: 4-bit codes, an fp32 absmax per 64); llm_int8_skip_modules keeps every
    down_proj and all of layer 3."""
    cfg = _cfg(
        quantization_config={
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "llm_int8_skip_modules": ["lm_head", "down_proj", "model.layers.3"],
        }
    )
    nf4 = _bits(4, 64, 32)
    expected = _expected(cfg, lambda n: BF16 if n.endswith("down_proj") or _layer(n) == 3 else nf4)
    assert _weights(cfg) == expected


def test_modelopt_mixed_precision_and_excludes() -> None:
    """MIXED_PRECISION: each listed module its own algorithm, the others 16-bit."""
    cfg = _cfg(
        quantization_config={
            "quant_method": "modelopt",
            "quant_algo": "MIXED_PRECISION",
            "exclude_modules": ["lm_head", "model.layers.2.mlp*"],
            "quantized_layers": {
                "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
                "model.layers.*.mlp.*": {"quant_algo": "NVFP4"},
            },
        }
    )

    def per_param(name: str) -> Fraction:
        if name == "model.layers.0.self_attn.q_proj":
            return FP8
        if ".mlp." in name and _layer(name) != 2:
            return _bits(4, 16, 8)  # e2m1, an e4m3 scale per 16
        return BF16

    assert _weights(cfg) == _expected(cfg, per_param)


def test_gpt_oss_rules_keep_attention_and_router_whole() -> None:
    """gpt-oss's glob list names whole kinds: one precision per kind, no per-layer plan."""
    arch = load_architecture("gpt-oss-20b")
    fmt = resolve_weight_format(arch, None)
    assert fmt.plan is None and fmt.unquantized == ("attention",)
    assert fmt.for_kind("experts").id == "mxfp4"


def test_mixtral_experts_told_apart_by_index() -> None:
    cfg = json.loads(
        (DATA / "engine_configs" / "mistralai--Mixtral-8x7B-Instruct-v0.1.json").read_text()
    )
    cfg |= {
        "num_hidden_layers": 2,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"targets": ["Linear"], "weights": W8_CHANNEL}},
            "ignore": ["lm_head", r"re:.*block_sparse_moe\.experts\.[01]\..*"],
        },
    }
    arch = architecture_from_config(cfg)
    fmt = resolve_weight_format(arch, None)
    counts = count_params(arch)
    expert = 3 * cfg["hidden_size"] * cfg["intermediate_size"]
    kept = 2 * 2 * expert  # experts 0 and 1 of both layers
    linear = counts.linear
    rest = counts.total - linear
    assert weights_bytes(counts, fmt) == 2 * rest + 2 * kept + (linear - kept)
    assert any("some routed experts of layers 0-1 kept in bf16" in n for n in fmt.notes)


def test_experts_named_by_an_index_range() -> None:
    """A regex naming experts 10-19 (none of which a sample of experts 0, 1 and the last would
    show): those experts of every MoE layer stay 16-bit."""
    from importlib import resources

    raw = resources.files("gpuplan.catalog").joinpath("data/models/Qwen--Qwen1.5-MoE-A2.7B.json")
    cfg = json.loads(raw.read_text()) | {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"targets": ["Linear"], "weights": W8_CHANNEL}},
            "ignore": ["lm_head", r"re:.*mlp\.experts\.1[0-9]\..*"],
        }
    }
    arch = architecture_from_config(cfg)
    counts = count_params(arch)
    expert = 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"]
    kept = 10 * expert * arch.num_moe_layers
    rest = counts.total - counts.linear
    fmt = resolve_weight_format(arch, None)
    assert weights_bytes(counts, fmt) == 2 * rest + 2 * kept + (counts.linear - kept)


# --------------------------------------------------------------------------------------
# Other families' names, bad patterns, headers first
# --------------------------------------------------------------------------------------


def test_a_rule_in_another_familys_names_applies_to_its_kind() -> None:
    gpt2 = {
        "model_type": "gpt2",
        "n_embd": 256,
        "n_layer": 2,
        "n_head": 4,
        "vocab_size": 512,
        "n_positions": 256,
        "torch_dtype": "bfloat16",
    }
    own = _weights(
        gpt2
        | {
            "quantization_config": {
                "quant_method": "fbgemm_fp8",
                "modules_to_not_convert": ["transformer.h.0.attn"],
            }
        }
    )
    cfg = gpt2 | {
        "quantization_config": {
            "quant_method": "fbgemm_fp8",
            "modules_to_not_convert": ["model.layers.0.self_attn"],
        }
    }
    assert _weights(cfg) == own
    notes = resolve_weight_format(architecture_from_config(cfg), None).notes
    assert any("name no module" in n for n in notes)
    assert any("attention of layer 0 kept in bf16" in n for n in notes)


@pytest.mark.parametrize(
    "qc",
    [
        {"quant_method": "awq", "modules_to_not_convert": [r"re:(a+)+$"]},
        {"quant_method": "gptq", "dynamic": {"(.*)*x": {"bits": 8}}},
        {"quant_method": "fp8", "modules_to_not_convert": "x" * 2000},
        {"quant_method": "fbgemm_fp8", "modules_to_not_convert": [3]},
        {"quant_method": "gptq", "dynamic": {"-:x": {}, "y": 8}},
        {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"},
        {
            "quant_method": "modelopt",
            "quant_algo": "MIXED_PRECISION",
            "quantized_layers": {"a": {"quant_algo": "W1"}},
        },
    ],
)
def test_bad_rules_fail_in_one_line(qc: dict[str, Any]) -> None:
    with pytest.raises(GpuplanError) as err:
        quantization_from_config(qc, "m")
    assert "\n" not in str(err.value)


def test_an_unparsable_regex_names_nothing() -> None:
    cfg = _cfg(
        quantization_config={"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["re:(["]}
    )
    assert _weights(cfg) == _expected(cfg, lambda n: FP8)


def test_headers_take_precedence_over_the_plan(tmp_path: Path) -> None:
    """A real fbgemm checkpoint (e4m3 weights + an fp32 scale per output channel; the listed
    modules in bf16): the bill shows the stored bytes, and the plan's math agrees with them
    to the scales."""
    torch = pytest.importorskip("torch")
    from model_files import save

    listed = ["lm_head", "model.layers.0", "model.layers.1.self_attn.q_proj"]
    cfg = _cfg(quantization_config={"quant_method": "fbgemm_fp8", "modules_to_not_convert": listed})
    tensors = {}
    scales = 0
    for name, shape in llama_shapes(cfg).items():
        module = name.removesuffix(".weight")
        quantised = (
            len(shape) == 2
            and _layer(module) is not None
            and _layer(module) != 0
            and module != "model.layers.1.self_attn.q_proj"
        )
        if quantised:
            tensors[name] = torch.zeros(shape, dtype=torch.float8_e4m3fn)
            tensors[module + ".weight_scale"] = torch.zeros((shape[0], 1), dtype=torch.float32)
            scales += shape[0] * 4
        else:
            tensors[name] = torch.zeros(shape, dtype=torch.bfloat16)
    folder = tmp_path / "fbgemm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    written = save(folder / "model.safetensors", tensors)
    plan = gpuplan.serve(str(folder), "h100", gpus=1)
    assert plan.weights_bytes == written
    math = _weights(cfg)
    assert math == written - scales


# --------------------------------------------------------------------------------------
# An invariant: each module a list keeps adds exactly its parameters × (bf16 − fp8)
# --------------------------------------------------------------------------------------

TINY_MODULES = [
    n.removesuffix(".weight")
    for n, s in llama_shapes(_cfg()).items()
    if len(s) == 2 and _layer(n) is not None
]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(TINY_MODULES), max_size=12, unique=True))
def test_each_kept_module_adds_its_parameters(listed: list[str]) -> None:
    cfg = _cfg(quantization_config={"quant_method": "fbgemm_fp8", "modules_to_not_convert": listed})
    shapes = llama_shapes(cfg)
    all_fp8 = _expected(cfg, lambda n: FP8)
    extra = sum(shapes[m + ".weight"][0] * shapes[m + ".weight"][1] for m in listed)
    assert _weights(cfg) == all_fp8 + extra
    arch = architecture_from_config(cfg)
    norms = (2 * cfg["num_hidden_layers"] + 1) * cfg["hidden_size"] * 2  # replicated, bf16
    total = all_fp8 + extra
    per_gpu = weights_per_gpu(arch, resolve_weight_format(arch, None), 2, 1).bytes
    assert per_gpu == (total - norms) // 2 + norms


def test_listed_norms_keep_no_linear_module() -> None:
    """A skip list naming every layer's norms (Qwen3-MoE FP8 checkpoints list
    'model.layers.N.post_attention_layernorm') keeps no linear module at the base dtype: a
    norm is not the attention block its name mentions. The weights equal the all-fp8 ones."""
    layers = _cfg()["num_hidden_layers"]
    norms = [
        f"model.layers.{i}.{n}"
        for i in range(layers)
        for n in ("input_layernorm", "post_attention_layernorm")
    ]
    cfg = _cfg(quantization_config={"quant_method": "fbgemm_fp8", "modules_to_not_convert": norms})
    assert _weights(cfg) == _expected(cfg, lambda n: FP8)
