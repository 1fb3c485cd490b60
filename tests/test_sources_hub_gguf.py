"""GGUF repositories on the Hub and in the local cache: the file llama.cpp's `-hf REPO[:QUANT]`
would run (the quant asked, else Q4_K_M, else the first file; never a projector), read by range
requests from the front of the file, never its tensor data; what was chosen is in the notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gpuplan.catalog.models import resolve_source  # noqa: E402
from gpuplan.catalog.sources import pick_gguf  # noqa: E402
from gpuplan.cli.main import main  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from model_files import FakeHub, fake_cache, serve_hub, write_gguf  # noqa: E402

REPO = "acme/Tiny-Chat-GGUF"


def _repo(folder: Path, q4km: bool = True) -> dict[str, int]:
    """A GGUF repository: Q8_0 and (optionally) Q4_K_M files and a projector; a vocabulary large
    enough that each file is bigger than the first range read. Returns each file's tensor bytes."""
    folder.mkdir(parents=True)
    written = {
        "Tiny-Chat-Q8_0.gguf": write_gguf(
            folder / "Tiny-Chat-Q8_0.gguf", vocab=8192, types={"attn": "Q8_0", "ffn": "Q8_0"}
        )
    }
    if q4km:
        written["Tiny-Chat-Q4_K_M.gguf"] = write_gguf(folder / "Tiny-Chat-Q4_K_M.gguf", vocab=8192)
    write_gguf(folder / "mmproj-Tiny-Chat-f16.gguf", layers=1)
    return written


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    written = _repo(tmp_path / "repo")
    fake = FakeHub({REPO: tmp_path / "repo", "acme/No-Default-GGUF": tmp_path / "other"})
    _repo(tmp_path / "other", q4km=False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with serve_hub(fake) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        yield fake, written, tmp_path


def test_default_quant_header_only(hub) -> None:  # type: ignore[no-untyped-def]
    fake, written, tmp_path = hub
    src = resolve_source(REPO)
    assert src.kind == "hub" and src.location.endswith("/Tiny-Chat-Q4_K_M.gguf")
    assert src.checkpoint is not None and src.checkpoint.format == "gguf"
    assert src.checkpoint.total_bytes == written["Tiny-Chat-Q4_K_M.gguf"]
    assert src.notes == ("GGUF file Tiny-Chat-Q4_K_M.gguf: llama.cpp's default quant Q4_K_M",)
    size = (tmp_path / "repo" / "Tiny-Chat-Q4_K_M.gguf").stat().st_size
    assert 0 < fake.served_bytes["Tiny-Chat-Q4_K_M.gguf"] < size  # the header, not the data
    assert "mmproj-Tiny-Chat-f16.gguf" not in fake.served_bytes


def test_a_quant_by_name_in_any_case_and_a_missing_one(hub) -> None:  # type: ignore[no-untyped-def]
    _, written, _ = hub
    src = resolve_source(f"{REPO}:q8_0")
    assert src.checkpoint is not None
    assert src.checkpoint.total_bytes == written["Tiny-Chat-Q8_0.gguf"]
    assert src.notes == ("GGUF file Tiny-Chat-Q8_0.gguf: the file for :q8_0",)
    with pytest.raises(GpuplanError, match="no GGUF file for quant 'Q5_K_S'.*Tiny-Chat-Q8_0"):
        resolve_source(f"{REPO}:Q5_K_S")


def test_without_a_q4_k_m_the_first_file_with_a_note(hub) -> None:  # type: ignore[no-untyped-def]
    src = resolve_source("acme/No-Default-GGUF")
    assert src.location.endswith("/Tiny-Chat-Q8_0.gguf")
    assert "the repository's only GGUF file" in src.notes[0]  # the projector is not a model


def test_the_cli_and_a_llama_server_line_size_it(hub, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["serve", f"{REPO}:Q8_0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any("Tiny-Chat-Q8_0.gguf" in n for n in data["notes"])
    line = f"llama-server -hf {REPO}:Q8_0 -c 4096 -ngl all"
    assert main(["serve", "--from", line, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["name"] == "llamacpp"
    assert any("Tiny-Chat-Q8_0.gguf" in n for n in data["notes"])


def test_a_cached_gguf_repository_picks_as_the_hub_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _repo(tmp_path / "src")
    fake_cache(tmp_path / "hub", REPO, tmp_path / "src", commit="d" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    src = resolve_source(REPO)
    assert src.kind == "hf-cache" and src.checkpoint is not None
    assert src.checkpoint.total_bytes == written["Tiny-Chat-Q4_K_M.gguf"]
    assert resolve_source(f"{REPO}:Q8_0").location.endswith("Tiny-Chat-Q8_0.gguf")


def test_pick_rules_on_names() -> None:
    split = [f"Q4_K_M/Big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    parts, why = pick_gguf([*split, "Big-Q8_0.gguf", "README.md"], None, "r")
    assert parts == split and "default quant" in why
    with pytest.raises(GpuplanError, match="quant 'Q4_K'"):
        pick_gguf(["a-Q4_K_M.gguf"], "Q4_K", "r")  # a tag matches whole, not a prefix
    with pytest.raises(GpuplanError, match="part .*00003-of-00003.gguf is missing"):
        pick_gguf(split[:2], None, "r")
    with pytest.raises(GpuplanError, match="no GGUF model file"):
        pick_gguf(["mmproj-x-f16.gguf"], None, "r")
    parts, why = pick_gguf(["b-Q5_K_S.gguf", "a-IQ2_M.gguf"], None, "r")
    assert parts == ["a-IQ2_M.gguf"] and "first of 2" in why
