"""torchtune: read a recipe config YAML (recipes/configs/**.yaml, plus `key=value` overrides as
`tune run` takes them) into train() arguments.

Read: model._component_ (the builder names the model and LoRA/QLoRA), lora_rank,
lora_attn_modules, apply_lora_to_mlp, apply_lora_to_output; batch_size,
gradient_accumulation_steps, tokenizer.max_seq_len and dataset.packed; optimizer._component_
(torch AdamW, bitsandbytes (Paged)AdamW8bit); optimizer_in_bwd; loss._component_;
compile; enable_activation_checkpointing, enable_activation_offloading; dtype; fsdp_cpu_offload.
"""

from __future__ import annotations

import re
from typing import Any

from gpuplan.engine.frameworks.overrides import (
    TrainOverrides,
    boolean,
    positive_int,
    str_list,
)
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_yaml

# builder → catalog model (torchtune/models/*/_model_builders.py)
MODELS = {
    "llama3_2_1b": "llama-3.2-1b",
    "llama3_2_3b": "llama-3.2-3b",
    "llama3_1_8b": "llama-3.1-8b",
    "llama3_8b": "llama-3.1-8b",
    "llama3_1_70b": "llama-3.1-70b",
    "llama3_3_70b": "llama-3.1-70b",
    "llama3_70b": "llama-3.1-70b",
    "llama3_1_405b": "llama-3.1-405b",
    "llama2_7b": "llama-2-7b",
    "qwen2_5_0_5b": "qwen2.5-0.5b",
    "qwen2_5_7b": "qwen2.5-7b",
    "qwen3_8b": "qwen3-8b",
    "qwen3_14b": "qwen3-14b",
    "qwen3_32b": "qwen3-32b",
    "phi4_14b": "phi-4",
}
LOSSES = {
    "CEWithChunkedOutputLoss": "chunked:8",
    "LinearCrossEntropyLoss": "linear_chunked:8",
    "CrossEntropyLoss": "standard",
}
ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}


def _apply_overrides(doc: dict[str, Any], overrides: list[str]) -> None:
    """`a.b=value` as tune run takes them (value parsed as YAML)."""
    for item in overrides:
        key, eq, value = item.partition("=")
        if not eq:
            raise GpuplanError(f"torchtune override {item!r} is not key=value")
        node = doc
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise GpuplanError(f"torchtune override {key!r}: {part} is not a mapping")
        node[parts[-1]] = (
            load_yaml(value, f"torchtune override {key.strip()[:80]!r}") if value.strip() else None
        )


def _component(doc: dict[str, Any], key: str) -> str:
    node = doc.get(key) or {}
    return str(node.get("_component_", "")) if isinstance(node, dict) else str(node)


