"""Engine adapters: the registry and flag tables, vLLM's rules by version (profile run, non-torch
memory by interconnect, CUDA graphs, MXFP4 backends, batch defaults), the memory-relevant flags,
SGLang's default fraction by version, TensorRT-LLM's fraction of what is left."""

from __future__ import annotations

import pytest

from gpuplan.api import engine_serve
from gpuplan.engine.profiles import engine_names, get_adapter
from gpuplan.engine.profiles.vllm.rules import RULES, rules_at
from gpuplan.errors import GpuplanError

GIB = 2**30


def bill(model="llama-3.1-8b", gpu="h100", engine="vllm", version=None, **args):
    return engine_serve(model, gpu, engine=engine, args=args, version=version).bill


def test_registry_and_adapter_shape():
    assert set(engine_names()) >= {"vllm", "sglang", "trtllm"}
    for name in ("vllm", "sglang", "trtllm"):
        a = get_adapter(name)
        assert a.name == name and a.versions and a.newest == a.versions[-1]
        assert a.knob("tp") and a.knob("max_model_len")
        assert a.flags.commands
    with pytest.raises(GpuplanError, match="unknown engine"):
        get_adapter("nosuch")


def test_version_rules_do_not_overlap():
    by_key: dict[str, list] = {}
    for r in RULES.rules:
        by_key.setdefault(r.key, []).append(r)
    for key, rules in by_key.items():
        rules.sort(key=lambda r: r.since)
        for a, b in zip(rules, rules[1:], strict=False):
            assert a.until is not None and a.until <= b.since, key


@pytest.mark.parametrize(
    "version, engine, sampler, graphs_in, nccl",
    [
        ("0.6.3", "v0", "v0", False, True),  # V0 to 0.6.4: the init snapshot precedes NCCL
        ("0.6.6", "v0", "v0", False, False),
        ("0.8.5", "v1", "native", False, False),
        ("0.10.1", "v1", "native", False, True),
        ("0.15.0", "v1", "native", False, False),
        ("0.19.0", "v1", "triton", False, False),
        ("0.21.0", "v1", "flashinfer", True, False),
    ],
)
def test_rules_by_version(version, engine, sampler, graphs_in, nccl):
    r = rules_at(version)
    assert r["engine"] == engine and r["sampler_path"] == sampler
    assert r["cudagraph_in_budget"] is graphs_in and r["nccl_counted"] is nccl


def test_sampler_pass_sets_the_activation_peak_by_version():
    """Qwen3-14B on H100 (llm-d-planner version sweep): 5.64 GiB on 0.15/0.16 (sort-based
    top-k/top-p), 2.23 GiB from 0.17 (Triton kernels)."""
    old = bill("qwen3-14b", version="0.16.0", max_model_len=8192, gpu_memory_utilization=0.95)
    new = bill("qwen3-14b", version="0.17.0", max_model_len=8192, gpu_memory_utilization=0.95)
    assert old.item("activation_peak").bytes / GIB == pytest.approx(5.64, abs=0.1)
    assert new.item("activation_peak").bytes / GIB == pytest.approx(2.23, abs=0.1)


def test_v0_profiles_a_whole_max_model_len_batch():
    """V0 without chunked prefill runs max(max_model_len, 2048) tokens through the model (RTX
    3090, vllm#10517: 2.07 GiB peak at 20k, 2.99 at 29k); above 32k chunked prefill caps it, at
    512 tokens through 0.6.4 (the GTX 1080 0.6.4.post1 log prints 'Chunked prefill is enabled with
    max_num_batched_tokens=512.'; the same comment's 35k run peaks at 0.06 GiB)."""

    def act(n):
        return bill("llama-3.1-8b", "rtx-3090", version="0.6.4", max_model_len=n).item(
            "activation_peak"
        )

    assert act(20000).bytes / GIB == pytest.approx(2.07, abs=0.15)
    assert act(29000).bytes / GIB == pytest.approx(2.99, abs=0.2)
    assert act(35000).inputs["max_num_batched_tokens"] == 512


