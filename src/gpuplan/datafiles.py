"""Data files parsed once and kept in a compiled form (the bottom layer: the engine reads its
own tables through it, and the catalog its own).

A data file (TOML or JSON under catalog/data/) is parsed on first use and its result written with
`marshal` (the format of Python's own .pyc files) to the user's cache directory
($GPUPLAN_CACHE_DIR, else $XDG_CACHE_HOME/gpuplan, else ~/.cache/gpuplan), keyed by the file's
name, size and modification time; later runs load that in a fraction of the parse time. When the
cache cannot be read or written, the file is simply parsed (GPUPLAN_CACHE_DIR=off turns it off).

Plain `os.path` rather than pathlib, and TOML's parser imported only on a cache miss: this
module is on every command's path (cold start, issue 14; `json` every command loads anyway).
"""

from __future__ import annotations

import json
import marshal
import os
from typing import Any

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog", "data")


def _cache_dir() -> str | None:
    explicit = os.environ.get("GPUPLAN_CACHE_DIR")
    if explicit is not None:
        return None if explicit.lower() in ("", "0", "off", "none") else explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpuplan")


def _parse(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".json"):
        return json.loads(text)
    import tomllib

    return tomllib.loads(text)


def load_data(name: str) -> Any:
    """The parsed content of catalog/data/`name`, from the compiled cache when it is current."""
    path = os.path.join(DATA, name)
    stat = os.stat(path)
    cache = _cache_dir()
    if cache is None:
        return _parse(path)
    key = f"{name.replace('/', '--')}.{stat.st_size}.{stat.st_mtime_ns}.marshal"
    target = os.path.join(cache, key)
    try:
        with open(target, "rb") as fh:
            return marshal.loads(fh.read())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = _parse(path)
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(marshal.dumps(data))
        os.replace(tmp, target)
    except (OSError, ValueError):
        pass
    return data
