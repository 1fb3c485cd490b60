"""Reference test of the family table: every model type, against transformers.

For every config of tests/family_configs.py (real config.json files from public repositories and
configs with published sizes, built through transformers' own config classes):

* parameters: the model built on the `meta` device has exactly `count_params(...).total`
  parameters, and exactly `.active` active ones — total minus, in every MoE layer, the routed
  experts' parameters × (experts − experts per token) ÷ experts, read off the modules themselves;
* cache: a tiny copy (widths, vocabulary and depth shrunk; every layer kind, head count and state
  shape kept) runs one forward pass on the CPU, and the KV tensors and recurrent states its cache
  holds are summed: the KV part equals gpuplan's KV bytes for those tokens, the state part
  gpuplan's state bytes (layout "transformers": conv states with all kernel taps).

No number here comes from gpuplan: transformers and torch compute every expected value.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

from family_configs import (  # noqa: E402
    BUILT,
    REFERENCE_TYPE,
    REMOTE_CODE,
    real_configs,
    reference_kwargs,
)
from gpuplan.catalog import get_precision  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402
from gpuplan.engine.kv_cache import indexer_key_bytes, kv_cache_bytes_per_sequence  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.state_cache import state_bytes_per_sequence  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402

pytestmark = pytest.mark.reference

REAL = real_configs()


def _catalog() -> dict[str, dict[str, Any]]:
    from importlib import resources

    data = resources.files("gpuplan.catalog").joinpath("data/models")
    configs = {
        p.name[:-5]: json.loads(p.read_text("utf-8"))
        for p in data.iterdir()
        if p.name.endswith(".json")
    }  # the encoder-decoders: their own section below and tests/test_encdec_training.py
    return {k: c for k, c in configs.items() if not c.get("is_encoder_decoder")}


CASES: dict[str, dict[str, Any]] = {
    **{f"catalog:{k}": v for k, v in _catalog().items()},
    **{f"real:{k}": v for k, v in REAL.items() if v.get("model_type") not in REMOTE_CODE},
    **{f"built:{k}": v for k, v in BUILT.items()},
}
_META_KEYS = ("model_type", "architectures", "auto_map", "transformers_version", "_name_or_path")


def _hf_config(cfg: dict[str, Any], attn: str | None = None) -> Any:
    model_type = REFERENCE_TYPE.get(cfg["model_type"], cfg["model_type"])
    kwargs = {k: v for k, v in copy.deepcopy(cfg).items() if k not in _META_KEYS}
    kwargs.pop("quantization_config", None)
    kwargs = reference_kwargs(model_type, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type, **kwargs)
    if attn:
        config._attn_implementation = attn
    return config


def _build(cfg: dict[str, Any], meta: bool) -> Any:
    builder = AutoModelForImageTextToText if "vision_config" in cfg else AutoModelForCausalLM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if meta:
            with torch.device("meta"):
                return builder.from_config(_hf_config(cfg))
        torch.manual_seed(0)
        return builder.from_config(_hf_config(cfg, "eager"))


def _default_meta(model_type: str) -> tuple[Any, Any]:
    """transformers' default config of `model_type` and its causal LM built on the meta device."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type)
        with torch.device("meta"):
            return config, AutoModelForCausalLM.from_config(config)