def test_non_torch_memory_by_interconnect():
    """TP buffers behind an NVSwitch (H100 SXM, 0.19: ~2.1 GiB at TP2) vs PCIe cards (L40S)."""
    h100 = bill("llama-3.1-8b", "h100", version="0.19.0", tensor_parallel_size=2)
    l40s = bill("llama-3.1-8b", "l40s", version="0.19.0", tensor_parallel_size=2)
    assert h100.item("non_torch").bytes / GIB == pytest.approx(2.08, abs=0.05)
    assert l40s.item("non_torch").bytes / GIB < 0.5
    assert l40s.settings["interconnect"] == "pcie"


def test_cuda_graphs_deducted_from_021():
    old = bill(version="0.19.0")
    new = bill(version="0.21.0")
    assert [i.key for i in old.items][-1] == "kv_cache" and old.outside_budget[0].bytes > 0
    assert "cuda_graphs" in [i.key for i in new.items] and new.outside_budget[0].bytes == 0
    assert new.kv_cache_bytes < old.kv_cache_bytes
    eager = bill(version="0.21.0", enforce_eager=True)
    assert "cuda_graphs" not in [i.key for i in eager.items]


def test_batch_defaults_by_gpu_memory():
    assert bill(gpu="h100").settings["max_num_seqs"] == 1024
    assert bill(gpu="a100-80gb", version="0.19.0").settings["max_num_batched_tokens"] == 2048
    assert bill(gpu="l40s").settings["max_num_seqs"] == 256


def test_mxfp4_backend_by_gpu_and_version():
    """gpt-oss-20b on H100: Marlin padding (13.64 GiB) on 0.19, Triton (13.47) on 0.11;
    consumer Blackwell (sm_120) gets Marlin's, datacenter Blackwell the SM100 kernels'."""

    def w(gpu, version):
        return bill("gpt-oss-20b", gpu, version=version).item("weights").bytes / GIB

    assert w("h100", "0.19.0") == pytest.approx(13.64, rel=0.01)
    assert w("h100", "0.11.0") == pytest.approx(13.47, rel=0.01)
    assert w("rtx-5090", "0.19.0") < w("b200", "0.19.0")


def test_max_model_len_auto_fits_the_length_and_needs_014():
    b = bill("llama-3.1-70b", "h100", tensor_parallel_size=2, max_model_len="auto")
    assert 0 < b.max_model_len <= 131072 and b.fits
    assert b.max_concurrency >= 1
    tight = bill(
        "llama-3.1-70b",
        "h100",
        tensor_parallel_size=2,
        gpu_memory_utilization=0.75,
        max_model_len="auto",
    )
    assert tight.max_model_len < b.max_model_len
    with pytest.raises(GpuplanError, match="0.14"):
        bill(version="0.11.0", max_model_len="auto")


def test_a_length_beyond_the_model_is_refused():
    b = bill("llama-3.1-8b", max_model_len=200_000)
    assert not b.fits and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in b.failure


def test_kv_cache_memory_bytes_and_block_override():
    b = bill(kv_cache_memory_bytes=4 * GIB)
    assert b.kv_cache_bytes == 4 * GIB
    assert bill(num_gpu_blocks_override=100).num_blocks == 100


