"""Reference test: gpuplan's parameter counts and KV-cache bytes against `transformers`.

Every expected value here is computed by `transformers` (and torch) from the same config dict
gpuplan reads; no number is pasted in.

* Parameters: `AutoModelForCausalLM.from_config(...)` is built on the `meta` device (shapes, no
  memory) and `sum(p.numel())` must equal `count_params(architecture_from_config(cfg)).total`
  exactly, for every catalog config and for the family configs written below.
* KV cache: a tiny real-weights copy of each config (hidden width, layers, FFN widths and vocab
  shrunk; heads, KV heads, head_dim, MLA ranks and the layer pattern kept) runs one forward of
  T tokens on the CPU, and the K/V tensors transformers caches are summed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from importlib import resources
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    DynamicCache,
    StaticCache,
)
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

from gpuplan.catalog import get_precision, list_models  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402

pytestmark = pytest.mark.reference

# Keys of a config.json that are not constructor arguments of a config class.
_META_KEYS = ("model_type", "architectures", "auto_map", "transformers_version", "_name_or_path")
# model_types transformers does not know, and the config class read for them. gpuplan reads any
# unknown model_type with the standard keys as a Llama-style decoder, so LlamaConfig is the reference.
_REFERENCE_TYPE = {"mycorp_decoder": "llama"}


def _catalog_configs() -> dict[str, dict[str, Any]]:
    """The catalog's decoders (its encoder-decoders: tests/test_encdec_training.py)."""
    data = resources.files("gpuplan.catalog").joinpath("data")
    configs = {
        entry.id: json.loads(data.joinpath(entry.config).read_text("utf-8"))
        for entry in list_models()
    }
    return {k: c for k, c in configs.items() if not c.get("is_encoder_decoder")}


CATALOG = _catalog_configs()


# --------------------------------------------------------------------------------------
# Families beyond the catalog, from their published config.json values
# --------------------------------------------------------------------------------------

_LLAMA_32_1B = {  # meta-llama/Llama-3.2-1B
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}

