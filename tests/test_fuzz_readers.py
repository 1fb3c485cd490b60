"""Property: every reader safe_read guards (JSON, TOML, YAML, Megatron flags, GGUF, HF cache refs
and revisions, the Hub client, the web body) gives an answer or one GpuplanError line, within its
own bounds. Hypothesis strategies per format; the bombs (billion laughs, 10^4-deep nesting,
5,000-digit integers) per format; slow servers on loopback. No timer in any test: a read that did
not stop would hang the test, and every bound is checked through the refusal that enforces it.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import (
    HUGE_INT,
    LONG_INT,
    TEXT,
    deep_json,
    deep_toml,
    deep_yaml,
    fuzz_settings,
    gguf_bytes,
    llama_gguf_meta,
    yaml_laughs,
)
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import MAX_DEPTH, check_tree, clean_name, load_json, load_toml, load_yaml


def _one_line(err: GpuplanError) -> None:
    text = str(err)  # the CLI escapes and shortens it (fuzz_support.assert_clean_exit)
    assert text and "\n" not in text, text


def _answer_or_refuse(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except GpuplanError as err:
        _one_line(err)
        return None


# --- values every format can carry -------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    HUGE_INT,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)


def _finite(doc: Any) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(_finite(v) for v in doc.values())
    if isinstance(doc, list):
        return all(_finite(v) for v in doc)
    return True


# --- JSON -------------------------------------------------------------------------------------


@fuzz_settings(300)
@given(doc=VALUES)
def test_json_documents_load_or_refuse(doc: Any) -> None:
    text = json.dumps(doc)
    got = _answer_or_refuse(load_json, text, "doc.json")
    if got is not None or doc is None:
        assert _finite(got)  # a NaN/Infinity never gets through
        assert got == json.loads(text)


@fuzz_settings(300)
@given(text=st.text(max_size=300) | st.binary(max_size=300))
def test_json_text_of_any_kind(text: str | bytes) -> None:
    _answer_or_refuse(load_json, text, "doc.json")


DS_KEYS = [
    "zero_optimization",
    "bf16",
    "fp16",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_batch_size",
    "activation_checkpointing",
]


@fuzz_settings(200)
@given(
    doc=st.dictionaries(
        st.sampled_from(DS_KEYS),
        VALUES
        | st.fixed_dictionaries(
            {},
            optional={
                "stage": SCALARS,
                "offload_optimizer": VALUES,
                "offload_param": VALUES,
                "enabled": SCALARS,
                "reduce_bucket_size": SCALARS,
                "device": SCALARS,
            },
        ),
        max_size=5,
    )
)
def test_deepspeed_configs(doc: dict[str, Any]) -> None:
    from gpuplan.engine.frameworks import deepspeed

    _answer_or_refuse(deepspeed.read, json.dumps(doc), 8)


@fuzz_settings(200)
@given(
    doc=st.dictionaries(
        st.sampled_from(
            [
                "fsdp",
                "bf16",
                "fp16",
                "optim",
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "gradient_checkpointing",
                "max_seq_length",
                "deepspeed",
            ]
        ),
        VALUES,
        max_size=5,
    )
)
def test_hf_trainer_arguments(doc: dict[str, Any]) -> None:
    from gpuplan.engine.frameworks import hf_trainer

    _answer_or_refuse(hf_trainer.read, json.dumps(doc))


# --- TOML --------------------------------------------------------------------------------------

TOML_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.sampled_from(["inf", "-inf", "nan", "+inf", LONG_INT, "1e400", "true", "0.5", '"x"']),
    st.lists(st.integers(-5, 5), max_size=4).map(lambda v: "[" + ", ".join(map(str, v)) + "]"),
    st.text(alphabet="abc[]{}=\"'., 0123\n", max_size=20),
)


@fuzz_settings(300)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["training", "parallelism", "model", "compile", "optimizer", "x"]),
            st.sampled_from(
                [
                    "local_batch_size",
                    "seq_len",
                    "tensor_parallel_degree",
                    "data_parallel_shard_degree",
                    "enable",
                    "name",
                    "steps",
                ]
            ),
            TOML_VALUES,
        ),
        max_size=6,
    )
)
def test_torchtitan_tomls(rows: list[tuple[str, str, str]]) -> None:
    from gpuplan.engine.frameworks import torchtitan

    text = "".join(f"[{section}]\n{key} = {value}\n" for section, key, value in rows)
    _answer_or_refuse(torchtitan.read, text, 8)


# --- YAML --------------------------------------------------------------------------------------

YAML_SCALARS = st.sampled_from(
    [
        ".inf",
        "-.inf",
        ".nan",
        LONG_INT,
        "*a",
        "&a x",
        "!!python/object:os.system",
        "[*b]",
        "~",
        "yes",
        "0x1F",
        "1_000",
        "2001-12-14",
        "{a: 1}",
        "[1, [2, [3]]]",
        "'q'",
        "3",
        "-1",
    ]
)


@fuzz_settings(300)
@given(
    extra=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "batch_size",
                    "gradient_accumulation_steps",
                    "dtype",
                    "compile",
                    "model",
                    "tokenizer",
                    "lora_attn_modules",
                    "optimizer",
                    "loss",
                ]
            ),
            YAML_SCALARS | TEXT.map(json.dumps),
        ),
        max_size=5,
    ),
    overrides=st.lists(
        st.tuples(
            st.sampled_from(["batch_size", "model.lora_rank", "a.b.c", "tokenizer"]), YAML_SCALARS
        ),
        max_size=2,
    ),
)
def test_torchtune_yamls_and_overrides(
    extra: list[tuple[str, str]], overrides: list[tuple[str, str]]
) -> None:
    from gpuplan.engine.frameworks import torchtune

    base = (
        "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n"
        "tokenizer:\n  max_seq_len: 2048\n"
    )
    text = base + "".join(f"{key}: {value}\n" for key, value in extra)
    _answer_or_refuse(torchtune.read, text, [f"{k}={v}" for k, v in overrides])


@fuzz_settings(100)
@given(doc=st.dictionaries(st.text(min_size=1, max_size=10), VALUES, max_size=5))
def test_vllm_config_files(doc: dict[str, Any]) -> None:
    import yaml

    from gpuplan.engine.profiles import get_adapter

    try:
        text = yaml.safe_dump(doc)
    except (yaml.YAMLError, ValueError):
        return
    _answer_or_refuse(get_adapter("vllm").config_args, text)


# --- Megatron flags ------------------------------------------------------------------------------

NUMBER_WORDS = st.one_of(
    st.integers(-3, 5000).map(str),
    HUGE_INT.map(str),
    st.sampled_from(["1e12", "1.0e+30", "inf", "nan", LONG_INT, "0x10", "", "8.5", "-0"]),
)


@fuzz_settings(300)
@given(
    flags=st.dictionaries(
        st.sampled_from(
            [
                "num-layers",
                "hidden-size",
                "num-attention-heads",
                "seq-length",
                "num-experts",
                "moe-router-topk",
                "ffn-hidden-size",
                "kv-channels",
                "tensor-model-parallel-size",
                "pipeline-model-parallel-size",
                "vocab-size",
                "hidden-dropout",
                "micro-batch-size",
                "num-query-groups",
                "recompute-num-layers",
            ]
        ),
        NUMBER_WORDS,
        max_size=8,
    ),
    yaml_form=st.booleans(),
)
def test_megatron_flags(flags: dict[str, str], yaml_form: bool) -> None:
    from gpuplan import api
    from gpuplan.engine.frameworks import megatron

    base = {
        "num-layers": "2",
        "hidden-size": "256",
        "num-attention-heads": "4",
        "seq-length": "1024",
        **flags,
    }
    if yaml_form:
        text = "MODEL_ARGS:\n" + "".join(f"  --{k}: {v or '~'}\n" for k, v in base.items())
    else:
        text = " ".join(f"--{k} {v}" if v else f"--{k}" for k, v in base.items())
    read = _answer_or_refuse(megatron.read, text)
    if read is not None:  # what is read is bounded: the bill is built in bounded time
        arch = read.model
        assert arch.num_layers <= 4096 and arch.hidden_size <= 1 << 22
        if arch.moe is not None:
            assert arch.moe.experts_per_token <= arch.moe.num_experts
        _answer_or_refuse(
            api.train,
            arch,
            "h100",
            gpus=8,
            **{k: v for k, v in read.kwargs.items() if k in ("tp", "pp", "seq", "micro_batch")},
        )


# --- the bombs, per format ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loader", "text"),
    [
        (load_json, deep_json()),
        (load_json, '{"a": ' + LONG_INT + "}"),
        (load_json, '{"a": NaN}'),
        (load_toml, deep_toml()),
        (load_toml, "a = " + LONG_INT),
        (load_toml, "a = nan"),
        (load_yaml, deep_yaml()),
        (load_yaml, yaml_laughs()),
        (load_yaml, "a: &a [*a]\n"),  # an alias to itself: a cycle, refused by depth
        (load_yaml, "a: " + LONG_INT),
        (load_yaml, "a: .nan"),
        (load_json, "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2)),
    ],
)
def test_each_format_refuses_its_bombs(loader: Any, text: str) -> None:
    with pytest.raises(GpuplanError) as err:
        loader(text, "doc")
    _one_line(err.value)


def test_a_wide_yaml_expansion_under_the_alias_limit_is_still_bounded() -> None:
    # 9 levels of 9 references: 81 aliases, under MAX_ALIASES, 9^9 leaves expanded
    with pytest.raises(GpuplanError, match="values"):
        load_yaml(yaml_laughs(levels=9, width=9), "doc")


def test_check_tree_walks_iteratively() -> None:
    deep: Any = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    with pytest.raises(GpuplanError, match="nested"):
        check_tree(deep, "doc")


@fuzz_settings(300)
@given(st.text(max_size=80))
def test_clean_names_are_printable(text: str) -> None:
    shown = clean_name(text, 100)
    assert shown.isprintable() and len(shown) <= 100


# --- GGUF ----------------------------------------------------------------------------------------

GGUF_NUMBERS = st.one_of(
    st.tuples(st.just("u32"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("u64"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("i32"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("f32"), st.floats(width=32, allow_nan=True, allow_infinity=True)),
    st.tuples(st.just("f64"), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just("str"), st.text(max_size=8)),
)


@fuzz_settings(300)
@given(
    meta=st.dictionaries(
        st.sampled_from(
            [
                "block_count",
                "embedding_length",
                "feed_forward_length",
                "attention.head_count",
                "attention.head_count_kv",
                "context_length",
                "vocab_size",
                "expert_count",
                "expert_used_count",
            ]
        ),
        GGUF_NUMBERS,
        max_size=4,
    ),
    dims=st.lists(
        st.integers(0, 2**64 - 1) | st.sampled_from([64, 256, 2**34, 2**35]), min_size=1, max_size=4
    ),
    name=st.text(max_size=20),
)
def test_gguf_headers(meta: dict[str, Any], dims: list[int], name: str) -> None:
    import io

    from gpuplan.catalog import load_architecture
    from gpuplan.catalog.sources.gguf_header import config_from_gguf, parse_gguf

    blob = gguf_bytes(llama_gguf_meta(**meta), [(name, dims, 0)])
    parsed = _answer_or_refuse(parse_gguf, io.BytesIO(blob), "m.gguf")
    if parsed is None:
        return
    tensors = parsed[1]
    for t in tensors:
        assert t.name.isprintable()
        assert t.numel <= 1 << 44
    config = _answer_or_refuse(config_from_gguf, parsed[0], tensors, "m.gguf")
    if config is not None:
        _answer_or_refuse(load_architecture, config)


# --- the HF cache: refs and revisions ---------------------------------------------------------


@fuzz_settings(300)
@given(st.text(max_size=60))
def test_revisions_are_refs_or_commits(revision: str) -> None:
    from gpuplan.catalog.sources.hf_cache import check_revision

    ok = _answer_or_refuse(check_revision, revision)
    if ok is not None:
        assert ".." not in ok and not ok.startswith("/") and ok.isprintable()
        assert all(part and not part.startswith(".") for part in ok.split("/"))


@fuzz_settings(100)
@given(content=st.binary(max_size=300), revision=st.sampled_from([None, "main", "v2"]))
def test_cached_refs_of_any_content(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, revision: str | None
) -> None:
    import os

    from gpuplan.catalog.sources.hf_cache import snapshot

    root = tmp_path_factory.mktemp("hub")
    repo = root / "models--acme--x"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots" / ("c" * 40)).mkdir(parents=True)
    (repo / "refs" / (revision or "main")).write_bytes(content)
    old = os.environ.get("HF_HUB_CACHE")
    os.environ["HF_HUB_CACHE"] = str(root)
    try:
        found = _answer_or_refuse(snapshot, "acme/x", revision)
    finally:
        if old is None:
            os.environ.pop("HF_HUB_CACHE")
        else:
            os.environ["HF_HUB_CACHE"] = old
    if found is not None:
        assert found.resolve().is_relative_to(repo.resolve())


# --- slow servers on loopback -------------------------------------------------------------------


@contextmanager
def _dribbling_hub(delay_s: float) -> Iterator[tuple[str, threading.Event]]:
    """A Hub whose model-info answer comes one byte at a time, `delay_s` apart (each read
    returns well inside any per-read timeout)."""
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"sha": "c" * 40, "siblings": [{"rfilename": "config.json"}]})
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for ch in body.encode():
                if done.is_set():
                    return
                try:
                    self.wfile.write(bytes([ch]))
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(delay_s)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", done
    finally:
        done.set()
        server.shutdown()
        server.server_close()


def test_a_hub_sending_one_byte_at_a_time_meets_the_whole_request_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuplan.catalog.sources import hub

    # the bounds under test, made small; the server's bytes each come well within READ_TIMEOUT_S
    monkeypatch.setattr(hub, "DEADLINE_S", 1.0)
    monkeypatch.setattr(hub, "READ_TIMEOUT_S", 0.5)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with _dribbling_hub(0.05) as (url, _):
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(GpuplanError, match="did not answer within 1 s") as err:
            hub.repo_listing("acme/slow", None)
    _one_line(err.value)


# --- the web body -------------------------------------------------------------------------------


def test_a_chunked_body_over_the_limit_gets_413() -> None:
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app

    def chunks() -> Iterator[bytes]:
        for _ in range(160):  # 10 MB, no Content-Length: sent chunked
            yield b" " * 65536

    with TestClient(create_app(workers=1), raise_server_exceptions=False) as client:
        r = client.post(
            "/api/serve", content=chunks(), headers={"content-type": "application/json"}
        )
    assert r.status_code == 413 and "larger than" in r.json()["detail"]


def test_a_half_sent_body_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    from gpuplan.web import guard
    from gpuplan.web.app import create_app

    monkeypatch.setattr(guard, "BODY_TIMEOUT_S", 0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(workers=1), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                f"POST /api/serve HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model":'.encode()
            )  # 10 of the 100 bytes promised, then nothing
            reply = ""
            while "}" not in reply:  # the status line and headers, then the JSON body
                chunk = sock.recv(65536).decode("latin-1")
                if not chunk:
                    break
                reply += chunk
        assert reply.startswith("HTTP/1.1 408"), reply[:200]
        assert "request body not received" in reply
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_cheap_requests_have_their_own_workers() -> None:
    from fastapi.testclient import TestClient

    from gpuplan.web.app import LIGHT_UNITS, create_app
    from gpuplan.web.limits import work_units
    from gpuplan.web.schema import ServeRequest, TrainRequest

    cheap = ServeRequest(model="llama-3.2-1b", gpus=1, fixes=False)
    heavy = TrainRequest(model="llama-3.2-1b")  # a training search with fixes
    assert work_units("serve", cheap)[0] <= LIGHT_UNITS < work_units("train", heavy)[0]
    app = create_app(workers=2)
    engine = app.state.engine  # type: ignore[attr-defined]
    assert engine.light is not engine.pool
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/api/serve", json=cheap.model_dump(exclude_none=True))
        assert r.status_code == 200
        assert engine.light.pids(), "the cheap request did not run in the light pool"
