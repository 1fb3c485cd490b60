"""The serving speed model (engine/perf.py): roofline terms from first principles, and the bar
against published measurements (bench/serving_speed_accuracy.py)."""

import importlib.util
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpuplan.api import serve
from gpuplan.engine.perf import (
    PerfKnobs,
    PerfSetup,
    compute_bound_batch,
    max_concurrency_for_tpot,
    serving_perf,
    touched_experts,
)

ROOT = Path(__file__).resolve().parents[1]


def _setup(model="llama-3.1-8b", gpu="h100", **kw):
    return serve(model, gpu, gpus=kw.pop("gpus", 1)).bill.setup


def test_single_sequence_decode_reads_the_weights_once():
    s = _setup()
    knobs = PerfKnobs(layer_latency_s=0.0)
    perf = serving_perf(PerfSetup(s, prompt_tokens=1, output_tokens=1, concurrency=1, knobs=knobs))
    # first principles: every weight but the embedding table, 2 bytes each, at 80 % of 3.35 TB/s
    a = s.arch
    table = a.vocab_size * a.hidden_size * 2
    weights = perf.weights_read_bytes
    assert weights == pytest.approx(16_060_000_000 - table, rel=0.01)
    expected = (weights + perf.kv_read_bytes) / (0.8 * 3.35e12)
    assert perf.decode_memory_s == pytest.approx(expected, rel=1e-9)
    assert perf.bound == "memory"


def test_decode_turns_compute_bound_past_the_ridge():
    s = _setup()
    base = PerfSetup(s, prompt_tokens=16, output_tokens=16)
    b_star = compute_bound_batch(base)
    # ridge: bytes ÷ (0.8 BW) = 2 N B ÷ (0.6 peak) → B ≈ 0.6·989e12 / (0.8·3.35e12) ≈ 221 for bf16
    assert 150 < b_star < 300
    assert serving_perf(replace(base, concurrency=max(1, b_star // 4))).bound == "memory"
    assert serving_perf(replace(base, concurrency=b_star * 4)).bound == "compute"


def test_tpot_grows_and_throughput_rises_with_concurrency():
    s = _setup()
    prev = None
    for c in (1, 4, 16, 64, 256):
        p = serving_perf(PerfSetup(s, prompt_tokens=512, output_tokens=256, concurrency=c))
        if prev:
            assert p.tpot_s >= prev.tpot_s
            assert p.tokens_per_s >= prev.tokens_per_s
        prev = p


def test_moe_reads_only_the_experts_a_batch_touches():
    assert touched_experts(8, 2, 1) == pytest.approx(2)
    assert touched_experts(256, 8, 1) == pytest.approx(8)
    assert touched_experts(8, 2, 1000) == pytest.approx(8)
    # gpt-oss-120b (128 experts, top-4) at 64 streams: "nearly all 111/128 unique experts are
    # loaded per decode step" (SemiAnalysisAI/InferenceX pull request 1061)
    assert round(touched_experts(128, 4, 64)) == 111
    s = _setup("mixtral-8x7b", gpus=2)
    one = serving_perf(PerfSetup(s, 16, 16, concurrency=1))
    many = serving_perf(PerfSetup(s, 16, 16, concurrency=64))
    # one token: attention + 2 of 8 experts; 64 tokens: all 8 experts
    assert one.weights_read_bytes < 0.45 * many.weights_read_bytes


def test_tensor_parallel_divides_the_step_and_adds_communication():
    one = serving_perf(PerfSetup(_setup("llama-3.1-70b", gpus=2), 128, 128, concurrency=8))
    four = serving_perf(PerfSetup(_setup("llama-3.1-70b", gpus=4), 128, 128, concurrency=8))
    assert four.decode_memory_s == pytest.approx(one.decode_memory_s / 2, rel=0.05)
    assert four.decode_comm_s > 0 and four.tpot_s < one.tpot_s


def test_concurrency_limit_from_the_latency_target():
    s = _setup()
    base = PerfSetup(s, prompt_tokens=1024, output_tokens=256)
    limit = max_concurrency_for_tpot(base, 0.030, 1000)
    assert limit >= 1
    assert serving_perf(replace(base, concurrency=limit)).tpot_s <= 0.030
    if limit < 1000:
        assert serving_perf(replace(base, concurrency=limit + 1)).tpot_s > 0.030
    assert max_concurrency_for_tpot(base, 1e-6, 1000) == 0


def _bench():
    spec = importlib.util.spec_from_file_location(
        "serving_speed_accuracy", ROOT / "bench" / "serving_speed_accuracy.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_published_measurements_bar():
    """Today's result is the bar: 33 cases (22 dense, 11 MoE; 5 GPU types), median |error| 6.8 %,
    26 within 25 %. The misses: TensorRT-LLM 0.6's Llama-2-70B at long contexts (2), DeepSeek-R1
    on 8 H200s at 64 streams (+25.4 %), and gpt-oss-120b MXFP4 on an MI300X (4; see perf.py)."""
    bench = _bench()
    cases = bench.load_cases()
    assert len(cases) >= 33
    assert sum(c.kind == "moe" for c in cases) >= 11
    assert len({c.gpu for c in cases if c.kind == "moe"}) >= 3
    assert len({c.gpu for c in cases}) >= 5
    errs = bench.errors(cases)
    assert statistics.median(abs(e) for e in errs) <= 0.07
    assert sum(abs(e) <= 0.25 for e in errs) == 26
    # the 22 dense cases and Mixtral keep their result from before the MoE cases came
    first = errs[:23]
    assert statistics.median(abs(e) for e in first) <= 0.045
    assert sum(abs(e) <= 0.25 for e in first) == 21
    # MoE on NVIDIA GPUs, out of sample: every case within 26 %
    nvidia_moe = [
        e for c, e in zip(cases, errs, strict=True) if c.kind == "moe" and c.gpu != "mi300x"
    ]
    assert len(nvidia_moe) == 7 and max(abs(e) for e in nvidia_moe) <= 0.26
