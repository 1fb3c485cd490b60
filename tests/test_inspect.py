"""`gpuplan inspect`: source, family, parameters by kind, headers, agreement report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gpuplan  # noqa: E402
from gpuplan.cli.main import main  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from model_files import TINY, write_checkpoint  # noqa: E402


def test_catalog_model_has_no_headers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "llama-3.1-8b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"]["kind"] == "catalog" and data["headers"] is None
    assert data["params_total"] == sum(data["params_by_kind"].values())
    assert data["context_limit"] == 131072
    assert main(["inspect", "llama-3.1-8b"]) == 0
    assert "gpuplan's catalog" in capsys.readouterr().out


def test_local_checkpoint_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = write_checkpoint(tmp_path / "m")
    report = gpuplan.inspect(str(tmp_path / "m"))
    d = report.to_dict()
    assert d["headers"]["total_bytes"] == written
    assert d["headers"]["bytes_by_dtype"] == {"BF16": written}
    assert d["headers"]["agreement"]["flagged"] is False
    assert d["architecture_weight_bytes"] == written
    assert main(["inspect", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "agrees" in out and "BF16" in out


def test_extra_layers_and_vision_tower_are_flagged(tmp_path: Path) -> None:
    """An MTP layer past num_hidden_layers and a vision tower the config does not describe are
    named, with their parameters, as what explains the difference."""
    h = TINY["hidden_size"]
    extra = {
        "model.layers.4.self_attn.q_proj.weight": torch.zeros(h, h, dtype=torch.bfloat16),
        "model.layers.4.mlp.up_proj.weight": torch.zeros(4 * h, h, dtype=torch.bfloat16),
        "model.vision_tower.blocks.0.attn.qkv.weight": torch.zeros(3 * h, h, dtype=torch.bfloat16),
        "model.mystery.weight": torch.zeros(300, dtype=torch.bfloat16),
    }
    write_checkpoint(tmp_path / "m", extra=extra)
    report = gpuplan.inspect(str(tmp_path / "m"))
    agree = report.agreement
    assert agree is not None and agree.flagged
    arch_total = count_params(report.ref.arch).total
    assert agree.header_params == arch_total + sum(t.numel() for t in extra.values())
    text = " ".join(agree.explanations)
    assert "layers 4–4 are past the 4 decoder layers" in text and f"{5 * h * h:,} params" in text
    assert "vision tower" in text and "model.vision_tower.blocks.*.attn.qkv.weight" in text
    assert "model.mystery.weight" in text and "no known kind" in text
    # the engine loads what the decoder uses: MTP layers are not in the weights line
    plan = gpuplan.serve(str(tmp_path / "m"), gpus=1)
    assert plan.bill.item("weights").bytes < report.ref.stored.total_bytes  # type: ignore[union-attr]


def test_quantized_config_is_reported(tmp_path: Path) -> None:
    cfg = TINY | {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    write_checkpoint(tmp_path / "m", cfg=cfg)
    d = gpuplan.inspect(str(tmp_path / "m")).to_dict()
    assert d["quantization"]["method"] == "fp8" and d["quantization"]["layout"] == "fp8-block128"


def test_training_bill_sets_headers_beside_the_weights_line(tmp_path: Path) -> None:
    """A full bf16 fine-tune holds the checkpoint's stored bytes per GPU (÷ ZeRO-3 shards)."""
    written = write_checkpoint(tmp_path / "m")
    plan = gpuplan.train(str(tmp_path / "m"), gpus=2, zero=3)
    assert any(
        "stored bytes on this GPU" in n and f"{-(-written // 2):,}" in n for n in plan.bill.notes
    )
