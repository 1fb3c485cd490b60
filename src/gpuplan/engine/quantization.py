"""A checkpoint's `quantization_config`, reduced to what sizes its weights.

`quantization_from_config` maps each method's keys onto a storage layout (a `Precision`: payload
bits, group size, scale and zero-point bits, engine/precision.py) and the module kinds the
method leaves unconverted. Key names mirror the quantizer configs of `transformers`
(utils/quantization_config.py: GPTQConfig, AwqConfig, FineGrainedFP8Config, FbgemmFp8Config,
CompressedTensorsConfig, Mxfp4Config, BitsAndBytesConfig, TorchAoConfig) and ModelOpt's
hf_quant_config.json (catalog/sources/modelopt.py). Named catalog formats (nvfp4, mxfp4, nf4,
bnb-*) are left to the precision catalog (`layout` None); every other layout is derived here
from the config's own bits and group sizes.

Each method's module lists become `ModuleRule`s (which modules a config names, and what they
get): transformers' `modules_to_not_convert` (fbgemm_fp8, fp8, AWQ, mxfp4, torchao), vLLM's
fp8 `ignored_layers`, bitsandbytes' `llm_int8_skip_modules`, ModelOpt's `exclude_modules` and
MIXED_PRECISION `quantized_layers`, compressed-tensors' `ignore` and per-group `targets`
(exact names before regexes before the class name "Linear", as compressed-tensors' matcher
ranks them), GPTQ's `dynamic` per-module overrides (GPTQModel; vLLM gptq_utils) and
`modules_in_block_to_quantize`. engine/module_plan.py applies them to every linear module.

`standard_layout` is what an engine's `--quantization METHOD` means for a checkpoint without
a `quantization_config`: the method's usual layout, said so in a note.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuplan.engine.frozen import record, replace
from gpuplan.engine.precision import Precision
from gpuplan.errors import GpuplanError

LINEAR = ("attention", "mlp", "experts", "shared_experts")
METHODS = (
    "gptq",
    "awq",
    "fp8",
    "fbgemm_fp8",
    "compressed-tensors",
    "bitsandbytes",
    "mxfp4",
    "modelopt",
    "torchao",
)
# config keys listing modules a method leaves at the checkpoint dtype
SKIP_KEYS = (
    "modules_to_not_convert",
    "ignored_layers",
    "ignore",
    "exclude_modules",
    "llm_int8_skip_modules",
)
MAX_PATTERNS = 100_000
MAX_PATTERN_CHARS = 1_000
# a name whose last component is a normalisation layer (layernorm, rmsnorm, q_norm, norm)
_NORM = re.compile(r"(?:^|[._])(?:\w*_)?(?:layer|rms)?norm\$?$")
# a repeated group holding a repetition: the regexes whose matching can take exponential time
_NESTED_REPEAT = re.compile(r"\([^()]*[*+}][^()]*\)[*+{]")


@record
class ModuleRule:
    """Modules a config names and what they get: kept at the checkpoint dtype (`keep`), a layout
    of their own (`layout`), or the config's layout (neither). `syntax` "name": plain names
    name whole dotted components, `*` globs, `re:` regexes; "regex": every pattern is a regex
    (GPTQ `dynamic` keys). `negate`: the rule names the decoder modules its patterns do not
    (GPTQ `modules_in_block_to_quantize`)."""

    patterns: tuple[str, ...]
    syntax: str
    key: str  # the config key it came from, said in the notes
    keep: bool = True
    layout: Precision | None = None
    negate: bool = False


@record
class QuantizationSpec:
    """A checkpoint's `quantization_config`, reduced to what sizes the weights.

    `precision` names the layout (a catalog id, or a derived one in `layout`); `rules` say
    which linear modules differ from it, in order (the first naming a module decides);
    `others_kept`: modules no rule names stay at the checkpoint dtype (compressed-tensors
    modules no config group targets); `lm_head`: the LM head is quantised too (GPTQ)."""

    method: str
    precision: str
    source: str = ""
    layout: Precision | None = None
    rules: tuple[ModuleRule, ...] = ()
    others_kept: bool = False
    lm_head: bool = False
    notes: tuple[str, ...] = ()


def _patterns(value: Any, name: str, key: str) -> tuple[str, ...]:
    """A config's list of module names or patterns, checked (a bad regex or a huge list is a
    one-line error, not a hang)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or len(value) > MAX_PATTERNS:
        raise GpuplanError(f"{name}: quantization_config {key!r} must be a list of module names")
    out: list[str] = []
    for item in value:
        if isinstance(item, list | tuple):  # GPTQ modules_in_block_to_quantize: lists of lists
            out.extend(_patterns(list(item), name, key))
            continue
        if not isinstance(item, str) or not item or len(item) > MAX_PATTERN_CHARS:
            raise GpuplanError(
                f"{name}: quantization_config {key!r} holds {str(item)[:40]!r}, not a module name"
            )
        _check_regex(item.removeprefix("re:").removeprefix("+:").removeprefix("-:"), name, key)
        out.append(item)
    return tuple(out)


