"""Every example command in README.md and in every `--help` text runs as documented (issue 23).

- A console block (`$ gpuplan …` and the lines under it) is run; it must exit 0 and print every
  line shown, in order (`...` stands for lines left out; trailing spaces are not compared).
- A `gpuplan …` line of a bash block is run and must exit 0.
- A command written inline (`gpuplan …` in backticks) names commands and options that exist;
  where it is a synopsis (MODEL, [optional parts]), its required part is run with the
  placeholders filled in: MODEL a catalog model, MODEL.gguf a tiny GGUF written here, LOGFILE
  a vLLM startup log from tests/data/engine_logs, CONFIG its config.json.
- Commands that cannot run in a test are listed in SKIPPED with the reason, and still have
  their command and option names checked.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from gpuplan.cli.group import COMMANDS, cli
from gpuplan.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
README = (ROOT / "README.md").read_text()
sys.path.insert(0, str(Path(__file__).parent))

SKIPPED = {
    "web": "starts a web server that runs until stopped (tests/test_web_*.py drive it)",
    "mcp": "starts an MCP stdio server that runs until stopped (needs the optional mcp SDK)",
    "--from": "a launch line with … placeholders (tests/test_launch.py runs real ones)",
    "--override": "a torchtune config with key=value overrides (tests/test_training_configs.py)",
    "--revision": "a Hub revision: needs the network (tests/test_sources_hub.py fakes it)",
}
PLACEHOLDERS = {"MODEL": "llama-3.1-8b", "CONFIG": None, "LOGFILE": None, "LOG": None}


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


# -- what the documents show ----------------------------------------------------------------


def console_examples(text: str) -> list[tuple[str, list[str]]]:
    """(command line, lines shown under it) of every `$ gpuplan` in a console block."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("$ gpuplan "):
                shown = []
                for after in lines[i + 1 :]:
                    if after.startswith("$ "):
                        break
                    shown.append(after.rstrip())
                found.append((line[2:], shown))
    return found


def shell_examples(text: str) -> list[str]:
    """Every command line starting `gpuplan` in a bash block (a comment after # dropped)."""
    found = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            for part in line.split("#", 1)[0].split("&&"):
                part = part.strip()
                if part.startswith("gpuplan "):
                    found.append(part)
    return found


def inline_examples(text: str) -> list[str]:
    """Every `gpuplan …` written in backticks outside the code blocks."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [" ".join(s.split()) for s in re.findall(r"`(gpuplan(?: [^`]+)?)`", prose)]


def help_texts() -> dict[str, str]:
    """`gpuplan --help` and every command's --help."""
    texts = {"gpuplan": _run(["--help"])[1]}
    for name in COMMANDS:
        code, out, err = _run([name, "--help"])
        assert code == 0, err
        texts[name] = out
    return texts


# -- names: commands and options that exist ---------------------------------------------------


def _options(command: str) -> set[str]:
    import click

    cmd = cli.get_command(click.Context(cli), command)
    names: set[str] = set()
    for p in cmd.params:
        names.update(p.opts)
        names.update(getattr(p, "secondary_opts", ()))
    return names


def _named(example: str) -> tuple[list[str], list[str]]:
    """(commands, options) an example names: `serve|inspect` names two; `--[no-]x` two."""
    text = example.replace("\\|", "|")
    words = text.split()
    commands = words[1].split("|") if len(words) > 1 and not words[1].startswith("-") else []
    options = []
    for word in re.findall(r"--[\[\]a-z0-9-]+", text):
        word = word.rstrip("]")
        if word.startswith("--[no-]"):
            options += ["--" + word[7:], "--no-" + word[7:]]
        else:
            options.append(word)
    return commands, options


def _check_names(example: str) -> None:
    commands, options = _named(example)
    for command in commands:
        assert command in COMMANDS, f"{example}: no command {command!r}"
    known = set().union(*(_options(c) for c in commands)) if commands else {"--help"}
    for option in options:
        assert option in known | {"--help"}, f"{example}: {option} is not an option"


# -- the runnable part of an example ----------------------------------------------------------


