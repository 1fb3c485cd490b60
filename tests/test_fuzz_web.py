"""Property: any request to the web API gets 200 or a 4xx with {"detail": one line}, never a 5xx,
always with the security headers (bounded by the server's own limits).

Bodies mix the schema's fields with hostile values (wrong types, huge and non-finite numbers,
sizes that round to zero, long strings, markup, pasted configs with hostile fields), unknown
fields, broken JSON and odd content types.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import HUGE_INT, SIZE_TEXT, TEXT, fuzz_settings

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from gpuplan.catalog.models import _catalog_config  # noqa: E402
from gpuplan.web.app import create_app  # noqa: E402

ROUTES = ("/api/serve", "/api/plan", "/api/train", "/api/sweep")
FIELDS = [
    "model",
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dp",
    "dtype",
    "kv_dtype",
    "context",
    "users",
    "headroom",
    "gpu_memory",
    "workspace",
    "cuda_context",
    "units",
    "server_gpus",
    "fixes",
    "zero",
    "fsdp",
    "micro_batch",
    "seq",
    "checkpointing",
    "method",
    "lora_rank",
    "optimizer",
    "overrides",
    "config",
]
PLAUSIBLE = {
    "model": st.sampled_from(["llama-3.2-1b", "qwen2.5-0.5b", "gpt2", "qwen1.5-moe-a2.7b"]),
    "gpu": st.sampled_from(["h100", "a10g", "l40s", "mi300x"]),
    "gpus": st.sampled_from([1, 2, 4, 8]),
    "context": st.sampled_from([512, 4096, 32768]),
    "users": st.sampled_from([1, 4, 64]),
    "headroom": st.sampled_from([0.5, 0.9, 1.0]),
    "gpu_memory": st.sampled_from(["80GB", "24GiB", 80_000_000_000]),
    "dtype": st.sampled_from(["bf16", "fp8", "int4", "awq"]),
    "zero": st.sampled_from([0, 1, 2, 3]),
    "seq": st.sampled_from([1024, 4096]),
    "method": st.sampled_from(["full", "lora", "qlora"]),
}
JSON_VALUE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**6), 10**6),
        HUGE_INT,
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([1e308, 5e-324, -0.0]),
        TEXT,
        SIZE_TEXT,
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _config_value(draw: st.DrawFn) -> dict[str, Any]:
    config = dict(_catalog_config(draw(st.sampled_from(["llama-3.2-1b", "qwen2.5-0.5b", "gpt2"]))))
    key = draw(st.sampled_from(["hidden_size", "num_attention_heads", "vocab_size", "head_dim"]))
    config[key] = draw(JSON_VALUE)
    return config


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, Any]:
    route = draw(st.sampled_from(ROUTES))
    body: dict[str, Any] = {"model": draw(PLAUSIBLE["model"])}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        if name == "config":
            body.pop("model", None)
            body["config"] = _config_value(draw)
        elif name in PLAUSIBLE and draw(st.booleans()):
            body[name] = draw(PLAUSIBLE[name])
        else:
            body[name] = draw(JSON_VALUE)
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.text(max_size=8))] = draw(JSON_VALUE)
    if route == "/api/sweep":
        vary = draw(st.sampled_from(["context", "users", "gpus", "zero", "seq", "micro_batch"]))
        values = draw(st.lists(st.integers(-1, 10**7), min_size=0, max_size=6))
        body = {
            "mode": draw(st.sampled_from(["serve", "train", "x"])),
            "base": body,
            "vary": vary,
            "values": values,
        }
    return route, body


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(workers=2), raise_server_exceptions=False) as c:
        yield c


def assert_answer(response: Any) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    assert response.headers.get("x-content-type-options") == "nosniff"
    assert "default-src 'self'" in response.headers.get("content-security-policy", "")
    data = response.json()
    if response.status_code >= 400:
        detail = data["detail"]
        assert isinstance(detail, str) and detail and "\n" not in detail, data
        assert "Traceback" not in response.text


@fuzz_settings(1500)
@given(request=bodies())
def test_any_request_is_answered_or_refused_with_a_message(
    client: TestClient, request: tuple[str, Any]
) -> None:
    route, body = request
    assert_answer(client.post(route, content=json.dumps(body)))


@fuzz_settings(200)
@given(
    raw=st.one_of(
        st.binary(max_size=64),
        st.sampled_from([b"", b"{", b"[]", b"null", b"1e400", b'{"model": NaN}', b"\xff\xfe"]),
        st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    ),
    route=st.sampled_from(ROUTES),
    content_type=st.sampled_from(["application/json", "text/plain", "", "multipart/form-data"]),
)
def test_any_bytes_are_refused_with_a_message(
    client: TestClient, raw: bytes, route: str, content_type: str
) -> None:
    assert_answer(client.post(route, content=raw, headers={"content-type": content_type}))


def test_non_finite_numbers_in_json_are_refused(client: TestClient) -> None:
    for value in (math.nan, math.inf, -math.inf):
        text = json.dumps({"model": "llama-3.2-1b", "headroom": value})
        r = client.post("/api/serve", content=text)
        assert_answer(r)
        assert r.status_code == 422
