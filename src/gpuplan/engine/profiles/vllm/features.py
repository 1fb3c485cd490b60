"""Flags that add or move weights on the GPU: multi-LoRA slots, speculative decoding drafts,
CPU weight offload, expert parallelism.

    --enable-lora      lora/layers/*.py create_lora_weights: every LoRA-able linear gets
                       max_loras stacked A/B slots of max_lora_rank in lora_dtype, allocated in
                       load_model (so inside "Model loading took"). Column-parallel layers
                       (qkv, gate_up) keep A whole and shard B; row-parallel (o, down) shard A
                       and keep B whole (not fully sharded: the default).
    --speculative-config   a draft model (draft_model / EAGLE) is loaded beside the target:
                       its weights (÷ tp) and its attention layers' KV pages (v1/spec_decode,
                       one more KV layer slot per draft layer); ngram needs no memory.
    --cpu-offload-gb   model_loader/utils.py + offloader: that many GiB of each rank's layer
                       weights stay in pinned host memory and are streamed in.
    --enable-expert-parallel   fused_moe/layer.py: experts are split whole over tp × dp ranks
                       instead of each being cut by tp.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.lora import linear_shapes
from gpuplan.engine.params import expert_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.profiles import GIB

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "q_b_proj", "kv_b_proj")
ROW_PARALLEL = ("o_proj", "down_proj")


def lora_slot_bytes(
    arch: Architecture, dtype: Precision, tp: int, max_loras: int, max_rank: int, layers: range
) -> int:
    """Bytes of vLLM's LoRA slots on one rank (attention and dense MLP linears of `layers`)."""
    elems = 0
    for i in layers:
        layer = arch.layers[i]
        for name, shapes in linear_shapes(arch, layer).items():
            if layer.moe and name in ("gate_proj", "up_proj", "down_proj"):
                continue  # routed experts: fused-MoE LoRA is not counted (see notes)
            for d_in, d_out in shapes:
                if name in COLUMN_PARALLEL:
                    elems += max_rank * d_in + (d_out // tp) * max_rank
                elif name in ROW_PARALLEL:
                    elems += max_rank * (d_in // tp) + d_out * max_rank
    return dtype.bytes_for(elems * max_loras)


def speculative_method(config: dict[str, Any]) -> str:
    """The draft kind a --speculative-config names ("ngram", "eagle", "mtp", "draft_model", …)."""
    method = str(config.get("method") or "").lower()
    if method:
        return method
    model = str(config.get("model") or "").lower()
    if model in ("ngram", "[ngram]"):
        return "ngram"
    if "eagle" in model:
        return "eagle"
    return "draft_model" if model else ""


def offloaded_bytes(cpu_offload_gb: float, layer_bytes: int) -> int:
    """Layer weights one rank keeps on the host: at most --cpu-offload-gb GiB of them."""
    return min(int(cpu_offload_gb * GIB), layer_bytes)


def expert_parallel_saving(arch: Architecture, bytes_per_param: float, tp: int, dp: int) -> int:
    """Expert bytes one rank no longer holds when experts are split over tp × dp ranks instead
    of tp (dp = 1: the same bytes, split by expert instead of by width)."""
    if arch.moe is None or dp <= 1:
        return 0
    moe_layers = sum(1 for layer in arch.layers if layer.moe)
    total = expert_params(arch) * arch.moe.num_experts * moe_layers
    return int(total * bytes_per_param / tp - total * bytes_per_param / (tp * dp))
