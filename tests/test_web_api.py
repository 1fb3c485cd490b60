"""The web API: thin over gpuplan.api, strict about its input, never a path, never a traceback."""

from __future__ import annotations

import json

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

import gpuplan  # noqa: E402
from gpuplan.web.app import MAX_BODY_BYTES, MAX_SWEEP_POINTS, create_app  # noqa: E402


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(), raise_server_exceptions=False)


def test_serve_matches_the_engine(client: TestClient) -> None:
    body = {"model": "llama-3.1-8b", "gpu": "h100", "gpu_memory": "80GB", "context": 4096}
    r = client.post("/api/serve", json=body)
    assert r.status_code == 200
    data = r.json()
    plan = gpuplan.serve("llama-3.1-8b", "h100", gpu_memory="80GB", context=4096).to_dict()
    for key in (
        "per_gpu",
        "per_gpu_total_bytes",
        "budget_bytes",
        "fits",
        "search",
        "kv_capacity_tokens",
    ):
        assert data[key] == plan[key], key
    assert data["view"]["overflow"]["status"] == "fits"
    assert data["fixes"] == []


def test_oom_reports_where_and_by_how_much_and_the_cheapest_fix(client: TestClient) -> None:
    r = client.post("/api/serve", json={"model": "llama-3.1-70b", "gpus": 1, "gpu_memory": "80GB"})
    data = r.json()
    assert r.status_code == 200 and not data["fits"]
    over = data["view"]["overflow"]
    assert over["status"] == "oom"
    assert over["over_memory_bytes"] == data["per_gpu_total_bytes"] - 80_000_000_000
    assert over["crosses_memory_at"] == "weights"
    assert data["fixes"], "a plan that does not fit comes with fixes"
    fix = data["fixes"][0]
    again = client.post(
        "/api/serve",
        json={"model": "llama-3.1-70b", "gpus": 1, "gpu_memory": "80GB", **fix["change"]},
    ).json()
    assert again["fits"], fix


def test_config_json_pasted_as_an_object(client: TestClient) -> None:
    from gpuplan.catalog.models import _catalog_config

    config = _catalog_config("llama-3.1-8b")
    r = client.post("/api/serve", json={"config": config, "gpu_memory": "80GB"})
    assert r.status_code == 200
    assert r.json()["params_total"] == gpuplan.serve("llama-3.1-8b").params_total


def test_overrides_change_the_kv_cache(client: TestClient) -> None:
    base = {"model": "llama-3.1-70b", "gpus": 4, "context": 8192, "users": 16}
    gqa = client.post("/api/serve", json=base).json()
    mha = client.post("/api/serve", json={**base, "overrides": {"num_key_value_heads": 64}}).json()
    assert mha["kv_bytes_per_token"] == 8 * gqa["kv_bytes_per_token"]


@pytest.mark.parametrize(
    "body, where",
    [
        ({"model": "llama-3.1-8b", "context": 0}, "context"),
        ({"model": "llama-3.1-8b", "users": "many"}, "users"),
        ({"model": "llama-3.1-8b", "headroom": 1.5}, "headroom"),
        ({"model": "llama-3.1-8b", "gpus": "lots"}, "gpus"),
        ({"model": "llama-3.1-8b", "path": "/etc/passwd"}, "path"),
        ({"model": "llama-3.1-8b", "overrides": {"rope_scaling": 2}}, "overrides"),
        ({}, "model"),
    ],
)
def test_validation_errors_are_422_with_a_message(
    client: TestClient, body: dict, where: str
) -> None:
    r = client.post("/api/serve", json=body)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert isinstance(detail, str) and where in detail
    assert "Traceback" not in r.text


