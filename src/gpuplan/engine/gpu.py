"""An accelerator as the engine sees it: how much memory a bill may use, and how fast it computes."""

from __future__ import annotations

from gpuplan.engine.frozen import record


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
    interconnect_bytes_per_s_per_dir: float | None = None
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

    def with_memory(self, memory_bytes: int) -> GpuSpec:
        """The same GPU measured against a memory figure the user gave (`--gpu-memory`)."""
        from dataclasses import replace

        return replace(self, memory_override=memory_bytes)
