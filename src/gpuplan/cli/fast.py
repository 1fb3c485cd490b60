"""The command lines people and scripts run most, answered without importing click (cold start,
issues 14 and 23): as tables or as JSON.

    gpuplan serve MODEL [serve's own-bill options] [--json]
    gpuplan train MODEL [train's options, no --from] [--json]
    gpuplan plan MODEL [plan's options] [--json | --csv]
    gpuplan models --json · gpus [--units U] --json · precisions --json

The options are read from the same table click reads (`cli/specs.py`), and the answer comes
from the same functions, so the output is the click path's, byte for byte
(tests/test_cli_fast.py compares them). Anything this module does not fully understand — a
command or option not listed, --help, an engine option, a value its reader refuses, a value that
starts with a dash, `--` — is left to click (`answer` returns False), which words its own errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuplan.cli import specs
from gpuplan.cli.jsonout import print_json

Table = dict[str, tuple[specs.Opt, bool]]  # spelling → (option, is its negative spelling)


def _table(opts: Sequence[specs.Opt]) -> Table:
    table: Table = {}
    for opt in opts:
        table.update({name: (opt, False) for name in opt.names})
        table.update({name: (opt, True) for name in opt.off})
    return table


_SERVE = _table(specs.SERVE_OWN_BILL)
_TRAIN = _table(specs.TRAIN_OPTIONS)
_PLAN = _table(specs.PLAN_OPTIONS)
_GPUS = _table((specs.UNITS, specs.JSON))
_JSON_ONLY = _table((specs.JSON,))


def answer(args: list[str]) -> bool:
    """Print the answer to `args` and return True, or return False to leave it to click."""
    if not args:
        return False
    command, rest = args[0], args[1:]
    handler = _HANDLERS.get(command)
    return bool(handler is not None and handler(rest))


def parse(args: list[str], table: Table) -> tuple[list[str], dict[str, Any], set[str]] | None:
    """(positional arguments, values by destination, destinations given) as click would read
    `args` against the options in `table`, or None where click's reading could differ or fail."""
    values = {opt.dest: opt.default for opt, _ in table.values()}
    positional: list[str] = []
    given: set[str] = set()
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            positional.append(token)
            continue
        name, has_value, text = token.partition("=")
        if name not in table:
            return None
        opt, negative = table[name]
        given.add(opt.dest)
        if opt.kind is bool:
            if has_value:
                return None
            values[opt.dest] = not negative
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
        values[opt.dest] = (*values[opt.dest], value) if opt.multiple else value
    for opt, _ in table.values():  # a default goes through the reader, as click's callback does
        default = opt.default
        if opt.dest not in given and opt.reader is not None and isinstance(default, str):
            values[opt.dest] = _read(opt, default)
    return positional, values, given


def _read(opt: specs.Opt, text: str) -> Any:
    """The option's value from its text, or None where click would refuse it."""
    try:
        value = opt.kind(text)
        if opt.choices:
            value = next((c for c in opt.choices if c.lower() == value.lower()), None)
            if value is None:
                return None
        return opt.reader(value) if opt.reader is not None else value
    except ValueError:
        return None


def _one_model(args: list[str], table: Table) -> tuple[str, dict[str, Any], set[str]] | None:
    """MODEL and the options' values, or None where click should read the line."""
    read = parse(args, table)
    if read is None or len(read[0]) != 1 or not read[0][0]:
        return None
    (model,), values, given = read
    return model, values, given


def _serve(args: list[str]) -> bool:
    read = _one_model(args, _SERVE)
    if read is None:
        return False
    model, values, _ = read
    try:
        ask = specs.serve_ask(model, values)
        speed = specs.speed_ask(values)
    except specs.BadValue:
        return False
    data = specs.serve_data(ask, values["units"], speed)
    if values["as_json"]:
        print_json(data)
    else:
        from gpuplan.cli.serve_render import render_serving

        render_serving(data, values["units"], values["explain"])
    return True


def _train(args: list[str]) -> bool:
    read = _one_model(args, _TRAIN)
    if read is None or read[1]["config"] is not None:
        return False  # a --from config: click's path reads it
    model, values, _ = read
    try:
        data = specs.train_data(model, values)
    except specs.BadValue:
        return False
    if values["as_json"]:
        print_json(data)
    else:
        from gpuplan.cli.train_render import render_training

        render_training(data, values["units"], values["explain"])
    return True


def _plan(args: list[str]) -> bool:
    read = _one_model(args, _PLAN)
    if read is None:
        return False
    from gpuplan.cli.plan_run import run_plan

    model, values, given = read
    run_plan(model, values, given)
    return True


def _listing(table: Table, rows: Callable[[], dict[str, Any]]) -> Callable[[list[str]], bool]:
    """A catalog listing's --json answer (its table is left to click)."""

    def handle(args: list[str]) -> bool:
        read = parse(args, table)
        if read is None or read[0] or not read[1]["as_json"]:
            return False
        print_json(rows())
        return True

    return handle


def _models() -> dict[str, Any]:
    from gpuplan.api.common import model_summaries

    return {"models": model_summaries()}


def _gpus() -> dict[str, Any]:
    from gpuplan.api.common import gpu_summaries

    return {"gpus": gpu_summaries()}


def _precisions() -> dict[str, Any]:
    from gpuplan.api.common import precision_summaries

    return {"precisions": precision_summaries()}


_HANDLERS: dict[str, Callable[[list[str]], bool]] = {
    "serve": _serve,
    "train": _train,
    "plan": _plan,
    "models": _listing(_JSON_ONLY, _models),
    "gpus": _listing(_GPUS, _gpus),
    "precisions": _listing(_JSON_ONLY, _precisions),
}