def _check_regex(text: str, name: str, key: str) -> None:
    if _NESTED_REPEAT.search(text):
        raise GpuplanError(
            f"{name}: quantization_config {key!r} pattern {text[:40]!r} repeats a repeated"
            " group; refused (its matching can take exponential time)"
        )


def skip_rules(qc: Mapping[str, Any], name: str) -> tuple[ModuleRule, ...]:
    """The modules a config keeps at the checkpoint dtype, one rule per list it gives."""
    out = []
    for key in SKIP_KEYS:
        patterns = _patterns(qc.get(key), name, key)
        if patterns:
            out.append(ModuleRule(patterns, "name", key))
    return tuple(out)


def _int(qc: Mapping[str, Any], name: str, key: str, default: int, lo: int, hi: int) -> int:
    value = qc.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise GpuplanError(f"{name}: quantization_config {key!r} must be a whole number")
    value = int(value)
    if not lo <= value <= hi:
        raise GpuplanError(f"{name}: quantization_config {key!r} = {value} is out of range")
    return value


def int_layout(
    method: str, bits: int, group: int, scale_bits: int = 16, zero_bits: int = 0, source: str = ""
) -> Precision:
    """Packed integer weights with one scale (and zero point) per group of `group` inputs;
    group ≤ 0 means one per output channel (negligible beside the weights)."""
    if group > 0:
        pid = f"{method}-int{bits}-g{group}"
        return Precision(pid, bits, group, scale_bits, zero_bits, scope="linear", source=source)
    return Precision(f"{method}-int{bits}-channel", bits, scope="linear", source=source)


def fp8_layout(block: Any = None, source: str = "") -> Precision:
    """fp8 e4m3 weights: per-tensor / per-channel scales (negligible), or one fp32 scale per
    block (DeepSeek-V3 §3.3.2: 128 × 128)."""
    if block:
        if (
            not isinstance(block, list | tuple)
            or not block
            or not all(
                isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 65536 for b in block
            )
        ):
            raise GpuplanError(
                f"fp8 weight_block_size must be a list of positive sizes, got {block!r}"
            )
        size = 1
        for b in block:
            size *= int(b)
        pid = (
            "fp8-block128" if list(block) == [128, 128] else f"fp8-block{'x'.join(map(str, block))}"
        )
        return Precision(pid, 8, size, 32, scope="linear", source=source)
    return Precision("fp8-tensor", 8, scope="linear", source=source)


