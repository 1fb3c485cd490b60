"""State caches of Mamba, linear-attention and short-convolution layers, and their serving line.

Expected values are derived here from the published config values and the state shapes of the
papers (Mamba-2: conv over x, B, C of d_conv − 1 taps and an SSM state of heads × head_dim ×
d_state; gated DeltaNet: conv over q, k, v and a state of value heads × d_k × d_v) — what vLLM's
MambaStateShapeCalculator allocates. tests/test_families.py checks the same formulas against the
caches of real forward passes.
"""

from __future__ import annotations

import pytest

import gpuplan
from family_configs import BUILT
from gpuplan.catalog import get_precision
from gpuplan.engine.architecture import architecture_from_config
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence
from gpuplan.engine.state_cache import (
    layer_state_shape,
    state_bytes_per_sequence,
    state_bytes_per_sequence_per_gpu,
    state_kinds,
)

# nvidia/Nemotron-H-8B-Base-8K: 52 blocks, 24 Mamba-2, 4 attention, 24 MLP
NEMOTRON_H_8B = {
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "intermediate_size": 21504,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "vocab_size": 131072,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "torch_dtype": "bfloat16",
}
# Qwen/Qwen3-Next-80B-A3B-Instruct: 36 gated-DeltaNet layers, 12 attention layers
QWEN3_NEXT = {**BUILT["qwen3-next-80b-a3b"], "torch_dtype": "bfloat16"}
BF16 = get_precision("bf16", for_kv=True)


def test_nemotron_h_state_is_the_mamba2_shape_times_its_layers():
    arch = architecture_from_config(NEMOTRON_H_8B, "nemotron-h-8b")
    mamba_layers = NEMOTRON_H_8B["hybrid_override_pattern"].count("M")
    d_inner = 128 * 64
    conv = (d_inner + 2 * 8 * 128) * (4 - 1)  # x, B, C channels × (d_conv − 1) taps
    ssm = 128 * 64 * 128  # heads × head_dim × d_state
    assert arch.num_state_layers == mamba_layers == 24
    assert arch.num_attention_layers == 4
    assert state_bytes_per_sequence(arch, BF16) == mamba_layers * (conv + ssm) * 2
    # transformers keeps all d_conv taps of the conv state
    assert (
        state_bytes_per_sequence(arch, BF16, layout="transformers")
        == mamba_layers * ((d_inner + 2 * 8 * 128) * 4 + ssm) * 2
    )
    # the KV cache is only the 4 attention layers': 2 × 8 heads × 128 × 2 bytes per token each
    assert kv_cache_bytes_per_sequence(arch, BF16, 1000) == 4 * 2 * 8 * 128 * 2 * 1000


def test_gated_deltanet_state_is_conv_plus_recurrent():
    arch = architecture_from_config(QWEN3_NEXT, "qwen3-next")
    conv_dim = 2 * 16 * 128 + 32 * 128
    per_layer = conv_dim * 3 + 32 * 128 * 128
    assert arch.num_state_layers == 36 and arch.num_attention_layers == 12
    assert state_bytes_per_sequence(arch, BF16) == 36 * per_layer * 2


def test_state_splits_over_tensor_parallel_ranks():
    arch = architecture_from_config(NEMOTRON_H_8B, "nemotron-h-8b")
    one = state_bytes_per_sequence_per_gpu(arch, BF16, tp=1)
    assert state_bytes_per_sequence_per_gpu(arch, BF16, tp=2) * 2 == one
    # 8 B/C groups cannot split 16 ways: vLLM replicates them to one group per rank
    layer = next(s for s in arch.layers if s.has_state)
    shape = layer_state_shape(arch, layer, tp=16)
    assert shape is not None
    assert shape.conv == ((8192 + 2 * 16 * 128) // 16, 3)
    assert shape.ssm == (128 // 16, 64, 128)


def test_state_kinds_give_engines_the_per_rank_page_shapes():
    arch = architecture_from_config(NEMOTRON_H_8B, "nemotron-h-8b")
    (kind,) = state_kinds(arch, BF16, tp=2)
    assert kind.kind == "mamba2" and kind.layers == 24
    assert kind.shape.conv == ((8192 + 2048) // 2, 3)
    assert kind.bytes_per_sequence == ((8192 + 2048) // 2 * 3 + 64 * 64 * 128) * 2


def test_serving_bill_has_a_state_line_constant_in_context():
    short = gpuplan.serve(NEMOTRON_H_8B, "h100", context=4096, users=4)
    long = gpuplan.serve(NEMOTRON_H_8B, "h100", context=32768, users=4)
    assert short.bill.item("state_cache").bytes == long.bill.item("state_cache").bytes > 0
    assert long.bill.item("kv_cache").bytes == 8 * short.bill.item("kv_cache").bytes
    data = short.to_dict()
    assert data["state_bytes_per_sequence"] == short.bill.item("state_cache").bytes // 4
    assert data["model"]["state_layers"] == 24 and data["model"]["family"] == "nemotron_h"
    assert any("recurrent state" in note for note in short.bill.notes)


def test_kv_capacity_accounts_for_the_state():
    plan = gpuplan.serve(NEMOTRON_H_8B, "h100", context=8192, users=1)
    b = plan.bill
    kv_seq = b.item("kv_cache").bytes
    state_seq = b.item("state_cache").bytes
    free = b.budget_bytes - sum(
        i.bytes for i in b.items if i.key not in ("kv_cache", "state_cache")
    )
    assert b.max_concurrent_sequences == free // (kv_seq + state_seq)
    assert b.kv_capacity_tokens == free * 8192 // (kv_seq + state_seq)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3"])
def test_attention_models_have_no_state_line(model):
    plan = gpuplan.serve(model, "h100", gpus="auto")
    assert "state_cache" not in [i.key for i in plan.bill.items]
    assert plan.to_dict()["state_bytes_per_sequence"] == 0


def test_nemotron_ssm_cache_dtype_float32_is_honoured():
    arch = architecture_from_config({**NEMOTRON_H_8B, "mamba_ssm_cache_dtype": "float32"}, "n")
    conv = (8192 + 2048) * 3
    ssm = 128 * 64 * 128
    assert state_bytes_per_sequence(arch, BF16) == 24 * (conv * 2 + ssm * 4)
