"""The tower table (catalog/data/towers.toml, engine/towers.py): every record against transformers.

Each record's wrappers are built from their default configuration on the meta device, and every
parameter outside the language model (towers, projectors, multimodal embedders) is summed; the
record must count exactly that. Gemma 3n's wrapper needs timm for its MobileNetV5 vision tower:
with timm installed the whole wrapper is built; without it its audio encoder and embedders are
built alone, and the MobileNetV5 record is checked against timm's block strings decoded here.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from gpuplan.engine.architecture import architecture_from_config
from gpuplan.engine.towers import (
    TowerTableError,
    all_kinds,
    all_towers,
    evaluate,
    field_values,
    tower_count,
)
from gpuplan.engine.vision import multimodal_params
from gpuplan.errors import GpuplanError

_TOWERS = all_towers()
_WRAPPERS = sorted({w for t in _TOWERS.values() for w in t.wrappers})
_BY_WRAPPER = {w: t for t in _TOWERS.values() for w in t.wrappers}
# built from their sub-modules when the whole wrapper needs an extra (timm) that is missing
_NEEDS_TIMM = {"gemma3n", "fast_vlm"}


def _has_timm() -> bool:
    try:
        import timm  # noqa: F401
    except Exception:  # missing, or a torchvision that does not match this torch
        return False
    return True


def _meta_model(config: Any) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for builder in (
        transformers.AutoModelForImageTextToText,
        transformers.AutoModelForSpeechSeq2Seq,
        transformers.AutoModelForSeq2SeqLM,
    ):
        try:
            with torch.device("meta"):
                return builder.from_config(config)
        except ValueError:
            continue
    raise AssertionError(f"transformers builds no wrapper for {config.model_type}")


def _gemma3n_parts(config: Any) -> int:
    """Gemma3nModel's audio tower and its two multimodal embedders, built alone."""
    torch = pytest.importorskip("torch")
    g = pytest.importorskip("transformers.models.gemma3n.modeling_gemma3n")
    with torch.device("meta"):
        modules = [
            g.Gemma3nAudioEncoder(config.audio_config),
            g.Gemma3nMultimodalEmbedder(config.vision_config, config.text_config),
            g.Gemma3nMultimodalEmbedder(config.audio_config, config.text_config),
        ]
    return sum(p.numel() for m in modules for p in m.parameters())


# timm's _gen_mobilenet_v5 block list for mobilenetv5_300m_enc (timm 1.0.31, models/mobilenetv5.py),
# in its own notation: er / uir / mqa, r repeats, k kernel, a start depthwise kernel, e expansion,
# h heads, d key dim, v2 a stride-2 key/value down conv, c output channels
_MNV5_300M = (
    ("er_r1_k3_s2_e4_c128", "er_r2_k3_s1_e4_c128"),
    (
        "uir_r1_a3_k5_s2_e6_c256",
        "uir_r1_a5_k0_s1_e4_c256",
        "uir_r1_a3_k0_s1_e4_c256",
        "uir_r1_a5_k0_s1_e4_c256",
        "uir_r1_a3_k0_s1_e4_c256",
    ),
    (
        "uir_r1_a5_k5_s2_e6_c640",
        "uir_r7_a5_k0_s1_e4_c640",
        "uir_r1_a0_k0_s1_e1_c640",
        *("mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640") * 14,
    ),
    (
        "uir_r1_a5_k5_s2_e6_c1280",
        *("mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280") * 19,
    ),
)


