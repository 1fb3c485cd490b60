"""The vLLM adapter: flag table (flags.toml), version rules (versions.toml), bill (bill.py),
launch builder. Versions: the V1 engine from 0.10 to the newest read, and the legacy V0 engine
(0.5–0.9) for the logs people still post."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from gpuplan.engine.profiles import EngineAdapter, EngineBill, EngineLaunch, register
from gpuplan.engine.profiles.common import parse_version
from gpuplan.engine.profiles.flags import load_flag_table
from gpuplan.engine.profiles.vllm.bill import vllm_bill
from gpuplan.engine.profiles.vllm.rules import RULES
from gpuplan.errors import GpuplanError


class VllmAdapter(EngineAdapter):
    name = "vllm"
    title = "vLLM"
    flags = load_flag_table(Path(__file__).with_name("flags.toml"))
    knobs: ClassVar[dict[str, str]] = {
        "tp": "tensor_parallel_size",
        "pp": "pipeline_parallel_size",
        "dp": "data_parallel_size",
        "max_model_len": "max_model_len",
        "memory_fraction": "gpu_memory_utilization",
        "max_seqs": "max_num_seqs",
        "max_batched_tokens": "max_num_batched_tokens",
        "block_size": "block_size",
        "enforce_eager": "enforce_eager",
        "dtype": "dtype",
        "quantization": "quantization",
        "kv_cache_dtype": "kv_cache_dtype",
    }
    versions = RULES.releases

    def resolve_version(self, version: str | None) -> str:
        """The version given (0.5.0 … newest; a newer one is read with the newest rules)."""
        if not version:
            return self.newest
        v = parse_version(version)
        if v < parse_version(self.versions[0]):
            raise GpuplanError(
                f"vLLM {version} is older than the oldest version gpuplan reads ({self.versions[0]})"
            )
        if v > parse_version(self.newest):
            return self.newest
        return ".".join(map(str, v))

    def bill(self, launch: EngineLaunch) -> EngineBill:
        return vllm_bill(launch)


ADAPTER = register(VllmAdapter())