def _setting(config: Any, names: tuple[str, ...], nested: str) -> int:
    """A config attribute under any of its names (the first of a per-layer list), or DBRX's
    ffn_config attribute `nested`."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in names:
        value = getattr(text, name, None)
        if value is not None:
            return int(value[0] if isinstance(value, list) else value)
    return int(getattr(text.ffn_config, nested))


def _top_k(config: Any) -> int:
    return _setting(
        config, ("num_experts_per_tok", "moe_topk", "moe_k", "top_k_experts"), "moe_top_k"
    )


def _experts(config: Any) -> int:
    names = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    return _setting(config, names, "moe_num_experts")


_EXPERT = re.compile(r"\.experts\.")


def _reference_active(model: Any, config: Any) -> int:
    """Total minus the idle share of the routed experts, from the modules' own parameters.
    Models built of `*ParallelExperts` modules (JetMoE's attention and MLP experts, weights of
    shape experts × out × in) are read from those modules."""
    total = sum(p.numel() for p in model.parameters())
    parallel = [
        m.weight
        for m in model.modules()
        if type(m).__name__.endswith("ParallelExperts") and type(m).__name__.startswith("JetMoe")
    ]
    if parallel:
        k = _top_k(config)
        return total - sum(w.numel() // w.shape[0] * (w.shape[0] - k) for w in parallel)
    idle = 0
    by_layer: dict[str, list[Any]] = {}
    for name, p in model.named_parameters():
        if _EXPERT.search(name) and "shared" not in name:
            by_layer.setdefault(name.split(".experts.")[0], []).append((name, p))
    if not by_layer:
        return total
    k, experts = _top_k(config), _experts(config)
    for params in by_layer.values():
        layer = sum(p.numel() for _, p in params)
        assert layer % experts == 0
        idle += layer // experts * (experts - k)
    return total - idle


@pytest.mark.parametrize("case", sorted(CASES))
def test_params_total_and_active_are_exact(case: str) -> None:
    cfg = CASES[case]
    model = _build(cfg, meta=True)
    expected = sum(p.numel() for p in model.parameters())
    counts = count_params(architecture_from_config(cfg, case))
    assert counts.total == expected, (
        f"{case}: gpuplan {counts.total:,} != transformers {expected:,}"
    )
    assert counts.active == _reference_active(model, model.config), case
    vision = counts.by_kind.get("vision", 0)
    assert sum(counts.per_layer) + counts.embedding + counts.lm_head + vision == counts.total


# --------------------------------------------------------------------------------------
# Caches of tiny copies
# --------------------------------------------------------------------------------------

TOKENS = 3  # shorter than the tiny windows: every attention layer caches every token
WINDOW = 4
VOCAB = 128

# per model_type: the keys whose values make a tiny copy (shapes that decide the cache are kept
# small but non-trivial; gpuplan reads the same tiny config, so only the structure matters)
_TINY_MAMBA2 = {"hidden_size": 32}
_TINY: dict[str, dict[str, Any]] = {
    "nemotron_h": {
        "mamba_num_heads": 8,
        "mamba_head_dim": 8,
        "ssm_state_size": 16,
        "n_groups": 2,
        **_TINY_MAMBA2,
    },
    "mamba2": {"num_heads": 8, "head_dim": 8, "state_size": 16, "n_groups": 2, **_TINY_MAMBA2},
    "falcon_h1": {"mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_d_state": 16},
    "granitemoehybrid": {
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_d_state": 16,
        **_TINY_MAMBA2,
    },
    "jamba": {
        "mamba_d_state": 8,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 0,
    },
    "mamba": {"state_size": 8},
    "qwen3_next": {
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
    },
    "qwen3_5_text": {
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
    },
    "qwen3_5_moe_text": {
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
    },
    "olmo_hybrid": {
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
    },
    "kimi_linear": {"linear_head_dim": 8, "linear_num_heads": 4},
    "zamba2": {"mamba_d_state": 16, "adapter_rank": 4, "n_mamba_heads": 8},
    "lara_mini": {
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
    },
    "dbrx": {"ffn_config": {"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2}},
    # GPTNeoConfig rebuilds attention_layers from attention_types
    "gpt_neo": {
        "attention_types": [[["global", "local"], 2]],
        "attention_layers": ["global", "local"] * 2,
    },
}
_FFN = (
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "ffn_dim",
    "n_inner",
    "moe_shared_expert_intermediate_size",
    "shared_intermediate_size",
    "block_ff_dim",
)
_WIDTH = ("hidden_size", "n_embd", "d_model")
_PATTERNS = ("layer_types", "layers_block_type")


def _tiny(cfg: dict[str, Any]) -> dict[str, Any]:
    """A small copy of `cfg` keeping every layer kind and the shapes its cache depends on."""
    cfg = copy.deepcopy(cfg)
    cfg.pop("quantization_config", None)
    if isinstance(cfg.get("text_config"), dict):  # a VLM: its cache is its language model's
        inner = cfg["text_config"]
        cfg = {**inner, "model_type": inner.get("model_type", cfg["model_type"])}
    model_type = cfg["model_type"]
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        cfg[key] = None
    cfg["vocab_size"] = VOCAB
    _fewer_heads(cfg)
    heads = next((cfg[k] for k in _HEADS if k in cfg), 4)
    width = heads * 8  # a derived head_dim becomes 8
    for key in _WIDTH:
        if key in cfg:
            cfg[key] = width
    if cfg.get("rotary_dim"):
        cfg["rotary_dim"] = 4
    for key in ("rope_scaling", "rope_parameters"):  # long-rope factors are sized by head_dim
        if isinstance(cfg.get(key), dict) and "short_factor" in cfg[key]:
            cfg.pop(key)
    for key in _FFN:
        if cfg.get(key) and not isinstance(cfg[key], list):
            cfg[key] = 32
    if cfg.get("q_lora_rank"):
        cfg["q_lora_rank"] = 32
    for key in ("hidden_size_per_layer_input", "laurel_rank", "global_head_dim"):
        if cfg.get(key):
            cfg[key] = 16
    if model_type.startswith(("gemma3n", "gemma4")):
        cfg["vocab_size_per_layer_input"] = VOCAB
        cfg["hidden_size_per_layer_input"] = 16
    for key in ("sliding_window", "attention_chunk_size"):
        if cfg.get(key):
            cfg[key] = WINDOW
    for key in ("n_positions", "max_position_embeddings", "max_seq_len"):
        if key in cfg:
            cfg[key] = 64
    cfg.update(_TINY.get(model_type, {}))
    _shrink_depth(cfg)
    n = next((cfg[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in cfg), 0)
    for key in ("mlp_layer_types", "indexer_types"):  # per-layer lists: the prefix kept
        if isinstance(cfg.get(key), list) and n:
            cfg[key] = cfg[key][:n]
    if cfg.get("num_attention_heads_per_layer"):  # Laguna: alternate full and half the heads
        half = heads // 2 if heads // 2 % cfg.get("num_key_value_heads", heads) == 0 else heads
        cfg["num_attention_heads_per_layer"] = [heads if i % 2 else half for i in range(n)]
    return cfg


_HEADS = (
    "num_attention_heads",
    "n_head",
    "n_heads",
    "num_heads",
    "attention_heads",
    "decoder_attention_heads",
)
_KV_HEADS = ("num_key_value_heads", "num_kv_heads")
_SMALL_DIMS = {
    "head_dim": 16,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "index_head_dim": 16,
    "index_n_heads": 4,
}


def _fewer_heads(cfg: dict[str, Any]) -> None:
    """At most 16 query heads (KV heads kept when they still divide them, else MHA), small head
    and latent widths, at most 8 experts: the cache's structure is kept, its size is not."""
    for key in _HEADS:
        if key in cfg and cfg[key] > 16:
            old = cfg[key]
            cfg[key] = 16
            for kv_key in _KV_HEADS:
                kv = cfg.get(kv_key)
                if kv is not None and (kv > 16 or 16 % kv):
                    cfg[kv_key] = 16 if kv == old else 8
    for key, value in _SMALL_DIMS.items():
        if cfg.get(key):
            cfg[key] = value
    if cfg.get("kv_lora_rank") and cfg.get("head_dim"):  # MLA configs' head_dim is the RoPE width
        cfg["head_dim"] = cfg["qk_rope_head_dim"]
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if cfg.get(key) and cfg[key] > 8:
            cfg[key] = 8
            cfg.update({k: 1 for k in ("n_group", "topk_group") if k in cfg})
    for key in ("num_experts_per_tok", "moe_topk", "top_k_experts"):
        if cfg.get(key) and cfg[key] > 2:
            cfg[key] = 2


