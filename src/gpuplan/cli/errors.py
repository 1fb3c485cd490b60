"""One line on stderr and an exit code: how every failure of the CLI ends (never a traceback)."""

from __future__ import annotations

import re
import sys

EXIT_USER_ERROR = 2
EXIT_WILL_NOT_START = (
    1  # `serve --engine …`: the answer was printed, and the engine would not start
)
EXIT_INTERNAL_ERROR = 70

MAX_MESSAGE = 400  # characters of one error line; a long input is quoted shortened
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` as one printable line: control characters (newlines, terminal escapes) shown as
    escapes, and shortened to `limit` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def fail(message: str, code: int = EXIT_USER_ERROR) -> int:
    """Print `gpuplan: MESSAGE` as one line on stderr; return the exit code."""
    sys.stderr.write(f"gpuplan: {one_line(message)}\n")
    sys.stderr.flush()
    return code
