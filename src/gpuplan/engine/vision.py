"""Parameters of a vision-language model's image encoder and projector.

Engines load the whole checkpoint of a VLM (vLLM's Gemma3ForConditionalGeneration,
LlavaForConditionalGeneration, Mistral3ForConditionalGeneration, Qwen2_5_VLForConditionalGeneration
…), so the encoder's weights count against GPU memory even for text-only traffic. The encoders are
ViTs (Dosovitskiy et al. 2021 §3.1): per layer q, k, v, o (fused or not, with biases), an MLP and
two norms, plus a patch embedding, position table and a projector into the text model. Counted
from `vision_config` as transformers builds these modules:

* SigLIP (Gemma 3, PaliGemma), CLIP-style LLaVA towers and Pixtral (Mistral 3): patch embedding
  3·p²·h (+ bias or ln_pre), a learned position table for SigLIP, projector per model;
* Llama 4: unfold patch embedding, class token, pixel-shuffle adapter (its own count);
* Qwen2-VL: conv3d patch embedding (c·t·p²·e), LayerNorm blocks with fused qkv and an fc1/fc2 MLP
  of mlp_ratio·e, the patch merger (LayerNorm, two linears over s²·e);
* Qwen2.5-VL: RMSNorm blocks with a gated MLP (biases) of intermediate_size, RMSNorm merger;
* Qwen3-VL: patch embedding with bias, a learned position table, LayerNorm blocks (fc1/fc2), the
  merger and one DeepStack merger per `deepstack_visual_indexes` entry.

Every field is read through engine/config_schema.py: a bad value fails naming `vision_config.<key>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.engine.config_schema import ConfigView
from gpuplan.errors import GpuplanError

# canonical vision fields -> their spellings in vision_config (rules in config_schema.FIELDS)
_KEYS: dict[str, tuple[str, ...]] = {
    "vision_hidden_size": ("hidden_size", "embed_dim"),
    "vision_embed_dim": ("embed_dim", "hidden_size"),
    "vision_layers": ("num_hidden_layers", "depth"),
    "vision_intermediate_size": ("intermediate_size",),
    "vision_patch_size": ("patch_size", "spatial_patch_size"),
    "vision_channels": ("num_channels", "in_channels", "in_chans"),
    "vision_image_size": ("image_size",),
    "vision_temporal_patch_size": ("temporal_patch_size",),
    "vision_merge_size": ("spatial_merge_size",),
    "vision_out_hidden_size": ("out_hidden_size",),
    "vision_mlp_ratio": ("mlp_ratio",),
    "vision_positions": ("num_position_embeddings",),
    "vision_deepstack": ("deepstack_visual_indexes",),
    "projector_input_dim": ("projector_input_dim",),
    "projector_output_dim": ("projector_output_dim",),
    "vision_output_dim": ("vision_output_dim",),
}
_DEFAULTS: dict[str, Any] = {
    "vision_intermediate_size": "4*vision_hidden_size",
    "vision_layers": 0,
    "vision_patch_size": 14,
    "vision_channels": 3,
    "vision_temporal_patch_size": 2,
    "vision_merge_size": 2,
    "vision_mlp_ratio": 4,
    "vision_deepstack": (),
}
_QWEN_VL = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_vl_vision": "qwen2_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen2_5_vl_vision": "qwen2_5_vl",
    "qwen3_vl": "qwen3_vl",
    "qwen3_vl_vision": "qwen3_vl",
    "qwen3_vl_moe": "qwen3_vl",
    "qwen3_vl_moe_vision": "qwen3_vl",
}


def vision_encoder_params(config: Mapping[str, Any], name: str = "model") -> int:
    """Encoder + projector parameters of a VLM config.json (0 when it has no `vision_config`)."""
    raw = config.get("vision_config")
    if raw is None:
        return 0
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{name}: config field 'vision_config' must be a JSON object")
    if not any(k in raw for k in ("hidden_size", "embed_dim")):
        return 0
    v = ConfigView(raw, f"{name}: vision_config", _KEYS, _DEFAULTS)
    kind = str(raw.get("model_type") or "")
    outer = str(config.get("model_type") or "")
    text = _text_hidden(config, v)
    qwen = _QWEN_VL.get(kind) or _QWEN_VL.get(outer)
    if qwen == "qwen2_vl":
        return _qwen2_vl(v)
    if qwen == "qwen2_5_vl":
        return _qwen2_5_vl(v, text)
    if qwen == "qwen3_vl":
        return _qwen3_vl(v, text)
    if kind == "llama4_vision_model":
        return _llama4_vision_params(config, v, text)
    return _vit(config, v, kind, text)


def _text_hidden(config: Mapping[str, Any], v: ConfigView) -> int:
    text = config.get("text_config")
    view = ConfigView(
        text if isinstance(text, Mapping) else config,
        f"{v.name.split(':')[0]}",
        {"hidden_size": ("hidden_size", "n_embd", "d_model")},
        {},
    )
    return view.get("hidden_size") or v.require("vision_hidden_size")


def _vit(config: Mapping[str, Any], v: ConfigView, kind: str, th: int) -> int:
    """SigLIP / CLIP-style / Pixtral towers and their projectors."""
    h = v.require("vision_hidden_size")
    inter = v.require("vision_intermediate_size")
    layers, patch, channels = (
        v.get("vision_layers"),
        v.get("vision_patch_size"),
        v.get("vision_channels"),
    )
    gated = kind == "pixtral"
    norm = h if kind == "pixtral" else 2 * h  # RMSNorm weight, or LayerNorm weight + bias
    attn = 4 * h * h + (0 if kind == "pixtral" else 4 * h)
    mlp = 3 * h * inter if gated else 2 * h * inter + inter + h
    n = layers * (attn + mlp + 2 * norm)
    # patch embedding, plus its bias (SigLIP) or the ln_pre RMSNorm (Pixtral): h either way
    n += channels * patch * patch * h + h
    if kind == "siglip_vision_model":
        side = (v.get("vision_image_size") or 224) // patch
        n += side * side * h + 2 * h  # position table, post-layernorm
    mt = str(config.get("model_type", ""))
    if mt == "gemma3":
        n += h * th + h  # mm_input_projection + mm_soft_emb_norm
    elif mt == "mistral3":
        merge = v.get("vision_merge_size")
        n += h * h * merge * merge + h + h * th + th * th  # patch merger, norm, 2-layer MLP
    elif mt == "kimi_vl":
        m = 4 * h
        n += m * m + m + m * th + th + 2 * m  # pre-norm, 2-layer MLP
    else:  # LLaVA-style: 2-layer MLP over the (possibly concatenated) feature layers
        feats = config.get("vision_feature_layer")
        k = len(feats) if isinstance(feats, list) else 1
        n += k * h * th + th + th * th + th
    return n


def _qwen2_vl(v: ConfigView) -> int:
    """Qwen2VisionTransformerPretrainedModel: conv3d patch embed (no bias), blocks of two
    LayerNorms, fused qkv with bias, proj, fc1/fc2 (mlp_ratio·e) with biases; PatchMerger:
    LayerNorm(e), Linear(e·s², e·s²), Linear(e·s², hidden_size)."""
    e = v.require("vision_embed_dim")
    out = v.require("vision_hidden_size")
    m = v.get("vision_mlp_ratio") * e
    n = (
        v.get("vision_channels")
        * v.get("vision_temporal_patch_size")
        * v.get("vision_patch_size") ** 2
        * e
    )
    block = 4 * e + (3 * e * e + 3 * e) + (e * e + e) + (e * m + m) + (m * e + e)
    n += v.get("vision_layers") * block
    merged = e * v.get("vision_merge_size") ** 2
    return n + 2 * e + merged * merged + merged + merged * out + out


def _qwen2_5_vl(v: ConfigView, th: int) -> int:
    """Qwen2_5_VisionTransformerPretrainedModel: RMSNorm blocks, fused qkv and proj with bias, a
    gated MLP with biases; merger: RMSNorm(h), Linear(h·s², h·s²), Linear(h·s², out_hidden_size)."""
    h, i = v.require("vision_hidden_size"), v.require("vision_intermediate_size")
    out = v.get("vision_out_hidden_size") or th
    n = (
        v.get("vision_channels")
        * v.get("vision_temporal_patch_size")
        * v.get("vision_patch_size") ** 2
        * h
    )
    block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 3 * h * i + 2 * i + h
    n += v.get("vision_layers") * block
    merged = h * v.get("vision_merge_size") ** 2
    return n + h + merged * merged + merged + merged * out + out


def _qwen3_vl(v: ConfigView, th: int) -> int:
    """Qwen3VLVisionModel: conv3d patch embed with bias, a learned position table, LayerNorm
    blocks (fused qkv, proj, linear_fc1/fc2 with biases); the merger (LayerNorm(h), two linears
    over h·s²) and one DeepStack merger (LayerNorm(h·s²), two linears) per deepstack index."""
    h, i = v.require("vision_hidden_size"), v.require("vision_intermediate_size")
    out = v.get("vision_out_hidden_size") or th
    n = (
        v.get("vision_channels")
        * v.get("vision_temporal_patch_size")
        * v.get("vision_patch_size") ** 2
        * h
        + h
    )
    n += (v.get("vision_positions") or 0) * h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
    n += v.get("vision_layers") * block
    merged = h * v.get("vision_merge_size") ** 2
    linears = merged * merged + merged + merged * out + out
    n += 2 * h + linears
    return n + len(v.get("vision_deepstack")) * (2 * merged + linears)


def _llama4_vision_params(config: Mapping[str, Any], v: ConfigView, th: int) -> int:
    """Llama 4's encoder as transformers' Llama4VisionModel + Llama4MultiModalProjector (and
    vLLM's mllama4.py) build it: an unfold patch embedding (linear, no bias), a class token and
    a learned position table of (image/patch)² + 1 rows, LayerNorm pre/post, ViT layers with
    biased q/k/v/o and fc1/fc2, then the pixel-shuffle adapter (fc1: intermediate ->
    projector_input_dim, fc2: projector_output_dim², no biases) and linear_1 into the text
    width (no bias)."""
    h = v.require("vision_hidden_size")
    inter = v.require("vision_intermediate_size")
    layers, patch, channels = (
        v.get("vision_layers"),
        v.get("vision_patch_size"),
        v.get("vision_channels"),
    )
    side = (v.get("vision_image_size") or 336) // patch
    p_in = v.get("projector_input_dim") or 4096
    p_out = v.get("projector_output_dim") or 4096
    out = v.get("vision_output_dim") or p_out
    n = layers * (4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h)
    n += channels * patch * patch * h + h + (side * side + 1) * h + 4 * h
    n += inter * p_in + p_out * p_out
    n += out * th
    return n