def test_engine_refusals_are_4xx_with_the_engine_message(client: TestClient) -> None:
    r = client.post("/api/serve", json={"model": "llama-3.1-8b", "tp": 3})
    assert r.status_code == 400
    assert "does not divide" in r.json()["detail"]
    r = client.post("/api/serve", json={"model": "llama-3.1-8b", "gpu": "h1000"})
    assert r.status_code == 400 and "unknown gpu" in r.json()["detail"]


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "../../../../etc/hostname",
        "~/.ssh/config.json",
        "/proc/self/environ",
        "config.json",
        ".",
        "src/gpuplan/catalog/data/models/meta-llama--Llama-3.1-8B.json",
    ],
)
def test_model_is_never_read_from_disk(client: TestClient, name: str) -> None:
    r = client.post("/api/serve", json={"model": name})
    assert r.status_code == 400
    assert "unknown model" in r.json()["detail"]
    for field in ("gpu", "dtype", "kv_dtype", "gpu_memory", "workspace"):
        r = client.post("/api/serve", json={"model": "llama-3.1-8b", field: name})
        assert r.status_code in (400, 422), field
        assert "root:" not in r.text


def test_malformed_config_is_refused_without_a_traceback(client: TestClient) -> None:
    for config in (
        {"hello": 1},
        {"model_type": "llama", "hidden_size": "big"},
        {"num_hidden_layers": -1},
    ):
        r = client.post("/api/serve", json={"config": config})
        assert r.status_code == 422, config
        assert r.json()["detail"].startswith("config.json")
        assert "Traceback" not in r.text
    deep: dict = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]
    r = client.post("/api/serve", json={"config": deep})
    assert r.status_code == 422 and "nested" in r.json()["detail"]
    r = client.post(
        "/api/serve", content=b'{"model": ', headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and "Traceback" not in r.text
    r = client.post("/api/serve", json={"config": [1, 2]})
    assert r.status_code == 422


def test_oversized_body_is_refused(client: TestClient) -> None:
    config = {"model_type": "llama", "padding": "x" * (MAX_BODY_BYTES + 10)}
    r = client.post("/api/serve", json={"config": config})
    assert r.status_code == 413
    assert "KiB" in r.json()["detail"]


def test_sweep_returns_the_engine_totals(client: TestClient) -> None:
    base = {"model": "llama-3.1-8b", "gpu_memory": "80GB", "gpus": 1}
    values = [1024, 4096, 131072]
    r = client.post("/api/sweep", json={"base": base, "vary": "context", "values": values})
    assert r.status_code == 200
    points = r.json()["points"]
    assert [p["value"] for p in points] == values
    for p in points:
        plan = gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1, context=p["value"])
        assert p["per_gpu_total_bytes"] == plan.per_gpu_total_bytes
        assert p["items"]["kv_cache"] == plan.bill.item("kv_cache").bytes
    r = client.post(
        "/api/sweep",
        json={"base": base, "vary": "users", "values": list(range(1, MAX_SWEEP_POINTS + 2))},
    )
    assert r.status_code == 422
    r = client.post("/api/sweep", json={"base": base, "vary": "zero", "values": [0, 1]})
    assert r.status_code == 400
    r = client.post(
        "/api/sweep", json={"base": {**base, "tp": 3}, "vary": "gpus", "values": [1, 3]}
    )
    assert r.status_code == 200 and r.json()["points"][1]["error"]


def test_catalogs_and_schema(client: TestClient) -> None:
    models = client.get("/api/models").json()["models"]
    assert any(m["id"] == "llama-3.1-8b" for m in models)
    gpus = client.get("/api/gpus").json()["gpus"]
    assert any(g["id"] == "h100-sxm" for g in gpus)
    precisions = client.get("/api/precisions").json()["precisions"]
    assert any(p["id"] == "fp8" and p["kv"] for p in precisions)
    schema = client.get("/openapi.json").json()
    for path in ("/api/serve", "/api/train", "/api/sweep", "/api/plan", "/api/models"):
        assert path in schema["paths"]
    serve_schema = schema["components"]["schemas"]["ServeRequest"]["properties"]
    assert {"model", "config", "context", "users", "gpu"} <= set(serve_schema)


def test_train_is_wired_or_says_not_yet(client: TestClient) -> None:
    r = client.post("/api/train", json={"model": "llama-3.1-8b", "zero": 3, "gpus": 8})
    if hasattr(gpuplan.api, "train"):
        assert r.status_code in (200, 400), r.text
    else:
        assert r.status_code == 501
        assert "not yet available" in r.json()["detail"]


