"""Hugging Face Trainer: read TrainingArguments (as JSON, the form `TrainingArguments.to_json_string`
and most launch scripts' config files take) into train() arguments.

Read: per_device_train_batch_size, gradient_accumulation_steps, gradient_checkpointing, bf16,
fp16, optim (adamw_torch[_fused], adamw_bnb_8bit, paged_adamw_8bit, adafactor, sgd),
fsdp ("full_shard" ...), max_seq_length / max_length (TRL's SFTConfig), deepspeed (refused:
give the ds_config with --from instead).
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.frameworks.overrides import (
    TrainOverrides,
    boolean,
    positive_int,
    str_list,
)
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_json

OPTIMIZERS = {
    "adamw_torch": ("adamw-amp-bf16", "foreach"),
    "adamw_torch_fused": ("adamw-amp-bf16", "fused"),
    "adamw_hf": ("adamw-amp-bf16", "for-loop"),
    "adamw_bnb_8bit": ("adamw8bit-amp", "fused"),
    "paged_adamw_8bit": ("adamw8bit-amp", "fused"),
    "adamw_8bit": ("adamw8bit-amp", "fused"),
    "adafactor": ("adafactor", "fused"),
    "sgd": ("sgd-momentum", "foreach"),
}


def read(text: str) -> TrainOverrides:
    doc = load_json(text, "the TrainingArguments JSON")
    if not isinstance(doc, dict):
        raise GpuplanError("TrainingArguments JSON is an object")
    if doc.get("deepspeed"):
        raise GpuplanError("these TrainingArguments use DeepSpeed: give its ds_config to --from")
    bf16 = boolean("bf16", doc.get("bf16", False))
    fp16 = boolean("fp16", doc.get("fp16", False))
    if bf16 and fp16:
        raise GpuplanError("bf16 and fp16 contradict each other")
    optim = str(doc.get("optim", "adamw_torch_fused")).lower()
    if optim not in OPTIMIZERS:
        raise GpuplanError(f"optim {optim!r} is not modelled ({', '.join(OPTIMIZERS)})")
    recipe, kernel = OPTIMIZERS[optim]
    if not (bf16 or fp16):
        recipe = "adamw-fp32" if recipe == "adamw-amp-bf16" else recipe
    kwargs: dict[str, Any] = {
        "micro_batch": positive_int(
            "per_device_train_batch_size", doc.get("per_device_train_batch_size", 8)
        ),
        "grad_accum": positive_int(
            "gradient_accumulation_steps", doc.get("gradient_accumulation_steps", 1)
        ),
        "checkpointing": "full"
        if boolean("gradient_checkpointing", doc.get("gradient_checkpointing", False))
        else "none",
        "recipe": recipe,
        "optimizer_kernel": kernel,
    }
    seq = doc.get("max_seq_length", doc.get("max_length"))
    if seq is not None:
        kwargs["seq"] = positive_int("max_seq_length", seq)
    fsdp = doc.get("fsdp") or ""
    if isinstance(fsdp, list):  # TrainingArguments takes a list of FSDPOption names or a string
        fsdp = " ".join(str_list("fsdp", fsdp))
    elif not isinstance(fsdp, str):
        raise GpuplanError(f"fsdp must be a string or a list of options, got {fsdp!r:.40}")
    modes = [m for m in str(fsdp).split() if m in ("full_shard", "shard_grad_op", "hybrid_shard")]
    if modes:
        kwargs["fsdp"] = modes[0]
    if "offload" in str(fsdp).split():
        kwargs["offload"] = "params"
    return TrainOverrides("hf-trainer", None, kwargs, ())
