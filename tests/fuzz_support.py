"""Shared by the tests/test_fuzz_*.py property tests: settings, hostile values, assertions.

Every fuzz test runs a fixed number of derandomised examples (deterministic in CI), with no
wall-clock limit (hypothesis `deadline=None`): the time and memory bounds are the code's, checked
through its own refusals. FUZZ_SCALE multiplies the example counts for a longer local run:
`FUZZ_SCALE=10 python -m pytest tests/test_fuzz_cli.py`.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- hostile values ----------------------------------------------------------------------

HUGE_INT = st.sampled_from([10**12, 2**63, 10**18 + 1, int("9" * 40), int("1" * 400)])
WEIRD_FLOAT_TEXT = st.sampled_from(
    ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "5e-324", "1e-400", "-0.0", "0.0"]
)
SIZE_TEXT = st.builds(
    lambda n, u: f"{n}{u}",
    st.one_of(
        st.integers(-5, 10**6).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        WEIRD_FLOAT_TEXT,
        HUGE_INT.map(str),
    ),
    st.sampled_from(["", "B", "KB", "MB", "GB", "TB", "GiB", "MiB", "TiB", "PB", "gb", " GB", "x"]),
)
MARKUP = st.sampled_from(["[/]", "[bold]", "[/red]", "[link=file:///etc/passwd]x", "\x1b[31m"])
TEXT = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    MARKUP,
    st.sampled_from(["", " ", "-", "--", "auto", "none", "0", "-1", "\n", "a\nb", "é", "💥"]),
    st.integers(300, 5000).map(lambda n: "x" * n),  # longer than a file name
)
NUMBER_TEXT = st.one_of(
    st.integers(-(10**6), 10**7).map(str),
    HUGE_INT.map(str),
    HUGE_INT.map(lambda n: str(-n)),
    WEIRD_FLOAT_TEXT,
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    SIZE_TEXT,
    TEXT,
)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """gpuplan's CLI in-process: (exit code, stdout, stderr)."""
    from gpuplan.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_clean_exit(argv: list[str], code: int, out: str, err: str) -> None:
    """Exit 0 (an answer) or 2 with exactly one line on stderr; never 70 or a traceback."""
    assert code in (0, 2), (argv, code, err[-500:])
    assert "Traceback" not in err, (argv, err[-2000:])
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, (argv, err[-2000:])
        assert lines[0].startswith("gpuplan: error: "), (argv, lines[0])
        assert len(lines[0]) <= 500, (argv, len(lines[0]))
        assert "\x1b" not in lines[0], (argv, lines[0])


def assert_refused(argv: list[str], code: int, out: str, err: str, needle: str = "") -> str:
    """Exit 2 with one clean line (containing `needle`): a refusal, never a crash."""
    assert_clean_exit(argv, code, out, err)
    assert code == 2, (argv, out[-300:])
    assert needle in err, (argv, err)
    return err


# --- hostile documents, one per format ---------------------------------------------------


def yaml_laughs(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs" YAML: each level an anchor listing the previous one `width` times
    (width ** levels leaves, a few hundred bytes of text)."""
    lines = ["a0: &a0 [lol]"]
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def deep_json(depth: int = 10_000) -> str:
    return "[" * depth + "]" * depth


def deep_yaml(depth: int = 10_000) -> str:
    return "x: " + "[" * depth + "]" * depth + "\n"


def deep_toml(depth: int = 10_000) -> str:
    return "x = " + "[" * depth + "]" * depth + "\n"


LONG_INT = "1" + "0" * 5000  # past Python's 4,300-digit int/str conversion limit


# --- GGUF bytes ----------------------------------------------------------------------------

GGUF_TYPES = {
    "u32": (4, "<I"),
    "i32": (5, "<i"),
    "f32": (6, "<f"),
    "u64": (10, "<Q"),
    "f64": (12, "<d"),
    "str": (8, None),
}


def _gguf_str(text: str) -> bytes:
    raw = text.encode("utf-8", errors="surrogatepass")
    return struct.pack("<Q", len(raw)) + raw


def gguf_bytes(
    meta: list[tuple[str, str, object]], tensors: list[tuple[str, list[int], int]]
) -> bytes:
    """A GGUF v3 header: metadata (key, type name, value) and tensor infos (name, dims with the
    fastest-varying first, GGML type id); no tensor data."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, kind, value in meta:
        type_id, fmt = GGUF_TYPES[kind]
        body = _gguf_str(str(value)) if fmt is None else struct.pack(fmt, value)
        out += _gguf_str(key) + struct.pack("<I", type_id) + body
    for name, dims, type_id in tensors:
        out += _gguf_str(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", type_id, 0)
    return out


def llama_gguf_meta(**overrides: tuple[str, object]) -> list[tuple[str, str, object]]:
    """A small Llama's GGUF metadata; `overrides` replace keys (without the llama. prefix)."""
    meta = {
        "block_count": ("u32", 2),
        "embedding_length": ("u32", 64),
        "feed_forward_length": ("u32", 128),
        "attention.head_count": ("u32", 4),
        "attention.head_count_kv": ("u32", 2),
        "context_length": ("u32", 2048),
        "vocab_size": ("u32", 256),
    }
    meta.update(overrides)
    return [("general.architecture", "str", "llama")] + [
        (f"llama.{k}", kind, v) for k, (kind, v) in meta.items()
    ]
