"""Property: any command line gets an answer (exit 0) or one line on stderr and exit 2.

Never exit 70 ("internal error"), never a traceback.
The options are read from the click commands themselves, so a new option is fuzzed too.
"""

from __future__ import annotations

import click
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import NUMBER_TEXT, TEXT, assert_clean_exit, fuzz_settings, run_cli
from gpuplan.cli.group import cli

COMMANDS = ("serve", "train", "plan", "check", "inspect", "models", "gpus", "recipes")
SMALL_MODELS = ("llama-3.2-1b", "qwen2.5-0.5b", "gpt2", "llama-3.1-8b", "qwen1.5-moe-a2.7b")
PLAUSIBLE = st.sampled_from(
    ["1", "2", "4", "8", "0", "0.5", "0.9", "1.0", "80GB", "79.2GiB", "auto", "h100", "a10g"]
    + ["bf16", "fp8", "int4", "awq", "full", "selective", "lora", "vllm", "sglang", "trtllm"]
)


def _options(name: str) -> list[click.Option]:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return [
        p
        for p in command.params
        if isinstance(p, click.Option) and "--help" not in p.opts and "--version" not in p.opts
    ]


OPTIONS = {name: _options(name) for name in COMMANDS}  # imports each command once, up front


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    name = draw(st.sampled_from(COMMANDS))
    argv = [name]
    if name in ("serve", "train", "plan", "check"):
        model = draw(st.sampled_from(SMALL_MODELS) if draw(st.integers(0, 3)) else TEXT)
        argv.append(model)
    for option in draw(st.lists(st.sampled_from(OPTIONS[name]), max_size=3, unique_by=id)):
        flag = draw(st.sampled_from(option.opts))
        if option.is_flag:
            argv.append(flag)
        else:
            argv += [flag, draw(PLAUSIBLE if draw(st.booleans()) else NUMBER_TEXT)]
    return argv


@fuzz_settings(2500)
@given(argv=command_lines())
def test_any_command_line_answers_or_fails_in_one_line(argv: list[str]) -> None:
    code, out, err = run_cli(argv)
    assert_clean_exit(argv, code, out, err)


@fuzz_settings(300)
@given(
    option=st.sampled_from(["--gpu-memory", "--workspace", "--cuda-context"]),
    value=st.sampled_from(["0.4B", "1e400GB", "5e-324GB", "1e-400", "1" * 400 + "GB", "nanGB"]),
)
def test_sizes_that_round_to_zero_or_overflow_are_refused(option: str, value: str) -> None:
    code, _, err = run_cli(["serve", "llama-3.2-1b", option, value])
    assert code == 2 and "size" in err, err


def test_the_issue_s_numbers_are_refused_in_one_line() -> None:
    for argv, fragment in [
        (["serve", "llama-3.1-8b", "--gpu-memory", "0.4B"], "rounds to 0 bytes"),
        (["serve", "llama-3.1-8b", "--gpu-memory", "1e400GB"], "larger than"),
        (["serve", "llama-3.1-8b", "--context", "1" * 400], "context"),
        (["serve", "llama-3.1-8b", "--headroom", "5e-324"], "too small"),
        (["train", "llama-3.1-8b", "--headroom", "5e-324"], "too small"),
        (["serve", "llama-3.1-8b", "--headroom", "nan"], "headroom"),
        (["train", "llama-3.1-8b", "--mfu", "inf"], "MFU"),
        (["train", "llama-3.1-8b", "--capacity-factor", "nan"], "capacity-factor"),
        (["serve", "llama-3.1-8b", "--engine", "vllm", "--max-model-len", "inf"], "max-model-len"),
        (["serve", "llama-3.1-8b", "--engine", "vllm", "--block-size", "9" * 40], "block_size"),
        (["serve", "x" * 5000], "too long"),
        (["plan", "llama-3.1-8b", "--top", "0"], "top"),
    ]:
        code, out, err = run_cli(argv)
        assert_clean_exit(argv, code, out, err)
        assert code == 2 and fragment in err, (argv, err)