def _shrink_depth(cfg: dict[str, Any]) -> None:
    """Few layers, but every kind of the schedule kept (a prefix holding each kind)."""
    if cfg.get("num_kv_shared_layers"):  # Gemma 3n/4: 2 KV-sharing layers after both kinds
        kinds = (
            ["sliding_attention"] * 2 + ["full_attention"] + ["sliding_attention", "full_attention"]
        )
        cfg["layer_types"] = kinds
        cfg["num_kv_shared_layers"] = 2
        if isinstance(cfg.get("intermediate_size"), list):
            cfg["intermediate_size"] = [32, 32, 48, 48, 48]
        _set_layers(cfg, len(kinds))
        return
    pattern = cfg.get("hybrid_override_pattern")
    if pattern:
        cfg["hybrid_override_pattern"] = pattern[: _prefix_with_all(list(pattern))]
        cfg.pop("num_hidden_layers", None)
        return
    for key in _PATTERNS:
        if isinstance(cfg.get(key), list):
            n = _prefix_with_all(cfg[key])
            cfg[key] = cfg[key][:n]
            _set_layers(cfg, n)
            return
    n = 4
    if cfg.get("first_k_dense_replace"):
        n = cfg["first_k_dense_replace"] + 2
    if cfg.get("moe_layer_start_index"):
        cfg["moe_layer_start_index"] = 1
        cfg["moe_layer_end_index"] = -1
    if cfg["model_type"] in ("gemma3", "gemma3_text"):
        n = 7
    if cfg.get("full_attn_idxs"):
        cfg["full_attn_idxs"] = [1, 3]
    if cfg.get("mlp_only_layers"):
        cfg["mlp_only_layers"] = [0]
    if cfg.get("max_window_layers") is not None and cfg.get("use_sliding_window"):
        cfg["max_window_layers"] = n // 2
    _set_layers(cfg, n)


def _set_layers(cfg: dict[str, Any], n: int) -> None:
    for key in ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers"):
        if key in cfg:
            cfg[key] = n
            return
    cfg["num_hidden_layers"] = n


def _prefix_with_all(kinds: list[Any]) -> int:
    wanted = set(kinds)
    seen: set[Any] = set()
    for i, kind in enumerate(kinds):
        seen.add(kind)
        if seen == wanted:
            return i + 1
    return len(kinds)


def _run(cfg: dict[str, Any]) -> Any:
    model = _build(cfg, meta=False).float().eval()
    ids = torch.randint(0, VOCAB, (1, TOKENS))
    new_api = "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model(input_ids=ids, use_cache=True)
    return getattr(out, "cache" if new_api else "past_key_values")


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if torch.is_tensor(t) else 0


def _measure(cache: Any) -> tuple[int, int]:
    """(KV bytes, recurrent-state bytes) a transformers cache holds; KV includes DeepSeek-V3.2's
    indexer keys (DynamicIndexedLayer.indexer_keys)."""
    kv = state = 0
    if hasattr(cache, "self_attention_cache"):  # EncoderDecoderCache of a decoder-only wrapper:
        for part in (cache.self_attention_cache, cache.cross_attention_cache):  # no encoder
            kv_part, state_part = _measure(part)  # states, so its cross part stays empty
            kv, state = kv + kv_part, state + state_part
        return kv, state
    for layer in cache.layers:
        kv += _nbytes(getattr(layer, "keys", None)) + _nbytes(getattr(layer, "values", None))
        kv += _nbytes(getattr(layer, "indexer_keys", None))
        for attr in ("conv_states", "recurrent_states"):
            for t in (getattr(layer, attr, None) or {}).values():
                state += _nbytes(t)
    for t in getattr(cache, "linear_cache", None) or []:  # MiniMaxCache's lightning states
        state += _nbytes(t)
    return kv, state


