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
  EXAONE 4.5's tower is the same with grouped-query attention (num_key_value_heads);
* Qwen3-VL: patch embedding with bias, a learned position table, LayerNorm blocks (fc1/fc2), the
  merger and one DeepStack merger per `deepstack_visual_indexes` entry.

Every field is read through engine/config_schema.py: a bad value fails naming `vision_config.<key>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.towers import tower_count
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
    "vision_pos_rows": ("init_pos_emb_height",),
    "vision_pos_cols": ("init_pos_emb_width",),
    "vision_projection_dim": ("projection_dim",),
    "vision_heads": ("num_heads", "num_attention_heads"),
    "vision_kv_heads": ("num_key_value_heads",),
}
# the wrapper's own keys a projector reads (outside vision_config)
_OUTER_KEYS = {
    "vision_projection_dim": ("projection_dim",),
    "vision_scale_factor": ("scale_factor",),
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
    "vision_pos_rows": 64,
    "vision_pos_cols": 64,
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
    # Qwen3.5 (dense and MoE): the Qwen3-VL tower under new model_type names
    "qwen3_5": "qwen3_vl",
    "qwen3_5_vision": "qwen3_vl",
    "qwen3_5_moe": "qwen3_vl",
    "qwen3_5_moe_vision": "qwen3_vl",
    # EXAONE 4.5: Qwen2.5-VL's tower with grouped-query attention in its blocks
    "exaone4_5": "qwen2_5_vl",
    "exaone4_5_vision": "qwen2_5_vl",
}


# towers counted; any other `vision_config.model_type` is named in a note and not counted
_VIT_TOWERS = frozenset(
    {"siglip_vision_model", "clip_vision_model", "pixtral", "idefics3_vision", "smolvlm_vision"}
)
# wrappers whose `vision_config` may omit model_type: transformers' default tower for each
_DEFAULT_TOWER = {
    "llava": "clip_vision_model",
    "llava_next": "clip_vision_model",
    "llava_next_video": "clip_vision_model",
    "llava_onevision": "siglip_vision_model",
    "vipllava": "clip_vision_model",
    "paligemma": "siglip_vision_model",
    "gemma3": "siglip_vision_model",
    "idefics3": "idefics3_vision",
    "smolvlm": "smolvlm_vision",
}
# projectors counted (by the wrapper's model_type); another wrapper's is estimated, with a note
_LLAVA = frozenset({"llava", "llava_next", "llava_next_video", "llava_onevision"})
_MISTRAL3 = frozenset(
    {"mistral3", "mistral_large4"}
)  # Mistral Large 4 builds Mistral 3's projector
_PROJECTORS = _LLAVA | _MISTRAL3 | {"gemma3", "kimi_vl", "paligemma", "idefics3", "smolvlm"}
# other encoders a checkpoint may carry; none is counted, each is named in a note
_OTHER_TOWERS = (
    "encoder_config",  # Granite Speech's conformer encoder (with its projector_config)
    "projector_config",
    "audio_config",
    "speech_config",
    "audio_encoder_config",
    "sound_config",
    "whisper_config",
)


# a wrapper's sub-configs that add no weights beside its language model and vision tower
_WRAPPER_NEUTRAL = frozenset(
    {
        "text_config",
        "vision_config",
        "quantization_config",
        "rope_config",
        "generation_config",
        "compression_config",
    }
)


def multimodal_params(
    config: Mapping[str, Any], name: str = "model"
) -> tuple[int, tuple[str, ...]]:
    """Encoder + projector parameters of a multimodal config.json, and a note for each tower or
    projector it does not count exactly (0 and no note for a text-only config)."""
    wrapper_keys = ("vision_config", "audio_config", "text_config", *_OTHER_TOWERS)
    if any(isinstance(config.get(k), Mapping) for k in wrapper_keys):
        counted = tower_count(config, name)  # a wrapper: the tower table first
        if counted is not None:
            note = (
                f"{counted.tower} {counted.kind} tower: one {counted.token_unit} adds"
                f" {counted.tokens:,} tokens to a request"
                if counted.tokens
                else f"{counted.tower} {counted.kind} tower counted; tokens per {counted.token_unit}"
            )
            missing = tuple(
                f"{key} tower ({_kind(config[key])}) not counted: its weights are missing from"
                " this bill"
                for key in counted.not_counted
            )
            return counted.params, (note, *missing)
    others = [k for k in _OTHER_TOWERS if isinstance(config.get(k), Mapping)]
    if isinstance(config.get("text_config"), Mapping):  # a wrapper: any other sub-model too
        others += [
            k
            for k, v in config.items()
            if k.endswith("_config")
            and isinstance(v, Mapping)
            and k not in _OTHER_TOWERS
            and k not in _WRAPPER_NEUTRAL
        ]
    notes = [
        f"{key} tower ({_kind(config[key])}) not counted: its weights are missing from this bill"
        for key in others
    ]
    params = vision_encoder_params(config, name, notes)
    return params, tuple(notes)


def _kind(raw: Mapping[str, Any]) -> str:
    return str(raw.get("model_type") or "unnamed")[:64]


def vision_encoder_params(
    config: Mapping[str, Any], name: str = "model", notes: list[str] | None = None
) -> int:
    """Encoder + projector parameters of a VLM config.json (0 when it has no `vision_config`).
    A tower of no known kind counts 0 and leaves a note in `notes`."""
    notes = [] if notes is None else notes
    raw = config.get("vision_config")
    if raw is None:
        return _fuyu_patches(config, name)
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{name}: config field 'vision_config' must be a JSON object")
    outer = str(config.get("model_type") or "")
    kind = str(raw.get("model_type") or _DEFAULT_TOWER.get(outer, ""))
    qwen = _QWEN_VL.get(kind) or _QWEN_VL.get(outer)
    if not (qwen or kind in _VIT_TOWERS or kind in ("llama4_vision_model", "moonvit")):
        notes.append(
            f"vision tower ({kind or 'no model_type'}) not counted: gpuplan does not model this"
            " encoder, so its weights are missing from this bill"
        )
        return 0
    if not any(k in raw for k in ("hidden_size", "embed_dim")):
        return 0
    v = ConfigView(raw, f"{name}: vision_config", _KEYS, _DEFAULTS)
    text = _text_hidden(config, v)
    if qwen and outer and outer not in _QWEN_VL:
        notes.append(
            f"the {outer} wrapper's own projector beside its {qwen} tower is not counted"
            " (the tower itself is counted exactly)"
        )
    if qwen == "qwen2_vl":
        return _qwen2_vl(v)
    if qwen == "qwen2_5_vl":
        return _qwen2_5_vl(v, text)
    if qwen == "qwen3_vl":
        return _qwen3_vl(v, text)
    if kind == "llama4_vision_model":
        return _llama4_vision_params(config, v, text)
    if outer not in _PROJECTORS:
        notes.append(
            f"the {outer or 'unnamed'} projector is not modelled: estimated as LLaVA's two-layer"
            " MLP (the vision tower itself is counted exactly)"
        )
    return _vit_tower(v, kind, outer, raw) + _projector(config, v, outer, text)


def _fuyu_patches(config: Mapping[str, Any], name: str) -> int:
    """Fuyu has no vision encoder: FuyuModel.vision_embed_tokens projects each patch's
    patch_size² × num_channels pixels straight to the text width (a linear with bias)."""
    text = config.get("text_config")
    if config.get("model_type") != "fuyu" or not isinstance(text, Mapping):
        return 0
    v = ConfigView(
        {**config, "hidden_size": text.get("hidden_size")},
        f"{name}: fuyu",
        {"vision_patch_size": ("patch_size",), "vision_channels": ("num_channels",)},
        {"vision_patch_size": 30, "vision_channels": 3},
    )
    h = v.require("hidden_size")
    return int(v.require("vision_patch_size") ** 2 * v.require("vision_channels") * h + h)


def _text_hidden(config: Mapping[str, Any], v: ConfigView) -> int:
    text = config.get("text_config")
    view = ConfigView(
        text if isinstance(text, Mapping) else config,
        f"{v.name.split(':')[0]}",
        {"hidden_size": ("hidden_size", "n_embd", "d_model")},
        {},
    )
    return int(view.get("hidden_size") or v.require("vision_hidden_size"))


def _vit_tower(v: ConfigView, kind: str, outer: str, raw: Mapping[str, Any]) -> int:
    """SigLIP / CLIP / Idefics3 / Pixtral / MoonViT towers as transformers (or Kimi-VL's remote
    code) builds them: per layer q, k, v, o and an MLP (biased, LayerNorm) or Pixtral's gated,
    bias-free RMSNorm layer; then each tower's embeddings and final norm."""
    h = v.require("vision_hidden_size")
    inter = v.require("vision_intermediate_size")
    layers, patch, channels = (
        v.get("vision_layers"),
        v.get("vision_patch_size"),
        v.get("vision_channels"),
    )
    pixtral = kind == "pixtral"
    norm = h if pixtral else 2 * h  # RMSNorm weight, or LayerNorm weight + bias
    attn = 4 * h * h + (0 if pixtral else 4 * h)
    mlp = 3 * h * inter if pixtral else 2 * h * inter + inter + h
    n = layers * (attn + mlp + 2 * norm) + channels * patch * patch * h
    side = (v.get("vision_image_size") or 224) // patch
    if kind == "clip_vision_model":  # class token, positions (+1 for it), pre and post LayerNorm
        return int(n + h + (side * side + 1) * h + 4 * h)
    if kind == "pixtral":  # ln_pre RMSNorm (the patch conv has no bias)
        return int(n + h)
    if kind == "moonvit":  # conv bias, a 64×64 learned 2-D position table, final LayerNorm
        rows = v.get("vision_pos_rows") * v.get("vision_pos_cols")
        return int(n + h + rows * h + 2 * h)
    # SigLIP family: conv bias, positions, post LayerNorm, and the attention-pooling head
    n += h + side * side * h + 2 * h
    if raw.get("vision_use_head", kind == "siglip_vision_model" and outer != "paligemma"):
        n += h + (4 * h * h + 4 * h) + 2 * h + (2 * h * inter + inter + h)
    return int(n)


def _projector(config: Mapping[str, Any], v: ConfigView, outer: str, th: int) -> int:
    """The projector from the tower's width h into the text model's th, per wrapper."""
    h = v.require("vision_hidden_size")
    if outer == "gemma3":
        return int(h * th + h)  # mm_input_projection + mm_soft_emb_norm
    if outer in _MISTRAL3:
        merge = v.get("vision_merge_size")
        return int(h * h * merge * merge + h + h * th + th * th)  # patch merger, norm, 2-layer MLP
    if outer == "kimi_vl":
        m = 4 * h
        return int(m * m + m + m * th + th + 2 * m)  # pre-norm, 2-layer MLP
    wrapper = ConfigView(config, v.name.split(":")[0], _OUTER_KEYS, {"vision_scale_factor": 2})
    if outer == "paligemma":  # one biased linear into projection_dim
        out = v.get("vision_projection_dim") or wrapper.get("vision_projection_dim") or th
        return int(h * out + out)
    if outer in ("idefics3", "smolvlm"):  # pixel shuffle by scale_factor², one linear, no bias
        scale = wrapper.get("vision_scale_factor")
        return int(h * scale * scale * th)
    # LLaVA: a 2-layer MLP over the (possibly concatenated) feature layers, + image_newline
    feats = config.get("vision_feature_layer")
    k = len(feats) if isinstance(feats, list) else 1
    newline = th if outer in ("llava_next", "llava_next_video", "llava_onevision") else 0
    return int(k * h * th + th + th * th + th + newline)


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
    return int(n + 2 * e + merged * merged + merged + merged * out + out)


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
    qkv = h + 2 * _vision_kv_width(v, h)
    block = 2 * h + (h * qkv + qkv) + (h * h + h) + 3 * h * i + 2 * i + h
    n += v.get("vision_layers") * block
    merged = h * v.get("vision_merge_size") ** 2
    return int(n + h + merged * merged + merged + merged * out + out)


def _vision_kv_width(v: ConfigView, h: int) -> int:
    """Width of the tower's k (and v) projection: h, or with grouped-query attention
    (Exaone4_5_VisionAttention: num_key_value_heads of h / num_heads) that many heads' worth."""
    kv = v.get("vision_kv_heads")
    if not kv:
        return h
    heads = v.require("vision_heads")
    if heads % kv or h % heads:
        raise v.fail("vision_kv_heads", f"({kv}) must divide num_heads ({heads}), which divide h")
    return int(kv * (h // heads))


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
    return int(n + len(v.get("vision_deepstack")) * (2 * merged + linears))


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
    return int(n)
