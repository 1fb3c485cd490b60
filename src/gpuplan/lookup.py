"""Name lookup with a 'did you mean' for every catalog."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan.errors import GpuplanError


def normalise(name: str) -> str:
    return " ".join(name.strip().lower().replace("_", "-").split())


def did_you_mean(kind: str, name: str, choices: Iterable[str]) -> GpuplanError:
    """An error naming the closest known names (difflib's ratio, as `git` does for commands)."""
    import difflib

    pool = sorted(set(choices))
    close = difflib.get_close_matches(normalise(name), pool, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return GpuplanError(f"unknown {kind} {name!r}{hint} (see `gpuplan {kind}s`)")


def dotted(node: Any, path: str) -> Any:
    """The value at a dotted `path` ("vision_config.hidden_size") in nested mappings; None when
    any step is absent or not a mapping."""
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node
