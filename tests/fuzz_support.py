"""Shared by the tests/test_fuzz_*.py property tests: settings, hostile values, assertions.

Every fuzz test runs a fixed number of derandomised examples (deterministic in CI), each under
a per-example time limit (hypothesis `deadline`). FUZZ_SCALE multiplies the example counts for
a longer local run: `FUZZ_SCALE=10 python -m pytest tests/test_fuzz_cli.py`.
"""

from __future__ import annotations

import contextlib
import io
import os
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
CASE_LIMIT = timedelta(seconds=3)  # one case: a CLI run, a config, a log, a request


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=CASE_LIMIT,
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