def quantization_from_config(qc: Any, name: str = "model") -> QuantizationSpec | None:
    """Map a checkpoint's `quantization_config` onto a storage layout.

    gptq / awq (bits, group_size; AWQ's w_bit / q_group_size), fp8 (per-tensor or
    `weight_block_size`), fbgemm_fp8 (per-channel, `modules_to_not_convert`),
    compressed-tensors (config groups: targets, ignore, num_bits, type, strategy, group size,
    symmetric), bitsandbytes (4-bit NF4/FP4 with or without double quantisation, 8-bit),
    mxfp4 (gpt-oss), modelopt (FP8, NVFP4, W4A16/W4A8 AWQ), torchao (int4/int8/float8).
    """
    if not qc:
        return None
    if not isinstance(qc, Mapping):
        raise GpuplanError(f"{name}: quantization_config must be a JSON object")
    method = str(qc.get("quant_method", "")).lower().replace("_", "-")
    skip = skip_rules(qc, name)
    if method in ("gptq", "awq"):
        return _gptq_awq(qc, method, skip, name)
    if method == "fp8":
        block = qc.get("weight_block_size")
        layout = fp8_layout(
            block,
            "fp8 e4m3 weights"
            + (f", fp32 scale per {block} block" if block else ", per-tensor scale"),
        )
        return QuantizationSpec(method, layout.id, f"fp8 weight_block_size={block}", layout, skip)
    if method == "fbgemm-fp8":
        layout = Precision(
            "fp8-channel",
            8,
            scope="linear",
            source="FBGEMM fp8: e4m3 weights, one fp32 scale per output channel",
        )
        return QuantizationSpec("fbgemm_fp8", layout.id, "fbgemm_fp8 per-channel", layout, skip)
    if method == "mxfp4":
        return QuantizationSpec(
            method, "mxfp4", "mxfp4 (32-element blocks, e8m0 scales)", rules=skip
        )
    if method == "bitsandbytes":
        return _bitsandbytes(qc, skip, name)
    if method == "compressed-tensors":
        return _compressed_tensors(qc, name)
    if method in ("nvfp4", "modelopt", "modelopt-fp4"):
        return _modelopt(qc, skip, name)
    if method == "torchao":
        return _torchao(qc, skip, name)
    if not method and str(qc.get("quantization", "")).lower() == "mix_quant":
        return _paddle_mix_quant(qc, name)
    keys = ", ".join(sorted(str(k)[:40] for k in qc)[:12])
    if not method:
        raise GpuplanError(
            f"{name}: quantization_config has no quant_method (its keys: {keys}); gpuplan"
            f" cannot tell how the weights are stored (it reads {', '.join(METHODS)})"
        )
    raise GpuplanError(
        f"{name}: quantization method {method[:40]!r} is not supported"
        f" ({', '.join(METHODS)}); its quantization_config keys: {keys}"
    )


# Paddle (FastDeploy) mix_quant weight types whose stored layout gpuplan reads: fp8 e4m3 with
# one scale per tensor, or one per 128 x 128 block (FastDeploy's block_wise_fp8 quant config)
_PADDLE_FP8 = {"tensor_wise_fp8": None, "block_wise_fp8": [128, 128]}


def _paddle_mix_quant(qc: Mapping[str, Any], name: str) -> QuantizationSpec | None:
    """PaddlePaddle's `mix_quant` block (ERNIE 4.5 checkpoints for FastDeploy): a weight type for
    the dense layers (`dense_quant_type`) and one for the experts (`moe_quant_type`). Without
    `is_quantized` the checkpoint stores its weights unquantised (FastDeploy quantises them as it
    loads): read as stored, None. Stored fp8 of one type for both is read as fp8; any other
    stored type is refused, naming the keys and their values."""
    if not qc.get("is_quantized"):
        return None
    dense, moe = qc.get("dense_quant_type"), qc.get("moe_quant_type")
    if dense == moe and isinstance(dense, str) and dense in _PADDLE_FP8:
        block = _PADDLE_FP8[dense]
        layout = fp8_layout(block, f"Paddle mix_quant {dense}: fp8 e4m3 weights")
        return QuantizationSpec("fp8", layout.id, f"Paddle mix_quant {dense}", layout)
    listed = ", ".join(
        f"{k}={str(qc.get(k))[:24]!r}"
        for k in ("dense_quant_type", "moe_quant_type", "kv_cache_quant_type")
        if k in qc
    )
    raise GpuplanError(
        f"{name}: quantization_config is Paddle's mix_quant with stored weights ({listed},"
        " is_quantized) gpuplan does not read (it reads tensor_wise_fp8 or block_wise_fp8 for"
        " both); cannot size this checkpoint"
    )


