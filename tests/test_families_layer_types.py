"""Families of issue 22's third round read through `layer_types` / `mlp_layer_types` lists and
MLA (the reader helper's share): each default config of transformers, built on the meta device,
has exactly gpuplan's total and active parameters; a tiny copy's forward pass caches exactly
gpuplan's KV bytes; and the variants gpuplan does not model are refused in one line naming the
key. Every expected value comes from transformers and torch (the helpers of test_families.py).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from gpuplan.catalog import get_precision  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.state_cache import state_bytes_per_sequence  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from test_families import TOKENS, _indexer_dtype, _measure, _reference_active, _run, _tiny  # noqa: E402

pytestmark = pytest.mark.reference

# model type -> what it adds to the families gpuplan already read
TYPES = {
    "gemma4_unified_text": "Gemma 4 without per-layer embeddings; per_layer_config head_dim 512",
    "axk1": "DeepSeek-V3 MLA and MoE with an RMSNorm on the MoE block's output",
    "beam": "a per-channel output gate with one bias per head; sandwich norms; sliding layers",
    "minimax_m3_vl_text": "q/k norms, dense and sparse layers of different widths",
}


def _default(model_type: str) -> tuple[dict, object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type)
    return config.to_dict(), config


@pytest.mark.parametrize("model_type", sorted(TYPES))
def test_default_configs_are_exact(model_type: str) -> None:
    raw, config = _default(model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    counts = count_params(architecture_from_config(raw, model_type))
    assert counts.total == sum(p.numel() for p in model.parameters()), model_type
    assert counts.active == _reference_active(model, model.config), model_type


@pytest.mark.parametrize("model_type", sorted(TYPES))
def test_caches_match_a_forward_pass(model_type: str) -> None:
    raw, _ = _default(model_type)
    # per_layer_config names layers of the full depth: the tiny copy derives it again
    # (Gemma4UnifiedTextConfig: global_head_dim on its full layers)
    cfg = _tiny({k: v for k, v in raw.items() if v is not None and k != "per_layer_config"})
    arch = architecture_from_config(cfg, model_type)
    fp32 = get_precision("fp32", for_kv=True)
    kv, state = _measure(_run(cfg))
    expected = kv_cache_bytes_per_sequence(arch, fp32, TOKENS, "engine") + _indexer_dtype(arch)
    assert kv == expected, model_type
    assert state == state_bytes_per_sequence(arch, fp32, layout="transformers"), model_type


def test_axk1_derives_its_expert_layers_without_the_list() -> None:
    """AXK1Config: without mlp_layer_types, layer 0 dense (first_k_dense_replace 1), the rest MoE."""
    raw, _ = _default("axk1")
    bare = {k: v for k, v in raw.items() if k != "mlp_layer_types"}
    derived, listed = (architecture_from_config(c, "axk1") for c in (bare, raw))
    assert derived.layers == listed.layers


@pytest.mark.parametrize(
    ("model_type", "change", "named"),
    [
        ("gemma4_unified_assistant", {}, "backbone_hidden_size"),
        ("minimax_m3_vl_text", {"layer_types": "minimax_m3_sparse"}, "minimax_m3_sparse"),
        ("beam", {"layer_types": None}, "layer_types"),
    ],
)
def test_unmodelled_variants_are_refused_naming_the_key(
    model_type: str, change: dict, named: str
) -> None:
    raw, _ = _default(model_type)
    for key, value in change.items():
        if value is None:
            raw.pop(key)
        else:
            raw[key] = [value] * len(raw[key])
    with pytest.raises(GpuplanError, match=named):
        architecture_from_config(raw, model_type)
