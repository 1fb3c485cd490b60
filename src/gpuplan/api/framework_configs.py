"""`gpuplan.train_from` (`gpuplan train --from CONFIG`): size training as a framework config
describes it (torchtitan TOML, torchtune YAML, Megatron-LM flags, DeepSpeed JSON,
TrainingArguments), through the framework readers of engine/frameworks. Its own module: the
readers load only when a config is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuplan.api.training import TrainingPlan, train
from gpuplan.catalog import load_architecture
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frameworks import deepspeed, hf_trainer, megatron, torchtitan, torchtune
from gpuplan.engine.frameworks.overrides import TrainOverrides
from gpuplan.engine.frozen import replace
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import MAX_TEXT_BYTES, clean_name, read_text

READERS = ("torchtitan", "torchtune", "megatron", "deepspeed", "hf-trainer")
HF_KEYS = (
    "per_device_train_batch_size",
    "model_name_or_path",
    "target_modules",
    "lora_r",
    "peft_type",
    "gradient_checkpointing",
    "sequence_len",  # axolotl
    "lora_target_linear",
)


def detect_format(text: str, name: str = "") -> str:
    """Which framework a config is for: by its file name, else by what it contains."""
    lower = name.lower()
    stripped = text.lstrip()
    if lower.endswith(".toml") or "[parallelism]" in text or "[activation_checkpoint]" in text:
        return "torchtitan"
    if "MODEL_ARGS" in text or "--num-layers" in text or "pretrain_gpt" in text:
        return "megatron"
    if lower.endswith(".json") or stripped.startswith("{"):
        ds_keys = "zero_optimization" in text or "train_micro_batch_size_per_gpu" in text
        if ds_keys and "per_device_train_batch_size" not in text:  # else inline in HF args
            return "deepspeed"
        return "hf-trainer"
    if "_component_" not in text and any(key in text for key in HF_KEYS):
        return "hf-trainer"  # TrainingArguments / TRL / PEFT as YAML or flags
    if lower.endswith((".yaml", ".yml")) or "_component_" in text:
        return "torchtune"
    raise GpuplanError(
        f"cannot tell which framework this config is for; give --format ({', '.join(READERS)})"
    )


def read_framework_config(
    text: str,
    format: str | None = None,
    *,
    name: str = "",
    gpus: int | None = None,
    overrides: list[str] | None = None,
) -> TrainOverrides:
    """Read one framework config (its text) into gpuplan's terms (engine/frameworks)."""
    fmt = (format or detect_format(text, name)).lower().replace("_", "-")
    if fmt == "torchtitan":
        return torchtitan.read(text, gpus, lambda model: load_architecture(model).num_layers)
    if fmt == "torchtune":
        return torchtune.read(text, overrides)
    if fmt in ("megatron", "megatron-lm"):
        return megatron.read(text)
    if fmt == "deepspeed":
        return deepspeed.read(text, gpus)
    if fmt in ("hf-trainer", "hf", "trainer"):
        return hf_trainer.read(text)
    raise GpuplanError(f"unknown config format {format!r}; use {', '.join(READERS)}")


def train_from(
    config: str,
    model: str | dict[str, Any] | Architecture | None = None,
    *,
    format: str | None = None,
    overrides: list[str] | None = None,
    **kwargs: Any,
) -> TrainingPlan:
    """Size training as a framework config describes it. `config` is a path to the config
    (torchtitan TOML, torchtune YAML, Megatron-LM flags or model_config.yaml, DeepSpeed or
    TrainingArguments JSON) or its text; `model` is needed when the config does not name one;
    `overrides` are torchtune's key=value; other keyword arguments (gpus, gpu, ...) go to
    train() and win over the config's."""
    text, name = _config_text(config)
    gpus = kwargs.get("gpus")
    read = read_framework_config(
        text, format, name=name, gpus=gpus if isinstance(gpus, int) else None, overrides=overrides
    )
    chosen = model if model is not None else read.model
    if chosen is None:
        raise GpuplanError(f"this {read.framework} config names no model: give MODEL")
    given = {k: v for k, v in kwargs.items() if v is not None}
    plan = train(chosen, **{**read.train_kwargs(), **given})
    return replace(plan, config_notes=read.notes)


def _config_text(config: str) -> tuple[str, str]:
    """(text, file name) of `config`: the file it names, or the config itself when it is text
    (several lines, a JSON/TOML opening, or command-line flags)."""
    if len(config) > MAX_TEXT_BYTES:
        raise GpuplanError(f"the config is larger than {MAX_TEXT_BYTES // 2**20} MiB")
    stripped = config.strip()
    if "\n" in stripped or stripped[:1] in ("{", "[", "-") or " --" in stripped:
        return config, ""
    path = Path(stripped)
    try:
        found = os.path.lexists(path)
    except (OSError, ValueError):
        found = False
    if not found:
        raise GpuplanError(f"no such config file: {clean_name(stripped, 200)}")
    return read_text(path, MAX_TEXT_BYTES, clean_name(stripped, 200)), path.name