def _gptq_awq(
    qc: Mapping[str, Any], method: str, skip: tuple[ModuleRule, ...], name: str
) -> QuantizationSpec:
    """GPTQ / AWQ: packed ints with fp16 scales and packed zero points per group (AutoGPTQ
    and AutoAWQ qzeros); GPTQ's `modules_in_block_to_quantize` (the others stay 16-bit),
    `dynamic` per-module overrides ("-:regex" not quantised, "+:regex" / "regex" with its
    own bits and group_size; first match wins) and `lm_head`."""
    bits = _int(qc, name, "bits" if "bits" in qc else "w_bit", 4, 2, 8)
    group = _int(qc, name, "group_size" if "group_size" in qc else "q_group_size", 128, -1, 2**20)
    layout = _int_layout(method, bits, group, name)
    rules = list(skip)
    inside = _patterns(qc.get("modules_in_block_to_quantize"), name, "modules_in_block_to_quantize")
    if inside:
        rules.append(ModuleRule(inside, "name", "modules_in_block_to_quantize", negate=True))
    rules += _dynamic_rules(qc.get("dynamic"), method, bits, group, name)
    lm_head = qc.get("lm_head") is True
    return QuantizationSpec(
        method,
        layout.id,
        f"{method} bits={bits} group_size={group}",
        layout,
        tuple(rules),
        lm_head=lm_head,
    )


def _int_layout(method: str, bits: int, group: int, name: str) -> Precision:
    if bits not in (2, 3, 4, 8):
        raise GpuplanError(f"{name}: {method} with {bits} bits is not supported (2, 3, 4 or 8)")
    return int_layout(
        method,
        bits,
        group,
        16,
        bits,
        f"{method} {bits}-bit, fp16 scales and packed zeros per group of {group}",
    )


def _dynamic_rules(dynamic: Any, method: str, bits: int, group: int, name: str) -> list[ModuleRule]:
    if dynamic is None:
        return []
    if not isinstance(dynamic, Mapping) or len(dynamic) > MAX_PATTERNS:
        raise GpuplanError(f"{name}: quantization_config 'dynamic' must map patterns to overrides")
    rules = []
    for pattern, override in dynamic.items():
        (text,) = _patterns([pattern], name, "dynamic")
        if text.startswith("-:"):
            rules.append(ModuleRule((text[2:],), "regex", "dynamic"))
            continue
        if not isinstance(override, Mapping):
            raise GpuplanError(f"{name}: quantization_config 'dynamic' {text!r} needs an object")
        own_bits = _int(override, name, "bits", bits, 2, 8)
        own_group = _int(override, name, "group_size", group, -1, 2**20)
        layout = None
        if (own_bits, own_group) != (bits, group):
            layout = _int_layout(method, own_bits, own_group, name)
        rules.append(ModuleRule((text.removeprefix("+:"),), "regex", "dynamic", False, layout))
    return rules


