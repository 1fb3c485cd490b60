"""The TensorRT-LLM adapter: flag table (flags.toml), bill (bill.py), launch builder."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from gpuplan.engine.profiles import EngineAdapter, EngineBill, EngineLaunch, register
from gpuplan.engine.profiles.flags import load_flag_table


class TrtllmAdapter(EngineAdapter):
    name = "trtllm"
    title = "TensorRT-LLM"
    flags = load_flag_table(Path(__file__).with_name("flags.toml"))
    knobs: ClassVar[dict[str, str]] = {
        "tp": "tp_size",
        "pp": "pp_size",
        "max_model_len": "max_seq_len",
        "memory_fraction": "free_gpu_memory_fraction",
        "max_seqs": "max_batch_size",
        "max_batched_tokens": "max_num_tokens",
        "block_size": "tokens_per_block",
        "kv_cache_dtype": "kv_cache_dtype",
    }
    versions = ("1.0.0",)

    def bill(self, launch: EngineLaunch) -> EngineBill:
        from gpuplan.engine.profiles.trtllm.bill import trtllm_bill

        return trtllm_bill(launch)


ADAPTER = register(TrtllmAdapter())
