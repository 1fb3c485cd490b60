"""The TensorRT-LLM adapter: flag table (flags.toml), bill (bill.py), launch builder."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from gpuplan.engine.profiles import (
    EngineAdapter,
    EngineBill,
    EngineLaunch,
    read_yaml_mapping,
    register,
)
from gpuplan.engine.profiles.flags import ParsedFlags, load_flag_table
from gpuplan.engine.profiles.trtllm.bill import trtllm_bill


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

    # LlmArgs fields of an --extra_llm_api_options / --config YAML → trtllm-serve argument names
    # (tensorrt_llm/llmapi/llm_args.py: TorchLlmArgs, KvCacheConfig)
    CONFIG_FIELDS: ClassVar[dict[str, str]] = {
        "tensor_parallel_size": "tp_size",
        "pipeline_parallel_size": "pp_size",
        "moe_expert_parallel_size": "ep_size",
        "max_seq_len": "max_seq_len",
        "max_num_tokens": "max_num_tokens",
        "max_batch_size": "max_batch_size",
        "kv_cache_config.free_gpu_memory_fraction": "free_gpu_memory_fraction",
        "kv_cache_config.tokens_per_block": "tokens_per_block",
        "kv_cache_config.max_tokens": "max_tokens",
        "kv_cache_config.dtype": "kv_cache_dtype",
    }

    def config_args(self, text: str) -> ParsedFlags:
        """An LlmArgs YAML: its memory fields as trtllm-serve arguments; other fields are
        reported as unmodelled (their dotted names), none are silently dropped."""
        data = read_yaml_mapping(text)
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    flat[f"{key}.{sub}"] = v
            else:
                flat[str(key)] = value
        args: dict[str, Any] = {}
        unmodelled: list[str] = []
        for key, value in flat.items():
            name = self.CONFIG_FIELDS.get(key)
            if name is None:
                unmodelled.append(f"{key} (config file)")
            elif value is not None:
                args[name] = self.flags.get(name).coerce(value)
        return ParsedFlags(args, (), tuple(unmodelled), (), (), None)

    def bill(self, launch: EngineLaunch) -> EngineBill:
        return trtllm_bill(launch)


ADAPTER = register(TrtllmAdapter())
