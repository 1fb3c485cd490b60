"""An accelerator as the engine sees it: how much memory a bill may use, and how fast it computes."""

from __future__ import annotations

from gpuplan.engine.frozen import record, replace
from gpuplan.errors import GpuplanError

# The dtype names the speed model asks for, and the catalog key holding each one's dense peak.
PEAK_KEYS = {
    "bf16": "bf16_dense_tflops",
    "fp16": "fp16_dense_tflops",
    "fp8": "fp8_dense_tflops",
    "fp4": "fp4_dense_tflops",
    "int8": "int8_dense_tops",
    "tf32": "tf32_dense_tflops",
}


@record
class GpuSpec:
    """One accelerator. Figures and their sources live in catalog/data/gpus.toml."""

    id: str
    name: str
    marketed_bytes: int
    driver_total_bytes: int | None = None
    memory_bandwidth_bytes_per_s: float | None = None
    bf16_dense_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    fp16_dense_tflops: float | None = None
    fp4_dense_tflops: float | None = None
    int8_dense_tops: float | None = None
    tf32_dense_tflops: float | None = None
    interconnect_bytes_per_s_per_dir: float | None = None
    interconnect_kind: str | None = None  # nvswitch | nvlink-bridge | xgmi | pcie | roce | ici
    interconnect_topology: str | None = None  # switch | mesh | bridge | host | torus
    interconnect_domain: int | None = None  # GPUs reachable at interconnect_bytes_per_s_per_dir
    nvlink_generation: int | None = None
    pcie_generation: int | None = None
    pcie_bytes_per_s_per_dir: float | None = None
    gpus_per_node: int = 8
    vendor: str = "nvidia"
    compute_capability: str | None = None  # CUDA compute capability ("9.0"); None for other vendors
    memory_override: int | None = None  # a figure the user gave (--gpu-memory)

    @property
    def memory_bytes(self) -> int:
        """The memory a bill is measured against: the driver-reported total where known
        (what `nvidia-smi` / `rocm-smi` shows, i.e. what a process can actually get), else
        the marketed capacity."""
        return self.memory_override or self.driver_total_bytes or self.marketed_bytes

    @property
    def memory_basis(self) -> str:
        if self.memory_override:
            return "marketed" if self.memory_override == self.marketed_bytes else "user"
        return "driver" if self.driver_total_bytes else "marketed"

    def figure(self, key: str) -> float:
        """A speed figure of this GPU by its catalog key ('memory_bandwidth_bytes_per_s',
        'interconnect_bytes_per_s_per_dir', 'bf16_dense_tflops', ...), or a one-line GpuplanError
        naming the GPU and the figure when the catalog has none (never a fallback)."""
        value = getattr(self, key, None)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise GpuplanError(
                f"{self.name} has no {key} in the GPU catalog (no public source read for it);"
                " gpuplan does not time it rather than guess"
            )
        return float(value)

    @property
    def half_dense_tflops(self) -> float | None:
        """The 16-bit tensor peak a bf16 model runs at: bf16, or fp16 on GPUs without a bf16
        rate (Volta, Turing, Vega 20), where engines and trainers run bf16 checkpoints in fp16
        (vLLM casts to float16 below compute capability 8.0)."""
        return self.bf16_dense_tflops or self.fp16_dense_tflops

    def peak_flops(self, dtype: str) -> float:
        """The dense tensor peak for a dtype ('bf16', 'fp16', 'fp8', 'fp4', 'int8', 'tf32') in
        FLOP/s (OP/s for int8), from the catalog's *_dense_* figure; refuses in one line if absent."""
        key = PEAK_KEYS.get(dtype)
        if key is None:
            raise GpuplanError(f"unknown dtype {dtype!r} for a peak; one of {', '.join(PEAK_KEYS)}")
        return self.figure(key) * 1e12

    def with_memory(self, memory_bytes: int) -> GpuSpec:
        """The same GPU measured against a memory figure the user gave (`--gpu-memory`)."""
        return replace(self, memory_override=memory_bytes)
