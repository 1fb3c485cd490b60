"""Property: any startup log gives a comparison or a one-line error; nothing it says is obeyed.

Real vLLM 0.19 logs (tests/data/engine_logs/) mutated: numbers replaced by hostile ones, the
launch-arguments dict given hostile values, lines cut, duplicated or shuffled, markup and
terminal escapes inserted. Fed to the parser and the API, and to `gpuplan check` in-process.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import HUGE_INT, MARKUP, NUMBER_TEXT, assert_clean_exit, fuzz_settings, run_cli
from gpuplan.api import check_log
from gpuplan.catalog.engine_logs import parse_log
from gpuplan.errors import GpuplanError

DATA = Path(__file__).parent / "data"
CASES: list[dict[str, Any]] = json.loads(
    (DATA / "engine_logs" / "vllm-0.19-h100.json").read_text()
)["cases"]
LOGS = [c["verbatim_excerpt"] for c in CASES[:20]]
CONFIG = str(DATA / "engine_configs" / "Qwen--Qwen3-1.7B.json")
ARG_VALUES = st.one_of(
    NUMBER_TEXT.map(repr),
    HUGE_INT.map(str),
    st.sampled_from(["-1", "0", "1e400", "float('nan')", "None", "True", "[]", "{}", "'[/]'"]),
    st.sampled_from(["'/etc/passwd'", "'../../config.json'", "'~/.ssh/id_rsa'"]),
)
_TMP = tempfile.TemporaryDirectory(prefix="gpuplan-fuzz-logs-")


@st.composite
def hostile_logs(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(LOGS)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        action = draw(st.integers(0, 6))
        line = lines[i] if lines else ""
        if action == 0:  # a number becomes a hostile one
            line = re.sub(r"\d+(\.\d+)?", lambda m: draw(NUMBER_TEXT), line, count=1)
        elif action == 1:  # a launch argument gets a hostile value
            key = draw(st.sampled_from(["model", "tensor_parallel_size", "max_model_len"]))
            key = draw(st.sampled_from([key, "gpu_memory_utilization", "block_size", "dtype"]))
            line = f"INFO non-default args: {{'{key}': {draw(ARG_VALUES)}}}"
        elif action == 2:
            line = line + draw(MARKUP)
        elif action == 3 and lines:
            lines.pop(i)
            continue
        elif action == 4:
            lines.insert(i, line)
        elif action == 5:
            line = line[: draw(st.integers(0, len(line)))]
        else:
            line = draw(st.text(max_size=60))
        if lines:
            lines[i] = line
    return "\n".join(lines)


def _compare_or_refuse(text: str) -> None:
    try:
        check_log(parse_log(text), CONFIG)
    except GpuplanError as err:
        assert str(err) and "\n" not in str(err), repr(err)


@fuzz_settings(1100)
@given(text=hostile_logs())
def test_any_log_is_compared_or_refused_in_one_line(text: str) -> None:
    _compare_or_refuse(text)


@fuzz_settings(250)
@given(text=hostile_logs(), as_json=st.booleans())
def test_check_on_any_log_exits_cleanly_and_prints_no_escapes(text: str, as_json: bool) -> None:
    path = Path(_TMP.name) / "log.txt"
    path.write_text(text, encoding="utf-8", errors="replace")
    argv = ["check", str(path), "--model", CONFIG] + (["--json"] if as_json else [])
    code, out, err = run_cli(argv)
    assert_clean_exit(argv, code, out, err)
    assert "\x1b" not in out, argv


def test_a_path_named_inside_a_log_is_never_opened(tmp_path: Path) -> None:
    """A log's launch arguments may name any file; only --model is ever read."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "config.json").write_text(Path(CONFIG).read_text())
    text = f"INFO non-default args: {{'model': '{secret}', 'max_model_len': 4096}}\n" + LOGS[0]
    log = tmp_path / "log.txt"
    log.write_text(text)
    code, out, err = run_cli(["check", str(log)])
    assert_clean_exit(["check", str(log)], code, out, err)
    assert code == 2 and "never opened" in err, err
