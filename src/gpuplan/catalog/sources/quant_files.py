"""GPTQ / AWQ checkpoints whose quantisation sits in a file beside config.json.

AutoGPTQ writes `quantize_config.json` ({"bits", "group_size", "desc_act", "sym", ...}, no
`quant_method`) and older AutoAWQ `quant_config.json` ({"w_bit", "q_group_size", "zero_point",
"version"}); many such checkpoints carry no `quantization_config` in config.json. vLLM reads these
files when the config has none (model_executor/model_loader/weight_utils.py get_quant_config,
each method's get_config_filenames: GPTQ quantize_config.json, AWQ quant_config.json and
quantize_config.json). The file becomes the config's `quantization_config`, its method named and
the file recorded (`_read_from`) so the bill says where the layout came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_json, read_text

MAX_BYTES = 1024 * 1024
QUANT_FILES = ("quantize_config.json", "quant_config.json")
_AWQ_KEYS = ("w_bit", "q_group_size", "zero_point", "version")


def quantization_config_from_file(data: Any, filename: str, name: str) -> dict[str, Any]:
    """A quantize_config.json / quant_config.json as a `quantization_config`: AutoAWQ's keys
    (w_bit, q_group_size, zero_point, version) or quant_config.json mean AWQ, else GPTQ."""
    if not isinstance(data, dict):
        raise GpuplanError(f"{name}: {filename} is not a JSON object")
    out = dict(data)
    if not isinstance(out.get("quant_method"), str):
        awq = filename == "quant_config.json" or any(k in out for k in _AWQ_KEYS)
        out["quant_method"] = "awq" if awq else "gptq"
    out["_read_from"] = filename
    return out


def read_quant_file(folder: Path) -> dict[str, Any] | None:
    for filename in QUANT_FILES:
        path = folder / filename
        if path.is_file():
            data = load_json(read_text(path, MAX_BYTES), str(path), cap=MAX_BYTES)
            return quantization_config_from_file(data, filename, str(path))
    return None


def with_quant_file(config: dict[str, Any], quant: dict[str, Any] | None) -> dict[str, Any]:
    """config.json with the file's quantisation, unless it declares its own."""
    if quant is None or config.get("quantization_config"):
        return config
    return {**config, "quantization_config": quant}