FAMILIES: dict[str, dict[str, Any]] = {
    # mistralai/Mistral-7B-v0.1: GQA 32/8, every layer slides over 4096 tokens
    "mistral-7b-v0.1": {
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
    },
    # Qwen/Qwen2-7B: bias on q, k, v (not o), GQA 28/4, sliding window configured but unused
    "qwen2-7b": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
        "max_window_layers": 28,
        "sliding_window": 131072,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    # Qwen/Qwen2.5-1.5B, with use_sliding_window switched on (structure variant): layers
    # i >= max_window_layers slide (Qwen2Config.layer_types)
    "qwen2.5-1.5b-swa": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 131072,
        "max_window_layers": 21,
        "sliding_window": 131072,
        "use_sliding_window": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    },
    # google/gemma-2-9b: head_dim 256 != 3584/16, alternating sliding/global, 4 norms per layer, tied
    "gemma-2-9b": {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "intermediate_size": 14336,
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
        "query_pre_attn_scalar": 256,
        "sliding_window": 4096,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "torch_dtype": "float32",
    },
    # google/gemma-3-1b-pt: MQA, head_dim 256 != 1152/4, qk-norm, sliding_window_pattern 6
    "gemma-3-1b": {
        "model_type": "gemma3_text",
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "max_position_embeddings": 32768,
        "query_pre_attn_scalar": 256,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "rope_theta": 1000000,
        "rope_local_base_freq": 10000,
        "rope_scaling": None,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    # google/gemma-3-270m: explicit layer_types (every 6th layer global)
    "gemma-3-270m": {
        "model_type": "gemma3_text",
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "max_position_embeddings": 32768,
        "query_pre_attn_scalar": 256,
        "sliding_window": 512,
        "layer_types": [
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)
        ],
        "rope_theta": 1000000.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    # microsoft/Phi-3-mini-4k-instruct: MHA, fused qkv_proj and gate_up_proj, sliding_window 2047
    "phi-3-mini-4k": {
        "model_type": "phi3",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096,
        "sliding_window": 2047,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "pad_token_id": 32000,
        "bos_token_id": 1,
        "eos_token_id": 32000,
        "torch_dtype": "bfloat16",
    },
    # microsoft/Phi-3-medium-4k-instruct: GQA 40/10
    "phi-3-medium-4k": {
        "model_type": "phi3",
        "hidden_size": 5120,
        "intermediate_size": 17920,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 10,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096,
        "sliding_window": 2047,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "pad_token_id": 32000,
        "bos_token_id": 1,
        "eos_token_id": 32000,
        "torch_dtype": "bfloat16",
    },
    # openai-community/gpt2-medium: GPT-2 key names, n_inner null (= 4 × n_embd), tied
    "gpt2-medium": {
        "model_type": "gpt2",
        "n_embd": 1024,
        "n_layer": 24,
        "n_head": 16,
        "n_inner": None,
        "n_positions": 1024,
        "n_ctx": 1024,
        "vocab_size": 50257,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
    },
    # Qwen/Qwen1.5-MoE-A2.7B: 60 experts top-4, one shared expert with a sigmoid gate, qkv bias
    "qwen1.5-moe-a2.7b": {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 1,
        "norm_topk_prob": False,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 151936,
        "max_position_embeddings": 8192,
        "max_window_layers": 21,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    # Qwen1.5-MoE-A2.7B with decoder_sparse_step 2 and mlp_only_layers (structure variant):
    # MoE on odd layers except those listed, dense intermediate_size MLP elsewhere
    "qwen1.5-moe-sparse-step": {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3, 10],
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 151936,
        "max_position_embeddings": 8192,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    # deepseek-ai/DeepSeek-V2-Lite: MLA with q_lora_rank null (plain q_proj), 2 shared + 64 routed
    "deepseek-v2-lite": {
        "model_type": "deepseek_v2",
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "greedy",
        "norm_topk_prob": False,
        "routed_scaling_factor": 1.0,
        "vocab_size": 102400,
        "max_position_embeddings": 163840,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    # Llama-3.2-1B with attention_bias and mlp_bias on (biases on q, k, v, o, gate, up, down)
    "llama-biases": {**_LLAMA_32_1B, "attention_bias": True, "mlp_bias": True},
    # Llama-3.2-1B as published: tied embeddings (no separate lm_head)
    "llama-tied": {**_LLAMA_32_1B, "tie_word_embeddings": True},
    # An unknown model_type with standard Llama keys: gpuplan reads it Llama-style
    "mycorp-decoder": {
        **{k: v for k, v in _LLAMA_32_1B.items() if k != "head_dim"},
        "model_type": "mycorp_decoder",
        "tie_word_embeddings": False,
    },
}


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _hf_config(cfg: dict[str, Any], attn_implementation: str | None = None) -> Any:
    """The transformers config class for `cfg`, built from exactly the same keys."""
    model_type = _REFERENCE_TYPE.get(cfg["model_type"], cfg["model_type"])
    kwargs = {k: v for k, v in cfg.items() if k not in _META_KEYS}
    config = AutoConfig.for_model(model_type, **kwargs)
    if attn_implementation:
        config._attn_implementation = attn_implementation
    return config


def _sizing_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A copy without `quantization_config`: sizes, not storage formats, are compared."""
    cfg = copy.deepcopy(cfg)
    cfg.pop("quantization_config", None)
    return cfg


def _meta_param_count(cfg: dict[str, Any]) -> int:
    """Vision-language checkpoints (a `vision_config`) are built whole, image encoder included."""
    builder = AutoModelForImageTextToText if "vision_config" in cfg else AutoModelForCausalLM
    with torch.device("meta"):
        model = builder.from_config(_hf_config(cfg))
    return sum(p.numel() for p in model.parameters())


def _assert_exact_params(cfg: dict[str, Any], name: str) -> None:
    cfg = _sizing_config(cfg)
    expected = _meta_param_count(cfg)
    counts = count_params(architecture_from_config(cfg, name))
    assert counts.total == expected, (
        f"{name}: gpuplan {counts.total:,} != transformers {expected:,}"
    )
    assert sum(counts.by_kind.values()) == counts.total
    vision = counts.by_kind.get("vision", 0)
    assert sum(counts.per_layer) + counts.embedding + counts.lm_head + vision == counts.total


# --------------------------------------------------------------------------------------
# 1 + 2. Exact parameter counts on the meta device
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_catalog_param_count_is_exact(model_id: str) -> None:
    """Every catalog config at full size (all layers: building on `meta` allocates nothing, so
    even Llama-3.1-405B, DeepSeek-V3 and Qwen3-235B build in well under a second; no layer
    count is shrunk). `quantization_config` is dropped before both sides read the config."""
    _assert_exact_params(CATALOG[model_id], model_id)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_param_count_is_exact(family: str) -> None:
    """Families beyond the catalog, from their published config values, at full size."""
    _assert_exact_params(FAMILIES[family], family)


# --------------------------------------------------------------------------------------
# 3. KV-cache bytes against the caches transformers fills
# --------------------------------------------------------------------------------------

TINY_HIDDEN = 64
TINY_FFN = 32
TINY_VOCAB = 128
TINY_WINDOW = 4  # sliding window of the tiny models
SHORT_T = 3  # shorter than the window: every layer caches all T tokens
LONG_T = 9  # longer than the window: sliding layers are capped

_TOKEN_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id")
_FFN_KEYS = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size")


def _tiny(cfg: dict[str, Any]) -> dict[str, Any]:
    """A small copy of `cfg` that keeps everything the KV cache depends on.

    Kept: num_attention_heads, num_key_value_heads, head_dim (written out when the config derived
    it from hidden_size, except GPT-2 whose head_dim is always n_embd / n_head and which is
    small anyway), MLA's kv_lora_rank / qk_*_head_dim / v_head_dim, expert counts and the layer
    pattern (layer_types sliced; enough layers for DeepSeek's first_k_dense_replace, Gemma 3's
    pattern of 6 and Qwen2's max_window_layers). Shrunk: hidden width, FFN widths, vocabulary,
    layer count, and any sliding window to TINY_WINDOW.
    """
    cfg = _sizing_config(cfg)
    if isinstance(cfg.get("text_config"), dict):  # a VLM: its KV cache is its language model's
        cfg = {**cfg["text_config"], "torch_dtype": cfg.get("torch_dtype", "bfloat16")}
        cfg.setdefault("model_type", "llama")
    for key in _TOKEN_KEYS:  # token ids of the real vocabulary would not fit the tiny one
        cfg[key] = None
    cfg["vocab_size"] = TINY_VOCAB
    model_type = cfg["model_type"]
    layers = 4
    if cfg.get("first_k_dense_replace"):
        layers = cfg["first_k_dense_replace"] + 2
    if model_type.startswith("gemma3"):
        layers = 7  # six sliding layers, then a global one, then sliding again
    if model_type == "gpt2":
        cfg["n_layer"] = layers
        cfg["n_positions"] = 64
        return cfg
    heads = cfg["num_attention_heads"]
    if cfg.get("kv_lora_rank") is None and cfg.get("head_dim") is None:
        cfg["head_dim"] = cfg["hidden_size"] // heads
    if cfg.get("q_lora_rank"):
        cfg["q_lora_rank"] = 32
    # Most config classes validate hidden_size % num_attention_heads == 0.
    cfg["hidden_size"] = heads * max(1, TINY_HIDDEN // heads)
    for key in _FFN_KEYS:
        if cfg.get(key):
            cfg[key] = TINY_FFN
    if isinstance(cfg.get("layer_types"), list):
        cfg["layer_types"] = cfg["layer_types"][:layers]
    if cfg.get("max_window_layers") is not None and cfg.get("use_sliding_window"):
        cfg["max_window_layers"] = layers // 2
    if cfg.get("mlp_only_layers"):
        cfg["mlp_only_layers"] = [0]
    cfg["num_hidden_layers"] = layers
    if cfg.get("sliding_window"):
        cfg["sliding_window"] = TINY_WINDOW
    if cfg.get("attention_chunk_size"):  # Llama 4's chunked local attention caps like a window
        cfg["attention_chunk_size"] = TINY_WINDOW
    return cfg


def _run(cfg: dict[str, Any], tokens: int, dtype: Any, cache: Any = None) -> tuple[Any, Any]:
    """One forward of `tokens` tokens on a tiny real-weights model; returns (model, its cache)."""
    torch.manual_seed(0)
    hf = _hf_config(cfg, attn_implementation="eager")
    model = AutoModelForCausalLM.from_config(hf).to(dtype).eval()
    ids = torch.randint(0, TINY_VOCAB, (1, tokens))
    # transformers 5 renamed `past_key_values` to `cache`
    new_api = "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    cache_kw = "cache" if new_api else "past_key_values"
    kwargs = {cache_kw: cache} if cache is not None else {}
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **kwargs)
    return model, getattr(out, cache_kw)


def _layer_bytes(layer: Any) -> int:
    return sum(t.numel() * t.element_size() for t in (layer.keys, layer.values))


def _layer_tokens(layer: Any) -> int:
    assert layer.keys.shape[-2] == layer.values.shape[-2]
    return layer.keys.shape[-2]


_KV_CASES = {
    **{f"catalog:{k}": v for k, v in CATALOG.items()},
    **{f"family:{k}": v for k, v in FAMILIES.items()},
}
_MLA_CASES = sorted(k for k, v in _KV_CASES.items() if v.get("kv_lora_rank") is not None)
_DENSE_KV_CASES = sorted(k for k in _KV_CASES if k not in _MLA_CASES)
# (torch dtype, gpuplan precision id): fp32 everywhere, bf16 for a few
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_BF16_CASES = ("catalog:llama-3.1-8b", "family:gemma-2-9b", "catalog:gpt-oss-20b")


def _dense_kv_params() -> list[Any]:
    params = [pytest.param(k, "fp32", id=f"{k}-fp32") for k in _DENSE_KV_CASES]
    params += [pytest.param(k, "bf16", id=f"{k}-bf16") for k in _BF16_CASES if k in _KV_CASES]
    return params


@pytest.mark.parametrize(("case", "dtype"), _dense_kv_params())
def test_kv_bytes_match_transformers_cache(case: str, dtype: str) -> None:
    """K and V that transformers caches for T tokens == gpuplan's KV bytes for a T-token sequence.

    Short sequence (T < window): DynamicCache holds all T tokens on every layer, K and V of
    num_key_value_heads × head_dim each, so bytes = T × gpuplan's bytes per token.

    Long sequence (T > window), what transformers does on sliding-window layers
    (transformers/cache_utils.py):
    * StaticCache allocates StaticSlidingWindowLayer buffers of min(max_cache_len, window) tokens
      and StaticLayer buffers of max_cache_len on full layers: exactly gpuplan's
      Σ_layers min(T, window), which is also what serving engines reserve per sequence.
    * DynamicCache's DynamicSlidingWindowLayer keeps only the last window − 1 tokens (the next
      token attends to those and itself), one token fewer than the static buffer.
    """
    cfg = _tiny(_KV_CASES[case])
    arch = architecture_from_config(cfg, case)
    precision = get_precision(dtype, for_kv=True)
    torch_dtype = _DTYPES[dtype]

    # Short: every layer caches all SHORT_T tokens.
    model, cache = _run(cfg, SHORT_T, torch_dtype)
    assert all(_layer_tokens(layer) == SHORT_T for layer in cache.layers)
    got = sum(_layer_bytes(layer) for layer in cache.layers)
    assert got == kv_cache_bytes_per_sequence(arch, precision, context=SHORT_T)

    # Long: the static buffers transformers allocates, capped at the window on sliding layers.
    static = StaticCache(config=model.config, max_cache_len=LONG_T)
    _, static = _run(cfg, LONG_T, torch_dtype, cache=static)
    got = sum(_layer_bytes(layer) for layer in static.layers)
    assert got == kv_cache_bytes_per_sequence(arch, precision, context=LONG_T)
    sliding = [getattr(layer, "is_sliding", False) for layer in static.layers]
    assert sliding == [layer.sliding_window is not None for layer in arch.layers]

    # Long, dynamic: sliding layers keep window − 1 tokens, full layers all of them.
    _, dynamic = _run(cfg, LONG_T, torch_dtype, cache=DynamicCache(config=model.config))
    for layer, spec in zip(dynamic.layers, arch.layers, strict=True):
        expected = LONG_T if spec.sliding_window is None else layer.sliding_window - 1
        assert spec.sliding_window is None or spec.sliding_window == layer.sliding_window
        assert _layer_tokens(layer) == expected


@pytest.mark.parametrize("case", _MLA_CASES)
def test_mla_kv_bytes(case: str) -> None:
    """Multi-head latent attention (DeepSeek V2/V3): both of gpuplan's layouts.

    layout="engine" is what serving engines (vLLM's MLA backends, SGLang) store: the compressed
    latent c_KV plus the shared RoPE key, i.e. the output of kv_a_proj_with_mqa,
    (kv_lora_rank + qk_rope_head_dim) per layer and token. layout="expanded" is the per-head K
    (qk_nope + qk_rope) and V (v_head_dim) of all num_attention_heads.

    What transformers caches depends on its version. transformers 5.x DeepseekV2/V3Attention
    ("Cache read / write is performed while latent KV is still compressed") puts the latent in
    the cache (kv_nope as `keys`, k_rot as `values`) and expands it per step with `expand_kv`;
    then the cache must equal layout="engine" and the tensors `expand_kv` returns must equal
    layout="expanded". Earlier versions cached the expanded K and V, and then the cache must
    equal layout="expanded" and kv_a_proj_with_mqa's width gives layout="engine".
    """
    cfg = _tiny(_KV_CASES[case])
    arch = architecture_from_config(cfg, case)
    precision = get_precision("fp32", for_kv=True)
    model, cache = _run(cfg, SHORT_T, torch.float32)
    assert all(_layer_tokens(layer) == SHORT_T for layer in cache.layers)
    cached = sum(_layer_bytes(layer) for layer in cache.layers)
    engine = kv_cache_bytes_per_sequence(arch, precision, SHORT_T, layout="engine")
    expanded = kv_cache_bytes_per_sequence(arch, precision, SHORT_T, layout="expanded")

    attentions = [layer.self_attn for layer in model.model.layers]
    element = torch.tensor([], dtype=torch.float32).element_size()
    latent_width = sum(a.kv_a_proj_with_mqa.out_features for a in attentions)
    assert latent_width * SHORT_T * element == engine
    if hasattr(attentions[0], "expand_kv"):  # transformers caches the latent
        assert cached == engine
        with torch.no_grad():
            full = [
                a.expand_kv(c.keys, c.values) for a, c in zip(attentions, cache.layers, strict=True)
            ]
        materialised = sum(
            k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in full
        )
        assert materialised == expanded
    else:  # transformers caches per-head K and V
        assert cached == expanded
