"""vLLM's kernel-backend choices that change memory, by GPU and version.

MXFP4 MoE experts (gpt-oss): the backend decides the padding of the expert weights
(model_executor/layers/quantization/mxfp4.py and fused_moe/oracle/mxfp4.py). The attention
backend decides the KV block size (platforms/cuda.py, platforms/interface.py::
update_block_size_for_backend).
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.weights import WeightFormat


def sm(gpu: GpuSpec) -> tuple[int, int]:
    """The GPU's compute capability as (major, minor); AMD and unknown GPUs read as (9, 0)."""
    text = gpu.compute_capability or "9.0"
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


MXFP4_PADDING = {  # (intermediate, hidden) multiples per MoE backend
    "marlin": (
        128,
        256,
    ),  # moe marlin kernel: n % 256 == 0 and k % 128 == 0 (quantization/mxfp4.py)
    "triton": (64, 256),  # intermediate to 64 (mxfp4.py); triton_kernels' swizzled layout pads the
    # hidden width to 256: the 0.11 H100 logs' 13.47 / 64.38 GiB for gpt-oss-20b / 120b
    "flashinfer_trtllm": (256, 256),  # SM100 FlashInfer TRT-LLM MXFP4 kernels
    "rocm": (256, 256),
}


def mxfp4_backend(gpu: GpuSpec, rules: dict[str, Any]) -> str:
    """The MXFP4 MoE backend vLLM picks (quantization/mxfp4.py::get_mxfp4_backend, later
    fused_moe/oracle/mxfp4.py::select_mxfp4_moe_backend): FlashInfer TRT-LLM kernels on
    datacenter Blackwell (sm_100/103); on Hopper the version's choice (versions.toml
    `mxfp4_sm90_backend`: Marlin, or Triton when triton_kernels ships with the image); Marlin on
    Ampere, Ada and consumer Blackwell (sm_120, which the SM100 kernels do not cover)."""
    if gpu.vendor == "amd":
        return "rocm"
    major, _ = sm(gpu)
    if major == 10:
        return "flashinfer_trtllm"
    if major == 9:
        return str(rules.get("mxfp4_sm90_backend", "marlin"))
    return "marlin"


def mxfp4_moe_alignment(gpu: GpuSpec, rules: dict[str, Any] | None = None) -> tuple[int, int]:
    """(intermediate, hidden) multiples the MXFP4 expert weights are padded to on `gpu`."""
    return MXFP4_PADDING[mxfp4_backend(gpu, rules or {})]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def mxfp4_padding_bytes(
    arch: Architecture,
    fmt: WeightFormat,
    tp: int,
    gpu: GpuSpec,
    rules: dict[str, Any] | None = None,
) -> int:
    """Extra bytes one MoE layer's experts take on one rank once padded for the MXFP4 kernel."""
    if arch.moe is None or fmt.for_kind("experts").id != "mxfp4":
        return 0
    m, h = arch.moe, arch.hidden_size
    inter_mult, hidden_mult = mxfp4_moe_alignment(gpu, rules)
    inter = m.expert_intermediate_size // tp
    padded_inter, padded_h = _round_up(inter, inter_mult), _round_up(h, hidden_mult)
    packed = fmt.for_kind("experts")
    extra = packed.bytes_for(m.num_experts * 3 * padded_inter * padded_h)
    extra -= packed.bytes_for(m.num_experts * 3 * inter * h)
    if m.expert_bias:
        bias = fmt.for_kind("bias")
        extra += bias.bytes_for(m.num_experts * (2 * padded_inter + padded_h))
        extra -= bias.bytes_for(m.num_experts * (2 * inter + h))
    return extra
