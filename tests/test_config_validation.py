"""The config validation layer: every bad field a one-line error naming it, never a wrong answer.

Covers the config items of issue 10 (negative expert counts, more active experts than experts,
negative sliding windows, head_dim 0, huge layer counts, wrong-typed fields, a short
no_rope_layers ...) and issue 8's rules for unknown families: read with a note when nothing in
the config says Llama-style reading would be wrong, refused naming the key otherwise. A property
test mutates real configs field by field: the reader answers or raises GpuplanError, nothing else,
each case fast.
"""

from __future__ import annotations

import copy
import json
import math
from importlib import resources
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.engine.architecture import architecture_from_config
from gpuplan.engine.families import all_families
from gpuplan.engine.kv_cache import kv_cache_bytes_per_token
from gpuplan.engine.params import count_params
from gpuplan.engine.precision import Precision
from gpuplan.errors import GpuplanError

LLAMA = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
MIXTRAL = {
    **LLAMA,
    "model_type": "mixtral",
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}
LLAMA4 = {
    **LLAMA,
    "model_type": "llama4_text",
    "num_local_experts": 16,
    "num_experts_per_tok": 1,
    "intermediate_size_mlp": 16384,
    "attention_chunk_size": 8192,
    "head_dim": 128,
}


def _error(config: dict[str, Any]) -> str:
    with pytest.raises(GpuplanError) as err:
        architecture_from_config(config, "m")
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("base", "field", "value", "named"),
    [
        (MIXTRAL, "num_local_experts", -3, "num_local_experts"),
        (MIXTRAL, "num_experts_per_tok", 9, "num_experts_per_tok"),
        (MIXTRAL, "num_experts_per_tok", 0, "num_experts_per_tok"),
        ({**LLAMA, "model_type": "mistral"}, "sliding_window", -5, "sliding_window"),
        (LLAMA, "head_dim", 0, "head_dim"),
        (LLAMA, "num_hidden_layers", 10**12, "num_hidden_layers"),
        (LLAMA, "num_hidden_layers", 100_000, "num_hidden_layers"),
        ({**LLAMA, "model_type": "mistral"}, "sliding_window", "abc", "sliding_window"),
        (
            {**LLAMA, "model_type": "deepseek_v3", "kv_lora_rank": 512},
            "q_lora_rank",
            "x",
            "q_lora_rank",
        ),
        (LLAMA4, "no_rope_layers", [1, 0], "no_rope_layers"),
        (LLAMA, "hidden_size", 10**400, "hidden_size"),
        (LLAMA, "hidden_size", float("nan"), "hidden_size"),
        (LLAMA, "vocab_size", True, "vocab_size"),
        (LLAMA, "num_key_value_heads", 7, "num_key_value_heads"),
        (LLAMA, "num_attention_heads", -32, "num_attention_heads"),
        (LLAMA, "intermediate_size", [1, 2], "intermediate_size"),
        (LLAMA, "partial_rotary_factor", float("inf"), "partial_rotary_factor"),
        (LLAMA, "tie_word_embeddings", "yes", "tie_word_embeddings"),
        (LLAMA, "rope_scaling", "linear", "rope_scaling"),
        (LLAMA, "rope_scaling", {"rope_type": "linear", "factor": "x"}, "rope_scaling"),
        (LLAMA, "layer_types", ["full_attention"] * 3, "layer_types"),
        (LLAMA, "layer_types", ["full_attention"] * 15 + ["mamba"], "layer_types"),
        (
            {**LLAMA, "model_type": "gemma3_text"},
            "sliding_window_pattern",
            "LLXG",
            "sliding_window_pattern",
        ),
        (
            LLAMA,
            "vision_config",
            {"model_type": "siglip_vision_model", "hidden_size": -4, "num_hidden_layers": 2},
            "vision_config",
        ),
        (LLAMA, "quantization_config", "fp8", "quantization_config"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(base, field, value, named):
    config = {**copy.deepcopy(base), field: value}
    message = _error(config)
    assert named in message


def test_nested_fields_are_named_with_their_path():
    dbrx = {
        "model_type": "dbrx",
        "d_model": 512,
        "n_heads": 8,
        "n_layers": 2,
        "vocab_size": 1000,
        "attn_config": {"kv_n_heads": 3},
        "ffn_config": {"ffn_hidden_size": 1024, "moe_num_experts": 4, "moe_top_k": 2},
    }
    assert "attn_config.kv_n_heads" in _error(dbrx)
    dbrx["attn_config"] = {"kv_n_heads": 2}
    dbrx["ffn_config"]["moe_top_k"] = 9
    assert "ffn_config.moe_top_k" in _error(dbrx)


def test_missing_sizes_are_all_named():
    message = _error({"model_type": "llama", "hidden_size": 4096})
    for key in ("num_hidden_layers", "num_attention_heads", "vocab_size"):
        assert key in message


def test_hybrid_pattern_with_an_unknown_block_is_refused():
    config = {
        "model_type": "nemotron_h",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "hybrid_override_pattern": "M*-X",
    }
    assert "hybrid_override_pattern" in _error(config)


# --------------------------------------------------------------------------------------
# Unknown families
# --------------------------------------------------------------------------------------


def test_unknown_family_with_known_mechanisms_is_read_with_a_note():
    arch = architecture_from_config({**LLAMA, "model_type": "mycorp_decoder"}, "m")
    reference = architecture_from_config(LLAMA, "m")
    assert count_params(arch).total == count_params(reference).total
    assert any("unknown model family 'mycorp_decoder'" in n for n in arch.notes)
    assert not any("unknown" in n for n in reference.notes)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"layer_types": ["full_attention", "mamba"] * 8}, "layer_types"),
        ({"hybrid_override_pattern": "M*" * 8}, "hybrid_override_pattern"),
        ({"ssm_state_size": 128}, "ssm_state_size"),
        ({"linear_num_value_heads": 32}, "linear_num_value_heads"),
        ({"mixer_config": {"kind": "hyena"}}, "mixer_config"),
        ({"num_kv_shared_layers": 4}, "num_kv_shared_layers"),
    ],
)
def test_unknown_family_declaring_an_unread_mechanism_is_refused(extra, key):
    message = _error({**LLAMA, "model_type": "mycorp_hybrid", **extra})
    assert key in message and "mycorp_hybrid" in message


