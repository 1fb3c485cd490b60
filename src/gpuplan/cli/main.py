"""`gpuplan`: the command group, and the one place errors become a line and an exit code."""

from __future__ import annotations

import importlib
import os
import re
import sys

import click

from gpuplan.errors import GpuplanError
from gpuplan.units import shown

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 70

# command name → (module, attribute): a command's module is imported only when it runs, so
# `gpuplan serve` never loads the training or planning code (cold start, issue 14)
COMMANDS = {
    "serve": ("gpuplan.cli.serve", "serve_command"),
    "train": ("gpuplan.cli.train", "train_command"),
    "recipes": ("gpuplan.cli.train", "recipes_command"),
    "frameworks": ("gpuplan.cli.train", "frameworks_command"),
    "models": ("gpuplan.cli.catalog", "models_command"),
    "gpus": ("gpuplan.cli.catalog", "gpus_command"),
    "check": ("gpuplan.cli.check", "check_command"),
    "inspect": ("gpuplan.cli.inspect", "inspect_command"),
    "plan": ("gpuplan.cli.plan", "plan_command"),
    "web": ("gpuplan.cli.web", "web_command"),
    "mcp": ("gpuplan.cli.mcp", "mcp_command"),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuplan")
def cli() -> None:
    """Will this model fit, and on how many GPUs? Itemised GPU memory for serving and training."""


MAX_MESSAGE = 400  # characters of one error line; a long input is quoted shortened
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` as one printable line: control characters (newlines, terminal escapes) shown as
    escapes, and shortened to `limit` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _fail(message: str, code: int = EXIT_USER_ERROR) -> int:
    click.echo(f"gpuplan: {one_line(message)}", err=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the CLI: bad input prints one line on stderr and exits 2, never a traceback."""
    if argv is not None and any("\x00" in a for a in argv):  # no real command line has one
        return _fail("error: an argument contains a NUL character")
    try:
        cli.main(args=argv, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as err:
        return _fail(f"error: {err}")
    except click.exceptions.Abort:
        return _fail("aborted", 130)
    except click.UsageError as err:
        hint = (
            f" (see `gpuplan {err.ctx.info_name} --help`)"
            if err.ctx and err.ctx.parent
            else " (see `gpuplan --help`)"
        )
        return _fail(f"error: {err.format_message()}{hint}")
    except click.ClickException as err:
        return _fail(f"error: {err.format_message()}")
    except (BrokenPipeError, KeyboardInterrupt):
        return 1
    except OSError as err:  # a path the user named: missing, unreadable, a name too long
        name = shown(err.filename) if err.filename is not None else "input"
        return _fail(f"error: cannot read {name}: {err.strerror or err.__class__.__name__}")
    except Exception as err:  # a bug in gpuplan: still one line, unless debugging
        if os.environ.get("GPUPLAN_DEBUG"):
            raise
        return _fail(
            f"internal error: {err.__class__.__name__}: {err} (set GPUPLAN_DEBUG=1 for a traceback)",
            EXIT_INTERNAL_ERROR,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
