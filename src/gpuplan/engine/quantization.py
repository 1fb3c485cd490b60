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
    "quark",
    "eetq",
    "hqq",
    "auto-round",
)
# config keys listing modules a method leaves at the checkpoint dtype
SKIP_KEYS = (
    "modules_to_not_convert",
    "ignored_layers",
    "ignore",
    "exclude_modules",
    "llm_int8_skip_modules",
    "skip_modules",
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
    """Map a checkpoint's `quantization_config` onto a storage layout (`_read_method`); a
    block read from a quantize_config.json / quant_config.json beside config.json
    (catalog/sources/quant_files.py, `_read_from`) says so in a note."""
    spec = _read_method(qc, name)
    source = qc.get("_read_from") if isinstance(qc, Mapping) else None
    if spec is None or not isinstance(source, str):
        return spec
    note = (
        f"quantisation read from {source[:40]} beside config.json (config.json has no"
        " quantization_config), as vLLM's get_quant_config reads it"
    )
    return replace(spec, notes=(*spec.notes, note))


def _read_method(qc: Any, name: str) -> QuantizationSpec | None:
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
    if method in ("auto-round", "intel/auto-round", "autoround"):
        # Intel AutoRound exports in AutoGPTQ's or AutoAWQ's packing (`packing_format`
        # auto_round:auto_gptq / auto_round:auto_awq), which vLLM's auto_round.py loads as such
        packing = "awq" if "awq" in str(qc.get("packing_format", "")).lower() else "gptq"
        return _gptq_awq(qc, packing, skip, name)
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
    if method == "quark":
        return _quark(qc, name)
    if method == "eetq":
        layout = Precision(
            "int8-channel", 8, scope="linear", source="EETQ int8 weight-only, per-channel scale"
        )
        return QuantizationSpec("eetq", layout.id, "eetq int8 per channel", layout, skip)
    if method == "hqq":
        return _hqq(qc, skip, name)
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
    marlin = method == "awq" and str(qc.get("version", "")).lower() == "marlin"
    layout = _int_layout(method, bits, group, name, 0 if marlin else bits)
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


def _int_layout(
    method: str, bits: int, group: int, name: str, zero: int | None = None
) -> Precision:
    """AutoGPTQ / AutoAWQ GEMM packing: fp16 scales and `bits`-wide packed zeros per group
    (qzeros, stored even for symmetric GPTQ); AutoAWQ's Marlin format (`version: marlin`)
    stores no zeros (WQLinear_Marlin: qweight and scales only)."""
    if bits not in (2, 3, 4, 8):
        raise GpuplanError(f"{name}: {method} with {bits} bits is not supported (2, 3, 4 or 8)")
    zero = bits if zero is None else zero
    zeros = "packed zeros" if zero else "no zeros (Marlin)"
    return int_layout(
        method,
        bits,
        group,
        16,
        zero,
        f"{method} {bits}-bit, fp16 scales and {zeros} per group of {group}",
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
        # asymmetric schemes store a zero point per group, packed to num_bits along the output
        # dim (compressed-tensors PackedQuantizationCompressor: pack_to_int32(zero_point,
        # num_bits, packed_dim=0); int-quantized 8-bit keeps one int8 each: 8 bits too)
        zero = 0 if symmetric else bits
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


def _hqq(qc: Mapping[str, Any], skip: tuple[ModuleRule, ...], name: str) -> QuantizationSpec:
    """HQQ (transformers HqqConfig: `quant_config.weight_quant_params` nbits / group_size, or
    the flat keys): packed `nbits` weights with an fp16 scale and an fp16 zero per group
    (hqq/core/quantize.py HQQLinear: W_q, scale, zero; unquantised scale / zero params)."""
    inner = qc.get("quant_config") if isinstance(qc.get("quant_config"), Mapping) else qc
    params = inner.get("weight_quant_params", inner) if isinstance(inner, Mapping) else {}
    if not isinstance(params, Mapping) or "nbits" not in params:
        raise GpuplanError(
            f"{name}: HQQ config has no weight_quant_params nbits; cannot size its weights"
        )
    bits = _int(params, name, "nbits", 4, 1, 8)
    group = _int(params, name, "group_size", 64, 1, 2**20)
    layout = int_layout(
        "hqq", bits, group, 16, 16, f"HQQ {bits}-bit, fp16 scale and zero per {group}"
    )
    return QuantizationSpec("hqq", layout.id, f"hqq nbits={bits} group_size={group}", layout, skip)


_QUARK_FLOAT = {"fp8_e4m3": 8, "fp8_e5m2": 8, "fp6_e2m3": 6, "fp6_e3m2": 6, "fp4": 4}
_QUARK_INT = {"int8": 8, "uint8": 8, "int4": 4, "uint4": 4}


def _quark_layout(weight: Any, name: str) -> Precision:
    """One AMD Quark weight spec (quark.torch QuantizationSpec: dtype, qscheme per_tensor |
    per_channel | per_group, group_size, scale_format) as a layout: fp8 with a per-tensor or
    per-channel scale; OCP MX (fp4 / fp6 in groups of 32 with an e8m0 scale: OCP MX v1.0);
    int8 / int4 with an fp16 scale per group, and an 8-bit zero point for the unsigned types
    (asymmetric), as vLLM's quark schemes load them (QuarkW8A8Fp8, QuarkW8A8Int8, QuarkOCP_MX,
    QuarkW4A16...)."""
    if not isinstance(weight, Mapping):
        raise GpuplanError(f"{name}: Quark global_quant_config has no weight spec")
    dtype = str(weight.get("dtype", "")).lower()
    scheme = str(weight.get("qscheme", "per_tensor")).lower()
    group = _int(weight, name, "group_size", 0, 0, 2**20) if scheme == "per_group" else 0
    if scheme == "per_group" and not group:
        raise GpuplanError(f"{name}: Quark per_group weight spec has no group_size")
    source = f"Quark {dtype} {scheme}" + (f" group {group}" if group else "")
    if dtype in _QUARK_FLOAT:
        bits = _QUARK_FLOAT[dtype]
        if bits == 8 and not group:
            pid = "fp8-tensor" if scheme == "per_tensor" else "fp8-channel"
            return Precision(pid, 8, scope="linear", source=source)
        if not group:
            raise GpuplanError(f"{name}: Quark {dtype} weights need qscheme per_group (OCP MX)")
        pid = "mxfp4" if (bits, group) == (4, 32) else f"quark-{dtype}-g{group}"
        return Precision(pid, bits, group, 8, scope="linear", source=source + ", e8m0 scales")
    if dtype in _QUARK_INT:
        bits = _QUARK_INT[dtype]
        if not group:
            return Precision(f"int{bits}-channel", bits, scope="linear", source=source)
        zero = 8 if dtype.startswith("u") else 0
        return int_layout("quark", bits, group, 16, zero, source + ", fp16 scales")
    raise GpuplanError(
        f"{name}: Quark weight dtype {dtype[:24]!r} is not supported (fp8_e4m3, fp8_e5m2, fp4,"
        " fp6_e2m3, fp6_e3m2, int8, uint8, int4, uint4)"
    )


def _quark(qc: Mapping[str, Any], name: str) -> QuantizationSpec:
    """AMD Quark (`quant_method: quark`): `global_quant_config` for every linear module,
    `layer_quant_config` (name pattern → its own spec, fnmatch `*`) before it, `exclude`
    (kept at the dtype) before both: vLLM quark.py `_find_matched_config` /
    `should_ignore_layer`."""
    glob = qc.get("global_quant_config")
    if not isinstance(glob, Mapping):
        raise GpuplanError(f"{name}: Quark config has no global_quant_config")
    layout = _quark_layout(glob.get("weight"), name)
    rules: list[ModuleRule] = []
    exclude = _patterns(qc.get("exclude"), name, "exclude")
    if exclude:
        rules.append(ModuleRule(exclude, "name", "exclude"))
    layers = qc.get("layer_quant_config") or {}
    if not isinstance(layers, Mapping) or len(layers) > MAX_PATTERNS:
        raise GpuplanError(f"{name}: Quark layer_quant_config must map names to specs")
    for pattern, own in layers.items():
        (text,) = _patterns([pattern], name, "layer_quant_config")
        own_layout = _quark_layout(own.get("weight") if isinstance(own, Mapping) else None, name)
        rules.append(ModuleRule((text,), "name", "layer_quant_config", False, own_layout))
    return QuantizationSpec("quark", layout.id, f"quark {layout.source}", layout, tuple(rules))


# --------------------------------------------------------------------------------------
# An engine flag without a quantization_config
# --------------------------------------------------------------------------------------

# engine --quantization name -> the method whose checkpoint layout it loads
_FLAG_METHOD = {
    "awq": "awq",
    "awq_marlin": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "marlin": "gptq",
    "compressed_tensors": "compressed-tensors",
    "fbgemm_fp8": "fbgemm_fp8",
    "modelopt": "modelopt",
    "modelopt_fp4": "modelopt",
    "mxfp4": "mxfp4",
    "torchao": "torchao",
    "quark": "quark",
    "w8a8_int8": "compressed-tensors",  # SGLang: int8 weights, one scale per output channel
}


def _scheme_of_name(model: str) -> dict[str, Any]:
    """What a checkpoint's name says of its layout, the way publishers name them (RedHatAI
    "-quantized.w8a8" / "-w4a16" / "-FP8-dynamic", TheBloke "-GPTQ-4bit-32g-actorder",
    "-AWQ", "-Int8", "-NVFP4", "-MXFP4"): bits, group size, weight type. Empty when it says
    nothing."""
    text = model.rsplit("/", 1)[-1].lower()
    words = set(re.split(r"[^a-z0-9]+", text))
    out: dict[str, Any] = {}
    if "nvfp4" in text or "fp4" in words:
        out["scheme"] = "nvfp4"
    elif "mxfp4" in text:
        out["scheme"] = "mxfp4"
    elif "fp8" in text:
        out["scheme"] = "fp8"
    elif re.search(r"w8a8|w8a16|int8|8bit|8-bit", text):
        out["scheme"], out["bits"] = "int", 8
    elif re.search(r"w4a16|w4a8|int4|4bit|4-bit", text):
        out["scheme"], out["bits"] = "int", 4
    elif re.search(r"int3|3bit|3-bit", text):
        out["scheme"], out["bits"] = "int", 3
    elif re.search(r"int2|2bit|2-bit", text):
        out["scheme"], out["bits"] = "int", 2
    group = re.search(r"(?:^|[^a-z0-9])(?:g|gs|group)(\d{2,4})(?:[^0-9]|$)", text) or re.search(
        r"(?:^|[^a-z0-9])(\d{2,4})g(?:[^a-z0-9]|$)", text
    )
    if group and int(group.group(1)) in (32, 64, 128, 256):
        out["group"] = int(group.group(1))
    return out


def _flag_config(method: str, key: str, hint: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The quantization_config a flag stands for (the method's usual layout, or what the model's
    name says of it), and the layout in words."""
    scheme, bits, group = hint.get("scheme"), int(hint.get("bits", 4)), int(hint.get("group", 128))
    if method in ("awq", "gptq"):
        bits = bits if scheme == "int" else 4
        cfg = {"quant_method": method, "bits": bits, "group_size": group}
        return cfg, f"{bits}-bit, group {group}"
    if method == "compressed-tensors":
        if scheme == "fp8":
            weights: dict[str, Any] = {"num_bits": 8, "type": "float", "strategy": "channel"}
            what = "FP8: e4m3 weights, one scale per output channel"
        elif scheme == "nvfp4":
            weights = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
            what = "NVFP4: e2m1, e4m3 scale per 16"
        elif scheme == "int" and bits == 8:
            weights = {"num_bits": 8, "type": "int", "strategy": "channel"}
            what = "W8A8 / W8A16: int8 weights, one scale per output channel"
        else:
            weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": group}
            what = f"W4A16: int4, group {group}, symmetric"
        groups = {"group_0": {"targets": ["Linear"], "weights": weights}}
        return {
            "quant_method": method,
            "config_groups": groups,
            "ignore": ["lm_head"],
        }, what
    if method == "modelopt":
        fp4 = key == "modelopt_fp4" or scheme == "nvfp4"
        algo = "NVFP4" if fp4 else "FP8"
        what = "NVFP4: e2m1, e4m3 scale per 16" if fp4 else "FP8 per tensor"
        return {"quant_method": method, "quant_algo": algo}, what
    if method == "quark":
        return _quark_flag(scheme, bits, group)
    if method == "torchao":
        return {
            "quant_method": method,
            "quant_type": "int4_weight_only",
        }, "int4 weight-only, group 128"
    if method == "mxfp4":
        return {"quant_method": method}, "e2m1, e8m0 scale per 32"
    return {"quant_method": method}, "fp8 e4m3 per output channel"


def _quark_flag(scheme: Any, bits: int, group: int) -> tuple[dict[str, Any], str]:
    """A Quark export as its name says (AMD publishes `-MXFP4`, `-FP8-KV`, `-w4a16`...):
    OCP MXFP4, int8 per channel, uint4 per group, else FP8 per tensor."""
    if scheme in ("mxfp4", "nvfp4"):
        weight = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
        what = "MXFP4: e2m1, e8m0 scale per 32"
    elif scheme == "int" and bits == 8:
        weight, what = {"dtype": "int8", "qscheme": "per_channel"}, "int8 per output channel"
    elif scheme == "int":
        weight = {"dtype": "uint4", "qscheme": "per_group", "group_size": group}
        what = f"uint4, group {group}"
    else:
        weight, what = {"dtype": "fp8_e4m3", "qscheme": "per_tensor"}, "FP8 per tensor"
    config = {"quant_method": "quark", "global_quant_config": {"weight": weight}}
    return config | {"exclude": ["lm_head"]}, what


def standard_layout(flag: str, model: str = "") -> QuantizationSpec | None:
    """What an engine's `--quantization` method means for a checkpoint whose config.json has no
    quantization_config (None: not a method with one standard layout). The engine would read
    the layout from the checkpoint; without it gpuplan takes what the model's name says
    (`-w8a8`, `-FP8-dynamic`, `-GPTQ-Int8`, `-AWQ-g64`, `-NVFP4`) or else the method's usual
    layout (AutoAWQ / AutoGPTQ 4-bit group 128, llm-compressor W4A16, ModelOpt FP8), and says
    which in a note."""
    key = flag.lower().replace("-", "_")
    method = _FLAG_METHOD.get(key)
    if method is None:
        return None
    hint = _scheme_of_name(model) if model else {}
    basis = f"as the model's name {model.rsplit('/', 1)[-1][:60]!r} says" if hint else ""
    if key == "w8a8_int8":  # the flag itself names the scheme
        hint, basis = {"scheme": "int", "bits": 8}, "as the flag names it"
    config, what = _flag_config(method, key, hint)
    spec = quantization_from_config(config, flag)
    assert spec is not None
    standard = "as the method's standard layout"
    basis = f"{basis or standard} ({what})"
    note = (
        f"--quantization {flag} without a quantization_config in config.json: sized {basis};"
        " modules the checkpoint keeps in 16-bit and its own group size are not known, so a"
        " checkpoint quantised otherwise will differ"
    )
    return replace(spec, notes=(*spec.notes, note))
