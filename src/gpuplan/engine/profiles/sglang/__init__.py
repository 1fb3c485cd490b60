"""The SGLang adapter: flag table (flags.toml), bill (bill.py), launch builder."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from gpuplan.engine.profiles import EngineAdapter, EngineBill, EngineLaunch, register
from gpuplan.engine.profiles.flags import load_flag_table
from gpuplan.engine.profiles.sglang.bill import sglang_bill


class SglangAdapter(EngineAdapter):
    name = "sglang"
    title = "SGLang"
    flags = load_flag_table(Path(__file__).with_name("flags.toml"))
    knobs: ClassVar[dict[str, str]] = {
        "tp": "tp_size",
        "pp": "pp_size",
        "dp": "dp_size",
        "max_model_len": "context_length",
        "memory_fraction": "mem_fraction_static",
        "max_seqs": "max_running_requests",
        "max_batched_tokens": "chunked_prefill_size",
        "block_size": "page_size",
        "enforce_eager": "disable_cuda_graph",
        "dtype": "dtype",
        "quantization": "quantization",
        "kv_cache_dtype": "kv_cache_dtype",
    }
    versions = ("0.4.6", "0.4.8", "0.5.0", "0.5.2", "0.5.3", "0.5.6", "0.5.9")
    kv_fp8_name = "fp8_e4m3"

    def bill(self, launch: EngineLaunch) -> EngineBill:
        return sglang_bill(launch)


ADAPTER = register(SglangAdapter())
