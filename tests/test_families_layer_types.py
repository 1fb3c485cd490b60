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
    "gemma4_unified_assistant": "its drafter: every layer KV-shared, projections to the target",
    "axk1": "DeepSeek-V3 MLA and MoE with an RMSNorm on the MoE block's output",
    "beam": "a per-channel output gate with one bias per head; sandwich norms; sliding layers",
    "minimax_m3_vl_text": "q/k norms, dense and sparse layers of different widths",
    "zamba": "Zamba 2's shared block with Mamba-1 layers, one block, no adapters",
    "bailing_hybrid": "KDA with full-rank forget and output gates beside MLA with a head gate",
    "dots3_note_text": "MLA of other shapes on sliding layers (per_layer_config), an indexer elsewhere",
    "axk2": "MLA whose q_gate_proj emits q and an output gate; norms with a low-rank gate",
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


# a drafter keeps no cache of its own: every layer reads its target model's K and V
_NO_OWN_CACHE = ("gemma4_unified_assistant",)


@pytest.mark.parametrize("model_type", sorted(set(TYPES) - set(_NO_OWN_CACHE)))
def test_caches_match_a_forward_pass(model_type: str) -> None:
    raw, _ = _default(model_type)
    # what the config class derives from the full widths and depth, the tiny copy derives again
    # (Gemma4UnifiedTextConfig's per_layer_config, ZambaConfig's attention widths and dt rank)
    derived = ("per_layer_config", "attention_head_dim", "attention_hidden_size", "mamba_dt_rank")
    cfg = _tiny({k: v for k, v in raw.items() if v is not None and k not in derived})
    if "num_expert_group" in cfg:  # BailingHybridConfig's group routing: one group of experts
        cfg["num_expert_group"] = cfg["topk_group"] = 1
    if model_type == "dots3_note_text":  # the sliding layers' own (tiny) MLA shapes
        cfg["per_layer_config"] = {
            str(i): {
                "kv_lora_rank": 2 * cfg["kv_lora_rank"],
                "qk_nope_head_dim": 8,
                "head_dim": 8 + cfg["qk_rope_head_dim"],
            }
            for i, kind in enumerate(cfg["layer_types"])
            if kind == "sliding_attention"
        }
    if model_type == "zamba":  # transformers ties the shared block only with two hybrid layers
        cfg["layers_block_type"] = ["mamba", "mamba", "hybrid", "mamba", "hybrid"]
        cfg["num_hidden_layers"] = 5
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


def test_a_drafter_caches_nothing_of_its_own() -> None:
    """Gemma4UnifiedAssistantConfig makes every layer KV-shared (num_kv_shared_layers = layers)."""
    raw, _ = _default("gemma4_unified_assistant")
    arch = architecture_from_config(raw, "gemma4_unified_assistant")
    assert all(layer.kv_shared for layer in arch.layers)
    fp32 = get_precision("fp32", for_kv=True)
    assert kv_cache_bytes_per_sequence(arch, fp32, 1000, "engine") == 0


@pytest.mark.parametrize(
    ("model_type", "lists"),
    [("zamba", ("layers_block_type",)), ("bailing_hybrid", ("layer_types", "mlp_layer_types"))],
)
def test_layers_derived_without_the_lists(model_type: str, lists: tuple[str, ...]) -> None:
    """Without its per-layer lists, a config's layers follow the config class's own rule
    (ZambaConfig: attn_layer_period / offset; BailingHybridConfig: layer_group_size and
    first_k_dense_replace)."""
    raw, _ = _default(model_type)
    bare = {k: v for k, v in raw.items() if k not in lists}
    derived, listed = (architecture_from_config(c, model_type) for c in (bare, raw))
    assert derived.layers == listed.layers


@pytest.mark.parametrize(
    ("model_type", "change", "named"),
    [
        ("gemma4_unified_assistant", {"use_ordered_embeddings": True}, "use_ordered_embeddings"),
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
        elif isinstance(raw[key], list):
            raw[key] = [value] * len(raw[key])
        else:
            raw[key] = value
    with pytest.raises(GpuplanError, match=named):
        architecture_from_config(raw, model_type)
