"""Hugging Face Trainer, PEFT and TRL: read TrainingArguments (JSON, YAML, or the
`python train.py --flag value …` command line HfArgumentParser takes), TRL's SFTConfig and
ModelConfig keys, and a PEFT LoraConfig into train() arguments.

TrainingArguments (transformers/training_args.py): per_device_train_batch_size (default 8),
gradient_accumulation_steps, gradient_checkpointing (+ gradient_checkpointing_kwargs
use_reentrant), bf16 / fp16 / tf32, optim (`OPTIMIZERS`), fsdp + fsdp_config (offload_params,
activation_checkpointing, reshard_after_forward), deepspeed (an inline ds_config dict: read by
the DeepSpeed reader), torch_empty_cache_steps. TRL: max_length / max_seq_length, and
ModelConfig's use_peft, lora_r, lora_alpha, lora_target_modules, lora_modules_to_save,
load_in_4bit / load_in_8bit, bnb_4bit_quant_type, use_bnb_nested_quant, dtype / torch_dtype.
PEFT LoraConfig (peft/tuners/lora/config.py, as adapter_config.json or under `peft_config` /
`lora_config`): r, lora_alpha, target_modules, modules_to_save. A `quantization_config`
(BitsAndBytesConfig: load_in_4bit, bnb_4bit_quant_type, bnb_4bit_use_double_quant, load_in_8bit)
sets the frozen base's format. axolotl YAMLs (base_model, sequence_len, micro_batch_size, adapter,
lora_r, lora_target_linear, optimizer, ...) and Unsloth's arguments (use_gradient_checkpointing
"unsloth") are read through the same keys.

The parameters' dtype is the model's load dtype, which TrainingArguments does not hold: with
`dtype`/`torch_dtype` bfloat16 the weights, gradients and optimizer states are bf16 (pure bf16,
torch.optim keeps states like the parameter); otherwise fp32 parameters under autocast
(from_pretrained's fp32 default before transformers 5), said in a note.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from gpuplan.engine.frameworks import deepspeed
from gpuplan.engine.frameworks.overrides import (
    TrainOverrides,
    boolean,
    positive_int,
    str_list,
)
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_json, load_yaml

# optim= value → (recipe over fp32 parameters under autocast, recipe over bf16 parameters or ""
# when not modelled, optimizer kernel). transformers/trainer.py get_optimizer_cls_and_kwargs.
OPTIMIZERS = {
    "adamw_torch": ("adamw-amp-bf16", "adamw-pure-bf16", "foreach"),
    "adamw_torch_fused": ("adamw-amp-bf16", "adamw-pure-bf16", "fused"),
    "adamw_hf": ("adamw-amp-bf16", "adamw-pure-bf16", "for-loop"),
    "adamw_apex_fused": ("adamw-amp-bf16", "adamw-pure-bf16", "fused"),
    "adamw_bnb_8bit": ("adamw8bit-amp", "adamw8bit-pure-bf16", "fused"),
    "adamw_8bit": ("adamw8bit-amp", "adamw8bit-pure-bf16", "fused"),
    "paged_adamw_8bit": ("paged-adamw8bit-amp", "paged-adamw8bit-pure-bf16", "fused"),
    "paged_adamw_32bit": ("paged-adamw32bit-amp", "paged-adamw32bit-pure-bf16", "fused"),
    "paged_adamw": ("paged-adamw32bit-amp", "paged-adamw32bit-pure-bf16", "fused"),
    "adamw_torch_8bit": ("torchao-adamw8bit-amp", "torchao-adamw8bit-pure-bf16", "for-loop"),
    "adamw_torch_4bit": ("torchao-adamw4bit-amp", "torchao-adamw4bit-pure-bf16", "for-loop"),
    "adafactor": ("adafactor-amp", "", "fused"),
    "sgd": ("sgd-amp", "sgd-pure-bf16", "foreach"),
    "lion_32bit": ("lion-amp", "", "fused"),
    "lion_8bit": ("lion8bit-amp", "", "fused"),
    "paged_lion_32bit": ("paged-lion32bit-amp", "", "fused"),
    "paged_lion_8bit": ("paged-lion8bit-amp", "", "fused"),
}
BF16 = ("bfloat16", "bf16", "torch.bfloat16")
LOAD_DTYPES = (*BF16, "float32", "fp32", "torch.float32", "auto", "float16", "fp16")


def read(text: str) -> TrainOverrides:
    """TrainingArguments (+ TRL / PEFT keys) as JSON, YAML or a command line → train() args."""
    doc = _load(text)
    notes: list[str] = []
    kwargs: dict[str, Any] = {
        "micro_batch": positive_int(
            "per_device_train_batch_size", doc.get("per_device_train_batch_size", 8)
        ),
        "grad_accum": positive_int(
            "gradient_accumulation_steps", doc.get("gradient_accumulation_steps", 1)
        ),
        "checkpointing": _checkpointing(doc, notes),
    }
    lora = _lora(doc, notes)
    kwargs.update(_recipe(doc, notes, bool(lora)))
    seq = doc.get("max_length", doc.get("max_seq_length"))
    if seq is not None:
        kwargs["seq"] = positive_int("max_length", seq)
    kwargs.update(_sharding(doc, kwargs, notes))
    kwargs.update(lora)
    if lora and "lora_base" not in kwargs:  # the frozen base as loaded
        kwargs["lora_base"] = "bf16" if _load_dtype(doc) in BF16 else "fp32"
    if boolean("offload_activations", doc.get("offload_activations", False)):
        kwargs["offload_activations"] = True
    _kbit_prepared(doc, kwargs, notes)
    _notes(doc, notes)
    model = doc.get("model_name_or_path") or doc.get("base_model_name_or_path")
    return TrainOverrides("hf-trainer", str(model) if model else None, kwargs, tuple(notes))


def _load(text: str) -> dict[str, Any]:
    """The arguments as one flat dict, whichever of the three forms `text` is."""
    stripped = text.strip()
    if stripped.startswith("{"):
        doc = load_json(stripped, "the TrainingArguments JSON")
    elif _is_command_line(stripped):
        doc = _command_line(stripped)
    else:
        doc = load_yaml(stripped, "the TrainingArguments YAML")
    if not isinstance(doc, dict):
        raise GpuplanError("TrainingArguments are a JSON/YAML object or --flag command line")
    if "base_model" in doc or "sequence_len" in doc or "adapter" in doc:
        doc = _axolotl(doc)
    if "use_gradient_checkpointing" in doc:
        doc = _unsloth(doc)
    for key in ("peft_config", "lora_config"):  # a LoraConfig nested in the document
        nested = doc.get(key)
        if isinstance(nested, dict):
            doc = {**nested, **{k: v for k, v in doc.items() if k != key}}
    return doc


# axolotl's config keys (docs/config.qmd) → the TrainingArguments / PEFT / TRL keys they set
AXOLOTL = {
    "base_model": "model_name_or_path",
    "sequence_len": "max_length",
    "micro_batch_size": "per_device_train_batch_size",
    "optimizer": "optim",
    "lora_target_modules": "target_modules",
    "lora_modules_to_save": "modules_to_save",
}


def _axolotl(doc: dict[str, Any]) -> dict[str, Any]:
    """An axolotl YAML in TrainingArguments terms: adapter lora | qlora (qlora: 4-bit NF4 with
    nested quantisation, axolotl's utils/models.py load_in_4bit path), lora_r,
    lora_target_linear (all linear layers), bf16 auto (= true on bf16 GPUs), and the renamed
    keys of `AXOLOTL`. Models load in bf16 when bf16 is set (axolotl's torch_dtype)."""
    out = {AXOLOTL.get(k, k): v for k, v in doc.items()}
    adapter = str(doc.get("adapter") or "").lower()
    if adapter not in ("", "lora", "qlora"):
        raise GpuplanError(f"axolotl adapter {adapter!r} is not modelled (lora, qlora)")
    if adapter:
        out["r"] = doc.get("lora_r", 8)
        out.pop("lora_r", None)
    if adapter == "qlora":
        out.setdefault("load_in_4bit", True)
        out.setdefault("use_bnb_nested_quant", True)
    if doc.get("lora_target_linear"):
        out["target_modules"] = "all-linear"
    if str(doc.get("bf16", "")).lower() == "auto":
        out["bf16"] = True
    if out.get("bf16") is True and "dtype" not in out and "torch_dtype" not in out:
        out["dtype"] = "bfloat16"
    return out


def _unsloth(doc: dict[str, Any]) -> dict[str, Any]:
    """Unsloth's arguments (FastLanguageModel.from_pretrained / get_peft_model):
    max_seq_length, load_in_4bit, r, target_modules, and use_gradient_checkpointing = "unsloth",
    which checkpoints every layer and offloads the saved inputs to host memory
    (unsloth_zoo gradient_checkpointing.py)."""
    out = dict(doc)
    mode = str(doc.get("use_gradient_checkpointing", "")).lower()
    if mode == "unsloth":
        out["gradient_checkpointing"] = True
        out["offload_activations"] = True
    elif mode in ("true", "false"):
        out["gradient_checkpointing"] = mode == "true"
    if out.get("load_in_4bit") and "use_bnb_nested_quant" not in out:
        out["use_bnb_nested_quant"] = True  # Unsloth's bnb-4bit checkpoints: double quant
    out["_unsloth"] = True  # its own k-bit preparation (_kbit_prepared)
    return out


def _is_command_line(text: str) -> bool:
    first = text.split(None, 1)[0] if text else ""
    return first.startswith("--") or first in ("python", "python3", "accelerate", "torchrun", "trl")


def _command_line(text: str) -> dict[str, Any]:
    """HfArgumentParser's command line: `--key value`, `--key=value`, a bare `--flag` (True),
    and list arguments (`--lora_target_modules q_proj v_proj`)."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "))
    except ValueError as e:
        raise GpuplanError(f"cannot read the command line: {e}") from None
    doc: dict[str, Any] = {}
    key: str | None = None
    for token in tokens:
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            key = name.replace("-", "_")
            doc[key] = value if eq else True
            if eq:
                key = None
        elif key is not None:
            current = doc[key]
            doc[key] = token if current is True else [*_as_list(current), token]
    return doc


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _checkpointing(doc: dict[str, Any], notes: list[str]) -> str:
    on = boolean("gradient_checkpointing", doc.get("gradient_checkpointing", False))
    fsdp_config = _fsdp_config(doc)
    if boolean(
        "fsdp_config.activation_checkpointing", fsdp_config.get("activation_checkpointing", False)
    ):
        on = True
    kwargs = doc.get("gradient_checkpointing_kwargs") or {}
    if on and isinstance(kwargs, dict) and "use_reentrant" in kwargs:
        reentrant = boolean("use_reentrant", kwargs["use_reentrant"])
        notes.append(
            f"gradient_checkpointing use_reentrant={reentrant}: both keep each layer's input"
            " and rebuild the layer in backward (torch/utils/checkpoint.py); billed alike"
        )
    return "full" if on else "none"


def _load_dtype(doc: dict[str, Any]) -> str:
    dtype = str(doc.get("dtype", doc.get("torch_dtype", "")) or "").lower()
    if dtype and dtype not in LOAD_DTYPES:
        raise GpuplanError(f"dtype {dtype!r} is not one of {', '.join(LOAD_DTYPES)}")
    return dtype


def _recipe(doc: dict[str, Any], notes: list[str], lora: bool) -> dict[str, Any]:
    """The recipe of the trained parameters. LoRA adapters are fp32 whatever the base's dtype:
    PEFT casts bf16/fp16 adapter weights to fp32 (get_peft_model autocast_adapter_dtype=True,
    peft/tuners/tuners_utils.py), so they take the recipe of fp32 parameters."""
    bf16 = boolean("bf16", doc.get("bf16", False))
    fp16 = boolean("fp16", doc.get("fp16", False))
    if bf16 and fp16:
        raise GpuplanError("bf16 and fp16 contradict each other")
    optim = str(doc.get("optim", "adamw_torch_fused")).lower()
    if optim not in OPTIMIZERS:
        raise GpuplanError(f"optim {optim!r} is not modelled ({', '.join(OPTIMIZERS)})")
    amp, pure, kernel = OPTIMIZERS[optim]
    dtype = _load_dtype(doc)
    if dtype in BF16 and not lora:
        if not pure:
            raise GpuplanError(f"optim {optim} over a bf16-loaded model is not modelled")
        return {"recipe": pure, "optimizer_kernel": kernel}
    if lora and not dtype:
        notes.append(
            "the model's load dtype is not in these arguments: an fp32 frozen base assumed"
            " (from_pretrained's default before transformers 5); give dtype: bfloat16"
        )
    if dtype in ("auto", "float16", "fp16"):
        raise GpuplanError(
            f"dtype {dtype}: give the load dtype gpuplan should bill (bfloat16 or float32)"
        )
    if not dtype and not lora:
        notes.append(
            "the model's load dtype is not in these arguments: fp32 parameters assumed"
            " (from_pretrained's default before transformers 5); give dtype: bfloat16 for a"
            " bf16-loaded model"
        )
    if not (bf16 or fp16) and amp == "adamw-amp-bf16":
        amp = "adamw-fp32"
    return {"recipe": amp, "optimizer_kernel": kernel}


def _fsdp_config(doc: dict[str, Any]) -> dict[str, Any]:
    """fsdp_config with accelerate's `fsdp_` prefixes dropped (training_args.py does the same)."""
    raw = doc.get("fsdp_config") or {}
    if not isinstance(raw, dict):
        raise GpuplanError("fsdp_config must be an object (a path to one is not read)")
    return {k.removeprefix("fsdp_"): v for k, v in raw.items()}


def _sharding(doc: dict[str, Any], kwargs: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """FSDP (fsdp + fsdp_config) or DeepSpeed (an inline ds_config dict)."""
    out: dict[str, Any] = {}
    ds = doc.get("deepspeed")
    fsdp = doc.get("fsdp") or ""
    if ds and fsdp:
        raise GpuplanError("fsdp and deepspeed contradict each other")
    if isinstance(ds, str) and ds:
        raise GpuplanError(
            "these TrainingArguments name a DeepSpeed config file: give its ds_config to --from"
            " (or put the dict inline under `deepspeed`)"
        )
    if isinstance(ds, dict):
        read = deepspeed.read(json.dumps(_resolve_auto(ds, doc, kwargs)))
        for key in ("zero", "offload"):
            if key in read.kwargs:
                out[key] = read.kwargs[key]
        notes.extend(read.notes)
        return out
    if isinstance(fsdp, list):  # TrainingArguments takes a list of FSDPOption names or a string
        words = " ".join(str_list("fsdp", fsdp))
    elif isinstance(fsdp, str):
        words = fsdp
    else:
        raise GpuplanError(f"fsdp must be a string or a list of options, got {fsdp!r:.40}")
    modes = [m for m in words.split() if m in ("full_shard", "shard_grad_op", "hybrid_shard")]
    if not modes:
        return out
    out["fsdp"] = modes[0]
    config = _fsdp_config(doc)
    offload = "offload" in words.split() or boolean(
        "fsdp_config.offload_params", config.get("offload_params", False)
    )
    if offload:
        if modes[0] != "full_shard":
            raise GpuplanError("FSDP CPU offload is modelled with full_shard only")
        out["offload"] = "params"
    if str(config.get("version", 1)) == "2":  # accelerate fsdp_version 2: fully_shard
        out["framework_overrides"] = {"fsdp_keeps_root": False}
        notes.append(
            "fsdp_version 2: accelerate applies fully_shard with reshard_after_forward=True,"
            " so the root (embedding, LM head) is resharded after forward like every unit"
        )
    if "reshard_after_forward" in config:
        out["reshard_after_forward"] = boolean(
            "fsdp_config.reshard_after_forward", config["reshard_after_forward"]
        )
    return out


def _resolve_auto(
    ds: dict[str, Any], doc: dict[str, Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The Trainer fills a ds_config's "auto" values from TrainingArguments
    (transformers/integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process)."""
    ds = dict(ds)
    fill = {
        "train_micro_batch_size_per_gpu": kwargs["micro_batch"],
        "gradient_accumulation_steps": kwargs["grad_accum"],
    }
    for key, value in fill.items():
        if ds.get(key, "auto") == "auto":
            ds[key] = value
    if ds.get("train_batch_size") == "auto":
        ds.pop("train_batch_size")
    for key in ("bf16", "fp16"):
        node = ds.get(key)
        if isinstance(node, dict) and node.get("enabled") == "auto":
            ds[key] = {**node, "enabled": bool(doc.get(key, False))}
    return ds


def _lora(doc: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """PEFT LoraConfig (r, target_modules, modules_to_save) or TRL's lora_* keys, and the base's
    format from load_in_4bit / load_in_8bit / quantization_config."""
    out: dict[str, Any] = {}
    rank = doc.get("r", doc.get("lora_r"))
    trl_peft = boolean("use_peft", doc.get("use_peft", False))
    if "lora_r" in doc and not trl_peft and "r" not in doc:
        rank = None  # TRL ModelConfig: lora_* keys apply only with use_peft
    if trl_peft and rank is None:
        rank = 16  # TRL ModelConfig.lora_r default
    base = _base(doc)
    if rank is None:
        if base:
            raise GpuplanError("a quantised base (load_in_4bit/8bit) is trained with LoRA: set r")
        return out
    out["lora_rank"] = positive_int("r", rank)
    targets = doc.get("target_modules", doc.get("lora_target_modules"))
    if targets:
        names = [targets] if isinstance(targets, str) else [str(t) for t in targets]
        out["lora_targets"] = tuple(n.replace("all_linear", "all-linear") for n in names)
    saved = doc.get("modules_to_save", doc.get("lora_modules_to_save"))
    if saved:
        out["lora_modules_to_save"] = tuple([saved] if isinstance(saved, str) else saved)
    if base:
        out["lora_base"] = base
    if "lora_alpha" in doc:
        notes.append("lora_alpha scales the adapters' output: no memory effect")
    return out


def _base(doc: dict[str, Any]) -> str:
    """The frozen base's format from bitsandbytes loading keys ("" = as loaded)."""
    q = doc.get("quantization_config") or {}
    if not isinstance(q, dict):
        raise GpuplanError("quantization_config must be an object")
    four = boolean("load_in_4bit", q.get("load_in_4bit", doc.get("load_in_4bit", False)))
    eight = boolean("load_in_8bit", q.get("load_in_8bit", doc.get("load_in_8bit", False)))
    if four and eight:
        raise GpuplanError("load_in_4bit and load_in_8bit contradict each other")
    if eight:
        return "int8"
    if not four:
        return ""
    kind = str(q.get("bnb_4bit_quant_type", doc.get("bnb_4bit_quant_type", "nf4"))).lower()
    if kind not in ("nf4", "fp4"):
        raise GpuplanError(f"bnb_4bit_quant_type must be nf4 or fp4, got {kind!r}")
    nested = boolean(
        "use_bnb_nested_quant",
        q.get("bnb_4bit_use_double_quant", doc.get("use_bnb_nested_quant", False)),
    )
    if kind == "fp4":
        return "fp4"
    return "nf4-dq" if nested else "nf4"


def _kbit_prepared(doc: dict[str, Any], kwargs: dict[str, Any], notes: list[str]) -> None:
    """QLoRA / 8-bit LoRA on a base whose quantised weights load on the GPU: TRL's SFTTrainer
    (trl/trainer/sft_trainer.py) and axolotl run peft's prepare_model_for_kbit_training, whose
    fp32 norms make the residual stream fp32 (profile kbit_fp32_residual). Skipped for sharded
    QLoRA (FSDP or DeepSpeed ZeRO-3 load the 4-bit weights on the CPU/meta device: TRL's
    is_sharded_qlora) and by Unsloth, which prepares the model itself."""
    if kwargs.get("lora_base") not in ("int8", "nf4", "nf4-dq", "fp4") or doc.get("_unsloth"):
        return
    if kwargs.get("fsdp") or kwargs.get("zero") == 3:
        return
    kwargs.setdefault("framework_overrides", {})["kbit_fp32_residual"] = True
    notes.append(
        "quantised base on the GPU: peft's prepare_model_for_kbit_training keeps the norms in"
        " fp32, so each layer's input (what gradient checkpointing keeps) is fp32"
    )


def _notes(doc: dict[str, Any], notes: list[str]) -> None:
    """Settings read that do not change the bill, or that it does not model, said once each."""
    steps = doc.get("torch_empty_cache_steps")
    if steps:
        notes.append(
            f"torch_empty_cache_steps={steps}: torch.cuda.empty_cache() between steps returns"
            " cached blocks to the driver; the peak inside a step (this bill) is unchanged"
        )
    if doc.get("tf32") not in (None, False):
        notes.append("tf32 changes matmul precision, not memory")
    if boolean("use_liger_kernel", doc.get("use_liger_kernel", False)):
        notes.append(
            "use_liger_kernel: Liger's fused linear cross entropy is not read from these"
            " arguments; give --loss linear_chunked:N to bill it"
        )
