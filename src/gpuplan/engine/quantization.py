"""A checkpoint's `quantization_config`, reduced to what sizes its weights.

`quantization_from_config` maps each method's keys onto a precision of the catalog
(catalog/data/precisions.toml) and the module kinds the method leaves unconverted. The key names
mirror the quantizer configs of `transformers` (utils/quantization_config.py): GPTQConfig,
AwqConfig, FineGrainedFP8Config, CompressedTensorsConfig, Mxfp4Config, BitsAndBytesConfig.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError


@dataclass(frozen=True)
class QuantizationSpec:
    """A checkpoint's `quantization_config`, reduced to what sizes the weights.

    `precision` names an entry of the precision catalog; `unquantized` lists the module
    kinds kept at the checkpoint's own dtype (embedding, lm_head, attention, router, ...).
    """

    method: str
    precision: str
    unquantized: tuple[str, ...] = ("embedding", "lm_head", "norm", "router", "bias")
    source: str = ""


def quantization_from_config(qc: Any, name: str = "model") -> QuantizationSpec | None:
    """Map a checkpoint's `quantization_config` onto a precision of the catalog.

    Methods read: gptq and awq (bits, group_size), fp8 (per-tensor or `weight_block_size`),
    compressed-tensors (the weights' num_bits/group strategy), mxfp4 (gpt-oss), bitsandbytes
    (4-bit NF4/FP4 with or without double quantisation, 8-bit LLM.int8).
    """
    if not qc:
        return None
    if not isinstance(qc, Mapping):
        raise GpuplanError(f"{name}: quantization_config must be a JSON object")
    method = str(qc.get("quant_method", "")).lower()
    skip = _unquantized_modules(qc)
    if method in ("gptq", "awq"):
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        group = int(qc.get("group_size", qc.get("q_group_size", 128)))
        if bits not in (2, 3, 4, 8):
            raise GpuplanError(f"{name}: {method} with {bits} bits is not supported (2, 3, 4 or 8)")
        precision = f"{method}-int{bits}-g{group}" if group > 0 else f"{method}-int{bits}"
        return QuantizationSpec(method, precision, skip, f"{method} bits={bits} group_size={group}")
    if method == "fp8":
        block = qc.get("weight_block_size")
        precision = "fp8-block128" if block else "fp8-tensor"
        return QuantizationSpec(method, precision, skip, f"fp8 weight_block_size={block}")
    if method == "mxfp4":
        return QuantizationSpec(method, "mxfp4", skip, "mxfp4 (32-element blocks, e8m0 scales)")
    if method == "bitsandbytes":
        if qc.get("load_in_4bit"):
            kind = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()
            double = bool(qc.get("bnb_4bit_use_double_quant", False))
            precision = f"{'nf4' if kind == 'nf4' else 'bnb-fp4'}{'-dq' if double else ''}"
            return QuantizationSpec(
                method, precision, skip, f"bitsandbytes 4-bit {kind} double_quant={double}"
            )
        if qc.get("load_in_8bit"):
            return QuantizationSpec(method, "bnb-int8", skip, "bitsandbytes LLM.int8")
    if method in ("compressed-tensors", "compressed_tensors"):
        return _compressed_tensors(qc, skip, name)
    if method in ("nvfp4", "modelopt"):
        algo = str(qc.get("quant_algo", "nvfp4")).lower()
        precision = "nvfp4" if "fp4" in algo else "fp8-tensor"
        return QuantizationSpec(method, precision, skip, f"modelopt {algo}")
    raise GpuplanError(
        f"{name}: quantization method {method or '(none)'!r} is not supported"
        " (gptq, awq, fp8, compressed-tensors, mxfp4, bitsandbytes, modelopt)"
    )


def _unquantized_modules(qc: Mapping[str, Any]) -> tuple[str, ...]:
    """Module kinds the checkpoint keeps at full precision.

    Embeddings, LM head, norms, routers and biases are never quantised by these methods;
    `modules_to_not_convert` / `ignore` may add attention or the LM head explicitly.
    """
    kinds = {"embedding", "lm_head", "norm", "router", "bias"}
    listed = list(qc.get("modules_to_not_convert") or []) + list(qc.get("ignore") or [])
    for module in listed:
        text = str(module)
        if "self_attn" in text or "attn" in text.split(".")[-1]:
            kinds.add("attention")
        if "shared_expert" in text:
            kinds.add("shared_experts")
        if text.endswith("mlp") or text.endswith("mlp.*"):
            kinds.add("mlp")
    return tuple(sorted(kinds))


def _compressed_tensors(
    qc: Mapping[str, Any], skip: tuple[str, ...], name: str
) -> QuantizationSpec:
    groups = qc.get("config_groups") or {}
    weights: Mapping[str, Any] = {}
    for group in groups.values():
        if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping):
            weights = group["weights"]
            break
    bits = int(weights.get("num_bits", 8))
    kind = str(weights.get("type", "int")).lower()
    strategy = str(weights.get("strategy", "tensor")).lower()
    group_size = weights.get("group_size")
    fmt = str(qc.get("format", "")).lower()
    if "nvfp4" in fmt or (kind == "float" and bits == 4):
        precision = "nvfp4"
    elif kind == "float" and bits == 8:
        precision = "fp8-block128" if strategy == "block" else "fp8-tensor"
    elif bits == 8:
        precision = "int8-channel"
    elif bits == 4:
        precision = f"int4-g{group_size}" if group_size else "int4-channel"
    else:
        raise GpuplanError(
            f"{name}: compressed-tensors with {bits}-bit {kind} weights is not supported"
        )
    return QuantizationSpec(
        "compressed-tensors", precision, skip, f"compressed-tensors {kind}{bits} {strategy}"
    )
