"""What the speed model refuses to time (engine/speed/scope.py): encoder-decoders, recurrent
and linear-attention mixers, DeepSeek-V4's compressed attention. `serve --speed` and latency
goals refuse them in one line; a plan without a latency goal still ranks layouts by memory and
says its speed columns leave the mixer out."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from gpuplan.catalog.models import load_architecture
from gpuplan.cli.main import main
from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.speed.scope import check_speed_scope, unmodelled_for_speed
from gpuplan.errors import GpuplanError

DATA = Path(__file__).parent / "data"
QWEN3_NEXT = DATA / "engine_configs" / "Qwen--Qwen3-Next-80B-A3B-Instruct.json"
DEEPSEEK_V4 = DATA / "configs" / "deepseek-ai--DeepSeek-V4-Flash-0731.json"


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _arch(path: Path):
    return architecture_from_config(json.loads(path.read_text()), path.stem)


@pytest.mark.parametrize(
    ("arch", "named"),
    [
        (lambda: load_architecture("flan-t5-base"), "encoder-decoder"),
        (lambda: _arch(QWEN3_NEXT), "gated_delta"),
        (lambda: _arch(DEEPSEEK_V4), "compressed attention"),
    ],
)
def test_models_the_speed_model_cannot_time_are_refused_naming_what(arch, named: str) -> None:
    a = arch()
    assert named in (unmodelled_for_speed(a) or "")
    with pytest.raises(GpuplanError, match=named):
        check_speed_scope(a)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3", "gpt-oss-20b", "gemma-3-27b-it"])
def test_attention_models_are_timed(model: str) -> None:
    assert unmodelled_for_speed(load_architecture(model)) is None


def test_serve_speed_and_latency_goals_refuse_in_one_line() -> None:
    for args in (
        ("serve", str(QWEN3_NEXT), "--gpu", "h200", "--speed"),
        ("plan", str(QWEN3_NEXT), "--tpot", "50ms"),
        ("serve", "flan-t5-base", "--gpu", "h100", "--speed"),
    ):
        code, out, err = _cli(*args)
        assert code == 2 and not out, args
        assert err.count("\n") == 1 and "serving speed is not modelled" in err, args


def test_a_memory_plan_says_its_speed_leaves_the_mixer_out() -> None:
    code, out, _ = _cli("plan", str(QWEN3_NEXT), "--json", "--top", "2")
    assert code == 0
    data = json.loads(out)
    assert data["options"] and "gated_delta" in data["speed_note"]
    code, out, _ = _cli("plan", "llama-3.1-8b", "--json", "--top", "2")
    assert code == 0 and "speed_note" not in json.loads(out)