@pytest.fixture(scope="module")
def fillers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Files for the placeholders: a tiny GGUF, a vLLM startup log and its config."""
    from model_files import write_gguf

    root = tmp_path_factory.mktemp("examples")
    write_gguf(root / "model.gguf")
    cases = json.loads((DATA / "engine_logs" / "vllm-0.19-h100.json").read_text())["cases"]
    log = root / "vllm.log"
    log.write_text(next(c["verbatim_excerpt"] for c in cases if _checks(c["verbatim_excerpt"])))
    config = DATA / "engine_configs" / "Qwen--Qwen3-1.7B.json"
    return {"gguf": str(root / "model.gguf"), "log": str(log), "config": str(config)}


def _checks(log: str) -> bool:
    """Whether `gpuplan check` can compare this log without --model (its model is known)."""
    from gpuplan.api import check_log
    from gpuplan.catalog.engine_logs import parse_log
    from gpuplan.errors import GpuplanError

    try:
        check_log(parse_log(log))
    except GpuplanError:
        return False
    return True


NO_ARGUMENTS = ("models", "gpus", "recipes", "frameworks", "precisions")


def runnable(example: str, fillers: dict[str, str]) -> list[str] | None:
    """The example's required part as arguments, placeholders filled in; None if it has no
    required part to run (a bare command named in prose, a skipped one, a '…' in it)."""
    text = example.replace("\\|", "|")
    while re.search(r"\[[^\[\]]*\]", text):
        text = re.sub(r"\s*\[[^\[\]]*\]", "", text)  # optional parts, innermost first
    words = [w.split("|")[0] for w in shlex.split(text)[1:]]  # a|b|c: the first choice
    if not words or any("…" in w for w in words):
        return None
    if words[0] not in NO_ARGUMENTS and (len(words) < 2 or words[1].startswith("-")):
        return None  # a command named in prose (`gpuplan plan --train`), not an example
    if any(w in SKIPPED or w.split("=")[0] in SKIPPED for w in words):
        return None
    filled = []
    for w in words:
        if w.lower() in ("model.gguf",):
            w = fillers["gguf"]
        elif w in ("LOGFILE", "LOG"):
            w = fillers["log"]
        elif w == "CONFIG":
            w = fillers["config"]
        elif w == "MODEL":
            w = PLACEHOLDERS["MODEL"]
        if re.fullmatch(r"[A-Z][A-Z_]+(\.\.\.|…)?", w):  # RESULT... : one or more
            return None  # a placeholder this test has no filler for
        filled.append(w)
    return filled


def _same(line: str, want: str) -> bool:
    """A shown line is the printed one, or its start when the document cut it with '…'."""
    if want.endswith(" …"):
        return line.startswith(want[:-2])
    return line == want


def _expect_shown(command: str, out: str, shown: list[str]) -> None:
    lines = [line.rstrip() for line in out.splitlines()]
    at = 0
    for want in shown:
        if want in ("...", "…", ""):
            continue
        while at < len(lines) and not _same(lines[at], want):
            at += 1
        assert at < len(lines), f"`{command}` no longer prints:\n{want}\n--- it prints:\n{out}"
        at += 1


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "shown"), console_examples(README), ids=lambda x: str(x)[:60])
def test_readme_console_examples_print_what_the_readme_shows(command, shown):
    code, out, err = _run(shlex.split(command)[1:])
    assert code == 0, err
    _expect_shown(command, out, shown)


@pytest.mark.parametrize("command", shell_examples(README))
def test_readme_shell_examples_run(command, fillers):
    _check_names(command)
    words = shlex.split(command)
    if words[1] in SKIPPED:
        pytest.skip(SKIPPED[words[1]])
    code, out, err = _run(words[1:])
    assert code == 0 and out, err


@pytest.mark.parametrize("example", sorted(set(inline_examples(README))))
def test_readme_inline_examples_name_real_commands_and_run(example, fillers):
    _check_names(example)
    args = runnable(example, fillers)
    if args is None:
        return  # names checked; nothing to run (see `runnable`)
    code, out, err = _run(args)
    assert code == 0 and out, f"{example} → {args}: {err}"


def test_every_help_text_example_runs(fillers):
    ran = 0
    for name, text in help_texts().items():
        flat = " ".join(text.split())
        for example in re.findall(r"`(gpuplan(?: [^`]+)?)`", flat):
            _check_names(example)
            words = example.split()
            assert len(words) == 1 or words[1] in COMMANDS, f"{name} --help: {example}"
            args = words[1:] if len(words) > 1 and words[1] not in SKIPPED else None
            if args and len(args) == 1 and args[0] in NO_ARGUMENTS:  # a listing: `gpuplan gpus`
                code, out, err = _run(args)
                assert code == 0 and out, f"{name} --help: {example}: {err}"
                ran += 1
    assert ran >= 4  # models, gpus, recipes, frameworks, precisions are pointed to


def test_every_option_example_in_help_is_accepted():
    """An option's help that gives examples ("e.g. 8192 or 32k") names values the option takes."""
    from gpuplan.cli import specs

    tables = (specs.SERVE_OWN_BILL, specs.TRAIN_OPTIONS, specs.PLAN_OPTIONS)
    rows = [opt for table in tables for opt in table if opt.reader]
    checked = 0
    for opt in rows:
        m = re.search(r"e\.g\. ([^\s,;.(]+)(?: or ([^\s,;.(]+))?", opt.help)
        if not m:
            continue
        for value in filter(None, m.groups()):
            if value in ("auto", "-1"):
                continue
            opt.reader(value)  # raises on a value the option refuses
            checked += 1
    assert checked >= 4


def test_the_skip_list_is_used():
    """Every reason listed is for something the documents show."""
    shown = README + " ".join(help_texts().values())
    for key in SKIPPED:
        assert key in shown, key
