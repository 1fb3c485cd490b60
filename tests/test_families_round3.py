"""Issue 22, round 3: the families the issue names, each read from a real config.

Every expected value comes from transformers (the model built on the meta device, the cache of a
tiny copy's forward pass on the CPU) or from the config itself; the helpers are
tests/test_families.py's. The configs are those of tests/family_configs.py (each with its
source there) and the files of tests/data/configs/round3/ (sources in tests/data/configs/SOURCES.md).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from family_configs import BUILT, real_configs  # noqa: E402
from gpuplan.catalog import get_precision  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402
from gpuplan.engine.kv_cache import kv_cache_bytes_per_sequence  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.state_cache import state_bytes_per_sequence  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from test_families import (  # noqa: E402
    _build,
    _measure,
    _reference_active,
    _run,
    _tiny,
)

pytestmark = pytest.mark.reference

ROUND3 = Path(__file__).parent / "data" / "configs" / "round3"
REAL = real_configs()
TOKENS = 3


def _file(name: str) -> dict[str, Any]:
    return json.loads((ROUND3 / f"{name}.json").read_text("utf-8"))


def _assert_exact(cfg: dict[str, Any], reference: dict[str, Any], name: str) -> None:
    """gpuplan's reading of `cfg` has exactly the parameters (total and active) of transformers'
    model built from `reference` (the same checkpoint spelt as transformers spells it)."""
    model = _build(reference, meta=True)
    counts = count_params(architecture_from_config(cfg, name))
    assert counts.total == sum(p.numel() for p in model.parameters()), name
    assert counts.active == _reference_active(model, model.config), name


def _assert_cache(cfg: dict[str, Any], name: str) -> None:
    """A tiny copy's forward pass caches exactly gpuplan's KV and state bytes."""
    tiny = _tiny(cfg)
    if "mamba_headdim" in tiny:  # Zyphra's keys: heads follow from the head width
        tiny.pop("n_mamba_heads", None)
        tiny["mamba_headdim"] = 8
    arch = architecture_from_config(tiny, name)
    fp32 = get_precision("fp32", for_kv=True)
    kv, state = _measure(_run(tiny))
    assert kv == kv_cache_bytes_per_sequence(arch, fp32, TOKENS, "engine"), name
    assert state == state_bytes_per_sequence(arch, fp32, layout="transformers"), name


def _hf_config(model_type: str, **settings: Any) -> Any:
    """transformers' config class of `model_type` with `settings` over its defaults."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model(model_type, **settings)


def _tiny_run(config: Any, dtype: str, **inputs: Any) -> tuple[Any, Any]:
    """A tiny model of `config` in `dtype` (fp32 / bf16), seeded, and its output after one
    forward pass of TOKENS tokens with the cache on (`inputs`: e.g. a cache object)."""
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).to(torch_dtype).eval()
        with torch.no_grad():
            ids = torch.randint(0, config.vocab_size, (1, TOKENS))
            return model, model(input_ids=ids, use_cache=True, **inputs)