def test_known_family_with_an_unknown_layer_type_is_refused():
    config = {
        **LLAMA,
        "model_type": "qwen3",
        "layer_types": ["full_attention"] * 15 + ["retention"],
    }
    message = _error(config)
    assert "layer_types" in message and "retention" in message


# --------------------------------------------------------------------------------------
# The family table itself
# --------------------------------------------------------------------------------------


def test_every_record_names_its_source_and_loads():
    families = all_families()
    assert len(families) > 40
    for name, family in families.items():
        assert family.source, name
    raw = resources.files("gpuplan.catalog").joinpath("data/families.toml").read_text("utf-8")
    assert "source" in raw


# --------------------------------------------------------------------------------------
# Property test: mutated real configs never escape as anything but GpuplanError
# --------------------------------------------------------------------------------------


def _catalog_and_test_configs() -> list[dict[str, Any]]:
    from pathlib import Path

    data = resources.files("gpuplan.catalog").joinpath("data/models")
    configs = [json.loads(p.read_text("utf-8")) for p in data.iterdir() if p.name.endswith(".json")]
    here = Path(__file__).parent / "data" / "configs"
    configs += [json.loads(p.read_text("utf-8")) for p in sorted(here.glob("*.json"))]
    return configs


CONFIGS = _catalog_and_test_configs()
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
FP16 = Precision("bf16", 16)


@settings(
    max_examples=3000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(index=st.integers(0, len(CONFIGS) - 1), data=st.data())
def test_mutated_configs_answer_or_refuse_in_one_line(index: int, data: st.DataObject) -> None:
    config = copy.deepcopy(CONFIGS[index])
    target = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    keys = sorted(target)
    key = data.draw(st.sampled_from(keys + ["num_experts", "layer_types", "head_dim"]))
    target[key] = data.draw(JUNK)
    try:
        arch = architecture_from_config(config, "m")
    except GpuplanError as err:
        assert "\n" not in str(err) and len(str(err)) < 400
    else:
        counts = count_params(arch)
        assert counts.total > 0 and 0 < counts.active <= counts.total
        assert kv_cache_bytes_per_token(arch, FP16) >= 0
        assert all(isinstance(n, int) for n in counts.by_kind.values())
        assert arch.rope is None or math.isfinite(arch.rope.factor)