def test_page_and_static_files(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and "<svg" in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    for name in ("app.js", "sim.js", "lesson.js", "plots.js", "state.js", "style.css"):
        r = client.get(f"/static/{name}")
        assert r.status_code == 200, name
        assert "http://" not in r.text.replace("http://www.w3.org/2000/svg", ""), name
        assert "https://" not in r.text, name
    assert client.get("/static/../api.py").status_code == 404


def test_lesson_has_23_steps_in_seven_parts_with_engine_drills(client: TestClient) -> None:
    lesson = client.get("/static/lesson.json").json()
    steps = lesson["steps"]
    assert len(steps) == 23
    assert sorted({s["part"] for s in steps}) == list(range(1, 8))
    for s in steps:
        assert s["title"] and s["text"] and s["scenario"]["mode"] in ("serve", "train")
    drills = [s for s in steps if s.get("drill")]
    assert len(drills) >= 2
    # the serving drills' answers come straight from the engine response
    for s in drills:
        sc = s["scenario"]
        if sc["mode"] != "serve":
            continue
        body = {k: v for k, v in sc.items() if k not in ("mode",)}
        data = client.post("/api/serve", json=body).json()
        assert isinstance(data[s["drill"]["answer_from"]], int)


def test_lesson_serving_scenarios_match_the_lesson_text(client: TestClient) -> None:
    steps = client.get("/static/lesson.json").json()["steps"]
    first = {k: v for k, v in steps[0]["scenario"].items() if k != "mode"}
    data = client.post("/api/serve", json=first).json()
    assert round(data["per_gpu_total_bytes"] / 1e9) == 19  # "19 GB of 80"
    assert data["gpu"]["memory_bytes"] == 80_000_000_000
    for s in steps:
        if s["scenario"]["mode"] == "serve":
            body = {k: v for k, v in s["scenario"].items() if k != "mode"}
            r = client.post("/api/serve", json=body)
            assert r.status_code == 200, (s["title"], r.text)
            if s["kind"] == "break":
                assert not r.json()["fits"], s["title"]


def test_json_numbers_are_exact_integers(client: TestClient) -> None:
    r = client.post("/api/serve", json={"model": "llama-3.1-405b", "gpus": 16})
    data = json.loads(r.text)
    assert all(isinstance(i["bytes"], int) for i in data["per_gpu"]["items"])


def test_train_endpoint_passes_only_the_controls_train_accepts(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring for gpuplan.api.train, with a stand-in until the real one lands."""
    seen: dict = {}

    class FakePlan:
        def to_dict(self, units: str = "GB") -> dict:
            items = [
                {"key": "weights", "name": "Weights", "category": "weights", "bytes": 10},
                {"key": "optimizer", "name": "Optimizer", "category": "optimizer", "bytes": 95},
            ]
            return {
                "mode": "train",
                "gpus": 8,
                "per_gpu": {"items": items, "total_bytes": 105},
                "per_gpu_total_bytes": 105,
                "budget_bytes": 90,
                "fits": False,
                "gpu": {"memory_bytes": 100},
            }

    def fake_train(model, gpu="h100", *, gpus=None, zero=0, micro_batch=1, seq=2048):  # type: ignore[no-untyped-def]
        seen.update(model=model, gpu=gpu, gpus=gpus, zero=zero, micro_batch=micro_batch, seq=seq)
        return FakePlan()

    monkeypatch.setattr(gpuplan.api, "train", fake_train, raising=False)
    body = {"model": "llama-3.1-8b", "gpus": 8, "zero": 3, "seq": 4096, "checkpointing": True}
    body["fixes"] = False  # the stand-in plan has no bill to look for fixes in
    r = client.post("/api/train", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert seen == {
        "model": "llama-3.1-8b",
        "gpu": "h100",
        "gpus": 8,
        "zero": 3,
        "micro_batch": 1,
        "seq": 4096,
    }
    assert data["view"]["overflow"]["status"] == "oom"
    assert data["view"]["overflow"]["crosses_memory_at"] == "optimizer"
    assert data["view"]["ignored_controls"] == ["checkpointing"]
    assert client.get("/api/features").json()["train"] is True
