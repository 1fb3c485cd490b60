"""`gpuplan`'s click command group: subcommands imported on first use, click's own errors as one
line. `cli/main.py` comes here for every command line the fast path (`cli/fast.py`) leaves."""

from __future__ import annotations

import importlib

import click

from gpuplan.cli.errors import EXIT_USER_ERROR, fail

# command name → (module, attribute): a command's module is imported only when it runs, so
# `gpuplan serve` never loads the training or planning code (cold start, issue 14)
COMMANDS = {
    "serve": ("gpuplan.cli.serve", "serve_command"),
    "train": ("gpuplan.cli.train", "train_command"),
    "recipes": ("gpuplan.cli.train", "recipes_command"),
    "frameworks": ("gpuplan.cli.train", "frameworks_command"),
    "models": ("gpuplan.cli.catalog", "models_command"),
    "gpus": ("gpuplan.cli.catalog", "gpus_command"),
    "precisions": ("gpuplan.cli.catalog", "precisions_command"),
    "check": ("gpuplan.cli.check", "check_command"),
    "calibrate": ("gpuplan.cli.calibrate", "calibrate_command"),
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


def run_click(args: list[str]) -> int:
    """Run `args` through click; its usage errors become one line and exit 2. gpuplan's own
    errors pass through to `cli/main.py`, which words them for every path alike."""
    if not args:  # no command: the group's help, as `gpuplan --help` prints it
        args = ["--help"]
    try:
        code = cli.main(args=args, prog_name="gpuplan", standalone_mode=False)
    except click.exceptions.Abort:
        return fail("aborted", 130)
    except click.UsageError as err:
        hint = (
            f" (see `gpuplan {err.ctx.info_name} --help`)"
            if err.ctx and err.ctx.parent
            else " (see `gpuplan --help`)"
        )
        return fail(f"error: {err.format_message()}{hint}")
    except click.ClickException as err:
        return fail(f"error: {err.format_message()}")
    return code if isinstance(code, int) else 0  # a command's click.exceptions.Exit(code)


__all__ = ["COMMANDS", "EXIT_USER_ERROR", "cli", "run_click"]
