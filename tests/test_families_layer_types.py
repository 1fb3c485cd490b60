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
from gpuplan.engine.activations import ActivationSpec, stage_bytes  # noqa: E402
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
    "longcat_flash": "two MLA sublayers and MLPs per block, a shortcut MoE with zero experts",
    "hy_v4": "MLA with sinks and a per-channel gate, GLM-5's shared indexers, hyper-connections",
}

# LongcatFlashExperts allocates gate_up_proj for routed + zero experts, down_proj for the routed
# ones only; checkpoints store the routed experts, so the phantom rows are taken off the reference
_PHANTOM_ROWS = ("longcat_flash",)


def _phantom_and_expert(model: object) -> tuple[int, int]:
    """(parameters in gate_up_proj rows beyond down_proj's experts, one routed expert's size),
    summed over layers / read from layer 0, from the modules' own shapes."""
    phantom, expert = 0, 0
    for layer in model.model.layers:  # type: ignore[attr-defined]
        gate_up, down = layer.mlp.experts.gate_up_proj, layer.mlp.experts.down_proj
        per_row = gate_up.numel() // gate_up.shape[0]
        phantom += per_row * (gate_up.shape[0] - down.shape[0])
        expert = per_row + down.numel() // down.shape[0]
    return phantom, expert


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
    total = sum(p.numel() for p in model.parameters())
    if model_type in _PHANTOM_ROWS:
        phantom, expert = _phantom_and_expert(model)
        idle = expert * (model.config.n_routed_experts - model.config.moe_topk)
        assert counts.total == total - phantom, model_type
        assert counts.active == total - phantom - idle * model.config.num_layers, model_type
        return
    assert counts.total == total, model_type
    assert counts.active == _reference_active(model, model.config), model_type


# a drafter keeps no cache of its own: every layer reads its target model's K and V
_NO_OWN_CACHE = ("gemma4_unified_assistant",)


@pytest.mark.parametrize("model_type", sorted(set(TYPES) - set(_NO_OWN_CACHE)))
def test_caches_match_a_forward_pass(model_type: str) -> None:
    raw, _ = _default(model_type)
    # what the config class derives from the full widths and depth, the tiny copy derives again
    # (Gemma4UnifiedTextConfig's per_layer_config, ZambaConfig's attention widths and dt rank)
    # (LongcatFlashConfig's qk_head_dim)
    derived = ("per_layer_config", "attention_head_dim", "attention_hidden_size", "mamba_dt_rank")
    derived += ("qk_head_dim",)
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
    if model_type == "longcat_flash":  # two blocks of two sublayers; zero experts beside routed
        cfg.update(num_layers=2, n_routed_experts=4, zero_expert_num=2, moe_topk=2)
    if model_type == "zamba":  # transformers ties the shared block only with two hybrid layers
        cfg["layers_block_type"] = ["mamba", "mamba", "hybrid", "mamba", "hybrid"]
        cfg["num_hidden_layers"] = 5
    arch = architecture_from_config(cfg, model_type)
    fp32 = get_precision("fp32", for_kv=True)
    kv, state = _measure(_run(cfg))
    expected = kv_cache_bytes_per_sequence(arch, fp32, TOKENS, "engine") + _indexer_dtype(arch)
    assert kv == expected, model_type
    assert state == state_bytes_per_sequence(arch, fp32, layout="transformers"), model_type


def test_hyper_connections_serve_but_training_refuses_naming_hc_mult() -> None:
    """HYV4Model widens the residual stream to hc_mult copies: its parameters are counted
    (test_default_configs_are_exact), its training activations are refused in one line."""
    raw, _ = _default("hy_v4")
    arch = architecture_from_config(raw, "hy_v4")
    assert any("hyper-connections" in note for note in arch.notes)
    spec = ActivationSpec(micro_batch=1, seq=16)
    with pytest.raises(GpuplanError, match="hc_mult"):
        stage_bytes(arch, spec, range(arch.num_layers), True, True)


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
        ("longcat_flash", {"router_bias": True}, "router_bias"),
        ("longcat_flash", {"attention_bias": True}, "attention_bias"),
        ("hy_v4", {"attention_bias": True}, "attention_bias"),
    ],
)
def test_unmodelled_variants_are_refused_naming_the_key(
    model_type: str, change: dict, named: str
) -> None:
    raw, _ = _default(model_type)
    for key, value in change.items():
        if value is None:
            raw.pop(key)
        elif isinstance(raw.get(key), list):
            raw[key] = [value] * len(raw[key])
        else:
            raw[key] = value
    with pytest.raises(GpuplanError, match=named):
        architecture_from_config(raw, model_type)
