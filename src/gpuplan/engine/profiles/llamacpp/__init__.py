"""The llama.cpp adapter (llama-server, GGUF files): flag table (flags.toml), bill (bill.py),
launch builder (the base class's, from the flag table)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.precision import Precision, get_precision
from gpuplan.engine.profiles import EngineAdapter, EngineBill, EngineLaunch, register
from gpuplan.engine.profiles.flags import load_flag_table
from gpuplan.engine.profiles.llamacpp.bill import llamacpp_bill, options_from_args
from gpuplan.engine.weights import WeightFormat

# llama.cpp's cache type names → gpuplan's precision ids (catalog/data/precisions.toml)
KV_NAMES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"
    title = "llama.cpp"
    flags = load_flag_table(Path(__file__).with_name("flags.toml"))
    knobs: ClassVar[dict[str, str]] = {
        "max_model_len": "ctx_size",
        "max_seqs": "n_parallel",
        "max_batched_tokens": "ubatch_size",
        "kv_cache_dtype": "cache_type_k",
        "gpu_layers": "n_gpu_layers",
        "split_mode": "split_mode",
        "tensor_split": "tensor_split",
        "gpus": "device",
    }
    versions = ("b7000",)

    def knob_args(self, knob: str, value: Any) -> dict[str, Any]:
        """--kv-dtype sets both cache types; --gpus N names N CUDA devices."""
        if knob == "kv_cache_dtype":
            key = {"fp16": "f16", "fp32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(
                str(value).lower(), str(value).lower()
            )
            return {"cache_type_k": key, "cache_type_v": key}
        if knob == "gpus":
            return {"device": ",".join(f"CUDA{i}" for i in range(int(value)))}
        return super().knob_args(knob, value)

    def weight_format(
        self, arch: Architecture, args: Mapping[str, Any], stored: Any = None
    ) -> WeightFormat:
        """A GGUF's weights are its stored blocks, loaded as they are."""
        base = get_precision("fp16")
        return WeightFormat(base, base, stored=stored)

    def kv_precision(self, weights: WeightFormat, args: Mapping[str, Any]) -> Precision:
        return self.cache_types(args)[0]

    def cache_types(self, args: Mapping[str, Any]) -> tuple[Precision, Precision]:
        k = str(args.get("cache_type_k") or "f16")
        v = str(args.get("cache_type_v") or "f16")
        return (
            get_precision(KV_NAMES.get(k, k), for_kv=True),
            get_precision(KV_NAMES.get(v, v), for_kv=True),
        )

    def bill(self, launch: EngineLaunch) -> EngineBill:
        options = options_from_args(launch.args, version=launch.version)
        return llamacpp_bill(launch, options, self.cache_types(launch.args))


ADAPTER = register(LlamaCppAdapter())
