"""vLLM's kernel-backend choices that change memory, by GPU and version.

MXFP4 MoE experts (gpt-oss): the backend decides the padding of the expert weights
(model_executor/layers/quantization/mxfp4.py and fused_moe/oracle/mxfp4.py). The attention
backend decides the KV block size (platforms/cuda.py, platforms/interface.py::
update_block_size_for_backend).
"""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.weights import WeightFormat


def sm(gpu: GpuSpec) -> tuple[int, int]:
    """The GPU's compute capability as (major, minor); AMD and unknown GPUs read as (9, 0)."""
    text = gpu.compute_capability or "9.0"
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def mxfp4_moe_alignment(gpu: GpuSpec) -> tuple[int, int]:
    """(intermediate, hidden) multiples vLLM pads MXFP4 expert weights to, by the MoE backend
    the GPU gets (fused_moe/oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size,
    read at upstream 28be48fa9): Marlin on Ampere/Ada/Hopper pads the per-rank intermediate width
    to 128 and the hidden width to 256; FlashInfer TRT-LLM on Blackwell and ROCm pad both to 256.
    The H100 logs of gpt-oss-20b (13.64 GiB at TP1, 7.01 GiB at TP2) match the Marlin padding."""
    if gpu.vendor == "amd":
        return 256, 256
    major = int((gpu.compute_capability or "9.0").split(".")[0])
    return (256, 256) if major >= 10 else (128, 256)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def mxfp4_padding_bytes(arch: Architecture, fmt: WeightFormat, tp: int, gpu: GpuSpec) -> int:
    """Extra bytes one MoE layer's experts take on one rank once padded for the MXFP4 kernel."""
    if arch.moe is None or fmt.for_kind("experts").id != "mxfp4":
        return 0
    m, h = arch.moe, arch.hidden_size
    inter_mult, hidden_mult = mxfp4_moe_alignment(gpu)
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
