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
    cfg = _wrapper("gemma3n", vision_config={"model_type": "gemma3n_vision", "hidden_size": 2048})
    arch = architecture_from_config(cfg, "full-gemma3n")
    assert arch.vision_params == 0
    assert any("gemma3n_vision" in n and "not counted" in n for n in arch.notes)


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


# --------------------------------------------------------------------------------------
# The tower table (catalog/data/towers.toml, engine/towers.py): every record against transformers
# --------------------------------------------------------------------------------------

from gpuplan.engine.towers import all_towers, tower_count  # noqa: E402

_TOWER_WRAPPERS = sorted({w for t in all_towers().values() for w in t.wrappers})


def _built_tower(model_type: str) -> tuple[dict[str, Any], int]:
    """A wrapper's default config and the parameters transformers builds outside its language
    model (tower, projector), on the meta device."""
    config, model = _meta_wrapper(model_type)
    text = _TEXT_MODULES.get(model_type, ("lm_head",))
    outside = sum(
        p.numel()
        for n, p in model.named_parameters()
        if "language_model" not in n and not n.startswith(text)
    )
    return config.to_dict(), outside


# wrappers whose language model is not a `language_model` module: the text modules' prefixes
_TEXT_MODULES = {"git": ("git.embeddings.", "git.encoder.", "output.")}


@pytest.mark.reference
@pytest.mark.parametrize("model_type", _TOWER_WRAPPERS)
def test_tower_records_are_exact_against_transformers(model_type: str) -> None:
    config, expected = _built_tower(model_type)
    counted = tower_count(config, model_type)
    assert counted is not None and counted.params == expected, (model_type, counted)
    assert counted.tokens > 0
    if model_type == "glm4v_moe":  # its default 96 heads do not divide 4096: GLM-4.5V's head_dim
        config["text_config"]["head_dim"] = 128
    arch = architecture_from_config(config, model_type)
    assert arch.vision_params == expected
    assert not any("tower" in n and "not counted" in n for n in arch.notes)


def test_tower_table_refuses_a_bad_field_in_one_line() -> None:
    cfg = {"model_type": "glm4v", "vision_config": {"hidden_size": "wide"}}
    with pytest.raises(GpuplanError, match="vision_config.hidden_size"):
        tower_count(cfg, "glm")
