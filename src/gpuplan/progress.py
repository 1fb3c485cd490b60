"""Progress lines for waits a user would otherwise sit through in silence (a slow Hub).

The CLI sets `listener` to a writer of one stderr line (cli/main.py); a library caller hears
nothing unless it sets one. Nothing here imports anything: every layer may use it.
"""

from __future__ import annotations

from collections.abc import Callable

listener: Callable[[str], None] | None = None


def say(line: str) -> None:
    """Pass one progress line to the listener, if there is one."""
    if listener is not None:
        listener(line)