def test_lora_slots_offload_and_drafts_move_the_weights():
    base = bill("llama-3.1-70b", tensor_parallel_size=4)
    w0 = base.item("weights").bytes
    lora = bill(
        "llama-3.1-70b", tensor_parallel_size=4, enable_lora=True, max_loras=4, max_lora_rank=64
    )
    # per layer and slot: rank × (A of q,k,v,gate,up whole + B of them ÷ tp + A of o,down ÷ tp
    # + B of o,down whole), 80 layers, 4 slots, bf16
    h, i, kv = 8192, 28672, 1024
    per_layer = 64 * (5 * h + (h + 2 * kv + 2 * i) // 4 + (h + i) // 4 + 2 * h)
    assert lora.item("weights").bytes - w0 == per_layer * 80 * 4 * 2
    offload = bill("llama-3.1-70b", tensor_parallel_size=4, cpu_offload_gb=10)
    assert w0 - offload.item("weights").bytes == 10 * GIB
    draft = bill(
        "llama-3.1-70b",
        tensor_parallel_size=4,
        speculative_config={"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 5},
    )
    assert draft.item("weights").bytes > w0
    ngram = bill("llama-3.1-70b", speculative_config={"method": "ngram"}, tensor_parallel_size=4)
    assert ngram.item("weights").bytes == w0 and not ngram.unmodelled
    unknown = bill(
        "llama-3.1-70b", speculative_config={"model": "x/unknown-draft"}, tensor_parallel_size=4
    )
    assert any("speculative" in u for u in unknown.unmodelled)


def test_expert_parallel_with_data_parallel_splits_experts():
    dense = bill("qwen3-30b-a3b", tensor_parallel_size=1, data_parallel_size=4)
    ep = bill(
        "qwen3-30b-a3b", tensor_parallel_size=1, data_parallel_size=4, enable_expert_parallel=True
    )
    assert ep.item("weights").bytes < 0.4 * dense.item("weights").bytes


def test_kv_connectors_are_reported_unmodelled():
    b = bill(kv_transfer_config={"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    assert any("--kv-transfer-config" in u for u in b.unmodelled)


def test_sglang_default_fraction_by_version():
    """4 × L4, QwQ-class TP4: 0.85 in SGLang 0.4.3 (by TP degree); the tiered reserve from
    0.4.8; the formula from 0.5.3 (H100 TP1: 0.835 before piecewise graphs)."""
    assert (
        bill("qwen3-32b", "l4", "sglang", "0.4.3", tp_size=4).settings["mem_fraction_static"]
        == 0.85
    )
    tiered = bill("qwen3-8b", "h100", "sglang", "0.5.0").settings["mem_fraction_static"]
    assert tiered == round((81559 - 10 * 1024) / 81559, 3)
    formula = bill("qwen3-8b", "h100", "sglang", "0.5.6").settings["mem_fraction_static"]
    assert formula == round((81559 - (512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024)) / 81559, 3)
    piecewise = bill("qwen3-8b", "h100", "sglang", "0.5.9").settings["mem_fraction_static"]
    assert piecewise < formula


def test_trtllm_fraction_of_what_is_left():
    a = bill(engine="trtllm", free_gpu_memory_fraction=0.9)
    b = bill(engine="trtllm", free_gpu_memory_fraction=0.5)
    assert b.kv_cache_bytes == pytest.approx(a.kv_cache_bytes * 0.5 / 0.9, rel=0.001)
    assert a.fits and a.block_size == 32


@pytest.mark.parametrize(
    "engine, flag, value",
    [
        ("vllm", "gpu_memory_utilization", 5e-324),
        ("vllm", "gpu_memory_utilization", 1e-12),
        ("sglang", "mem_fraction_static", 5e-324),
        ("trtllm", "free_gpu_memory_fraction", 1e-300),
    ],
)
def test_a_fraction_that_leaves_no_budget_is_refused_in_one_line(engine, flag, value):
    """Not "will not start" with a negative KV line: a share under 1 MiB is a one-line error."""
    with pytest.raises(GpuplanError, match="at least 1 MiB") as err:
        bill(engine=engine, **{flag: value})
    assert "\n" not in str(err.value)
    with pytest.raises(GpuplanError, match="greater than 0"):
        bill(engine=engine, **{flag: 0.0})
    # a small but real share is a prediction, not an error
    assert not bill(engine=engine, **{flag: 0.001}).fits


def test_the_cli_refuses_a_vanishing_fraction(capsys):
    from gpuplan.cli.main import main

    code = main(
        ["serve", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm"]
        + ["--gpu-memory-utilization", "5e-324"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--gpu-memory-utilization" in err