def _mobilenet_v5_300m() -> int:
    """MobileNetV5-300M's parameters decoded from its block strings (RmsNorm2d: a weight per
    channel; convs without bias but the stem's): EdgeResidual = k×k expansion conv + norm + 1×1
    projection + norm; UniversalInvertedResidual = [depthwise a×a + norm] + 1×1 expansion + norm
    + [depthwise k×k + norm] + 1×1 projection + norm + layer scale; MobileMultiQueryAttention2d =
    norm + query 1×1 to h·d + one key and one value head (each [depthwise 3×3 stride 2 + norm]
    + 1×1 to d) + output 1×1 + layer scale; then the fusion adapter (stage 2 and 3 outputs
    concatenated, 1×1 expansion ×2 + norm, 1×1 to 2048 + norm, a final norm)."""
    c_in, total = 64, 3 * 3 * 3 * 64 + 64 + 64  # stem conv with bias, its norm
    for stage in _MNV5_300M:
        for block in stage:
            kind, *opts = block.split("_")
            o = {x[0]: int(x[1:]) for x in opts}
            for _ in range(o["r"]):
                c, mid = o["c"], c_in * o.get("e", 1)
                if kind == "er":
                    total += o["k"] ** 2 * c_in * mid + mid + mid * c + c
                elif kind == "uir":
                    total += (o["a"] ** 2 * c_in + c_in) if o["a"] else 0
                    total += c_in * mid + mid + ((o["k"] ** 2 * mid + mid) if o["k"] else 0)
                    total += mid * c + c + c
                else:  # mqa: heads h of key dim d, one shared key and value head
                    down = 9 * c + c if o.get("v") == 2 else 0
                    total += c + c * o["h"] * o["d"] + 2 * (down + c * o["d"]) + o["h"] * o["d"] * c
                    total += c
                c_in = c
    fused = 640 + 1280
    return total + fused * 2 * fused + 2 * fused + 2 * fused * 2048 + 2048 + 2048


# timm's fastvit_mci3 arguments (timm 1.0.31, models/fastvit.py): blocks per stage, widths,
# token mixers; mlp_ratio 4, 7x7 conditional position encodings before the attention stages
_FASTVIT_MCI3 = ((2, 96, "repmixer"), (12, 192, "repmixer"), (24, 384, "repmixer"))
_FASTVIT_MCI3 += ((4, 768, "attention"), (2, 1536, "attention"))


