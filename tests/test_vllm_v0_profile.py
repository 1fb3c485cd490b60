"""vLLM V0's profile run (issue 20): its eager forward replayed through a caching-allocator model
(engine/profiles/vllm/profile_run.py v0_peak_terms) and the version's memory baseline
(non_torch.py). Expected values are derived here from the allocation order of vLLM's
models/llama.py and PyTorch's allocator rules, or read from real logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.api import engine_serve
from gpuplan.engine.allocator import replay
from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.profiles.common import engine_weight_format
from gpuplan.engine.profiles.vllm.profile_run import (
    ProfileBatch,
    v0_dense_forward_events,
    v0_peak_terms,
)
from gpuplan.engine.profiles.vllm.rules import rules_for

CONFIGS = Path(__file__).parent / "data" / "engine_configs"
GIB = 2**30
MIB = 2**20


def _config(name: str) -> dict:
    return dict(json.loads((CONFIGS / name).read_text()))


def _arch(name: str):
    arch = architecture_from_config(_config(name))
    return arch, engine_weight_format(arch, None, None)


def test_caching_allocator_reuses_splits_and_reserves():
    """A freed 100 MiB block serves a 60 MiB request (split: 40 MiB stays cached); a 50 MiB
    request fits no cached block and reserves a segment of its own: 150 MiB reserved, 110 MiB
    allocated at the peak. A 30 MiB request after that takes the 40 MiB remainder."""
    events = [
        ("alloc", "a", 100 * MIB),
        ("free", "a", 0),
        ("alloc", "b", 60 * MIB),
        ("alloc", "c", 50 * MIB),
        ("alloc", "d", 30 * MIB),
    ]
    peak, reserved = replay(events)
    assert reserved == 150 * MIB
    assert peak == 140 * MIB


def test_freed_neighbours_merge():
    """Two adjacent freed halves of one segment serve a request as large as both."""
    events = [
        ("alloc", "a", 100 * MIB),
        ("free", "a", 0),
        ("alloc", "b", 50 * MIB),
        ("alloc", "c", 50 * MIB),
        ("free", "b", 0),
        ("free", "c", 0),
        ("alloc", "d", 100 * MIB),
    ]
    assert replay(events) == (100 * MIB, 100 * MIB)


@pytest.mark.parametrize("tokens, logged_gib", [(20000, 17.06 - 14.99), (29000, 17.98 - 14.99)])
def test_v0_forward_peak_is_three_hidden_and_three_mlp_widths(tokens, logged_gib):
    """Llama-3.1-8B, V0 eager, one GPU: at the down projection the residual, the normed hidden
    state, gate_up (2I), the activation (I) and the output are alive — (3h + 3I) × T × 2 B.
    vllm#10517 (RTX 3090, 0.6.4) logs peak_torch_memory − weights = 2.07 / 2.99 GiB at
    max_model_len 20,000 / 29,000 (one batch of that many tokens). A block whose remainder
    would be under 1 MiB is handed out whole and counted so."""
    arch, fmt = _arch("meta-llama--Llama-3.1-8B-Instruct.json")
    h, inter = arch.hidden_size, arch.mlp.intermediate_size
    peak, _ = replay(v0_dense_forward_events(arch, fmt, 1, tokens))
    assert peak == pytest.approx((3 * h + 3 * inter) * tokens * 2, abs=2 * MIB)
    assert peak / GIB == pytest.approx(logged_gib, abs=0.02)


def test_v0_reserve_of_a_wide_model_at_tp8():
    """Llama-3.1-405B at TP 8 on a 131,072-token batch: gate_up (2I/tp = 13,312 wide) fits in the
    freed normed-hidden block (16,384 wide), the activation and every later [T, h] do not, so the
    first layer reserves embedding + norm output + qkv + attention + o_proj + activation +
    down_proj output = 4h + (q + 2kv)/tp + q/tp + I/tp per token, and the later layers reuse it."""
    arch, fmt = _arch("meta-llama--Llama-3.1-405B.json")
    t, tp = 131072, 8
    att = arch.attention
    q = att.num_heads * att.head_dim // tp
    kv = 2 * (att.num_kv_heads // tp) * att.head_dim
    per_token = 4 * arch.hidden_size + (q + kv) + q + arch.mlp.intermediate_size // tp
    peak, reserved = replay(v0_dense_forward_events(arch, fmt, tp, t))
    assert reserved == per_token * t * 2
    assert peak == (3 * arch.hidden_size + 3 * arch.mlp.intermediate_size // tp) * t * 2
    terms = v0_peak_terms(arch, fmt, tp, ProfileBatch(t, 256, True), 37.5, 0, reserved=True)
    assert terms.peak == reserved  # the sampler's blocks fit in what the forward left cached


def _bill(version: str, gpu: str, tp: int = 1, **args):
    config = _config("meta-llama--Llama-2-7b-hf.json")
    args = {"tensor_parallel_size": tp, "dtype": "float16", **args}
    return engine_serve(config, gpu, engine="vllm", args=args, version=version).bill


def test_baseline_by_version():
    """vLLM <= 0.6.3 measures from a snapshot taken after the CUDA context and before the
    process groups (worker.py init_device): no context, the communicators counted; 0.6.4 counts
    all memory not held by torch (the context included); 0.6.5 on only the growth."""
    old = _bill("0.6.3", "a100-80gb", tp=2).item("non_torch").inputs
    assert old["scope"] == "init_free" and old["nccl_communicator_bytes"] > 0
    assert _bill("0.6.4", "a100-80gb").item("non_torch").inputs["scope"] == "absolute"
    assert _bill("0.6.5", "a100-80gb").item("non_torch").inputs["scope"] == "increase"
    amd = _bill("0.6.3", "mi300x", tp=8).item("non_torch").inputs
    assert amd["communicator"] == "rccl"


def test_rocm_total_is_the_vram_size():
    """ROCm's hipMemGetInfo total is the VRAM size amdgpu reports: vLLM logs
    total_gpu_memory=191.98GiB on MI300X (notes-mi300x case in public-logs.json)."""
    assert _bill("0.6.3", "mi300x").total_bytes / GIB == pytest.approx(191.98, abs=0.005)


def test_v0_logs_torch_peak():
    """Every V0 log that prints its torch peak ('PyTorch activation peak', or 0.6.4's
    peak_torch_memory less the weights), against the bill's activation line: 16 of 22 within
    0.1 GiB today. The rest: MoE models on the generic terms (DeepSeek-R1 +2.2, DeepSeek-Coder-V2
    with CPU offload −1.3 GiB), a non-driver TP rank that runs no sampler (vllm#13061, +1.2), the
    0.8.2 T4 sampler (+0.26), a launch whose inputs are partly unknown (+0.9) and MI300X fp8
    (−0.24)."""
    from engine_cases import ALL_LOG_FILES, load_cases, predict

    close = total = 0
    for case in load_cases(ALL_LOG_FILES):
        r = predict(case) if case.engine == "vllm" else None
        if r is None or r.bill is None or rules_for(r.bill.launch)["engine"] != "v0":
            continue
        lg = case.logged
        logged = lg.get("activation_peak_gib")
        if logged is None and "peak_torch_gib_v0" in lg:
            weights = lg.get("weights_gib") or r.bill.item("weights").bytes / GIB
            logged = lg["peak_torch_gib_v0"] - weights
        if logged is None:
            continue
        total += 1
        close += abs(r.bill.item("activation_peak").bytes / GIB - logged) <= 0.1
    assert (close, total) == (16, 22)