def _one_per_model_type() -> list[str]:
    """One config per model type (the catalog's caches are checked in test_reference_params.py)."""
    chosen: dict[str, str] = {}
    cases = [c for c in CASES if not c.startswith("catalog:")]
    # DeepSeek-V4 aliases K and V and keeps compressor states: tests/test_family_deepseek_v4.py
    cases = [c for c in cases if CASES[c]["model_type"] != "deepseek_v4"]
    for case in sorted(cases, key=lambda c: (not c.startswith("built:"), c)):
        chosen.setdefault(CASES[case]["model_type"], case)
    return sorted(chosen.values())


def _indexer_dtype(arch: Any) -> int:
    """transformers keeps DeepSeek Sparse Attention's indexer keys in the model dtype (fp32 here)
    where engines keep fp8 with scales: the difference over the layers that run an indexer."""
    fp32 = get_precision("fp32", for_kv=True)
    out = 0
    for layer in arch.layers:
        a = arch.attention_of(layer)
        if layer.has_attention and a.indexer_head_dim:
            out += TOKENS * (
                indexer_key_bytes(a, fp32, "expanded") - indexer_key_bytes(a, fp32, "engine")
            )
    return out


@pytest.mark.parametrize("case", _one_per_model_type())
def test_cache_bytes_match_a_forward_pass(case: str) -> None:
    if "vision_config" in CASES[case]:
        pytest.skip("vision-language checkpoints: their language models' caches are tested alone")
    cfg = _tiny(CASES[case])
    arch = architecture_from_config(cfg, case)
    assert count_params(arch).total < 50_000_000, f"{case}: the tiny copy is not tiny"
    fp32 = get_precision("fp32", for_kv=True)
    kv, state = _measure(_run(cfg))
    # transformers' Falcon broadcasts the KV heads of the new decoder architecture to every
    # query head before caching them (FalconAttention); engines cache the KV heads only
    layout = "expanded" if cfg.get("new_decoder_architecture") else "engine"
    expected = kv_cache_bytes_per_sequence(arch, fp32, TOKENS, layout) + _indexer_dtype(arch)
    assert kv == expected, case
    assert state == state_bytes_per_sequence(arch, fp32, layout="transformers"), case
    assert (state > 0) == (arch.num_state_layers > 0)


# --------------------------------------------------------------------------------------
# Remote-code families: no transformers class; checked against the checkpoint's own size
# --------------------------------------------------------------------------------------