def _fastvit_mci3() -> int:
    """FastViT-MCi3 reparameterized (inference_mode): each MobileOne / RepMixer branch folded
    into one conv with bias. Stem: 3x3 conv 3 -> 96, depthwise 3x3, 1x1. Per later stage a
    depthwise 7x7 and a 1x1 downsample (each biased); attention stages a depthwise 7x7
    position conv. A ConvMlp is a depthwise 7x7 conv (no bias) + BatchNorm + biased 1x1 fc1
    (x4) and fc2; a RepMixer block adds a depthwise 3x3 mixer and one layer scale, an
    attention block a LayerNorm2d, a bias-free qkv, a biased proj and two layer scales. Then a
    depthwise 3x3 conv to twice the last width with a squeeze-excite of ratio 1/16."""
    e0 = _FASTVIT_MCI3[0][1]
    total = 27 * e0 + e0 + 9 * e0 + e0 + e0 * e0 + e0
    for i, (blocks, e, mixer) in enumerate(_FASTVIT_MCI3):
        total += (49 * e + e + e * e + e) if i else 0
        total += 49 * e + e if mixer == "attention" else 0
        mlp = 49 * e + 2 * e + 4 * e * e + 4 * e + 4 * e * e + e
        block = 9 * e + e + e if mixer == "repmixer" else 2 * e + 3 * e * e + e * e + e + 2 * e
        total += blocks * (block + mlp)
    f = 2 * _FASTVIT_MCI3[-1][1]
    return total + 9 * f + f + 2 * f * (f // 16) + f // 16 + f


def _timm_tower(model_type: str) -> int:
    return _mobilenet_v5_300m() if model_type == "gemma3n" else _fastvit_mci3()


def _timm_free_parts(config: Any) -> int:
    """What a timm-towered wrapper holds beside its timm tower, built alone: Gemma 3n's audio
    tower and embedders, FastVLM's projector."""
    if config.model_type == "gemma3n":
        return _gemma3n_parts(config)
    torch = pytest.importorskip("torch")
    f = pytest.importorskip("transformers.models.fast_vlm.modeling_fast_vlm")
    with torch.device("meta"):
        projector = f.FastVlmMultiModalProjector(config)
    return sum(p.numel() for p in projector.parameters())


def _reference(model_type: str) -> tuple[dict[str, Any], int]:
    """A wrapper's default config and the parameters transformers builds outside its language
    model (towers, projectors, embedders) on the meta device."""
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(
            model_type, **_OPTIONAL_TOWERS.get(model_type, {})
        )
        if model_type in _NEEDS_TIMM and not _has_timm():
            return config.to_dict(), _timm_free_parts(config) + _timm_tower(model_type)
        model = _meta_model(config)
    text = _TEXT_MODULES.get(model_type, ("lm_head",))
    outside = sum(
        p.numel()
        for n, p in model.named_parameters()
        if "language_model" not in n and "text_model" not in n and not n.startswith(text)
    )
    return config.to_dict(), outside


# wrappers whose default config has no tower (each sub-config optional): built with each at its
# sub-config class's defaults, as transformers' Gemma4Config docstring builds a Gemma 4 E2B-like one
_OPTIONAL_TOWERS: dict[str, dict[str, Any]] = {"gemma4": {"vision_config": {}, "audio_config": {}}}

# wrappers whose language model is not a `language_model` module: the text modules' prefixes
_TEXT_MODULES = {
    "git": ("git.embeddings.", "git.encoder.", "output."),
    "blip": ("text_decoder.",),
    "pix2struct": ("decoder.",),
}


@pytest.mark.reference
@pytest.mark.parametrize("model_type", _WRAPPERS)
def test_tower_records_are_exact_against_transformers(model_type: str) -> None:
    config, expected = _reference(model_type)
    counted = tower_count(config, model_type)
    assert counted is not None and counted.params == expected, (model_type, counted)
    assert counted.tokens > 0 or not _BY_WRAPPER[model_type].tokens
    if model_type == "glm4v_moe":  # its default 96 heads do not divide 4096: GLM-4.5V's head_dim
        config["text_config"]["head_dim"] = 128
    try:
        arch = architecture_from_config(config, model_type)
    except GpuplanError as err:  # the text model's refusal (its family), never the tower's
        assert "tower" not in str(err) and "vision_config" not in str(err), err
        return
    assert arch.vision_params == expected
    notes = [n for n in arch.notes if "tower" in n and "not counted" in n]
    assert [n.split(" tower")[0] for n in notes] == list(counted.not_counted)


def test_every_record_names_a_source_and_mounts_known_kinds() -> None:
    kinds = all_kinds()
    assert {"clip_vision", "siglip_vision", "whisper_encoder"} <= set(kinds)
    for tower in _TOWERS.values():
        assert tower.source and (tower.params or tower.uses)
        assert all(kind in kinds for kind, _, _ in tower.uses.values())


def test_mounted_kind_reads_its_fields_under_the_mount() -> None:
    """Video-LLaVA mounts one CLIP kind twice (image and video towers) on vision_config: the
    tower count doubles, and the projector is counted once (a CLIP ViT from first principles:
    patch conv c·p²·h, class token h, (n+1)·h positions, 4h of pre/post LayerNorms, per layer
    4h²+4h attention, 2hi+i+h MLP, two LayerNorms 4h)."""
    h, i, p, s, t, layers = 32, 64, 4, 16, 48, 2
    cfg = {
        "model_type": "video_llava",
        "vision_config": {
            "hidden_size": h,
            "intermediate_size": i,
            "num_hidden_layers": layers,
            "patch_size": p,
            "image_size": s,
            "num_channels": 3,
        },
        "vision_feature_layer": [-2, -3],
        "text_config": {"hidden_size": t},
    }
    clip = 3 * p * p * h + h + ((s // p) ** 2 + 1) * h + 4 * h
    clip += layers * (4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h)
    projector = 2 * h * t + t + t * t + t
    counted = tower_count(cfg, "tiny")
    assert counted is not None
    assert counted.params == 2 * clip + projector
    assert set(counted.parts) >= {"image.layers", "video.layers", "projector"}


def test_reciprocal_field_refuses_a_bad_ratio_in_one_line() -> None:
    cfg = {"model_type": "internvl", "downsample_ratio": 0, "text_config": {}}
    with pytest.raises(GpuplanError, match="downsample_ratio"):
        tower_count(cfg, "internvl")


def test_bad_field_inside_a_mounted_kind_names_its_path() -> None:
    cfg = {"model_type": "vipllava", "vision_config": {"hidden_size": "wide"}}
    with pytest.raises(GpuplanError, match="vision_config.hidden_size"):
        tower_count(cfg, "vipllava")


def _gemma3n(architecture: str) -> dict[str, Any]:
    return {
        "model_type": "gemma3n",
        "vision_config": {"model_type": "gemma3n_vision", "architecture": architecture},
        "audio_config": {"model_type": "gemma3n_audio"},
        "text_config": {"hidden_size": 2048},
    }


def test_tower_not_counted_by_its_record_is_named_in_the_notes() -> None:
    """A MobileNetV5 the record does not know (another timm architecture) counts nothing and
    is named; Gemma 3n's own mobilenetv5_300m_enc is counted."""
    params, notes = multimodal_params(_gemma3n("mobilenetv5_base"), "gemma3n")
    assert params > 0
    assert any(n.startswith("vision_config tower (gemma3n_vision) not counted") for n in notes)
    known, notes = multimodal_params(_gemma3n("mobilenetv5_300m_enc"), "gemma3n")
    assert known - params == _mobilenet_v5_300m()
    assert not any("not counted" in n for n in notes)


def test_mobilenet_v5_record_matches_timm_block_strings() -> None:
    counted = tower_count(_gemma3n("mobilenetv5_300m_enc"), "gemma3n")
    assert counted is not None
    vision = sum(n for part, n in counted.parts.items() if part.startswith("vision."))
    assert vision == _mobilenet_v5_300m() == 294_126_912  # timm 1.0.31 on the meta device


def test_tower_table_refuses_a_bad_field_in_one_line() -> None:
    cfg = {"model_type": "glm4v", "vision_config": {"hidden_size": "wide"}}
    with pytest.raises(GpuplanError, match="vision_config.hidden_size"):
        tower_count(cfg, "glm")


def test_stage_sums_and_list_helpers_are_plain_arithmetic() -> None:
    """A chain of convolutions c0 -> c1 -> c2 (kernel k each) has c0·c1·k + c1·c2·k weights;
    `among` tests membership, `total` sums a list, a subscript may be computed."""
    d, k = [2, 3, 4], 5
    chain = "sum(d[i - 1]*d[i]*k for i in range(1, len(d)))"
    assert evaluate(chain, {"d": d, "k": k}, "t", "w") == 2 * 3 * 5 + 3 * 4 * 5
    assert evaluate("among(16, r) + among(8, r)", {"r": [16, 32]}, "t", "w") == 1
    assert evaluate("total(d) + d[len(d) - 1]", {"d": d}, "t", "w") == 9 + 4


def test_stage_sum_refuses_runaway_ranges_and_other_generators() -> None:
    with pytest.raises(GpuplanError, match="wrong shape"):
        evaluate("sum(i for i in range(n))", {"n": 10**9}, "huge", "w")
    with pytest.raises(TowerTableError):
        evaluate("sum(i for i in d)", {"d": [1, 2]}, "t", "w")


def test_a_field_reads_one_setting_from_per_layer_tables() -> None:
    spec = {"x": {"path": "per_layer", "values": True, "key": "experts"}}
    config = {"per_layer": {"3": {"experts": 4}, "4": {"experts": 8}, "5": {"other": 1}}}
    assert field_values(spec, {}, config, "t", "r") == {"x": [4, 8]}


def test_fastvit_record_matches_timm_arguments() -> None:
    cfg = {
        "model_type": "fast_vlm",
        "vision_config": {"architecture": "fastvit_mci3", "model_args": {"inference_mode": True}},
        "text_config": {"hidden_size": 64},
    }
    counted = tower_count(cfg, "fast_vlm")
    assert counted is not None and not counted.not_counted
    vision = sum(n for part, n in counted.parts.items() if part.startswith("vision."))
    assert vision == _fastvit_mci3() == 122_714_208  # timm 1.0.31 on the meta device
    cfg["vision_config"]["model_args"] = {"inference_mode": False}  # train-time branches
    counted = tower_count(cfg, "fast_vlm")
    assert counted is not None and counted.not_counted == ("vision_config",)


def test_gemma4_counts_only_the_towers_its_config_builds() -> None:
    """Gemma4Model builds a tower (and its embedder) only for a sub-config that is not null: a
    text-only wrapper adds nothing and names nothing; a vision_config of another model_type is
    named as not counted rather than sized as Gemma 4's."""
    text_only = {"model_type": "gemma4", "vision_config": None, "audio_config": None}
    params, notes = multimodal_params({**text_only, "text_config": {"hidden_size": 64}}, "g")
    assert params == 0 and not any("not counted" in n for n in notes)
    other = {**text_only, "vision_config": {"model_type": "siglip_vision_model"}}
    counted = tower_count({**other, "text_config": {"hidden_size": 64}}, "g")
    assert counted is not None and counted.params == 0
    assert counted.not_counted == ("vision_config",)
