"""Parameters of a vision-language model's image encoder and projector.

Engines load the whole checkpoint of a VLM (vLLM's Gemma3ForConditionalGeneration,
LlavaForConditionalGeneration, Mistral3ForConditionalGeneration, KimiVLForConditionalGeneration
…), so the encoder's weights count against GPU memory even for text-only traffic. The encoder
is a ViT (SigLIP, Pixtral, MoonViT: Dosovitskiy et al. 2021 §3.1): per layer q, k, v, o
(h × h each, with biases), an MLP (fc1/fc2 with biases, or a gated SiLU MLP for Pixtral) and two
norms; plus the patch embedding (3·p²·h), a learned position table for SigLIP and a projector
into the text model. Llama 4's encoder (unfold patch embedding, class token, pixel-shuffle
adapter) has its own count. Counted from `vision_config` as transformers builds these modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def vision_encoder_params(config: Mapping[str, Any], name: str = "model") -> int:
    """Encoder + projector parameters of a VLM config.json (0 when it has no `vision_config`)."""
    v = config.get("vision_config")
    if not isinstance(v, Mapping) or not v.get("hidden_size"):
        return 0
    h = int(v["hidden_size"])
    inter = int(v.get("intermediate_size") or 4 * h)
    layers = int(v.get("num_hidden_layers") or 0)
    patch = int(v.get("patch_size") or 14)
    channels = int(v.get("num_channels") or 3)
    kind = str(v.get("model_type", ""))
    if kind == "llama4_vision_model":
        return _llama4_vision_params(config, v)
    gated = kind == "pixtral"
    norm = h if kind == "pixtral" else 2 * h  # RMSNorm weight, or LayerNorm weight + bias
    attn = 4 * h * h + (0 if kind == "pixtral" else 4 * h)
    mlp = 3 * h * inter if gated else 2 * h * inter + inter + h
    n = layers * (attn + mlp + 2 * norm)
    # patch embedding, plus its bias (SigLIP) or the ln_pre RMSNorm (Pixtral): h either way
    n += channels * patch * patch * h + h
    if kind == "siglip_vision_model":
        side = int(v.get("image_size") or 224) // patch
        n += side * side * h + 2 * h  # position table, post-layernorm
    text = config.get("text_config") or {}
    th = int(text.get("hidden_size") or config.get("hidden_size") or h)
    mt = str(config.get("model_type", ""))
    if mt == "gemma3":
        n += h * th + h  # mm_input_projection + mm_soft_emb_norm
    elif mt == "mistral3":
        merge = int(config.get("spatial_merge_size") or 2)
        n += h * h * merge * merge + h + h * th + th * th  # patch merger, norm, 2-layer MLP
    elif mt == "kimi_vl":
        m = 4 * h
        n += m * m + m + m * th + th + 2 * m  # pre-norm, 2-layer MLP
    else:  # LLaVA-style: 2-layer MLP over the (possibly concatenated) feature layers
        feats = config.get("vision_feature_layer")
        k = len(feats) if isinstance(feats, list) else 1
        n += k * h * th + th + th * th + th
    return n


def _llama4_vision_params(config: Mapping[str, Any], v: Mapping[str, Any]) -> int:
    """Llama 4's encoder as transformers' Llama4VisionModel + Llama4MultiModalProjector (and
    vLLM's mllama4.py) build it: an unfold patch embedding (linear, no bias), a class token and
    a learned position table of (image/patch)² + 1 rows, LayerNorm pre/post, ViT layers with
    biased q/k/v/o and fc1/fc2, then the pixel-shuffle adapter (fc1: intermediate ->
    projector_input_dim, fc2: projector_output_dim², no biases) and linear_1 into the text
    width (no bias)."""
    h = int(v["hidden_size"])
    inter = int(v.get("intermediate_size") or 4 * h)
    layers = int(v.get("num_hidden_layers") or 0)
    patch = int(v.get("patch_size") or 14)
    channels = int(v.get("num_channels") or 3)
    side = int(v.get("image_size") or 336) // patch
    p_in = int(v.get("projector_input_dim") or 4096)
    p_out = int(v.get("projector_output_dim") or 4096)
    out = int(v.get("vision_output_dim") or p_out)
    text = config.get("text_config") or {}
    th = int(text.get("hidden_size") or config.get("hidden_size") or h)
    n = layers * (4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h)
    n += channels * patch * patch * h + h + (side * side + 1) * h + 4 * h
    n += inter * p_in + p_out * p_out
    n += out * th
    return n
