"""cli/fast.py: the click-free path answers `serve … --json`, `models --json` and `gpus --json`
exactly as the click command does, declines whatever it does not fully understand, and loads
neither click nor rich."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import fuzz_settings
from gpuplan.cli import fast, specs
from gpuplan.cli.main import main


def _both(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[tuple, tuple, bool]:
    """(code, stdout, stderr) with the fast path and with click alone; whether fast answered."""
    answered: list[bool] = []
    real = fast.answer

    def spying(a: list[str]) -> bool:
        answered.append(real(a))
        return answered[-1]

    def run() -> tuple:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        return code, out.getvalue(), err.getvalue()

    monkeypatch.setattr(fast, "answer", spying)
    with_fast = run()
    monkeypatch.setattr(fast, "answer", lambda a: False)
    return with_fast, run(), bool(answered and answered[0])


ANSWERED = [
    ["serve", "llama-3.1-8b", "--json"],
    ["serve", "--json", "qwen2.5-7b", "--gpu", "a100-40gb", "--context=32k", "--users", "8"],
    ["serve", "llama-3.1-70b", "--json", "--tp", "2", "--dtype", "fp8", "--kv-cache-dtype", "fp8"],
    ["serve", "llama-3.1-405b", "--gpus", "1", "--json"],  # does not fit: the three answers
    ["serve", "mixtral-8x7b", "--json", "--units", "gib", "--headroom", "0.8", "--explain"],
    ["serve", "llama-3.1-8b", "--json", "--gpu-memory", "marketed", "--workspace", "2GB"],
    ["serve", "llama-3.1-8b", "--json", "--max-model-len", "8192", "--gpus", "auto"],
    ["models", "--json"],
    ["gpus", "--json"],
    ["gpus", "--units", "GiB", "--json"],
    # issue 23: tables, train and plan from their option tables too
    ["serve", "llama-3.1-8b"],
    ["serve", "llama-3.1-70b", "--gpus", "1", "--explain", "--units", "GiB"],
    ["train", "llama-3.1-8b", "--json"],
    ["train", "llama-3.1-8b", "--gpus", "8", "--no-compile", "--seq", "8K", "--explain"],
    ["train", "mixtral-8x7b", "--gpus", "16", "--ep", "8", "--attention", "EAGER"],
    ["plan", "llama-3.1-8b", "--json", "--top", "3"],
    ["plan", "llama-3.1-8b", "--gpu", "h100", "--gpu", "H200", "--objective", "COST"],
    ["plan", "llama-3.1-8b", "--train", "--top", "2", "--global-batch-tokens", "4M"],
    ["plan", "llama-3.1-8b", "--matrix", "--csv", "--dtype", "fp8"],
    ["precisions", "--json"],
    # issue 19: the pinned layout's speed
    [
        "serve",
        "llama-3.1-8b",
        "--speed",
        "--json",
        "--users",
        "8",
        "--prompt",
        "2k",
        "--output",
        "64",
    ],
    ["serve", "llama-3.1-8b", "--speed", "--request-rate", "2", "--eager", "--output", "32"],
    ["plan", "mixtral-8x7b", "--json", "--tp", "2", "--ep", "--top", "2"],
]
DECLINED = [
    ["serve", "llama-3.1-8b", "--json", "--engine", "vllm"],
    ["serve", "llama-3.1-8b", "--json", "--help"],
    ["serve", "llama-3.1-8b", "--json", "--gpus", "x"],
    ["serve", "llama-3.1-8b", "--json", "--context", "auto"],
    ["serve", "llama-3.1-8b", "--json", "--users", "-1"],
    ["serve", "llama-3.1-8b", "--json", "--users"],
    ["serve", "llama-3.1-8b", "--json", "--tp", "1.5"],
    ["serve", "llama-3.1-8b", "--json", "--units", "MB"],
    ["serve", "llama-3.1-8b", "--json", "--json=1"],
    ["serve", "llama-3.1-8b", "extra", "--json"],
    ["serve", "--json"],
    ["serve", "llama-3.1-8b", "--json", "--", "x"],
    ["models", "extra", "--json"],
    ["models"],  # a listing's table: click's command renders it
    ["train", "llama-3.1-8b", "--from", "x.toml"],
    ["train", "llama-3.1-8b", "--stage", "-1"],
    ["train", "llama-3.1-8b", "--compile=1"],
    ["plan", "llama-3.1-8b", "--top", "0"],
    ["plan", "llama-3.1-8b", "--objective", "cheapest"],
    ["plan", "--json"],
]


@pytest.mark.parametrize("args", ANSWERED, ids=" ".join)
def test_answers_as_click_does(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with_fast, click_only, answered = _both(args, monkeypatch)
    assert answered
    assert with_fast == click_only and with_fast[0] == 0 and with_fast[1]
    assert with_fast[1].startswith("{") == ("--json" in args)


@pytest.mark.parametrize("args", DECLINED, ids=" ".join)
def test_declines_what_it_does_not_understand(args: list[str], monkeypatch: pytest.MonkeyPatch):
    with_fast, click_only, answered = _both(args, monkeypatch)
    assert not answered and with_fast == click_only


def test_gpuplan_errors_read_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    for args in (
        ["serve", "no-such-model-x", "--json"],
        ["serve", "llama-3.1-8b", "--gpu", "h1000", "--json"],
        ["serve", "llama-3.1-8b", "--users", "0", "--json"],
        ["serve", "llama-3.1-8b", "--context", "0", "--json"],
    ):
        with_fast, click_only, answered = _both(args, monkeypatch)
        assert with_fast == click_only and with_fast[0] == 2 and with_fast[2].count("\n") == 1


OPTION_TEXT = st.sampled_from(
    ["1", "2", "8", "0", "0.5", "1e3", "32k", "auto", "h100", "a10g", "fp8", "gib", "", " 4", "x"]
)
OPTIONS = [opt for opt in specs.SERVE_OWN_BILL]


@given(
    st.lists(st.tuples(st.sampled_from(OPTIONS), st.sampled_from([0, 1]), OPTION_TEXT), max_size=4),
    st.sampled_from(["llama-3.2-1b", "qwen2.5-0.5b", "gpt2"]),
)
@fuzz_settings(60)
def test_any_own_bill_line_reads_the_same(picked: list, model: str) -> None:
    args = ["serve", model, "--json"]
    for opt, spelling, text in picked:
        name = opt.names[min(spelling, len(opt.names) - 1)]
        args += [name] if opt.kind is bool else [f"{name}={text}"]
    with pytest.MonkeyPatch.context() as mp:
        with_fast, click_only, _ = _both(args, mp)
    assert with_fast == click_only


@pytest.mark.parametrize(
    ("name", "table"),
    [("serve", specs.SERVE_OWN_BILL), ("train", specs.TRAIN_OPTIONS), ("plan", specs.PLAN_OPTIONS)],
)
def test_click_reads_the_same_table(name: str, table: tuple) -> None:
    import click

    from gpuplan.cli.group import cli

    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    by_dest = {p.name: p for p in command.params if isinstance(p, click.Option)}
    for opt in table:
        param = by_dest[opt.dest]
        assert tuple(param.opts) == opt.names and tuple(param.secondary_opts) == opt.off
        assert param.multiple == opt.multiple
        assert param.default == (None if opt.multiple else opt.default)
    if name != "serve":  # every option of train and plan is in its table
        assert set(by_dest) == {opt.dest for opt in table}


def test_the_fast_path_loads_neither_click_nor_rich() -> None:
    code = (
        "import io, sys, contextlib\n"
        "from gpuplan.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['serve', 'llama-3.1-8b', '--json']) == 0\n"
        "    assert main(['models', '--json']) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich'))\n"
        "assert not loaded, loaded\n"
        "assert 'gpuplan.api.training' not in sys.modules\n"
        "assert 'gpuplan.planner.training_search' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
