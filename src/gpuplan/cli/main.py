"""`gpuplan`: the command group, and the one place errors become a line and an exit code."""

from __future__ import annotations

import importlib
import os
import sys

import click

from gpuplan.errors import GpuplanError

EXIT_USER_ERROR = 2

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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI: bad input prints one line on stderr and exits 2, never a traceback."""
    try:
        cli.main(args=argv, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as err:
        click.echo(f"gpuplan: error: {err}", err=True)
        return EXIT_USER_ERROR
    except click.exceptions.Abort:
        click.echo("gpuplan: aborted", err=True)
        return 130
    except click.UsageError as err:
        hint = (
            f" (see `gpuplan {err.ctx.info_name} --help`)"
            if err.ctx and err.ctx.parent
            else " (see `gpuplan --help`)"
        )
        click.echo(f"gpuplan: error: {err.format_message()}{hint}", err=True)
        return EXIT_USER_ERROR
    except click.ClickException as err:
        click.echo(f"gpuplan: error: {err.format_message()}", err=True)
        return EXIT_USER_ERROR
    except (BrokenPipeError, KeyboardInterrupt):
        return 1
    except Exception as err:  # a bug in gpuplan: still one line, unless debugging
        if os.environ.get("GPUPLAN_DEBUG"):
            raise
        click.echo(
            f"gpuplan: internal error: {err.__class__.__name__}: {err} (set GPUPLAN_DEBUG=1 for a traceback)",
            err=True,
        )
        return 70
    return 0


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
