"""Catalog data files parsed once and kept in a compiled form.

A data file (TOML or JSON under catalog/data/) is parsed on first use and its result written with
`marshal` (the format of Python's own .pyc files) to the user's cache directory
($GPUPLAN_CACHE_DIR, else $XDG_CACHE_HOME/gpuplan, else ~/.cache/gpuplan), keyed by the file's
name, size and modification time; later runs load that in a fraction of the parse time. When the
cache cannot be read or written, the file is simply parsed (GPUPLAN_CACHE_DIR=off turns it off).
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"


def _cache_dir() -> Path | None:
    explicit = os.environ.get("GPUPLAN_CACHE_DIR")
    if explicit is not None:
        return None if explicit.lower() in ("", "0", "off", "none") else Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuplan"


def _parse(path: Path) -> Any:
    text = path.read_text("utf-8")
    if path.suffix == ".json":
        import json

        return json.loads(text)
    import tomllib

    return tomllib.loads(text)


def load_data(name: str) -> Any:
    """The parsed content of catalog/data/`name`, from the compiled cache when it is current."""
    path = DATA / name
    stat = path.stat()
    cache = _cache_dir()
    if cache is None:
        return _parse(path)
    key = f"{name.replace('/', '--')}.{stat.st_size}.{stat.st_mtime_ns}.marshal"
    target = cache / key
    try:
        return marshal.loads(target.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = _parse(path)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(data))
        os.replace(tmp, target)
    except (OSError, ValueError):
        pass
    return data
