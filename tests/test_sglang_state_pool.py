"""SGLang's hybrid models (Mamba-2, gated DeltaNet beside attention): the pool memory is split
between a state pool and the attention token pool (model_runner_kv_cache_mixin.py,
handle_max_mamba_cache; defaults --mamba-full-memory-ratio 0.9 and --mamba-ssm-dtype float32 as
SGLang's Qwen3-Next docs state them, sgl-project/sglang PR #15337). Expected values are derived
here from the layer shapes of Qwen3-Next-80B-A3B's config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.api import engine_serve

CONFIGS = Path(__file__).parent / "data" / "engine_configs"
QWEN3_NEXT = json.loads((CONFIGS / "Qwen--Qwen3-Next-80B-A3B-Instruct.json").read_text())

# Qwen3-Next at TP 2: 36 gated-DeltaNet layers, each one request's conv state of
# (2·16·128 + 32·128) / 2 channels × 3 taps in bf16 and recurrent state of 32 / 2 heads × 128 × 128
# in float32; 12 attention layers of 2 KV heads / 2 × (256 + 256) × 2 B per token.
PER_REQ_FP32 = 36 * ((2 * 16 * 128 + 32 * 128) // 2 * 3 * 2 + 16 * 128 * 128 * 4)
CELL = 12 * 1 * (256 + 256) * 2


def _bill(**args):
    return engine_serve(
        QWEN3_NEXT, "h200", engine="sglang", args={"tp_size": 2, **args}, name="qwen3-next"
    ).bill


def _pool(b) -> int:
    return b.item("kv_cache").bytes + b.item("state_cache").bytes


def test_the_state_pool_takes_ratio_over_one_plus_ratio_of_the_pool():
    b = _bill()
    rest = _pool(b)
    size = int(rest * 0.9 / 1.9 // PER_REQ_FP32)
    assert b.item("state_cache").bytes == size * PER_REQ_FP32
    assert b.kv_capacity_tokens == (rest - size * PER_REQ_FP32) // CELL
    assert any("assumed float32" in n for n in b.notes) and b.fits


def test_max_mamba_cache_size_and_the_ssm_dtype_flags():
    b = _bill(max_mamba_cache_size=100)
    assert b.item("state_cache").bytes == 100 * PER_REQ_FP32
    half = _bill(max_mamba_cache_size=100, mamba_ssm_dtype="bfloat16")
    per_req_bf16 = 36 * ((2 * 16 * 128 + 32 * 128) // 2 * 3 * 2 + 16 * 128 * 128 * 2)
    assert half.item("state_cache").bytes == 100 * per_req_bf16
    assert not any("assumed float32" in n for n in half.notes)


def test_without_radix_cache_the_running_requests_size_the_state_pool():
    b = _bill(disable_radix_cache=True, max_running_requests=48)
    assert b.item("state_cache").bytes == 48 * PER_REQ_FP32


@pytest.mark.parametrize("flag", ["--mamba-full-memory-ratio 0.5", "--max-mamba-cache-size 64"])
def test_the_state_flags_are_read_from_a_launch_line(flag, tmp_path):
    from gpuplan.api.engines import serve_launch

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_NEXT))
    line = f"python -m sglang.launch_server --model-path {tmp_path} --tp 2 {flag}"
    plan = serve_launch(line, "h200")
    assert plan.bill.item("state_cache").bytes > 0 and not plan.bill.unmodelled


def test_an_unknown_ssm_dtype_is_refused_in_one_line():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="--mamba-ssm-dtype") as err:
        _bill(mamba_ssm_dtype="int3")
    assert "\n" not in str(err.value)