def test_chatglm_matches_its_checkpoint_size():
    """THUDM/chatglm2-6b (the same shapes as the chatglm3-6b preset read here): its
    pytorch_model.bin.index.json gives total_size 12,487,168,064 bytes of fp16 tensors, i.e. every
    parameter × 2 bytes plus the 32-value fp16 rotary inv_freq buffer the checkpoint also stores
    (kv_channels / 4 = 32 values, 64 bytes)."""
    arch = architecture_from_config(REAL["mlc-llm--chatglm"], "chatglm3-6b")
    inv_freq_bytes = 2 * (REAL["mlc-llm--chatglm"]["kv_channels"] // 4)
    assert 2 * count_params(arch).total + inv_freq_bytes == 12_487_168_064


@pytest.mark.parametrize(
    "name", sorted(k for k, v in REAL.items() if v["model_type"] in REMOTE_CODE)
)
def test_remote_code_configs_are_read(name: str) -> None:
    arch = architecture_from_config(REAL[name], name)
    assert arch.family in REMOTE_CODE and not arch.notes
    assert count_params(arch).total > 10**9


# --------------------------------------------------------------------------------------
# transformers' own default configurations (each class's defaults mirror its flagship checkpoint)

DEFAULT_CONFIG_TYPES = [
    "arcee",  # plain relu² MLP
    "apertus",  # plain xIELU MLP (two learned scalars), per-head QK norms
    "glm4_moe_lite",  # MLA + shared experts, `mlp_layer_types`
    "vaultgemma",  # Gemma 2 without the post-norms
    "granite_swa",  # attention sinks on every layer
    "granitemoe_swa",
    "apertus1p5_text",
    "sarvam_moe",  # GLM-4.5's MoE layout
    "deepseek_v32",  # layer_types of "indexed_attention" (DSA), as transformers 5 writes them
    "cohere2_moe",  # read by the records of the families they extend
    "exaone_moe",
    "flex_olmo",
    "minimax_m2",
    "cwm",
    "minicpm3",  # MLA with a dense gated MLP on every layer
    "youtu",
    "sarvam_mla",  # DeepSeek-V3's MLA + shared-expert layout
    "glm_moe_dsa",  # DeepSeek-V3.2's indexer with GLM-5's shapes
    "afmoe",  # gated attention output, Peri-LN norms, sliding layers, shared experts
    "persimmon",  # per-head LayerNorms with bias on q and k
    "nanochat",  # parameter-free RMSNorms (one after the embedding), relu² fc1/fc2
    "jais2",  # relu² up/down MLP with biases, LayerNorms
    "hyperclovax",  # Peri-LN post-norms (use_post_norm)
    "gpt_neo",  # global / local (windowed) layers, learned positions
    "codegen",  # GPT-J's modules
    "xglm",  # sinusoidal positions (no parameters)
    "biogpt",  # learned positions with 2 extra rows
    "openai-gpt",  # post-norm, no final norm
    "olmo_hybrid",  # Gated DeltaNet layers (unfused projections) beside OLMo 2's attention
    "lfm3",  # LFM2's short convolutions, a gate per attention head, sandwich norms
    "laguna",  # per-layer query heads, a gate per head, shared expert, score-correction bias
    "mimo_v2_flash",  # sliding layers with twice the KV heads and attention sinks
    "kimi_linear",  # Kimi Delta Attention layers beside MLA layers
    "fuyu",  # Persimmon with a linear patch projection for a vision encoder
    "mellum",  # per-head q/k norms, experts on the layers mlp_layer_types marks sparse
    "ctrl",  # sinusoidal positions, a biased lm_head tied to the embedding
    "aria_text",  # experts on every layer beside shared experts, Aria's key names
    "flint",  # Qwen3-MoE attention with sinks, an ungated shared expert, sliding layers
    "kolibri1",  # GLM-4's four norms, experts with a shared expert on every layer
    "lara_mini",  # Qwen3.5's Gated DeltaNet beside full and sliding attention
    # issue 22: BERT variants, early decoders, decoder-only wrappers (engine/added_params.py)
    "electra",  # embeddings of embedding_size projected in, a generator head of that width
    "rembert",  # input / output embedding sizes, an untied decoder
    "roberta-prelayernorm",  # pre-LayerNorm layers and a final LayerNorm
    "roc_bert",  # pronunciation and shape tables, map_inputs_layer
    "roformer",  # a sinusoidal position table that is a parameter
    "xlm-roberta-xl",  # pre-LayerNorm, no embedding LayerNorm
    "xmod",  # per-language adapters in every layer
    "gpt_neox_japanese",  # the last layer's dense_bias
    "bitnet",  # attention and FFN sub-norms
    "modernbert-decoder",  # no attn_norm in layer 0, a dense + LayerNorm head
    "trocr",  # cross-attention blocks in a decoder-only model
    "bigbird_pegasus",  # pre-LayerNorm decoder with cross-attention, an untied head
    "xlm",  # emb_dim / n_layers, post-LayerNorm
    "doge",  # dynamic-mask attention (A, dt_proj), residual scales
    "diffllama",  # differential attention's lambdas
]
# transformers builds no cache for these (OpenAIGPTLMHeadModel has no past-key-values path;
# XLMWithLMHeadModel returns a MaskedLMOutput without its cache)
_NO_CACHE = ("cwm", "openai-gpt", "xlm")
# BERT-style causal LMs cache only as decoders (is_decoder, as their *ForCausalLM asks for)
_CAUSAL_SETTINGS: dict[str, dict[str, Any]] = {
    "xmod": {
        "default_language": "en_XX",
        "pad_token_id": 1,
    },  # XmodModel needs a language for its adapters
    "bigbird_pegasus": {"is_encoder_decoder": False},  # as BigBirdPegasusForCausalLM sets it
    # position ids count from the padding index (RoBERTa's create_position_ids_from_input_ids)
    **{t: {"pad_token_id": 1} for t in ("roberta-prelayernorm", "xlm-roberta-xl")},
    "modernbert-decoder": {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},  # strict ints
}
_AS_DECODER = (
    "electra",
    "rembert",
    "roberta-prelayernorm",
    "roc_bert",
    "roformer",
    "xlm-roberta-xl",
    "xmod",
)


# CwmConfig cannot be rebuilt from its own dict (a None bos_token_id fails its strict field)
@pytest.mark.parametrize("model_type", [t for t in DEFAULT_CONFIG_TYPES if t not in _NO_CACHE])
def test_default_config_caches_match_a_forward_pass(model_type: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = {k: v for k, v in AutoConfig.for_model(model_type).to_dict().items() if v is not None}
    cfg = _tiny(raw)
    if model_type in _AS_DECODER:
        cfg["is_decoder"] = True
    cfg.update(_CAUSAL_SETTINGS.get(model_type, {}))
    arch = architecture_from_config(cfg, model_type)
    fp32 = get_precision("fp32", for_kv=True)
    kv, state = _measure(_run(cfg))
    expected = kv_cache_bytes_per_sequence(arch, fp32, TOKENS, "engine") + _indexer_dtype(arch)
    assert kv == expected, model_type
    assert state == state_bytes_per_sequence(arch, fp32, layout="transformers"), model_type


@pytest.mark.parametrize("model_type", DEFAULT_CONFIG_TYPES)
def test_transformers_default_configs_are_exact(model_type: str) -> None:
    config, model = _default_meta(model_type)
    expected = sum(p.numel() for p in model.parameters())
    arch = architecture_from_config(config.to_dict(), model_type)
    counts = count_params(arch)
    assert counts.total == expected, model_type
    assert counts.active == _reference_active(model, model.config), model_type
    assert not arch.notes, arch.notes


# configs that leave out the per-layer lists transformers derives in __post_init__: gpuplan's
# family rule derives the same layers (compared with the default config's own lists)
DERIVED_SCHEDULES = [
    "afmoe",
    "mimo_v2_flash",
    "olmo_hybrid",
    "laguna",
    "glm_moe_dsa",
    "kimi_linear",
]


@pytest.mark.parametrize("model_type", DERIVED_SCHEDULES)
def test_schedules_derived_without_layer_lists(model_type: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = AutoConfig.for_model(model_type).to_dict()
    bare = {
        k: v
        for k, v in full.items()
        if k not in ("layer_types", "mlp_layer_types", "indexer_types", "head_dim")
        or (k == "head_dim" and "kv_lora_rank" not in full)
    }
    derived, listed = (architecture_from_config(c, model_type) for c in (bare, full))
    assert derived.layers == listed.layers, model_type
    assert count_params(derived).total == count_params(listed).total


def test_kimi_linear_reads_the_checkpoints_nested_linear_attn_config() -> None:
    """Kimi Linear checkpoints nest the KDA shapes and the 1-indexed layer lists in
    linear_attn_config (KimiLinearConfig.__post_init__ reads them the same way)."""
    full = [4, 8, 12, 16, 20, 24, 27]
    nested = {
        "head_dim": 64,
        "num_heads": 16,
        "short_conv_kernel_size": 4,
        "full_attn_layers": full,
        "kda_layers": [i for i in range(1, 28) if i not in full],
    }
    cfg = {"model_type": "kimi_linear", "num_hidden_layers": 27, "linear_attn_config": nested}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(
            "kimi_linear", linear_attn_config=nested, num_hidden_layers=27
        )
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    defaults = {k: v for k, v in config.to_dict().items() if not k.startswith("linear")}
    defaults.pop("layer_types")
    arch = architecture_from_config({**defaults, **cfg}, "kimi-linear")
    counts = count_params(arch)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active == _reference_active(model, model.config)
    mixers = ["attention" if t == "full_attention" else "gated_delta" for t in config.layer_types]
    assert [layer.mixer for layer in arch.layers] == mixers


def test_mimo_v2_flash_reads_the_checkpoints_spelling() -> None:
    """MiMo-V2-Flash's config.json lists its layers as hybrid_layer_pattern (0 full, 1 sliding)
    and moe_layer_freq (0 dense, 1 experts) and spells the sliding layers' shapes (swa_*); the
    reference is transformers built from the same layers spelt its way (layer_types)."""
    pattern = [0, 1, 1, 1, 1, 1] * 2
    experts = [0] + [1] * 11
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(
            "mimo_v2_flash",
            num_hidden_layers=12,
            layer_types=["sliding_attention" if p else "full_attention" for p in pattern],
            mlp_layer_types=["sparse" if e else "dense" for e in experts],
        )
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    cfg = {k: v for k, v in config.to_dict().items() if k not in ("layer_types", "mlp_layer_types")}
    cfg |= {
        "hybrid_layer_pattern": pattern,
        "moe_layer_freq": experts,
        "swa_num_attention_heads": cfg["num_attention_heads"],
        "swa_num_key_value_heads": 2 * cfg["num_key_value_heads"],
        "swa_head_dim": cfg["head_dim"],
        "swa_v_head_dim": cfg["v_head_dim"],
        "add_swa_attention_sink_bias": True,
        "add_full_attention_sink_bias": False,
    }
    counts = count_params(architecture_from_config(cfg, "mimo-v2-flash"))
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active == _reference_active(model, model.config)


def test_kimi_variants_gpuplan_does_not_model_are_refused() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model("kimi_linear").to_dict()
    for key in ("mla_use_output_gate", "attn_res_block_size", "routed_expert_hidden_size"):
        with pytest.raises(GpuplanError, match=key):  # Kimi-K3's other mechanisms
            architecture_from_config({**cfg, key: 8}, "kimi")


@pytest.mark.parametrize(
    ("model_type", "key"), [("lfm3", "layer_types"), ("gpt_neo", "attention_layers")]
)
def test_a_schedule_only_its_list_tells_is_refused_without_it(model_type: str, key: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(model_type).to_dict()
    cfg.pop(key)
    with pytest.raises(GpuplanError, match=f"no '{key}'"):
        architecture_from_config(cfg, model_type)


# unknown families whose configs declare what a Llama-style reading would miss
REFUSED_UNKNOWN = {
    "xlnet": "mem_len",  # two-stream relative attention over a memory
}


@pytest.mark.parametrize(("model_type", "named"), sorted(REFUSED_UNKNOWN.items()))
def test_unknown_families_with_unread_mechanisms_are_refused(model_type: str, named: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type).to_dict()
    with pytest.raises(GpuplanError, match=re.escape(named)):
        architecture_from_config(config, model_type)


# --------------------------------------------------------------------------------------
# Quantisation blocks gpuplan does not read: refused naming their keys
# --------------------------------------------------------------------------------------

_ERNIE = {
    "model_type": "ernie4_5_moe",
    "hidden_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "vocab_size": 1000,
    "intermediate_size": 2048,
}


def test_paddle_mix_quant_over_unquantised_weights_is_read_as_stored() -> None:
    """ERNIE 4.5 Paddle checkpoints: a mix_quant block FastDeploy applies as it loads."""
    qc = {"dense_quant_type": "wint8", "moe_quant_type": "wint4", "quantization": "mix_quant"}
    plain = architecture_from_config(_ERNIE, "ernie")
    arch = architecture_from_config({**_ERNIE, "quantization_config": qc}, "ernie")
    assert arch.quantization is None
    assert count_params(arch).total == count_params(plain).total
    assert any("mix_quant" in note and "'wint4'" in note for note in arch.notes)


def test_paddle_mix_quant_stored_fp8_is_read_and_other_stored_types_are_refused() -> None:
    fp8 = {
        "dense_quant_type": "block_wise_fp8",
        "moe_quant_type": "block_wise_fp8",
        "quantization": "mix_quant",
        "is_quantized": True,
    }
    arch = architecture_from_config({**_ERNIE, "quantization_config": fp8}, "ernie")
    assert arch.quantization is not None and arch.quantization.method == "fp8"
    w4a8 = {**fp8, "dense_quant_type": "wint8", "moe_quant_type": "w4a8"}
    with pytest.raises(GpuplanError, match="dense_quant_type='wint8', moe_quant_type='w4a8'"):
        architecture_from_config({**_ERNIE, "quantization_config": w4a8}, "ernie")


def test_unknown_quantisation_block_is_refused_naming_its_keys() -> None:
    block = {"weight_bits": 3, "scheme": "odd"}
    with pytest.raises(GpuplanError, match="no quant_method .its keys: scheme, weight_bits"):
        architecture_from_config({**_ERNIE, "quantization_config": block}, "ernie")
    block = {"quant_method": "vptq", "nbits": 4}
    with pytest.raises(GpuplanError, match="'vptq' is not supported.*keys: nbits, quant_method"):
        architecture_from_config({**_ERNIE, "quantization_config": block}, "ernie")


# --------------------------------------------------------------------------------------
# Encoder-decoders (engine/encoder_decoder.py): parameters on the meta device, caches of a
# tiny forward pass (self-attention KV per decoder token, cross-attention KV per encoder token)
# --------------------------------------------------------------------------------------

from family_configs import ENCODER_DECODERS  # noqa: E402
from gpuplan.engine.encoder_decoder import encoder_decoder_types  # noqa: E402
from gpuplan.engine.kv_cache import cross_kv_bytes, kv_cache_bytes_per_token  # noqa: E402


def _seq2seq(cfg: dict[str, Any], meta: bool) -> Any:
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    builder = AutoModelForSpeechSeq2Seq if cfg["model_type"] == "whisper" else AutoModelForSeq2SeqLM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if meta:
            with torch.device("meta"):
                return builder.from_config(_hf_config(cfg))
        torch.manual_seed(0)
        return builder.from_config(_hf_config(cfg, "eager")).float().eval()


_ENCDEC_CASES = {
    **{f"default:{t}": {"model_type": t} for t in encoder_decoder_types()},
    **{f"built:{k}": v for k, v in ENCODER_DECODERS.items()},
}


def _full(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config as transformers writes it (defaults filled in), for the default cases."""
    if len(cfg) > 1:
        return cfg
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model(cfg["model_type"]).to_dict()


@pytest.mark.parametrize("case", sorted(_ENCDEC_CASES))
def test_encoder_decoder_params_are_exact(case: str) -> None:
    cfg = _full(_ENCDEC_CASES[case])
    expected = sum(p.numel() for p in _seq2seq(cfg, meta=True).parameters())
    if cfg["model_type"] in ("t5", "mt5") and cfg.get("tie_word_embeddings") is False:
        # T5 v1.1 / Flan-T5 checkpoints store an untied lm_head (flan-t5-base's safetensors hold
        # 247,577,856 parameters); transformers 5's T5Config ties it regardless (its
        # configuration_t5.py says so), so the reference adds it back
        expected += cfg["vocab_size"] * cfg["d_model"]
    counts = count_params(architecture_from_config(cfg, case))
    assert counts.total == expected == counts.active, (case, counts.total, expected)
    assert sum(counts.per_layer) + counts.embedding + counts.lm_head == counts.total


_TINY_ENCDEC = {
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 64,
    "num_heads": 4,
    "num_layers": 2,
    "num_decoder_layers": 3,
    "encoder_layers": 2,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "vocab_size": VOCAB,
    "max_position_embeddings": 64,
    "max_source_positions": 8,
    "max_target_positions": 16,
    "num_mel_bins": 8,
    "pad_token_id": 0,
    "decoder_start_token_id": 1,
}
SOURCE = 5  # encoder tokens of a text encoder-decoder's request


@pytest.mark.parametrize("model_type", encoder_decoder_types())
def test_encoder_decoder_caches_match_a_forward_pass(model_type: str) -> None:
    cfg = {**_full({"model_type": model_type}), **_TINY_ENCDEC}
    cfg = {k: v for k, v in cfg.items() if k in _TINY_ENCDEC or k not in ("bos_token_id",)}
    model = _seq2seq(cfg, meta=False)
    arch = architecture_from_config(cfg, model_type)
    decoder_ids = torch.randint(2, VOCAB, (1, TOKENS))
    if model_type == "whisper":  # the encoder reads 2 x max_source_positions mel frames
        inputs = {"input_features": torch.randn(1, 8, 16)}
        encoder_tokens = 8
    else:
        inputs = {"input_ids": torch.randint(2, VOCAB, (1, SOURCE))}
        encoder_tokens = SOURCE
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model(**inputs, decoder_input_ids=decoder_ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    self_kv, _ = _measure(cache.self_attention_cache)
    cross_kv, _ = _measure(cache.cross_attention_cache)
    fp32 = get_precision("fp32", for_kv=True)
    assert self_kv == kv_cache_bytes_per_token(arch, fp32) * TOKENS
    assert cross_kv == cross_kv_bytes(arch, fp32, encoder_tokens)
    assert arch.encoder is not None and arch.encoder.encoder_tokens in (0, encoder_tokens)


def test_training_an_encoder_decoder_over_tensor_parallelism_is_refused_in_one_line() -> None:
    """Training is modelled over data parallelism (tests/test_encdec_training.py); tp, pp and
    cp splits of the two stacks are refused by name."""
    from gpuplan.catalog import get_gpu
    from gpuplan.catalog.recipes import get_recipe
    from gpuplan.engine.sharding import Layout
    from gpuplan.engine.training import TrainingSetup, validate_training

    arch = architecture_from_config(_full({"model_type": "t5"}), "t5")
    setup = TrainingSetup(arch, get_recipe("adamw-bf16"), get_gpu("h100"), Layout(tp=2))
    with pytest.raises(GpuplanError, match="training an encoder-decoder.*tp=2"):
        validate_training(setup)


def test_kimi_full_rank_gate_replaces_the_low_rank_pair() -> None:
    """Kimi-K3's KDA (linear_attn_config.use_full_rank_gate): transformers 5.24 has no Kimi-K3, so
    the reference is transformers' Kimi Linear with its g_a / g_b modules swapped for the
    h x heads·head_dim g_proj that vLLM's Kimi-K3 KDA builds (read off the built modules)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model("kimi_linear").to_dict()
    model = _build(config, meta=True)
    expected = sum(p.numel() for p in model.parameters())
    hidden = config["hidden_size"]
    for module in model.modules():
        if hasattr(module, "g_a_proj") and hasattr(module, "g_b_proj"):
            expected -= module.g_a_proj.weight.numel() + module.g_b_proj.weight.numel()
            expected += hidden * module.g_b_proj.weight.shape[0]
    nested = {**config, "linear_attn_config": {"use_full_rank_gate": True}}
    assert count_params(architecture_from_config(nested, "kimi-k3-kda")).total == expected
    low_rank = count_params(architecture_from_config(config, "kimi-linear")).total
    assert low_rank == sum(p.numel() for p in model.parameters()) != expected


def test_glm4_moe_without_head_dim_floors_it_as_transformers_does() -> None:
    """Glm4MoeConfig's defaults have 96 heads over hidden 4096 and no head_dim:
    Glm4MoeAttention takes hidden_size // heads (42), and the reading says so in a note."""
    config, model = _default_meta("glm4_moe")
    arch = architecture_from_config(config.to_dict(), "glm4_moe")
    assert count_params(arch).total == sum(p.numel() for p in model.parameters())
    assert count_params(arch).active == _reference_active(model, model.config)
    assert arch.attention.head_dim == model.model.layers[0].self_attn.head_dim
    assert any("head_dim" in note for note in arch.notes)


def test_git_counts_its_image_encoder_with_the_text_model() -> None:
    """GitForCausalLM holds its CLIP-style image encoder and projection (towers.toml [git]):
    the whole model is counted, and the tower's tokens per image are GIT's image_patch_tokens."""
    config, model = _default_meta("git")
    arch = architecture_from_config(config.to_dict(), "git")
    assert count_params(arch).total == sum(p.numel() for p in model.parameters())
    patch_tokens = model.git.encoder.layer[0].attention.self.image_patch_tokens
    assert any(f"adds {patch_tokens} tokens" in note for note in arch.notes)


def test_cpmant_is_exact_and_says_its_prompt_tokens_are_cached() -> None:
    """CpmAntForCausalLM: parameters exact; its forward pass prepends prompt_length prompt
    tokens, so the cache holds TOKENS + prompt_length tokens, which the note says."""
    config, model = _default_meta("cpmant")
    raw = {k: v for k, v in AutoConfig.for_model("cpmant").to_dict().items() if v is not None}
    arch = architecture_from_config(config.to_dict(), "cpmant")
    assert count_params(arch).total == sum(p.numel() for p in model.parameters())
    assert any(f"prepends {config.prompt_length} prompt tokens" in n for n in arch.notes)
    cfg = _tiny(raw)
    tiny = architecture_from_config(cfg, "cpmant")
    kv, _ = _measure(_run(cfg))
    fp32 = get_precision("fp32", for_kv=True)
    tokens = TOKENS + cfg["prompt_length"]
    assert kv == kv_cache_bytes_per_sequence(tiny, fp32, tokens, "engine")


# variants of the families read since issue 22 that gpuplan does not model: refused naming the key
UNMODELLED_VARIANTS = [
    ("doge", {"is_moe": True}, "is_moe"),  # DogeCDMoE: retrieval experts as embedding rows
    ("xmod", {"pre_norm": True}, "pre_norm"),
    ("xlm", {"asm": True}, "asm"),  # an adaptive softmax head
]


@pytest.mark.parametrize(("model_type", "setting", "named"), UNMODELLED_VARIANTS)
def test_unmodelled_variants_are_refused_naming_their_key(
    model_type: str, setting: dict[str, Any], named: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = {**AutoConfig.for_model(model_type).to_dict(), **setting}
    with pytest.raises(GpuplanError, match=re.escape(named)):
        architecture_from_config(config, model_type)
