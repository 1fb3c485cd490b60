"""Engine profiles: the memory bill a real serving engine draws up at startup.

The lesson's bill (`engine/serving.py`, `--engine generic`) charges a fixed workspace and CUDA
context against a headroom. A profile instead mirrors one engine's own accounting: how it sizes
its budget, what it subtracts, and how it cuts the rest into KV-cache blocks or token slots, so
that `kv_capacity_tokens` is the figure that engine will print in its startup log.

    vllm.py    vLLM V1 (0.19 era): gpu_memory_utilization × total − weights − profiled peaks
    sglang.py  SGLang: mem_fraction_static × free-before-load − weights → max_total_num_tokens
    trtllm.py  TensorRT-LLM (PyTorch backend): free_gpu_memory_fraction × memory free after loading
    llamacpp.py  llama.cpp (llama-server, GGUF): layers per GPU / host by --n-gpu-layers, KV cells

Each profile is a pure function `EngineLaunch -> EngineBill`; nothing here reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.bill import Bill, LineItem
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.precision import Precision
from gpuplan.engine.weights import WeightFormat
from gpuplan.errors import GpuplanError

ENGINES = ("generic", "vllm", "sglang", "trtllm", "llamacpp")
GIB = 2**30


@dataclass(frozen=True)
class EngineLaunch:
    """One engine launch: the model, the GPUs and the engine's own flags (None = its default)."""

    engine: str
    arch: Architecture
    weights: WeightFormat
    kv: Precision
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    dp: int = 1
    max_model_len: int | None = None
    # vLLM
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    disable_hybrid_kv_cache_manager: bool = False
    # SGLang
    mem_fraction_static: float | None = None
    max_total_tokens: int | None = None
    page_size: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    # TensorRT-LLM
    free_gpu_memory_fraction: float | None = None
    tokens_per_block: int | None = None
    max_num_tokens: int | None = None
    max_batch_size: int | None = None
    # weights the text decoder does not hold (vision encoder, projector)
    extra_params: int = 0
    is_multimodal: bool = False
    # settings an engine adapter keeps in its own types (llama.cpp: options, K/V cache types)
    engine_options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Range:
    """A figure gpuplan cannot pin down: nominal, low-high, and what moves it."""

    nominal: int
    low: int
    high: int
    moved_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "nominal": self.nominal,
            "low": self.low,
            "high": self.high,
            "moved_by": self.moved_by,
        }


@dataclass(frozen=True)
class EngineBill(Bill):
    """What the engine will do with one GPU (the rank that sets the KV size)."""

    launch: EngineLaunch
    engine: str
    version: str  # the engine versions the rules were read from
    total_bytes: int  # the memory the engine sees on one GPU
    budget_bytes: int  # the share it lets itself use (requested memory)
    items: tuple[LineItem, ...]  # the budget lines, KV cache last
    kv_cache_bytes: int  # may be negative: a failed start
    kv_capacity_tokens: int
    max_concurrency: float
    max_model_len: int
    kv_bytes_per_token: int  # one token on this GPU, all its layer slots
    block_size: int
    num_blocks: int
    fits: bool
    failure: str | None = None
    outside_budget: tuple[LineItem, ...] = ()  # allocated after KV sizing (vLLM 0.19 CUDA graphs)
    ranges: dict[str, Range] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)  # the defaults the engine picked

    def extra_lines(self) -> tuple[LineItem, ...]:
        return self.outside_budget

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        return {
            "name": self.engine,
            "version": self.version,
            "total_bytes": self.total_bytes,
            "budget_bytes": self.budget_bytes,
            "lines": [i.to_dict(units) for i in self.items],
            "outside_budget": [i.to_dict(units) for i in self.outside_budget],
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "max_model_len": self.max_model_len,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "fits": self.fits,
            "failure": self.failure,
            "ranges": {k: r.to_dict() for k, r in self.ranges.items()},
            "settings": dict(self.settings),
            "notes": list(self.notes),
        }


def engine_bill(launch: EngineLaunch) -> EngineBill:
    """The bill of `launch.engine` (vllm, sglang or trtllm)."""
    validate_launch(launch)
    if launch.engine == "vllm":
        from gpuplan.engine.profiles.vllm import vllm_bill

        return vllm_bill(launch)
    if launch.engine == "sglang":
        from gpuplan.engine.profiles.sglang import sglang_bill

        return sglang_bill(launch)
    if launch.engine == "trtllm":
        from gpuplan.engine.profiles.trtllm import trtllm_bill

        return trtllm_bill(launch)
    if launch.engine == "llamacpp":
        from gpuplan.engine.profiles.llamacpp import llamacpp_bill

        opts = dict(launch.engine_options)
        return llamacpp_bill(launch, opts["options"], opts["kv_types"])
    raise GpuplanError(f"unknown engine {launch.engine!r}; choose one of {', '.join(ENGINES)}")


def validate_launch(launch: EngineLaunch) -> None:
    for name in ("tp", "pp", "dp"):
        if getattr(launch, name) < 1:
            raise GpuplanError(f"{name} must be at least 1, got {getattr(launch, name)}")
    for name in (
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "page_size",
        "tokens_per_block",
    ):
        value = getattr(launch, name)
        if value is not None and value < 1:
            raise GpuplanError(f"{name} must be a positive whole number, got {value}")
    for name in ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction"):
        value = getattr(launch, name)
        if value is not None and not 0 < value <= 1:
            raise GpuplanError(f"{name} must be in (0, 1], got {value}")
    if launch.arch.attention.num_heads % launch.tp:
        raise GpuplanError(
            f"tensor parallel size {launch.tp} does not divide the"
            f" {launch.arch.attention.num_heads} attention heads of {launch.arch.name}"
        )
    if launch.pp > launch.arch.num_layers:
        raise GpuplanError(
            f"pipeline parallel size {launch.pp} exceeds the {launch.arch.num_layers} layers"
        )


def gib(n: float) -> int:
    """n GiB as whole bytes."""
    return round(n * GIB)


def budget_item(
    key: str, label: str, nbytes: int, formula: str, inputs: dict[str, Any], category: str
) -> LineItem:
    """A budget line whose explanation is its formula and result."""
    return LineItem(
        key=key,
        label=label,
        bytes=max(0, int(nbytes)),
        formula=formula,
        template=formula + " = {bytes}",
        inputs=inputs,
        category=category,
    )