def _meta_causal_lm(config: Any) -> Any:
    """transformers' causal LM for `config`, built on the meta device (no weights allocated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)


# --------------------------------------------------------------------------------------
# Families sized exactly: parameters and caches
# --------------------------------------------------------------------------------------

NAMED = {
    "jetmoe": BUILT["jetmoe-8b"],
    "step3p7": BUILT["step-3.7-flash"],
    "zamba2 (transformers' keys)": BUILT["zamba2-2.7b"],
    "zamba2 (Zyphra's keys)": REAL["mlstm_kernels--zamba2-7b"],
    "exaone4_5": BUILT["exaone-4.5-33b"],
    "hy_v3 (HunYuan 3)": BUILT["hy3-preview"],
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_family_parameters_are_exact(name: str) -> None:
    _assert_exact(NAMED[name], NAMED[name], name)


@pytest.mark.parametrize("name", [n for n in sorted(NAMED) if "vision_config" not in NAMED[n]])
def test_named_family_caches_match_a_forward_pass(name: str) -> None:
    _assert_cache(NAMED[name], name)


def test_exaone_4_5_beta_config_is_read_as_the_release() -> None:
    """EXAONE 4.5's beta config.json (TensorRT-LLM's copy) spells its text model_type
    exaone4_vl_text and carries num_kv_heads beside num_key_value_heads: read as the release
    (exaone4_5_text), whose transformers model is the reference."""
    beta = _file("trtllm--exaone-4.5-33b-beta")
    release = {k: copy.deepcopy(beta[k]) for k in ("model_type", "text_config", "vision_config")}
    release["text_config"]["model_type"] = "exaone4_5_text"  # the beta's top-level text keys and
    release["text_config"].pop("num_kv_heads")  # num_kv_heads: not Exaone4_5_Config's
    _assert_exact(beta, release, "exaone-4.5-33b-beta")
    # its text model is EXAONE 4's (Exaone4_5_Config's text_config is an Exaone4Config)
    text = {**release["text_config"], "model_type": "exaone4", "num_hidden_layers": 4}
    text["layer_types"] = text["layer_types"][:4]
    _assert_cache(text, "exaone-4.5-text")


def _minimax_m3_text() -> dict[str, Any]:
    return _file("mlx--minimax-m3")["text_config"]


def _as_transformers(text: dict[str, Any]) -> dict[str, Any]:
    """MiniMax-M3's checkpoint spelling (model_type minimax_m3) as transformers' class reads it."""
    return {**text, "model_type": "minimax_m3_vl_text"}


def test_minimax_m3_checkpoint_spelling_is_read() -> None:
    """MiniMaxAI/MiniMax-M3's text config is model_type `minimax_m3` (transformers:
    minimax_m3_vl_text); without sparse_attention_freq every layer is full attention
    (MiniMaxM3VLTextConfig.__post_init__), sized exactly, and so is its cache."""
    text = _minimax_m3_text()
    _assert_exact(text, _as_transformers(text), "minimax-m3")
    tiny = {**text, "num_local_experts": 8, "num_experts_per_tok": 2}
    for key in ("sparse_attention_config", "model_type", "architectures"):
        tiny.pop(key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defaults = AutoConfig.for_model("minimax_m3_vl_text", **tiny).to_dict()
    _assert_cache({k: v for k, v in defaults.items() if v is not None}, "minimax-m3")


def test_minimax_m3_sparse_layers_are_refused_naming_the_key() -> None:
    """Sparse layers (a lightning indexer, MiniMaxM3VLIndexer) are not modelled: a config whose
    sparse_attention_freq marks any is refused in one line naming that key."""
    text = _minimax_m3_text()
    sparse = {**text["sparse_attention_config"], "sparse_attention_freq": [0, 1] * 30}
    with pytest.raises(GpuplanError, match="sparse_attention_config.sparse_attention_freq"):
        architecture_from_config({**text, "sparse_attention_config": sparse}, "minimax-m3")


# --------------------------------------------------------------------------------------
# Kimi-K3's Kimi Delta Attention with a full-rank output gate
# --------------------------------------------------------------------------------------

# vLLM's Kimi tiny test overrides (tests of the Kimi-Linear DCP path; SOURCES.md): a
# Kimi-K3-style linear_attn_config with use_full_rank_gate, over Kimi Linear's defaults
_K3_LINEAR = {
    "full_attn_layers": [4],
    "head_dim": 128,
    "kda_layers": [1, 2, 3],
    "num_heads": 8,
    "short_conv_kernel_size": 4,
    "use_full_rank_gate": True,
}
_K3_TEXT = {
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "vocab_size": 256,
    "hidden_size": 256,
    "head_dim": 32,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "q_lora_rank": 128,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "mla_use_nope": True,
    "max_position_embeddings": 512,
}


def test_kimi_k3_full_rank_gate_is_exact() -> None:
    """transformers 5.24 has no Kimi-K3: the reference is Kimi Linear built from the same config
    with each KDA layer's g_a / g_b pair replaced by the hidden x heads·head_dim g_proj that
    vLLM's Kimi-K3 KDA holds (shapes read off the built modules)."""
    low_rank = {**_K3_LINEAR, "use_full_rank_gate": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model("kimi_linear", **_K3_TEXT, linear_attn_config=low_rank)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    expected = sum(p.numel() for p in model.parameters())
    for module in model.modules():
        if hasattr(module, "g_a_proj") and hasattr(module, "g_b_proj"):
            expected -= module.g_a_proj.weight.numel() + module.g_b_proj.weight.numel()
            expected += _K3_TEXT["hidden_size"] * module.g_b_proj.weight.shape[0]
    cfg = {**config.to_dict(), "linear_attn_config": _K3_LINEAR}
    cfg.pop("layer_types")
    counts = count_params(architecture_from_config(cfg, "kimi-k3-kda"))
    assert counts.total == expected


def test_kimi_k3_gated_mla_is_refused_naming_the_key() -> None:
    """The same overrides carry Kimi-K3's gated MLA output (mla_use_output_gate), which gpuplan
    does not model: refused in one line naming it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model("kimi_linear", **_K3_TEXT).to_dict()
    cfg = {**config, "linear_attn_config": _K3_LINEAR, "mla_use_output_gate": True}
    with pytest.raises(GpuplanError, match="mla_use_output_gate"):
        architecture_from_config(cfg, "kimi-k3")


# --------------------------------------------------------------------------------------
# ERNIE with a Paddle mix_quant block
# --------------------------------------------------------------------------------------

# the block PaddlePaddle's fp8 conversion script writes into an ERNIE 4.5 config.json beside
# tensor-wise fp8 weights (SOURCES.md)
_FASTDEPLOY_FP8 = {
    "dense_quant_type": "tensor_wise_fp8",
    "moe_quant_type": "tensor_wise_fp8",
    "quantization": "mix_quant",
    "kv_cache_quant_type": "float8_e4m3",
    "is_quantized": True,
}
_ERNIE = BUILT["ernie-4.5-21b-a3b"]


def test_ernie_stored_fp8_mix_quant_is_read_as_stored() -> None:
    """Stored fp8 weights, one scale per tensor: the linear weights of the layers and experts
    are 1 byte each; the same parameters as the unquantised checkpoint."""
    plain = architecture_from_config(_ERNIE, "ernie")
    arch = architecture_from_config({**_ERNIE, "quantization_config": _FASTDEPLOY_FP8}, "ernie")
    assert arch.quantization is not None
    assert arch.quantization.method == "fp8" and "tensor_wise_fp8" in arch.quantization.source
    layout = arch.quantization.layout
    assert layout is not None and layout.bits == 8 and layout.scope == "linear"
    assert count_params(arch).total == count_params(plain).total


def test_ernie_mix_quant_loaded_quantisation_is_read_as_stored() -> None:
    """Without is_quantized the checkpoint stores bf16 weights that FastDeploy quantises as it
    loads: read as stored, and a note names the block's keys and values (never "method
    '(none)'")."""
    block = {k: v for k, v in _FASTDEPLOY_FP8.items() if k != "is_quantized"}
    block |= {"dense_quant_type": "wint8", "moe_quant_type": "wint4"}
    arch = architecture_from_config({**_ERNIE, "quantization_config": block}, "ernie")
    assert arch.quantization is None
    note = " ".join(arch.notes)
    assert "mix_quant" in note and "'wint8'" in note and "'wint4'" in note
    assert "(none)" not in note


def test_ernie_mix_quant_unread_stored_types_are_refused_naming_the_keys() -> None:
    block = {**_FASTDEPLOY_FP8, "moe_quant_type": "w4a8"}
    with pytest.raises(GpuplanError) as err:
        architecture_from_config({**_ERNIE, "quantization_config": block}, "ernie")
    message = str(err.value)
    assert "\n" not in message and "(none)" not in message
    for named in ("dense_quant_type='tensor_wise_fp8'", "moe_quant_type='w4a8'", "float8_e4m3"):
        assert named in message


# --------------------------------------------------------------------------------------
# RWKV-4 (families.toml [rwkv]): parameters on the meta device, states of a forward pass
# --------------------------------------------------------------------------------------

# RWKV-4 Pile checkpoints' shapes (Peng et al. 2023, the RWKV paper's model table; RWKV/rwkv-4-*
# -pile on the Hub): layers x width; the vocabulary and context of the Pile tokenizer
_RWKV4 = {"169m": (12, 768), "430m": (24, 1024), "1b5": (24, 2048), "14b": (40, 5120)}


@pytest.mark.parametrize("size", ["default", *_RWKV4])
def test_rwkv_parameters_are_exact(size: str) -> None:
    settings: dict[str, Any] = {}
    if size != "default":
        layers, width = _RWKV4[size]
        settings = {"num_hidden_layers": layers, "hidden_size": width, "vocab_size": 50277}
    config = _hf_config("rwkv", **settings)
    model = _meta_causal_lm(config)
    arch = architecture_from_config(config.to_dict(), f"rwkv-4-{size}")
    counts = count_params(arch)
    assert counts.total == counts.active == sum(p.numel() for p in model.parameters())
    assert arch.num_state_layers == config.num_hidden_layers


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_rwkv_state_matches_a_forward_pass(dtype: str) -> None:
    """RwkvModel's five states per layer (token shifts in the model dtype, WKV numerator,
    denominator and maximum in float32) equal gpuplan's state bytes; nothing is cached per
    token."""
    config = _hf_config(
        "rwkv", hidden_size=32, num_hidden_layers=3, vocab_size=128, context_length=64
    )
    _, out = _tiny_run(config, dtype)
    measured = sum(t.numel() * t.element_size() for t in out.state)
    arch = architecture_from_config(config.to_dict(), "rwkv-tiny")
    precision = get_precision(dtype, for_kv=True)
    assert measured == state_bytes_per_sequence(arch, precision, layout="transformers")
    assert kv_cache_bytes_per_sequence(arch, precision, TOKENS, "engine") == 0


# --------------------------------------------------------------------------------------
# RecurrentGemma (families.toml [recurrent_gemma]): RG-LRU blocks beside local attention
# --------------------------------------------------------------------------------------

# google/recurrentgemma-2b and -9b as their config.json files set them (RecurrentGemma report,
# Botev et al. 2024): width, depth and heads; one KV head; intermediate_size = 6 x width (gate and
# up together); lru_width = width; a 2,048-token local attention window
_RECURRENT_GEMMA = {
    "2b": {"hidden_size": 2560, "num_hidden_layers": 26, "num_attention_heads": 10},
    "9b": {"hidden_size": 4096, "num_hidden_layers": 38, "num_attention_heads": 16},
}


@pytest.mark.parametrize("size", ["default", *_RECURRENT_GEMMA])
def test_recurrent_gemma_parameters_are_exact(size: str) -> None:
    settings: dict[str, Any] = {}
    if size != "default":
        shape = _RECURRENT_GEMMA[size]
        width = shape["hidden_size"]
        settings = {
            **shape,
            "lru_width": width,
            "intermediate_size": 6 * width,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "attention_window_size": 2048,
            "vocab_size": 256000,
        }
    config = _hf_config("recurrent_gemma", **settings)
    model = _meta_causal_lm(config)
    arch = architecture_from_config(config.to_dict(), f"recurrentgemma-{size}")
    counts = count_params(arch)
    assert counts.total == counts.active == sum(p.numel() for p in model.parameters())
    kinds = ["rglru" if t == "linear_attention" else "attention" for t in config.layers_block_type]
    assert [layer.mixer for layer in arch.layers] == kinds
    assert {layer.sliding_window for layer in arch.layers if layer.has_attention} == {
        config.attention_window_size
    }


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_recurrent_gemma_caches_match_a_forward_pass(dtype: str) -> None:
    """A tiny RecurrentGemma (lru_width unlike hidden_size, MQA) run on the CPU: its attention
    layers' K and V (DynamicCache) equal gpuplan's KV bytes; its recurrent blocks' conv1d_state
    (the last conv1d_width - 1 inputs, model dtype) and RG-LRU recurrent_states (float32) equal
    gpuplan's state bytes."""
    from transformers import DynamicCache

    config = _hf_config(
        "recurrent_gemma",
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        lru_width=48,
        num_hidden_layers=3,
        vocab_size=128,
        attention_window_size=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config._attn_implementation = "eager"
    cache = DynamicCache(config=config)
    model, _ = _tiny_run(config, dtype, cache=cache)
    kv, _ = _measure(cache)
    blocks = [layer.temporal_block for layer in model.model.layers]
    states = [
        t
        for b in blocks
        if hasattr(b, "rg_lru")
        for t in (b.conv1d_state, b.rg_lru.recurrent_states)
    ]
    arch = architecture_from_config(config.to_dict(), "recurrentgemma-tiny")
    precision = get_precision(dtype, for_kv=True)
    assert kv == kv_cache_bytes_per_sequence(arch, precision, TOKENS, "engine")
    measured = sum(t.numel() * t.element_size() for t in states)
    assert measured == state_bytes_per_sequence(arch, precision, layout="transformers")


# --------------------------------------------------------------------------------------
# xLSTM (families.toml [xlstm]): mLSTM blocks with a matrix memory per head
# --------------------------------------------------------------------------------------


# xLSTMConfig's defaults mirror NX-AI/xLSTM-7b; the variants switch what changes the modules
@pytest.mark.parametrize(
    "settings", [{}, {"use_bias": True}, {"weight_mode": "fused"}, {"num_heads": 16}]
)
def test_xlstm_parameters_are_exact(settings: dict[str, Any]) -> None:
    config = _hf_config("xlstm", **settings)
    model = _meta_causal_lm(config)
    counts = count_params(architecture_from_config(config.to_dict(), "xlstm-7b"))
    assert counts.total == counts.active == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_xlstm_state_matches_a_forward_pass(dtype: str) -> None:
    """xLSTMCache's C, n and m per layer and head (in the model dtype) equal gpuplan's state
    bytes; no KV cache. Widths are multiples of 64 (xLSTMCache rounds them up, the layers do
    not)."""
    config = _hf_config(
        "xlstm",
        hidden_size=256,
        embedding_dim=256,
        num_heads=4,
        num_hidden_layers=2,
        vocab_size=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    _, out = _tiny_run(config, dtype)
    states = out["cache"].rnn_state.values()
    measured = sum(t.numel() * t.element_size() for layer in states for t in layer)
    arch = architecture_from_config(config.to_dict(), "xlstm-tiny")
    precision = get_precision(dtype, for_kv=True)
    assert measured == state_bytes_per_sequence(arch, precision, layout="transformers")
    assert kv_cache_bytes_per_sequence(arch, precision, TOKENS, "engine") == 0


# --------------------------------------------------------------------------------------
# Families still not modelled: refused in one line naming the mechanism's key
# --------------------------------------------------------------------------------------

NOT_MODELLED = {
    "zaya": "cca_time0",
    "dory": "n_recurrent_loops",
    "inkling_text": "d_rel",
    "inkling2_text": "d_rel",
    "inkling2_loop_text": "loop_num_passes",
    "hrm_text": "H_cycles",
    "blt": "patcher_config",
}


@pytest.mark.parametrize(("model_type", "named"), sorted(NOT_MODELLED.items()))
def test_unmodelled_families_are_refused_naming_the_key(model_type: str, named: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type).to_dict()
    with pytest.raises(GpuplanError, match=f"'{named}'") as err:
        architecture_from_config(config, model_type)
    assert "\n" not in str(err.value)
