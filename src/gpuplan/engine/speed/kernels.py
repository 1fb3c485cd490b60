"""Kernel efficiencies per GPU architecture (kernels.toml) and the few fitted figures.

Every efficiency in kernels.toml carries a published source; `SpeedKnobs` holds the five figures
fitted to the serving measurements (bench/serving_speed_accuracy.py --fit), each overridable (a
calibration file replaces them for one GPU and engine)."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuplan.engine.frozen import record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.errors import GpuplanError

_DATA = Path(__file__).with_name("kernels.toml")


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return tomllib.loads(_DATA.read_text("utf-8"))


@record
class KernelFigures:
    """One architecture's kernel efficiencies (see kernels.toml for each figure's meaning)."""

    arch: str
    gemm_bf16: float
    gemm_fp8: float
    gemm_w4a16: float
    fp4_units: bool
    gemm_tile_m: int
    grouped_tile_m: int
    grouped_gemm: float
    attn_prefill: float
    attn_prefill_half_seq: float
    attn_decode_bw: float
    link_bus: float
    link_latency_us: float
    sources: tuple[str, ...]
    gemm_fp4: float = 0.0  # share of the fp4 peak; 0: as gemm_fp8 (kernels.toml)
    gemm_k_half: float = 0.0  # K at which a GEMM reaches half its large-K rate (widths.py)
    gemm_fixed_us: float = 0.0  # fixed time of one GEMM kernel beyond its roofline (kernels.toml)
    grouped_tile_m_w4a16: int = 0  # the grouped GEMM's block M on the weight-only fp4/int4 path
    # (0: grouped_tile_m; kernels.toml)


@record
class SpeedKnobs:
    """The fitted figures: achieved HBM share on weight streams, fixed cost per kernel launched
    with and without CUDA graphs, fixed CPU cost per engine step, a fixed cost per request on
    a served (HTTP) run, added to its TTFT and E2E as the client times them, and a CPU cost per
    sequence a step carries (the scheduler's per-request loop: sglang/srt/managers/
    scheduler.py process_batch_result_decode, vllm/v1/core/sched/scheduler.py
    update_from_output; 0 unless calibrated)."""

    hbm: float = 0.74
    kernel_graph_us: float = 3.0
    kernel_eager_us: float = 45.0
    step_ms: float = 0.3
    request_ms: float = 30.0  # fixed per request on the API path (HTTP, tokenise, detokenise)
    seq_us: float = 0.0  # CPU cost per sequence of a step (scheduler bookkeeping, detokenise)
    # SGLang before 0.5: the scheduler's per-sequence work of a decode step, exposed (policy.py
    # `legacy_cpu`), and the per-request cost of SGLang's native /generate endpoint, which
    # sglang.bench_serving --backend sglang calls (Load.client "sglang") instead of request_ms
    legacy_seq_us: float = 60.0
    native_request_ms: float = 0.0


def default_knobs() -> SpeedKnobs:
    """The fitted figures as kernels.toml's [fitted] table holds them."""
    f = _table()["fitted"]
    return SpeedKnobs(
        hbm=float(f["hbm"]),
        kernel_graph_us=float(f["kernel_graph_us"]),
        kernel_eager_us=float(f["kernel_eager_us"]),
        step_ms=float(f["step_ms"]),
        request_ms=float(f["request_ms"]),
        seq_us=float(f.get("seq_us", 0.0)),
        legacy_seq_us=float(f["legacy_seq_us"]),
        native_request_ms=float(f["native_request_ms"]),
    )


_BY_CC = {"8.0": "ampere", "8.6": "ampere", "8.7": "ampere", "8.9": "ada", "9.0": "hopper"}


def architecture_of(gpu: GpuSpec) -> str:
    """The kernel generation of `gpu`: from its CUDA compute capability, or kernels.toml's
    [arch_of] table for GPUs without one; refused in one line when neither names it."""
    table = _table()
    if gpu.id in table["arch_of"]:
        return str(table["arch_of"][gpu.id])
    cc = gpu.compute_capability
    if cc in _BY_CC:
        return _BY_CC[cc]
    if cc and cc.split(".")[0] in ("10", "12"):
        return "blackwell"
    raise GpuplanError(
        f"{gpu.name} has no kernel figures for the speed model (compute capability {cc or 'unknown'}"
        " not in engine/speed/kernels.toml); cannot time it"
    )


def kernel_figures(gpu: GpuSpec) -> KernelFigures:
    """The efficiencies of `gpu`'s architecture."""
    arch = architecture_of(gpu)
    row = _table()["arch"][arch]
    return KernelFigures(
        arch=arch, **{k: v for k, v in row.items() if k != "sources"}, sources=tuple(row["sources"])
    )


def source_titles(keys: tuple[str, ...]) -> tuple[str, ...]:
    """`title (url)` of each source key."""
    src = _table()["sources"]
    return tuple(f"{src[k]['title']} ({src[k]['url']})" for k in keys)
