"""`gpuplan`: the command group, and the one place errors become a line and an exit code."""

from __future__ import annotations

import os
import sys

import click

from gpuplan.cli.catalog import gpus_command, models_command
from gpuplan.cli.check import check_command
from gpuplan.cli.inspect import inspect_command
from gpuplan.cli.plan import plan_command
from gpuplan.cli.serve import serve_command
from gpuplan.cli.train import recipes_command, train_command
from gpuplan.cli.web import web_command
from gpuplan.errors import GpuplanError

EXIT_USER_ERROR = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuplan")
def cli() -> None:
    """Will this model fit, and on how many GPUs? Itemised GPU memory for serving and training."""


cli.add_command(serve_command)
cli.add_command(train_command)
cli.add_command(recipes_command)
cli.add_command(models_command)
cli.add_command(gpus_command)
cli.add_command(check_command)
cli.add_command(inspect_command)
cli.add_command(plan_command)
cli.add_command(web_command)


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
