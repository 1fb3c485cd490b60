"""Corrupt model inputs: every one a one-line GpuplanError (exit 2 from the CLI), never a
traceback; reads stay bounded. Fuzzed with hypothesis."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.catalog.models import resolve_source
from gpuplan.catalog.sources.gguf_header import parse_gguf
from gpuplan.catalog.sources.safetensors_header import (
    DTYPE_BITS,
    MAX_HEADER_BYTES,
    header_length,
    parse_header,
    read_file_header,
)
from gpuplan.cli.main import main
from gpuplan.errors import GpuplanError

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _one_line(err: GpuplanError) -> None:
    assert "\n" not in str(err) and str(err)


@FUZZ
@given(st.binary(max_size=200))
def test_random_safetensors_headers(raw: bytes) -> None:
    try:
        parse_header(raw, "m.safetensors")
    except GpuplanError as err:
        _one_line(err)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.fixed_dictionaries(
            {},
            optional={
                "dtype": st.sampled_from([*DTYPE_BITS, "Q9", "", "bf16"]) | json_values,
                "shape": st.lists(st.integers(-3, 2**50), max_size=9) | json_values,
                "data_offsets": st.lists(st.integers(-5, 2**63), max_size=3) | json_values,
            },
        )
        | json_values,
        max_size=5,
    )
)
def test_structured_safetensors_headers(header: dict) -> None:
    raw = json.dumps(header).encode()
    try:
        tensors = parse_header(raw, "m.safetensors")
    except GpuplanError as err:
        _one_line(err)
        return
    for t in tensors:  # what parses is consistent: bytes from dtype and shape
        assert t.nbytes == -(-t.numel * DTYPE_BITS[t.dtype] // 8)


@FUZZ
@given(st.integers(0, 2**64 - 1), st.integers(0, 64))
def test_header_length_past_the_end(n: int, size: int) -> None:
    first8 = struct.pack("<Q", n)
    try:
        got = header_length(first8, "m", 8 + size)
    except GpuplanError as err:
        _one_line(err)
        assert n > size or n > MAX_HEADER_BYTES
        return
    assert got == n <= size


@FUZZ
@given(
    st.binary(min_size=0, max_size=300),
    st.sampled_from([b"GGUF", b"GGML", b"\x00\x00\x00\x00", b"GGU"]),
)
def test_random_gguf(tail: bytes, magic: bytes) -> None:
    try:
        parse_gguf(io.BytesIO(magic + tail), "m.gguf")
    except GpuplanError as err:
        _one_line(err)
        if (magic + tail)[:4] != b"GGUF":  # "GGU" + a tail starting with "F" is GGUF's magic
            assert "not a GGUF file" in str(err)


@FUZZ
@given(
    st.integers(0, 5), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.binary(max_size=120)
)
def test_gguf_counts_and_versions(version: int, n_tensors: int, n_kv: int, rest: bytes) -> None:
    blob = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + rest
    try:
        parse_gguf(io.BytesIO(blob), "m.gguf")
    except GpuplanError as err:
        _one_line(err)


def test_corrupt_files_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each corrupt input the issue names: one line on stderr, exit 2."""
    (tmp_path / "past").mkdir()
    (tmp_path / "past" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "past" / "model.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "config.json").write_text("{")
    (tmp_path / "dtype").mkdir()
    (tmp_path / "dtype" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    bad = json.dumps({"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}).encode()
    (tmp_path / "dtype" / "model.safetensors").write_bytes(struct.pack("<Q", len(bad)) + bad)
    (tmp_path / "magic.gguf").write_bytes(b"GGML" + bytes(40))
    (tmp_path / "empty").mkdir()
    cases = {
        "past": "runs past the end",
        "json": "not valid JSON",
        "dtype": "unknown dtype",
        "magic.gguf": "not a GGUF file",
        "empty": "directory has no config.json",
    }
    for name, message in cases.items():
        assert main(["inspect", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (name, err)


def test_reads_are_bounded(tmp_path: Path) -> None:
    """A header claiming more than the format's limit is refused before anything is read."""
    f = tmp_path / "m.safetensors"
    f.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"x" * 16)
    with pytest.raises(GpuplanError, match="limit"):
        read_file_header(f)
    with pytest.raises(GpuplanError):
        resolve_source("x" * 5000)