def _model(doc: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(catalog model, method full/lora/qlora, the model node)."""
    node = doc.get("model") or {}
    builder = _component(doc, "model").rsplit(".", 1)[-1]
    method = "full"
    name = builder
    for prefix, kind in (("qlora_", "qlora"), ("lora_", "lora")):
        if builder.startswith(prefix):
            method, name = kind, builder[len(prefix) :]
    if name not in MODELS:
        raise GpuplanError(
            f"torchtune model builder {builder!r} is not in gpuplan's catalog; give the model as MODEL"
        )
    return MODELS[name], method, node if isinstance(node, dict) else {}


def _lora_targets(node: dict[str, Any]) -> tuple[str, ...]:
    modules = str_list(
        "model.lora_attn_modules", node.get("lora_attn_modules", ["q_proj", "v_proj"])
    )
    targets = [ATTN.get(m, m) for m in modules]
    if boolean("apply_lora_to_mlp", node.get("apply_lora_to_mlp", False)):
        targets += ["gate_proj", "up_proj", "down_proj"]
    return tuple(targets)


def _recipe(doc: dict[str, Any]) -> str:
    opt = _component(doc, "optimizer")
    dtype = str(doc.get("dtype", "bf16")).lower()
    if dtype not in ("bf16", "fp32", "bfloat16", "float32"):
        raise GpuplanError(f"torchtune dtype must be bf16 or fp32, got {dtype!r}")
    pure = dtype in ("bf16", "bfloat16")
    low_bit = re.search(r"([48])bit$", opt, re.I)
    if "torchao" in opt and low_bit and pure:  # torchao.optim.AdamW8bit / AdamW4bit
        return f"torchao-adamw{low_bit.group(1)}bit-pure-bf16"
    paged = "paged" in opt.lower()  # bitsandbytes PagedAdamW8bit / PagedAdamW: unified memory
    if re.search(r"8bit", opt, re.I) and "torchao" not in opt:
        if paged and pure:
            return "paged-adamw8bit-pure-bf16"
        return "adamw8bit-pure-bf16" if pure else "adamw-8bit"
    if opt and not opt.endswith(("AdamW", "Adam")) or (low_bit and not pure):
        raise GpuplanError(
            f"torchtune optimizer {opt!r} is not modelled (AdamW, bitsandbytes (Paged)AdamW8bit,"
            " torchao AdamW8bit/4bit over bf16)"
        )
    if paged and pure:
        return "paged-adamw32bit-pure-bf16"
    return "adamw-pure-bf16" if pure else "adamw-fp32"


def read(text: str, overrides: list[str] | None = None) -> TrainOverrides:
    """A torchtune YAML (and tune-run overrides) → train() arguments."""
    doc = _load(text, overrides or [])
    model, method, node = _model(doc)
    tokenizer = doc.get("tokenizer") or {}
    seq = tokenizer.get("max_seq_len") if isinstance(tokenizer, dict) else None
    if seq is None:
        raise GpuplanError(
            "the torchtune config sets no tokenizer.max_seq_len: the longest sample decides the"
            " peak; give --seq"
        )
    accum, in_bwd = _accumulation(doc)
    ckpt, offload = _activation_memory(doc)
    loss = _component(doc, "loss").rsplit(".", 1)[-1]
    if loss and loss not in LOSSES:
        raise GpuplanError(f"torchtune loss {loss!r} is not modelled ({', '.join(LOSSES)})")
    kwargs: dict[str, Any] = {
        "seq": positive_int("tokenizer.max_seq_len", seq),
        "micro_batch": positive_int("batch_size", doc.get("batch_size", 1)),
        "grad_accum": accum,
        "checkpointing": "full" if ckpt else "none",
        "offload_activations": offload,
        "optimizer_in_backward": in_bwd,
        "compile": boolean("compile", doc.get("compile", False)),
        "recipe": _recipe(doc),
        "loss": LOSSES.get(loss, "standard"),
    }
    if method != "full":
        kwargs["method"] = method
        kwargs["lora_rank"] = positive_int("model.lora_rank", node.get("lora_rank", 8))
        kwargs["lora_targets"] = _lora_targets(node)
    if boolean("fsdp_cpu_offload", doc.get("fsdp_cpu_offload", False)):
        kwargs["offload"] = "params"
    return TrainOverrides("torchtune", model, kwargs, _notes(doc, method, node))


def _load(text: str, overrides: list[str]) -> dict[str, Any]:
    """The config as a mapping, with the tune-run overrides applied."""
    doc = load_yaml(text, "the torchtune YAML")
    if not isinstance(doc, dict):
        raise GpuplanError("a torchtune config is a YAML mapping")
    _apply_overrides(doc, overrides)
    return doc


def _accumulation(doc: dict[str, Any]) -> tuple[int, bool]:
    """(gradient_accumulation_steps, optimizer_in_bwd): stepping in backward leaves no
    gradients to accumulate, so torchtune refuses the two together."""
    accum = positive_int("gradient_accumulation_steps", doc.get("gradient_accumulation_steps", 1))
    in_bwd = boolean("optimizer_in_bwd", doc.get("optimizer_in_bwd", False))
    if in_bwd and accum > 1:
        raise GpuplanError("optimizer_in_bwd requires gradient_accumulation_steps = 1")
    return accum, in_bwd


def _activation_memory(doc: dict[str, Any]) -> tuple[bool, bool]:
    """(enable_activation_checkpointing, enable_activation_offloading); offloading works
    only with checkpointing."""
    ckpt = boolean(
        "enable_activation_checkpointing", doc.get("enable_activation_checkpointing", False)
    )
    offload = boolean(
        "enable_activation_offloading", doc.get("enable_activation_offloading", False)
    )
    if offload and not ckpt:
        raise GpuplanError(
            "enable_activation_offloading needs enable_activation_checkpointing (torchtune refuses it)"
        )
    return ckpt, offload


def _notes(doc: dict[str, Any], method: str, node: dict[str, Any]) -> tuple[str, ...]:
    """What the config sets that the bill does not model: unpacked samples, the LM head's
    adapter."""
    notes = []
    dataset = doc.get("dataset") or {}
    if isinstance(dataset, dict) and not boolean("dataset.packed", dataset.get("packed", False)):
        notes.append(
            "dataset.packed is false: every batch is as long as its longest sample; the bill"
            " assumes max_seq_len"
        )
    if method != "full" and boolean(
        "apply_lora_to_output", node.get("apply_lora_to_output", False)
    ):
        notes.append("apply_lora_to_output: the LM head's adapter is not modelled")
    return tuple(notes)
