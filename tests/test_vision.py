"""Vision and other encoder towers (engine/vision.py): exact where modelled, a note where not.

The reference is transformers itself: each wrapper's default configuration is built on the meta
device and every parameter outside the language model (tower, projector, image_newline) is
summed. Towers gpuplan does not model must count nothing and say so in the architecture's notes.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from gpuplan.engine.architecture import architecture_from_config
from gpuplan.engine.params import count_params
from gpuplan.engine.vision import multimodal_params
from gpuplan.errors import GpuplanError

TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}


def _wrapper(model_type: str, **extra: Any) -> dict[str, Any]:
    return {"model_type": model_type, "text_config": {"model_type": "llama", **TEXT}, **extra}


def test_text_only_config_has_no_tower_and_no_note() -> None:
    assert multimodal_params({"model_type": "llama", **TEXT}) == (0, ())


def test_unknown_vision_tower_counts_nothing_and_says_so() -> None:
    cfg = _wrapper("some_vlm", vision_config={"model_type": "mystery_vision", "hidden_size": 2048})
    arch = architecture_from_config(cfg, "full-some-vlm")
    assert arch.vision_params == 0
    assert any("mystery_vision" in n and "not counted" in n for n in arch.notes)


def test_audio_towers_are_named_not_ignored() -> None:
    cfg = _wrapper(
        "llava",
        vision_config={
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "num_hidden_layers": 1,
        },
        audio_config={"model_type": "whisper_encoder"},
        speech_config={"model_type": "conformer"},
    )
    params, notes = multimodal_params(cfg)
    assert params > 0
    assert [n.split(" tower")[0] for n in notes] == ["audio_config", "speech_config"]
    assert "whisper_encoder" in notes[0] and "conformer" in notes[1]


def test_known_tower_under_unknown_wrapper_notes_the_estimated_projector() -> None:
    cfg = _wrapper(
        "some_vlm",
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "vision_use_head": False,
        },
    )
    params, notes = multimodal_params(cfg)
    assert params > 0
    assert len(notes) == 1 and "some_vlm projector is not modelled" in notes[0]


def test_bad_tower_field_is_one_line_error() -> None:
    cfg = _wrapper("paligemma", vision_config={"hidden_size": 32, "projection_dim": "wide"})
    with pytest.raises(GpuplanError, match="projection_dim"):
        multimodal_params(cfg)


# wrappers whose whole checkpoint transformers builds; default configs are real model sizes
REFERENCE_TYPES = [
    "llava",  # CLIP ViT-L/14-336 + 2-layer MLP
    "llava_next",  # + image_newline
    "llava_onevision",  # SigLIP tower
    "paligemma",  # SigLIP without head, one biased linear
    "gemma3",  # SigLIP with its attention-pooling head by default
    "idefics3",  # pixel-shuffle connector
    "smolvlm",
    "mistral3",  # Pixtral
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_5",  # Qwen3-VL-style tower under a new model_type
    "qwen3_5_moe",
    "llama4",
]


def _meta_wrapper(model_type: str) -> tuple[Any, Any]:
    """A wrapper's default config and the model transformers builds from it on the meta device
    (image-text-to-text, else speech seq2seq, else seq2seq)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type)
        for builder in (
            transformers.AutoModelForImageTextToText,
            transformers.AutoModelForSpeechSeq2Seq,
            transformers.AutoModelForSeq2SeqLM,
        ):
            try:
                with torch.device("meta"):
                    model = builder.from_config(config)
                break
            except ValueError:
                continue
    return config, model


@pytest.mark.reference
@pytest.mark.parametrize("model_type", REFERENCE_TYPES)
def test_tower_and_projector_match_transformers(model_type: str) -> None:
    config, model = _meta_wrapper(model_type)
    text_parts = ("language_model", "text_model")
    expected = sum(
        p.numel()
        for n, p in model.named_parameters()
        if not any(part in n for part in text_parts) and not n.startswith("lm_head")
    )
    arch = architecture_from_config(config.to_dict(), model_type)
    assert arch.vision_params == expected, model_type
    assert not [n for n in arch.notes if "not counted" in n or "not modelled" in n]
    assert count_params(arch).by_kind["vision"] == expected


@pytest.mark.reference
def test_mistral_large4_tower_and_projector_match_transformers() -> None:
    """Mistral Large 4 builds Mistral 3's Pixtral tower and patch-merger projector (its text
    family is read elsewhere): the tower alone is checked here."""
    config, model = _meta_wrapper("mistral_large4")
    expected = sum(
        p.numel()
        for n, p in model.named_parameters()
        if "language_model" not in n and not n.startswith("lm_head")
    )
    params, notes = multimodal_params(config.to_dict(), "mistral_large4")
    assert params == expected
    assert not [n for n in notes if "not counted" in n or "not modelled" in n]
