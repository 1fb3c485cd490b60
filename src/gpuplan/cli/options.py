"""click options built from the option table (cli/specs.py), and the click forms of its readers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from gpuplan.cli import specs
from gpuplan.cli.specs import Opt


class LazyChoice(click.Choice):
    """A case-insensitive choice whose values are looked up only when needed (a value is given,
    or --help prints them): `--engine`'s list needs the engine registry, which a command run
    without --engine never loads (cold start)."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self._loaded: tuple[str, ...] | None = None
        self.case_sensitive = False

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._loaded is None:
            self._loaded = tuple(self._load())
        return self._loaded


def click_option(opt: Opt) -> Callable[[Any], Any]:
    """The click option for one row of the option table."""
    if opt.kind is bool:
        if opt.off:
            names = [f"{on}/{off}" for on, off in zip(opt.names, opt.off, strict=True)]
            return click.option(*names, opt.dest, default=None, help=opt.help)
        return click.option(*opt.names, opt.dest, is_flag=True, default=opt.default, help=opt.help)
    kind: Any = opt.kind if opt.kind is not str else None
    if opt.choices:
        kind = click.Choice(list(opt.choices), case_sensitive=False)
    callback = _read_with(opt.reader) if opt.reader is not None else None
    return click.option(
        *opt.names,
        opt.dest,
        type=kind,
        default=opt.default if not opt.multiple else None,
        multiple=opt.multiple,
        show_default=opt.show_default,
        metavar=opt.metavar,
        callback=callback,
        help=opt.help,
    )


def click_options(opts: Sequence[Opt]) -> Callable[[Any], Any]:
    """A decorator adding every row of `opts` to a command, in the table's order."""

    def add(command: Any) -> Any:
        for opt in reversed(opts):
            command = click_option(opt)(command)
        return command

    return add


def _read_with(reader: Callable[[str], Any]) -> Callable[[click.Context, Any, Any], Any]:
    def callback(ctx: click.Context, param: Any, value: Any) -> Any:
        try:
            return reader(value)
        except specs.BadValue as err:
            raise click.BadParameter(str(err), param_hint=err.hint) from None

    return callback


units_option = click_option(specs.UNITS)
gpus_option = click_option(specs.GPUS)
headroom_option = click_option(specs.HEADROOM)
gpu_memory_option = click_option(specs.GPU_MEMORY)


def parse_gpus(value: str | None) -> int | str | None:
    """--gpus as the API takes it: None, "auto", or a count."""
    try:
        return specs.read_gpus(value)
    except specs.BadValue as err:
        raise click.BadParameter(str(err), param_hint=err.hint) from None


# The engine's memory share, by every engine's own flag name: one declaration for `serve` and
# `calibrate` (each engine's adapter maps the common knob to its argument, engine/profiles/).
memory_fraction_option = click.option(
    "--memory-fraction",
    "--gpu-memory-utilization",
    "--mem-fraction-static",
    "--free-gpu-memory-fraction",
    "memory_fraction",
    type=float,
    help="Engines: the engine's memory share (vLLM of total; SGLang of free at start;"
    " TensorRT-LLM of free after loading).",
)
