"""The extra weights V0's MLA backend keeps after loading (vLLM 0.7.x).

`attention/backends/mla/utils.py::MLACommonImpl.process_weights_after_loading` (V0, 0.7.x,
with VLLM_MLA_PERFORM_MATRIX_ABSORPTION on by default) builds the decode path's absorbed
matrices and keeps them beside the raw projections the prefill path still uses. Per MLA layer
and rank, with N = num_heads / tp, L = kv_lora_rank, Q = q_lora_rank (the hidden size when the
model has no q LoRA), H = hidden size:

    W_Q_UK = W_Q · W_UK      [Q, N·L]   re-quantised to the checkpoint's fp8 (block scales as the
                                         checkpoint's), else in the activation dtype
    W_UV_O = W_UV · W_O      [N·L, H]   likewise
    W_QR                     [Q, N·r]   the rope slice of q_proj, copied in the activation dtype
    W_UK, W_UV                          views of kv_b_proj's weight; for an fp8 checkpoint the
                                         dequantised [L, N·(nope + v)] copy they view stays alive

All of it is allocated inside `load_model`, so vLLM counts it in "Loading model weights took".
Checkpoints in other formats are refused by that code (only fp8 and unquantised weights take
the MLA path), so nothing is added for them.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.model_records import Architecture
from gpuplan.engine.weights import WeightFormat


def _is_fp8(precision: Any) -> bool:
    return str(precision.id).startswith("fp8")


def absorbed_mla_bytes(arch: Architecture, fmt: WeightFormat, tp: int, layers: range) -> int:
    """Bytes one rank holds for the absorbed MLA matrices of `layers` (0 for a model without
    MLA or with weights in a format the V0 MLA backend does not take)."""
    attn_fmt = fmt.for_kind("attention")
    base = fmt.base
    act = base.bytes_per_element if not _is_fp8(base) else 2
    fp8 = _is_fp8(attn_fmt)
    if not fp8 and attn_fmt.id != base.id:
        return 0  # AWQ / GPTQ attention: not an MLA-capable layout in 0.7
    total = 0
    for i in layers:
        a = arch.attention_of(arch.layers[i])
        if not a.is_mla or a.kv_lora_rank is None:
            continue
        heads = a.num_heads // tp
        lat = a.kv_lora_rank
        q_rows = a.q_lora_rank or arch.hidden_size
        absorbed = q_rows * heads * lat + heads * lat * arch.hidden_size
        absorbed_bytes = int(attn_fmt.bytes_for(absorbed) if fp8 else absorbed * act)
        rope = int(q_rows * heads * a.qk_rope_head_dim * act)
        kv_b = int(lat * heads * (a.qk_nope_head_dim + a.v_head_dim) * act) if fp8 else 0
        total += absorbed_bytes + rope + kv_b
    return total
