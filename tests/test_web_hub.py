"""`gpuplan web --hub`: the page's model field takes a Hugging Face repo id (issue 24, item 7),
read from this machine's Hugging Face cache (else the Hub) — only when the server was started
with --hub, and only a well-formed repo id, never a path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuplan.web.app import create_app
from gpuplan.web.compute import HUB_ENV
from model_files import fake_cache, write_checkpoint


@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    write_checkpoint(tmp_path / "src")
    fake_cache(tmp_path / "hub", "acme/tiny", tmp_path / "src")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return json.loads((tmp_path / "src" / "config.json").read_text())


def _serve(model: str) -> tuple[int, dict]:
    with TestClient(create_app(workers=1), raise_server_exceptions=False) as client:
        r = client.post("/api/serve", json={"model": model, "gpus": 1})
        return r.status_code, r.json()


def test_a_repo_id_is_refused_unless_the_server_allows_the_hub(cached, monkeypatch):
    monkeypatch.delenv(HUB_ENV, raising=False)
    status, body = _serve("acme/tiny")
    assert status == 400 and "--hub" in body["detail"]


def test_with_hub_a_cached_repo_is_billed_from_its_config(cached, monkeypatch):
    monkeypatch.setenv(HUB_ENV, "1")
    status, body = _serve("acme/tiny")
    assert status == 200, body
    assert body["model"]["id"] == "acme/tiny"
    # the bill is the config's: its layer count as the cache holds it
    assert body["model"]["layers"] == cached["num_hidden_layers"]


@pytest.mark.parametrize("name", ["../../etc/hostname", "/etc/hostname", "acme/../x", "a/b/c"])
def test_with_hub_a_path_is_never_read(cached, monkeypatch, name):
    monkeypatch.setenv(HUB_ENV, "1")
    status, body = _serve(name)
    assert 400 <= status < 500 and "\n" not in body["detail"]