def kinds_of(pattern: str) -> set[str]:
    """The module kinds a module name or pattern ('model.layers.*.self_attn', 're:.*mlp.gate$',
    'lm_head', 'Linear') names."""
    text = pattern.removeprefix("re:").lower()
    if text in ("linear", "nn.linear", "torch.nn.linear"):
        return set(LINEAR)
    if _NORM.search(text):
        # a normalisation layer ('model.layers.3.post_attention_layernorm', 'q_norm'): no
        # linear module, whatever words its name shares with one (Qwen3-MoE FP8 checkpoints list
        # every layer's norms in modules_to_not_convert)
        return set()
    kinds: set[str] = set()
    if "lm_head" in text:
        kinds.add("lm_head")
    if "embed" in text:
        kinds.add("embedding")
    if "vision" in text or "visual" in text or "multi_modal" in text:
        kinds.add("vision")
    if (
        "attn" in text
        or "attention" in text
        or any(p in text for p in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv"))
    ):
        kinds.add("attention")
    if "shared_expert" in text:
        kinds.add("shared_experts")
    elif "expert" in text:
        kinds.add("experts")
    if text.endswith(("gate", "gate$", "router", "router$")) or ".gate." in text:
        kinds.add("router")
    if (
        "mlp" in text
        or "feed_forward" in text
        or "ffn" in text
        or any(p in text for p in ("gate_proj", "up_proj", "down_proj"))
    ) and not kinds & {"experts", "shared_experts", "router"}:
        kinds.add("mlp")
    return kinds


def _bitsandbytes(
    qc: Mapping[str, Any], skip: tuple[ModuleRule, ...], name: str
) -> QuantizationSpec:
    if qc.get("load_in_4bit"):
        kind = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()
        double = bool(qc.get("bnb_4bit_use_double_quant", False))
        precision = f"{'nf4' if kind == 'nf4' else 'bnb-fp4'}{'-dq' if double else ''}"
        return QuantizationSpec(
            "bitsandbytes",
            precision,
            f"bitsandbytes 4-bit {kind} double_quant={double}",
            rules=skip,
        )
    if qc.get("load_in_8bit"):
        return QuantizationSpec("bitsandbytes", "bnb-int8", "bitsandbytes LLM.int8", rules=skip)
    raise GpuplanError(f"{name}: bitsandbytes config sets neither load_in_4bit nor load_in_8bit")


def _ct_layout(weights: Mapping[str, Any], fmt: str, name: str) -> Precision:
    """One compressed-tensors weight scheme as a layout (compressed_tensors.quantization
    QuantizationArgs: num_bits, type int|float, strategy tensor|channel|group|block|
    tensor_group, group_size, block_structure, symmetric)."""
    bits = _int(weights, name, "num_bits", 8, 1, 16)
    kind = str(weights.get("type", "int")).lower()
    strategy = str(weights.get("strategy", "tensor")).lower()
    group = weights.get("group_size")
    symmetric = bool(weights.get("symmetric", True))
    if kind == "float" and bits == 4 or "nvfp4" in fmt:
        return Precision(
            "nvfp4",
            4,
            16,
            8,
            scope="linear",
            source="compressed-tensors nvfp4: e2m1 values, fp8 e4m3 scale per 16, fp32 global scale",
        )
    if kind == "float" and bits == 8:
        if strategy == "block":
            return fp8_layout(
                weights.get("block_structure") or [128, 128], "compressed-tensors fp8 block"
            )
        pid = "fp8-tensor" if strategy == "tensor" else "fp8-channel"
        return Precision(pid, 8, scope="linear", source=f"compressed-tensors fp8 {strategy}")
    if kind != "int" or bits not in (2, 3, 4, 8):
        raise GpuplanError(
            f"{name}: compressed-tensors with {bits}-bit {kind} weights is not supported"
        )
    if strategy == "group" and isinstance(group, int) and group > 0:
        zero = 0 if symmetric else 8  # asymmetric schemes store an int8 zero point per group
        return int_layout(
            "ct", bits, group, 16, zero, f"compressed-tensors int{bits} group {group}"
        )
    return Precision(
        f"int{bits}-channel",
        bits,
        scope="linear",
        source=f"compressed-tensors int{bits} {strategy}",
    )


def _compressed_tensors(qc: Mapping[str, Any], name: str) -> QuantizationSpec:
    """Config groups, each a weight scheme for the modules its `targets` name; `ignore` keeps
    modules at the dtype, and modules no group targets stay there too. A module targeted by
    several groups takes the group naming it most exactly: an exact name, then a regex, then
    the class "Linear" (compressed-tensors utils/match.py)."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, Mapping) or not groups:
        raise GpuplanError(f"{name}: compressed-tensors config has no config_groups")
    fmt = str(qc.get("format", "")).lower()
    ranked: list[tuple[int, int, ModuleRule]] = []
    first: Precision | None = None
    described = []
    for order, (group_name, group) in enumerate(groups.items()):
        if not isinstance(group, Mapping) or not isinstance(group.get("weights"), Mapping):
            continue
        layout = _ct_layout(group["weights"], str(group.get("format") or fmt), name)
        first = first or layout
        key = f"config_groups.{group_name}"
        targets = _patterns(group.get("targets") or ["Linear"], name, f"{key}.targets")
        by_rank: dict[int, list[str]] = {}
        for target in targets:
            rank = 2 if target[:1].isupper() and "." not in target else int("re:" in target)
            by_rank.setdefault(rank, []).append(target)
        for rank, patterns in by_rank.items():
            rule = ModuleRule(tuple(patterns), "name", key, keep=False, layout=layout)
            ranked.append((rank, order, rule))
        described.append(f"{layout.id} → {', '.join(targets)}")
    if first is None:
        raise GpuplanError(f"{name}: compressed-tensors config_groups declare no weights")
    ranked.sort(key=lambda r: (r[0], r[1]))
    rules = skip_rules(qc, name) + tuple(r for _, _, r in ranked)
    return QuantizationSpec(
        "compressed-tensors",
        first.id,
        "compressed-tensors " + "; ".join(described),
        first,
        rules,
        others_kept=True,
    )


NVFP4 = Precision(
    "nvfp4",
    4,
    16,
    8,
    scope="linear",
    source="NVFP4: e2m1 values, fp8 e4m3 scale per 16, fp32 global scale",
)


def _modelopt_layout(algo: str, group: int) -> Precision:
    """One ModelOpt quant_algo as a layout: FP8 per-tensor, NVFP4 (group 16, e4m3 scales),
    W4A16_AWQ / W4A8_AWQ (int4, fp16 scale per group), INT8 per channel."""
    if "FP4" in algo:
        return NVFP4
    if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO"):
        return Precision("fp8-tensor", 8, scope="linear", source=f"ModelOpt {algo}: e4m3")
    if "W4A16" in algo or "W4A8" in algo or "INT4" in algo:
        return int_layout(
            "modelopt", 4, group, 16, 0, f"ModelOpt {algo}: int4, fp16 scale per {group}"
        )
    if "INT8" in algo or "W8A8" in algo:
        return Precision("int8-channel", 8, scope="linear", source=f"ModelOpt {algo}")
    raise GpuplanError(
        f"ModelOpt quant_algo {algo!r} is not supported (FP8, NVFP4, W4A16_AWQ, W4A8_AWQ, INT8,"
        " MIXED_PRECISION)"
    )


def _modelopt(qc: Mapping[str, Any], skip: tuple[ModuleRule, ...], name: str) -> QuantizationSpec:
    """ModelOpt (hf_quant_config.json): one quant_algo for every linear module but the
    `exclude_modules`, or MIXED_PRECISION with a `quantized_layers` map (module → its own
    quant_algo; modules it does not list stay at the dtype: vLLM modelopt.py
    ModelOptMixedPrecisionConfig)."""
    algo = str(qc.get("quant_algo", "nvfp4")).upper()
    group = _int(qc, name, "group_size", 128, 1, 2**20)
    notes: tuple[str, ...] = ()
    if str(qc.get("kv_cache_quant_algo") or "").upper() == "FP8":
        notes = ("ModelOpt checkpoint carries fp8 KV-cache scales (kv_cache_quant_algo FP8)",)
    if algo == "MIXED_PRECISION":
        layers = qc.get("quantized_layers")
        if not isinstance(layers, Mapping) or not layers or len(layers) > MAX_PATTERNS:
            raise GpuplanError(f"{name}: ModelOpt MIXED_PRECISION needs a quantized_layers map")
        rules = list(skip)
        counts: dict[Precision, int] = {}
        for module, own in layers.items():
            (pattern,) = _patterns([module], name, "quantized_layers")
            if not isinstance(own, Mapping):
                raise GpuplanError(f"{name}: quantized_layers {pattern!r} needs an object")
            try:
                layout = _modelopt_layout(
                    str(own.get("quant_algo", "")).upper(),
                    _int(own, name, "group_size", group, 1, 2**20),
                )
            except GpuplanError as e:
                raise GpuplanError(f"{name}: {e}") from None
            counts[layout] = counts.get(layout, 0) + 1
            rules.append(ModuleRule((pattern,), "name", "quantized_layers", False, layout))
        main = max(counts, key=lambda p: counts[p])
        return QuantizationSpec(
            "modelopt", main.id, "modelopt MIXED_PRECISION", main, tuple(rules), True, notes=notes
        )
    try:
        layout = _modelopt_layout(algo, group)
    except GpuplanError as e:
        raise GpuplanError(f"{name}: {e}") from None
    precision = "nvfp4" if layout is NVFP4 else layout.id
    return QuantizationSpec(
        "modelopt",
        precision,
        f"modelopt {algo}",
        None if layout is NVFP4 else layout,
        skip,
        notes=notes,
    )


def _torchao(qc: Mapping[str, Any], skip: tuple[ModuleRule, ...], name: str) -> QuantizationSpec:
    """torchao (TorchAoConfig.quant_type: a string or {"default": {"_type": ..., "_data":
    {"group_size": ...}}}): int4 weight-only keeps a bf16 scale and zero per group
    (torchao/quantization/quant_api.py Int4WeightOnlyConfig), int8 weight-only and the fp8
    configs one scale per row."""
    qt = qc.get("quant_type")
    kind, group = "", 128
    if isinstance(qt, str):
        kind = qt.lower()
        kwargs = qc.get("quant_type_kwargs") or {}
        if isinstance(kwargs, Mapping) and isinstance(kwargs.get("group_size"), int):
            group = int(kwargs["group_size"])
    elif isinstance(qt, Mapping):
        inner = qt.get("default", qt)
        if isinstance(inner, Mapping):
            kind = str(inner.get("_type", "")).lower()
            data = inner.get("_data") or {}
            if isinstance(data, Mapping) and isinstance(data.get("group_size"), int):
                group = int(data["group_size"])
    if "int4" in kind:
        layout = int_layout(
            "torchao",
            4,
            group,
            16,
            16,
            f"torchao int4 weight-only, bf16 scale and zero per {group}",
        )
    elif "float8" in kind or "fp8" in kind:
        layout = Precision("fp8-channel", 8, scope="linear", source=f"torchao {kind}")
    elif "int8" in kind:
        layout = Precision("int8-channel", 8, scope="linear", source=f"torchao {kind}")
    else:
        raise GpuplanError(
            f"{name}: torchao quant_type {kind or qt!r} is not supported (int4, int8, float8)"
        )
    return QuantizationSpec("torchao", layout.id, f"torchao {kind}", layout, skip)


# --------------------------------------------------------------------------------------
# An engine flag without a quantization_config
# --------------------------------------------------------------------------------------

_STANDARD = {
    # engine --quantization name -> (method, layout builder, what it assumes)
    "awq": ("awq", "4-bit, group 128"),
    "awq_marlin": ("awq", "4-bit, group 128"),
    "gptq": ("gptq", "4-bit, group 128"),
    "gptq_marlin": ("gptq", "4-bit, group 128"),
    "marlin": ("gptq", "4-bit, group 128"),
    "compressed_tensors": ("compressed-tensors", "W4A16: int4, group 128, symmetric"),
    "fbgemm_fp8": ("fbgemm_fp8", "fp8 e4m3 per output channel"),
    "modelopt": ("modelopt", "FP8 per tensor"),
    "modelopt_fp4": ("modelopt", "NVFP4: e2m1, e4m3 scale per 16"),
    "mxfp4": ("mxfp4", "e2m1, e8m0 scale per 32"),
    "torchao": ("torchao", "int4 weight-only, group 128"),
}


def standard_layout(flag: str) -> QuantizationSpec | None:
    """The usual layout of an engine's `--quantization` method, for a checkpoint whose
    config.json has no quantization_config (None: not a method with one standard layout)."""
    key = flag.lower().replace("-", "_")
    if key not in _STANDARD:
        return None
    method, what = _STANDARD[key]
    configs: dict[str, dict[str, Any]] = {
        "awq": {"quant_method": "awq", "bits": 4, "group_size": 128},
        "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
        "compressed-tensors": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "strategy": "group",
                        "group_size": 128,
                    },
                }
            },
        },
        "fbgemm_fp8": {"quant_method": "fbgemm_fp8"},
        "modelopt": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4" if key == "modelopt_fp4" else "FP8",
        },
        "mxfp4": {"quant_method": "mxfp4"},
        "torchao": {"quant_method": "torchao", "quant_type": "int4_weight_only"},
    }
    spec = quantization_from_config(configs[method], flag)
    assert spec is not None
    note = (
        f"--quantization {flag} without a quantization_config in config.json: sized as the"
        f" method's standard layout ({what}); a checkpoint quantised otherwise will differ"
    )
    return replace(spec, notes=(*spec.notes, note))
