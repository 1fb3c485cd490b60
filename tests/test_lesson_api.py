"""web/lesson_api.py: drill answers read the way people type them, checked against the engine;
headline comparisons and "what changed" over the same requests as /api/serve and /api/train."""

from __future__ import annotations

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

import gpuplan  # noqa: E402
from gpuplan.web.app import create_app  # noqa: E402
from gpuplan.web.lesson_api import (  # noqa: E402
    AnswerError,
    is_right,
    lesson,
    parse_number,
    read_answer,
)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(), raise_server_exceptions=False)


@pytest.mark.parametrize(
    ("text", "value", "digits"),
    [
        ("1129", 1129, 4),
        ("1,120", 1120, 3),  # thousands separator
        ("1 120", 1120, 3),
        ("1,234,567", 1234567, 7),
        ("16,3", 16.3, 3),  # decimal comma
        ("0,130", 0.13, 3),
        ("1,13", 1.13, 3),
        ("1.234,5", 1234.5, 5),
        ("1,234.5", 1234.5, 5),
        ("17.18", 17.18, 4),
        (".5", 0.5, 1),
        ("50", 50, 1),
    ],
)
def test_numbers_as_people_type_them(text, value, digits):
    assert parse_number(text) == (pytest.approx(value), digits)


@pytest.mark.parametrize("text", ["1.2.3", "1,23,4", "12,5.3", "1..2", ""])
def test_nonsense_is_refused(text):
    with pytest.raises(AnswerError):
        parse_number(text)


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("1129 GB", "TB", 1.129),
        ("1,120 GB", "TB", 1.12),
        ("1.13 TB", "TB", 1.13),
        ("1.13TB", "TB", 1.13),
        ("1 TiB", "TB", 2**40 / 1e12),
        ("16 GiB", "GB", 16 * 2**30 / 1e9),
        ("17,2", "GB", 17.2),
        ("17180 MB", "GB", 17.18),
        ("50 sequences", "sequences", 50),
        ("50 users", "sequences", 50),
    ],
)
def test_units_are_converted_to_the_drills(text, unit, value):
    assert read_answer(text, unit)["value"] == pytest.approx(value)


def test_a_unit_of_the_wrong_kind_is_refused():
    with pytest.raises(AnswerError):
        read_answer("5 apples", "GB")
    with pytest.raises(AnswerError):
        read_answer("50 GB", "sequences")


def test_right_within_tolerance_or_as_rounded():
    truth = 1.128859  # TB
    assert is_right(1.13, 3, truth, 0.01)
    assert is_right(1129 / 1000, 4, truth, 0.01)
    assert is_right(1.12, 3, truth, 0.01)  # 70 × 16 = 1,120 GB: the formula sheet, 0.8 % low
    assert is_right(1.1, 2, truth, 0.01)  # rounded to two digits
    assert not is_right(1.0, 1, truth, 0.01)  # one digit is too coarse to count
    assert not is_right(1.2, 2, truth, 0.01)


def test_drill_check_70b_training_state(client: TestClient) -> None:
    states = gpuplan.train(
        "llama-3.1-70b", gpus=1, zero=0, gpu_memory="marketed"
    ).model_states_bytes
    for answer in ("1129 GB", "1,120 GB", "1.13 TB", "1,13 TB"):
        r = client.post("/api/lesson/check", json={"step": 21, "answer": answer}).json()
        assert r["right"], (answer, r)
        assert r["truth"] == pytest.approx(states / 1e12)
    r = client.post("/api/lesson/check", json={"step": 21, "answer": "1,120 GB"}).json()
    assert r["read_as"] == "1,120 GB = 1.12 TB"
    assert any("70.55 B × 2 bytes" in line for line in r["arithmetic"])
    n = states // 16
    assert r["arithmetic"][-1].startswith(
        f"in all 16 bytes × {n:,} parameters = {16 * n / 1e12:.2f} TB"
    )
    r = client.post("/api/lesson/check", json={"step": 21, "answer": "1120"}).json()
    assert not r["right"] and r["hint"].startswith("1120 GB would be right")
    r = client.post("/api/lesson/check", json={"step": 21, "answer": "a lot"}).json()
    assert r["status"] == "unreadable" and not r["right"]


def test_drill_check_counts_and_kv_cache(client: TestClient) -> None:
    plan = gpuplan.serve("llama-3.1-70b", gpus=4, context=8192, gpu_memory="marketed")
    r = client.post(
        "/api/lesson/check", json={"step": 8, "answer": str(plan.max_concurrent_sequences)}
    ).json()
    assert r["right"] and r["unit"] == "sequences"
    assert f"{plan.kv_capacity_tokens:,} tokens" in r["arithmetic"][0]
    # 2 × 32 layers × 8 KV heads × 128 dims × 2 bytes × 131,072 tokens
    kv = 2 * 32 * 8 * 128 * 2 * 131072
    r = client.post("/api/lesson/check", json={"step": 9, "answer": "17,2 GB"}).json()
    assert r["right"] and r["truth"] == pytest.approx(kv / 1e9)


