"""The command lines scripts run most, answered without importing click (cold start, issue 14).

    gpuplan serve MODEL [serve's own-bill options] --json
    gpuplan models --json
    gpuplan gpus [--units U] --json

The options are read from the same table click reads (`cli/specs.py`), and the answer comes
from the same functions, so the output is the click path's, byte for byte
(tests/test_cli_fast.py compares them). Anything this module does not fully understand — a
command or option not listed, --help, an engine option, a value its reader refuses, a value that
starts with a dash, `--` — is left to click (`answer` returns False), which words its own errors.
"""

from __future__ import annotations

from typing import Any

from gpuplan.cli import specs
from gpuplan.cli.jsonout import print_json

_SERVE = {name: opt for opt in specs.SERVE_OWN_BILL for name in opt.names}
_GPUS = {name: opt for opt in (specs.UNITS, specs.JSON) for name in opt.names}
_MODELS = {name: opt for opt in (specs.JSON,) for name in opt.names}


def answer(args: list[str]) -> bool:
    """Print the JSON answer to `args` and return True, or return False to leave it to click."""
    if not args or "--json" not in args:
        return False
    command, rest = args[0], args[1:]
    if command == "serve":
        data = _serve(rest)
    elif command == "models":
        data = _models(rest)
    elif command == "gpus":
        data = _gpus(rest)
    else:
        return False
    if data is None:
        return False
    print_json(data)
    return True


def parse(args: list[str], table: dict[str, specs.Opt]) -> tuple[list[str], dict[str, Any]] | None:
    """(positional arguments, values by destination) as click would read `args` against the
    options in `table`, or None where click's reading could differ or fail."""
    values = {opt.dest: opt.default for opt in table.values()}
    positional: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            positional.append(token)
            continue
        name, has_value, text = token.partition("=")
        opt = table.get(name)
        if opt is None:
            return None
        if opt.kind is bool:
            if has_value:
                return None
            values[opt.dest] = True
            continue
        if not has_value:
            if i == len(args):
                return None
            text = args[i]
            i += 1
        if text.startswith("-"):
            return None
        value = _read(opt, text)
        if value is None:
            return None
        values[opt.dest] = value
    return positional, values


def _read(opt: specs.Opt, text: str) -> Any:
    """The option's value from its text, or None where click would refuse it."""
    try:
        value = opt.kind(text)
        return opt.reader(value) if opt.reader is not None else value
    except ValueError:
        return None


def _serve(args: list[str]) -> dict[str, Any] | None:
    read = parse(args, _SERVE)
    if read is None or len(read[0]) != 1 or not read[0][0]:
        return None
    (model,), values = read
    try:
        ask = specs.serve_ask(model, values)
    except specs.BadValue:
        return None
    return specs.serve_data(ask, values["units"])


def _models(args: list[str]) -> dict[str, Any] | None:
    read = parse(args, _MODELS)
    if read is None or read[0]:
        return None
    from gpuplan.api.common import model_summaries

    return {"models": model_summaries()}


def _gpus(args: list[str]) -> dict[str, Any] | None:
    read = parse(args, _GPUS)
    if read is None or read[0]:
        return None
    from gpuplan.api.common import gpu_summaries

    return {"gpus": gpu_summaries()}
