"""NVIDIA ModelOpt checkpoints: `hf_quant_config.json` beside config.json.

TensorRT Model Optimizer's Hugging Face export writes the quantisation into a separate file:
{"producer": {"name": "modelopt", ...}, "quantization": {"quant_algo": "FP8" | "NVFP4" |
"W4A16_AWQ" | "W4A8_AWQ" | "MIXED_PRECISION", "kv_cache_quant_algo": "FP8", "group_size": 16,
"exclude_modules": ["lm_head", ...], "quantized_layers": {module: {"quant_algo": ...}} when
MIXED_PRECISION}} (modelopt/torch/export/unified_export_hf.py; vLLM reads
it in model_executor/layers/quantization/modelopt.py). It becomes the config's
`quantization_config` with `quant_method: modelopt`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_json, read_text

MAX_BYTES = 4 * 1024 * 1024


def quantization_config_from_modelopt(data: Any, name: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("quantization"), dict):
        raise GpuplanError(f"{name}: hf_quant_config.json has no 'quantization' object")
    q = data["quantization"]
    out: dict[str, Any] = {"quant_method": "modelopt"}
    for key in (
        "quant_algo",
        "kv_cache_quant_algo",
        "group_size",
        "exclude_modules",
        "quantized_layers",
    ):
        if q.get(key) is not None:
            out[key] = q[key]
    if not isinstance(out.get("quant_algo"), str):
        raise GpuplanError(f"{name}: hf_quant_config.json has no quant_algo")
    return out


def read_modelopt(folder: Path) -> dict[str, Any] | None:
    path = folder / "hf_quant_config.json"
    if not path.is_file():
        return None
    data = load_json(read_text(path, MAX_BYTES), str(path), cap=MAX_BYTES)
    return quantization_config_from_modelopt(data, str(path))


def with_modelopt(config: dict[str, Any], modelopt: dict[str, Any] | None) -> dict[str, Any]:
    """config.json with hf_quant_config.json's quantisation, unless it declares its own."""
    if modelopt is None or config.get("quantization_config"):
        return config
    return {**config, "quantization_config": modelopt}
