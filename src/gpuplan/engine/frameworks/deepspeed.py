"""DeepSpeed: read a ds_config JSON into train() arguments.

Read (deepspeed/runtime/config.py, zero/config.py): zero_optimization.stage,
offload_optimizer.device, offload_param.device, reduce_bucket_size, allgather_bucket_size;
train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size; bf16.enabled,
fp16.enabled; activation_checkpointing.cpu_checkpointing. Values of "auto" (the Hugging Face
integration fills them in) are left to the other arguments.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.frameworks.overrides import TrainOverrides, boolean, positive_int, section
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_json


def _number(value: Any) -> Any:
    """A bucket size as DeepSpeed takes it: a number, or its text ("5e8")."""
    if isinstance(value, str) and len(value) <= 40:
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _auto(value: Any) -> bool:
    return value is None or value == "auto"


def _enabled(doc: dict[str, Any], key: str) -> bool:
    """`bf16` / `fp16`: an object with `enabled` (DeepSpeed reads it as DeepSpeedBF16Config /
    DeepSpeedFP16Config keyword arguments, runtime/precision_config.py) or a plain true/false;
    anything else (`"bf16": "yes"`) is refused, never read as off."""
    node = doc.get(key)
    if node is None or isinstance(node, bool):
        return bool(node)
    if not isinstance(node, dict):
        raise GpuplanError(f'{key} must be an object like {{"enabled": true}}, got {node!r:.40}')
    return boolean(f"{key}.enabled", node.get("enabled", False))


def _device(zero: dict[str, Any], key: str) -> str:
    """offload_optimizer / offload_param `device`: none, cpu or nvme (zero/offload_config.py
    OffloadDeviceEnum)."""
    device = section(zero, key).get("device", "none")
    if device is None:
        return "none"
    if device not in ("none", "cpu", "nvme"):
        raise GpuplanError(
            f"zero_optimization.{key}.device must be none, cpu or nvme, got {device!r:.40}"
        )
    return str(device)


def read(text: str, gpus: int | None = None) -> TrainOverrides:
    """A ds_config → train() arguments; `gpus` checks train_batch_size against the world."""
    doc = load_json(text, "the DeepSpeed JSON")
    if not isinstance(doc, dict):
        raise GpuplanError("a DeepSpeed config is a JSON object")
    zero = section(doc, "zero_optimization")
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise GpuplanError(f"zero_optimization.stage must be 0-3, got {stage!r}")
    kwargs: dict[str, Any] = {"zero": stage}
    opt_dev, param_dev = _device(zero, "offload_optimizer"), _device(zero, "offload_param")
    if param_dev != "none" and stage != 3:
        raise GpuplanError("offload_param needs zero_optimization.stage 3")
    if opt_dev != "none" and stage == 0:
        raise GpuplanError("offload_optimizer needs zero_optimization.stage 1-3")
    if param_dev in ("cpu", "nvme"):
        kwargs["offload"] = "params"
    elif opt_dev in ("cpu", "nvme"):
        kwargs["offload"] = "optimizer"
    bf16, fp16 = _enabled(doc, "bf16"), _enabled(doc, "fp16")
    if bf16 and fp16:
        raise GpuplanError("bf16.enabled and fp16.enabled contradict each other")
    kwargs["recipe"] = "adamw-bf16" if (bf16 or fp16) else "adamw-fp32"
    micro = doc.get("train_micro_batch_size_per_gpu")
    accum = doc.get("gradient_accumulation_steps")
    total = doc.get("train_batch_size")
    if not _auto(micro):
        kwargs["micro_batch"] = positive_int("train_micro_batch_size_per_gpu", micro)
    if not _auto(accum):
        kwargs["grad_accum"] = positive_int("gradient_accumulation_steps", accum)
    if not _auto(total) and not _auto(micro) and not _auto(accum) and gpus:
        want = kwargs["micro_batch"] * kwargs["grad_accum"] * gpus
        if positive_int("train_batch_size", total) != want:
            raise GpuplanError(
                f"train_batch_size {total} ≠ micro batch {kwargs['micro_batch']} × accumulation"
                f" {kwargs['grad_accum']} × {gpus} GPUs = {want}"
            )
    framework: dict[str, Any] = {}
    for key, name in (
        ("reduce_bucket_size", "reduce_bucket_elems"),
        ("allgather_bucket_size", "allgather_bucket_elems"),
    ):
        if not _auto(zero.get(key)):
            framework[name] = positive_int(f"zero_optimization.{key}", _number(zero[key]))
    if framework:
        kwargs["framework_overrides"] = framework
    ac = section(doc, "activation_checkpointing")
    if boolean("activation_checkpointing.cpu_checkpointing", ac.get("cpu_checkpointing", False)):
        kwargs["offload_activations"] = True
    return TrainOverrides("deepspeed", None, kwargs, ())