def test_check_refuses_a_step_without_a_drill(client: TestClient) -> None:
    r = client.post("/api/lesson/check", json={"step": 1, "answer": "1"})
    assert r.status_code == 400 and "no drill" in r.json()["detail"]
    assert client.post("/api/lesson/check", json={"step": 0, "answer": "1"}).status_code == 422


def test_compare_zero_stages(client: TestClient) -> None:
    base = {
        "mode": "train",
        "model": "llama-3.1-8b",
        "gpus": 8,
        "zero": 0,
        "gpu_memory": "marketed",
    }
    r = client.post(
        "/api/lesson/compare",
        json={"base": base, "variants": [{"zero": z} for z in range(4)]},
    )
    assert r.status_code == 200, r.text
    data = r.json()
    n = gpuplan.train("llama-3.1-8b", gpus=1, gpu_memory="marketed").params_total
    expected = [16 * n, 4 * n + 12 * n // 8, 2 * n + 14 * n // 8, 2 * n]
    got = [p["model_states_bytes"] for p in data["points"]]
    assert got == pytest.approx(expected, rel=1e-6)
    assert data["scale_bytes"] == max(p["scale_bytes"] for p in data["points"])
    assert data["current"]["zero"] == 0 and data["errors"] == [None] * 4


def test_compare_follows_the_gpu_type_at_its_marketed_memory(client: TestClient) -> None:
    base = {
        "mode": "train",
        "model": "llama-3.1-70b",
        "gpus": "auto",
        "zero": 3,
        "gpu_memory": "marketed",
    }
    variants = [{"gpu": "h100-sxm"}, {"gpu": "h200"}, {"gpu": "b200"}]
    data = client.post("/api/lesson/compare", json={"base": base, "variants": variants}).json()
    assert [p["gpus"] for p in data["points"]][1:] == [16, 8]
    assert [p["gpu"]["memory_bytes"] for p in data["points"]] == [80e9, 141e9, 180e9]
    assert data["points"][0]["lower_bound_gpus"] == 16
    assert data["points"][0]["why_not_fewer"]["gpus"] == 16


def test_compare_reports_a_refused_variant_and_limits_its_size(client: TestClient) -> None:
    base = {"mode": "serve", "model": "llama-3.1-70b", "gpus": 4}
    data = client.post(
        "/api/lesson/compare", json={"base": base, "variants": [{"gpus": 4}, {"gpus": 3}]}
    ).json()
    assert data["points"][1] is None and "tp=3" in data["errors"][1]
    too_many = [{"gpus": 1}] * 9
    assert (
        client.post("/api/lesson/compare", json={"base": base, "variants": too_many}).status_code
        == 422
    )
    bad = client.post("/api/lesson/compare", json={"base": {**base, "nope": 1}, "variants": [{}]})
    assert bad.status_code == 400 and "nope" in bad.json()["detail"]


def test_change_between_two_requests(client: TestClient) -> None:
    before = {"mode": "train", "model": "llama-3.1-8b", "gpus": 8, "zero": 0}
    r = client.post("/api/lesson/change", json={"before": before, "after": {**before, "zero": 1}})
    assert "Optimizer states ÷ 8" in r.json()["caption"]


def test_marketed_memory_follows_the_gpu(client: TestClient) -> None:
    for gpu, memory in (("h100", 80e9), ("h200", 141e9), ("b200", 180e9)):
        data = client.post(
            "/api/serve", json={"model": "llama-3.1-8b", "gpu": gpu, "gpu_memory": "marketed"}
        ).json()
        assert data["gpu"]["memory_bytes"] == memory
        assert data["gpu"]["memory_basis"] == "marketed"
    driver = client.post("/api/serve", json={"model": "llama-3.1-8b", "gpu_memory": "driver"})
    assert driver.json()["gpu"]["memory_basis"] == "driver"


def test_every_drill_names_a_figure_the_engine_gives(client: TestClient) -> None:
    for step in lesson()["steps"]:
        if step.get("drill"):
            r = client.post("/api/lesson/check", json={"step": step["id"], "answer": "1"})
            assert r.status_code == 200, (step["id"], r.text)
            assert r.json()["truth"] > 0
            assert all("?" not in line for line in r.json()["arithmetic"]), r.json()["arithmetic"]
