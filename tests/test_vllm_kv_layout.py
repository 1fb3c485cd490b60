"""vLLM's KV-cache layout for hybrid models (engine/profiles/vllm/kv_layout.py): state layers paged
with the attention layers, the attention block raised until its page holds a state page, state
pages padded to it, KV cache groups as for sliding windows; V0's separate state cache; TRT-LLM and
llama.cpp refuse state layers (SGLang's state pool: test_sglang_state_pool.py).

Expected values are vLLM's own startup lines (block size, padding, tokens, concurrency) or are
derived here from the layer shapes (Gu & Dao 2023, Dao & Gu 2024, Yang et al. 2024 state sizes as
vLLM's model/mamba_utils.py allocates them)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from family_configs import BUILT
from gpuplan.api import engine_serve
from gpuplan.engine.profiles.vllm.kv_layout import (
    blocks_per_request,
    kv_layout,
    reported_tokens,
)
from gpuplan.errors import GpuplanError

GIB = 2**30
CONFIGS = Path(__file__).parent / "data" / "engine_configs"
QWEN3_NEXT = json.loads((CONFIGS / "Qwen--Qwen3-Next-80B-A3B-Instruct.json").read_text())
QWEN35 = json.loads((CONFIGS / "Qwen--Qwen3.5-0.8B.json").read_text())
NANO_V2 = BUILT["nemotron-nano-9b-v2"]
NANO_V3 = BUILT["nemotron-3-nano-30b-a3b"]
LFM2 = BUILT["lfm2-1.2b"]


def bill(config, version, gpu="h100", name="m", **args):
    return engine_serve(config, gpu, engine="vllm", args=args, version=version, name=name).bill


def padding_pct(b) -> float:
    kv = b.item("kv_cache").inputs
    return 100 * (kv["page_bytes"] - kv["state_page_bytes"]) / kv["state_page_bytes"]


@pytest.mark.parametrize(
    "config, version, args, block, pad",
    [
        # vLLM 0.10.2 log, 2 × H200 (tests/data/engine_logs/public-logs.json)
        (QWEN3_NEXT, "0.10.2", {"tensor_parallel_size": 2}, 544, 1.49),
        # vLLM 0.19.0 log: the config's mamba_ssm_dtype float32 is honoured (from 0.16)
        (QWEN35, "0.19.0", {"max_model_len": 4096}, 544, 2.64),
        # vLLM 0.19.0 log of Nemotron-Cascade-2-30B-A3B (the Nemotron-3-Nano geometry) with
        # fp8 KV and --mamba-ssm-cache-dtype float32 (public repository, index id 51961570119)
        (
            NANO_V3,
            "0.19.0",
            {"kv_cache_dtype": "fp8", "mamba_ssm_cache_dtype": "float32"},
            4176,
            0.19,
        ),
        # vllm#24280 (2025-09-04): "672 tokens for NVIDIA-Nemotron-Nano-9B-v2" (bf16 SSM state:
        # the config's float32 is honoured from 0.13 only)
        (NANO_V2, "0.10.2", {}, 672, None),
        # LFM2.5-1.2B on vLLM (public repository notes, index id 64285867313): block 16, the
        # short-conv state page padded by 300 %
        (LFM2, "0.19.0", {"max_model_len": 2048}, 16, 300.0),
    ],
)
def test_hybrid_block_size_and_padding_are_the_logged_ones(config, version, args, block, pad):
    b = bill(config, version, **args)
    assert b.block_size == block
    if pad is not None:
        assert padding_pct(b) == pytest.approx(pad, abs=0.005)


def test_qwen3_next_layout_from_first_principles():
    """12 attention + 36 gated-DeltaNet layers at TP2: attention 1 KV head × (256 + 256) × 2 B =
    1,024 B per token; a DeltaNet state = conv (2·16·128 + 32·128)/2 channels × 3 taps × 2 B +
    recurrent 16 heads × 128 × 128 × 2 B; group size 12 → 1 attention + 3 state groups of 12."""
    b = bill(QWEN3_NEXT, "0.10.2", gpu="h200", tensor_parallel_size=2)
    layout = kv_layout(
        b.launch.arch, b.launch, 16, range(48), max_model_len=262144, align_to_block=False
    )
    attn_token = 1 * (256 + 256) * 2
    state = (2 * 16 * 128 + 32 * 128) // 2 * 3 * 2 + 16 * 128 * 128 * 2
    block = 16 * math.ceil(state / (16 * attn_token))
    assert (layout.block_size, layout.state_page_bytes) == (block, state)
    assert layout.page_bytes == block * attn_token
    assert (layout.slots, layout.groups, layout.padding_layers) == (12, 4, 0)
    assert layout.group_kinds.count(("state", None)) == 3
    # the logged memory gives the logged figures (0.10.2: blocks // groups × block size)
    blocks = int(44.59 * GIB) // layout.page_bytes // 12
    assert blocks == 7162  # "num_gpu_blocks is: 7162"
    assert reported_tokens(layout, blocks, block) == 973_760
    per_request = math.ceil(262144 / block) + 3  # one page per state group
    assert blocks_per_request(layout, 262144, block, 8192) == per_request
    assert round(blocks / per_request, 2) == 14.77


def test_lfm2_short_conv_groups_and_the_logged_figures():
    """LFM2: 6 attention + 10 short-conv layers; 10 ≥ 1.5 × 6 so the group size is 6 and the
    conv layers take 2 groups (2 padding layers, "Add 2 padding layers, may waste at most
    20.00%"). The log's 217,264 tokens and 313.37× at 2,048 tokens fix num_blocks = 40,738."""
    b = bill(LFM2, "0.19.0", max_model_len=2048)
    layout = kv_layout(b.launch.arch, b.launch, 16, range(16), max_model_len=2048)
    assert (layout.slots, layout.groups, layout.padding_layers) == (6, 3, 2)
    assert layout.state_page_bytes == 2048 * (3 - 1) * 2  # hidden × (L_cache − 1) × bf16
    assert reported_tokens(layout, 40_738, 16) == 217_264
    assert round(40_738 / blocks_per_request(layout, 2048, 16, 2048), 2) == 313.37


def test_logged_hybrid_kv_memory_gives_the_logged_tokens():
    """The two hybrid logs of the corpus: their own KV memory through gpuplan's layout."""
    data = json.loads(
        (Path(__file__).parent / "data" / "engine_logs" / "public-logs.json").read_text()
    )
    cases = [c for c in data["cases"] if c["logged"].get("mamba_padding_pct")]
    assert len(cases) == 2
    for c in cases:
        config = json.loads((CONFIGS / (c["model_id"].replace("/", "--") + ".json")).read_text())
        b = engine_serve(
            config, c["gpu"], engine="vllm", args=c["launch_args"], version=c["engine_version"]
        ).bill
        lg = c["logged"]
        kv = b.item("kv_cache").inputs
        blocks = int(lg["kv_cache_gib"] * GIB) // kv["page_bytes"] // kv["layer_slots"]
        layout = kv_layout(
            b.launch.arch,
            b.launch,
            b.block_size,
            range(b.launch.arch.num_layers),
            max_model_len=b.max_model_len,
        )
        assert reported_tokens(layout, blocks, b.block_size) == lg["kv_cache_tokens"], c["case_id"]
        per_request = blocks_per_request(layout, b.max_model_len, b.block_size, 8192)
        assert round(blocks / per_request, 2) == lg["max_concurrency"], c["case_id"]


def test_from_021_the_token_figure_is_concurrency_times_length():
    b = bill(QWEN3_NEXT, "0.21.0", gpu="h200", tensor_parallel_size=2)
    per_request = math.ceil(262144 / 544) + 3
    assert b.kv_capacity_tokens == int(b.num_blocks / per_request * 262144)
    old = bill(QWEN3_NEXT, "0.19.0", gpu="h200", tensor_parallel_size=2)
    assert old.kv_capacity_tokens == old.num_blocks // 4 * 544


def test_state_only_model_pages_one_state_per_request():
    """Mamba-130m (24 Mamba-1 layers, d_inner 1536, d_state 16, conv 4): one uniform group of
    state pages, a block per request; the logged token figure is blocks × max_model_len."""
    b = bill(BUILT["mamba-130m"], "0.19.0", max_model_len=2048)
    state = 1536 * 3 * 2 + 1536 * 16 * 2
    kv = b.item("kv_cache").inputs
    assert kv["page_bytes"] == state and kv["layer_slots"] == 24 and kv["groups"] == 1
    assert b.num_blocks == b.kv_cache_bytes // state // 24
    assert b.kv_capacity_tokens == b.num_blocks * 2048
    assert b.max_concurrency == b.num_blocks


def test_v0_keeps_a_separate_state_cache():
    """Before 0.10.2 a model with state layers runs on V0 (the V1 oracle's fallback): the
    MambaCacheManager holds pad(max_num_seqs) slots × state layers × (conv + SSM), the KV cache
    only the attention layers. Jamba-Mini-1.5: 4 attention, 28 Mamba-1 layers (d_inner 8192,
    d_state 16, conv 4), bf16."""
    b = bill(BUILT["jamba-mini-1.5"], "0.9.2", max_model_len=8192, max_num_seqs=100)
    assert b.version.endswith("(V0 engine)")
    state = b.item("state_cache")
    per_seq = 28 * (8192 * 3 + 8192 * 16) * 2
    assert state.bytes == 104 * per_seq  # 100 sequences padded to a CUDA-graph batch of 104
    kv = b.item("kv_cache").inputs
    assert kv["page_bytes"] == 16 * 8 * (128 + 128) * 2 and kv["layer_slots"] == 4
    v1 = bill(BUILT["jamba-mini-1.5"], "0.10.2", max_model_len=8192, max_num_seqs=100)
    assert v1.version.endswith("(V1 engine)") and "state_cache" not in {i.key for i in v1.items}


@pytest.mark.parametrize(
    "config, version, ssm_bytes",
    [
        (NANO_V2, "0.12.0", 2),  # the config's float32 not yet honoured
        (NANO_V2, "0.13.0", 4),  # #29978
        (NANO_V3, "0.19.0", 2),  # no mamba_ssm_cache_dtype in its config
        (NANO_V3, "0.20.0", 4),  # #39032: float32 by default for NemotronH
    ],
)
def test_ssm_state_dtype_by_version(config, version, ssm_bytes):
    b = bill(config, version)
    arch = b.launch.arch
    m = arch.mamba
    conv = (m.d_inner + 2 * m.n_groups * m.d_state) * (m.d_conv - 1) * 2
    ssm = m.n_heads * m.head_dim * m.d_state * ssm_bytes
    assert b.item("kv_cache").inputs["state_page_bytes"] == conv + ssm


def test_too_few_state_blocks_for_max_num_seqs_fails_from_019():
    """#38270: each decode sequence needs one state block; --enforce-eager skips the check.
    Nemotron-Nano-9B-v2 on an A100 40GB: a float32 SSM state makes 5.4 MB pages, 4 slots each."""
    args = {"max_num_seqs": 1024, "max_model_len": 32768}
    b = bill(NANO_V2, "0.19.0", gpu="a100-40gb", **args)
    assert b.num_blocks < 1024
    assert not b.fits and "Mamba cache blocks" in b.failure
    assert bill(NANO_V2, "0.19.0", gpu="a100-40gb", enforce_eager=True, **args).fits
    assert bill(NANO_V2, "0.18.0", gpu="a100-40gb", **args).fits


def test_prefix_caching_modes_for_state_layers():
    """0.15+: gated DeltaNet takes mamba_cache_mode align (two state pages per request);
    Mamba-2 models take 'all', which gpuplan reports as unmodelled; 0.10.2 disables it."""
    none = bill(QWEN3_NEXT, "0.19.0", gpu="h200", tensor_parallel_size=2, max_model_len=32768)
    align = bill(
        QWEN3_NEXT,
        "0.19.0",
        gpu="h200",
        tensor_parallel_size=2,
        max_model_len=32768,
        enable_prefix_caching=True,
    )
    assert align.settings["mamba_cache_mode"] == "align"
    per_none = none.num_blocks / none.max_concurrency
    per_align = align.num_blocks / align.max_concurrency
    assert per_align - per_none == pytest.approx(3)  # one more page in each of 3 state groups
    nano = bill(NANO_V2, "0.19.0", enable_prefix_caching=True)
    assert any("mamba_cache_mode all" in u for u in nano.unmodelled)
    old = bill(QWEN3_NEXT, "0.10.2", gpu="h200", tensor_parallel_size=2, enable_prefix_caching=True)
    assert any("disables prefix caching" in n for n in old.notes)


def test_disabling_the_hybrid_manager_is_refused_for_state_layers():
    with pytest.raises(GpuplanError, match="disable-hybrid-kv-cache-manager"):
        bill(LFM2, "0.19.0", disable_hybrid_kv_cache_manager=True)


@pytest.mark.parametrize(
    "engine, config", [("trtllm", QWEN3_NEXT), ("sglang", LFM2)]
)  # SGLang's Mamba / gated-DeltaNet pool is modelled (test_sglang_state_pool.py), not short conv
def test_other_engines_refuse_state_layers_in_one_line(engine, config):
    with pytest.raises(GpuplanError, match="state layers") as err:
        engine_serve(config, "h200", engine=engine, args={}, name="m")
    assert "\n" not in str(err.value)


def test_mamba_cache_mode_without_prefix_caching_is_none():
    b = bill(LFM2, "0.19.0", mamba_cache_mode="align")
    assert b.settings["mamba_cache_mode"] == "none"
    assert any("sets it to none" in n for n in b.notes)
    on = bill(LFM2, "0.19.0", mamba_cache_mode="align", enable_prefix_caching=True)
    assert on.settings["mamba_cache_mode"] == "align"
