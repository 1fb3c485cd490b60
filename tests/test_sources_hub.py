"""The Hugging Face cache and the Hub: a fake cache folder, and a fake Hub on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from gpuplan.catalog.models import resolve_source  # noqa: E402
from gpuplan.cli.main import main  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from model_files import FakeHub, fake_cache, serve_hub, write_checkpoint  # noqa: E402

REPO = "acme/Tiny-Chat-7B-Instruct"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, int]:
    written = write_checkpoint(tmp_path / "src")
    root = tmp_path / "hf" / "hub"
    fake_cache(root, REPO, tmp_path / "src", commit="1" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root, written


def test_cached_model_serves_offline_under_its_repo_id(
    cache: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    root, written = cache
    src = resolve_source(REPO)
    assert (src.kind, src.name, src.revision) == ("hf-cache", REPO, "1" * 40)
    assert src.checkpoint is not None and src.checkpoint.total_bytes == written
    assert main(["serve", REPO, "--json"]) == 0
    out = capsys.readouterr().out
    assert f'"id": "{REPO}"' in out and "1111111111" not in out.split('"notes"')[0]


def test_hf_home_and_snapshot_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path / "src")
    snap = fake_cache(tmp_path / "home" / "hub", REPO, tmp_path / "src", commit="2" * 40)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert resolve_source(REPO).kind == "hf-cache"
    by_path = resolve_source(str(snap))  # a snapshot path shows the repo id, not the hash
    assert by_path.name == REPO and by_path.revision == "2" * 40


def test_revision_by_ref_and_by_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path / "a")
    write_checkpoint(tmp_path / "b", cfg={**__import__("model_files").TINY, "num_hidden_layers": 2})
    root = tmp_path / "hub"
    fake_cache(root, REPO, tmp_path / "a", commit="a" * 40)
    fake_cache(root, REPO, tmp_path / "b", commit="b" * 40, ref="v2")
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    assert resolve_source(REPO).config["num_hidden_layers"] == 4
    assert resolve_source(REPO, "v2").config["num_hidden_layers"] == 2
    assert resolve_source(REPO, "b" * 40).config["num_hidden_layers"] == 2


def test_neither_cache_nor_network_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", REPO]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "tried: catalog; local path; Hugging Face cache" in err and "HF_HUB_OFFLINE" in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused at once
    assert main(["serve", REPO]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Hub http://127.0.0.1:9" in err


def _hub(tmp_path: Path, shards: int = 1, **kw: object) -> tuple[FakeHub, int]:
    written = write_checkpoint(tmp_path / "repo", shards=shards)
    return FakeHub({REPO: tmp_path / "repo"}, **kw), written  # type: ignore[arg-type]


def test_hub_reads_config_and_headers_by_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, written = _hub(tmp_path, shards=4)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        src = resolve_source(REPO)
    assert src.kind == "hub" and src.revision == "c" * 40
    assert src.checkpoint is not None and src.checkpoint.files == 4
    assert src.checkpoint.total_bytes == written
    for name, served in hub.served_bytes.items():
        if name.endswith(".safetensors"):  # header only: far less than the file
            size = (tmp_path / "repo" / name).stat().st_size
            header = int.from_bytes((tmp_path / "repo" / name).read_bytes()[:8], "little") + 8
            assert served <= header < size
    assert all(r is not None for p, r in hub.requests if p.endswith(".safetensors"))


def test_hub_token_and_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _ = _hub(tmp_path, token="hf_secret")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(GpuplanError, match="HF_TOKEN"):
            resolve_source(REPO, "main")
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        assert resolve_source(REPO, "main").kind == "hub"
    assert any("/revision/main" in p for p, _ in hub.requests)


def test_unknown_repo_on_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _ = _hub(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(GpuplanError, match="no such repository") as err:
            resolve_source("acme/does-not-exist")
    assert "tried: catalog; local path; Hugging Face cache" in str(err.value)


def test_hub_serves_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hub, written = _hub(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert main(["inspect", REPO, "--revision", "main", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["source"]["kind"] == "hub" and data["headers"]["total_bytes"] == written
