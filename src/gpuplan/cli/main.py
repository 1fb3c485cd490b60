"""`gpuplan`: the entry point, and the one place gpuplan's errors become a line and an exit code.

A command line goes to the fast path first (`cli/fast.py`: `serve MODEL … --json`, `models
--json`, `gpus --json`, answered without importing click), and otherwise to the click group
(`cli/group.py`). Both raise gpuplan's errors here, so they read the same whichever path ran.
"""

from __future__ import annotations

import os
import sys

from gpuplan import progress
from gpuplan.cli.errors import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, fail
from gpuplan.errors import GpuplanError
from gpuplan.units import shown

__all__ = ["EXIT_INTERNAL_ERROR", "EXIT_USER_ERROR", "main", "run"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI: bad input prints one line on stderr and exits 2, never a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    if any("\x00" in a for a in args):  # no real command line has one
        return fail("error: an argument contains a NUL character")
    progress.listener = _progress_line
    try:
        from gpuplan.cli.fast import answer

        if answer(args):
            return 0
        from gpuplan.cli.group import run_click

        return run_click(args)
    except GpuplanError as err:
        return fail(f"error: {err}")
    except (BrokenPipeError, KeyboardInterrupt):
        return 1
    except OSError as err:  # a path the user named: missing, unreadable, a name too long
        name = shown(err.filename) if err.filename is not None else "input"
        return fail(f"error: cannot read {name}: {err.strerror or err.__class__.__name__}")
    except Exception as err:  # a bug in gpuplan: still one line, unless debugging
        if os.environ.get("GPUPLAN_DEBUG"):
            raise
        return fail(
            f"internal error: {err.__class__.__name__}: {err} (set GPUPLAN_DEBUG=1 for a traceback)",
            EXIT_INTERNAL_ERROR,
        )


def _progress_line(line: str) -> None:
    """A wait the user would otherwise sit through in silence, as one stderr line."""
    sys.stderr.write(f"gpuplan: {line}\n")
    sys.stderr.flush()


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
