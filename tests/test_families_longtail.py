"""Issue 22's long-tail measure: real config.json files of 2025-2026 releases gpuplan had not seen.

The files are tests/data/configs/longtail/ (each one's repository and path in
tests/data/configs/SOURCES.md, section "Long tail"). For every file, the model transformers builds
from it on the meta device is the reference: gpuplan's total and active parameters equal its own.
Two files are the exceptions the scan found and left: two configs quoted without a vocabulary
(Ministral 3's geometry, Kimi-K2.7's text model), which gpuplan refuses in one line. Gemma 4's
vision tower and embedder are counted by its towers.toml record, so its total is exact too. A tiny
copy of each family the scan added or changed runs one forward pass on the CPU: the KV and
recurrent-state bytes its cache holds equal gpuplan's.

No expected number comes from gpuplan: transformers and torch compute every one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuplan.catalog import get_precision  # noqa: E402
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence  # noqa: E402
from gpuplan.engine.model_reader import architecture_from_config  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.state_cache import state_bytes_per_sequence  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from test_families import _build, _measure, _reference_active, _run, _tiny  # noqa: E402

pytestmark = pytest.mark.reference

LONGTAIL = Path(__file__).parent / "data" / "configs" / "longtail"
FILES = {p.stem: json.loads(p.read_text("utf-8")) for p in sorted(LONGTAIL.glob("*.json"))}
REFUSED = {
    "eval-harness--ministral-3-3b-geometry": "vocab_size",
    "sytra--kimi-k2.7-text": "vocab_size",
}
TOKENS = 3


def test_the_long_tail_holds_what_the_scan_measured() -> None:
    """28 real configs: 26 exact (Gemma 4's vision tower counted), two refused."""
    assert len(FILES) == 28
    assert set(REFUSED) <= set(FILES)


@pytest.mark.parametrize("name", [n for n in FILES if n not in REFUSED])
def test_parameters_equal_transformers(name: str) -> None:
    """Total and active parameters equal those of transformers' model built from the file."""
    cfg = FILES[name]
    model = _build(cfg, meta=True)
    counts = count_params(architecture_from_config(cfg, name))
    assert counts.total == sum(p.numel() for p in model.parameters()), name
    assert counts.active == _reference_active(model, model.config), name


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_config_without_a_vocabulary_is_refused_by_name(name: str) -> None:
    with pytest.raises(GpuplanError, match=REFUSED[name]):
        architecture_from_config(FILES[name], name)


@pytest.mark.parametrize(
    "name",
    [
        "mlxcel--dots-llm1-inst",
        "trtllm--exaone-moe-4-layers",
        "glacial--lfm2.5-8b-a1b",
        "megatron-bridge--qwen3.5-27b-text",
    ],
)
def test_cache_bytes_equal_a_forward_pass(name: str) -> None:
    """A tiny copy's forward pass caches exactly gpuplan's KV and state bytes."""
    tiny = _tiny(FILES[name])
    arch = architecture_from_config(tiny, name)
    fp32 = get_precision("fp32", for_kv=True)
    kv, state = _measure(_run(tiny))
    assert kv == kv_cache_bytes_per_sequence(arch, fp32, TOKENS, "engine"), name
    assert state == state_bytes_per_sequence(arch, fp32, layout="transformers"), name


def _unknown(**extra: Any) -> dict[str, Any]:
    base = {
        "model_type": "not_a_family",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 100,
        "num_experts": 4,
    }
    return {**base, **extra}


@pytest.mark.parametrize(
    "key, value",
    [("first_k_dense_replace", 1), ("num_dense_layers", 2), ("mlp_layer_types", ["dense"])],
)
def test_an_unknown_family_with_dense_layers_first_is_refused(key: str, value: Any) -> None:
    """dots.llm1 was read as experts on every layer before it had a record (+1.5 %)."""
    with pytest.raises(GpuplanError, match=key):
        architecture_from_config(_unknown(**{key: value}), "x")


def test_an_unknown_family_with_no_dense_layer_is_still_read() -> None:
    architecture_from_config(_unknown(first_k_dense_replace=0), "x")


def test_experts_that_vary_between_layers_are_refused_by_name() -> None:
    """HunYuanMoEV1Moe indexes moe_topk by layer: one repeated value is read, others refused."""
    cfg = {**FILES["breakdown--hunyuan-a13b-lists"], "moe_topk": [8] * 31 + [4]}
    with pytest.raises(GpuplanError, match="moe_topk.*varies between layers"):
        architecture_from_config(cfg, "x")


def test_mlp_layer_types_of_the_wrong_length_are_refused() -> None:
    cfg = {**FILES["trtllm--exaone-moe-4-layers"], "mlp_layer_types": ["dense", "sparse"]}
    with pytest.raises(GpuplanError, match="mlp_layer_types"):
        architecture_from_config(cfg, "x")
