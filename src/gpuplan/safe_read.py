"""The one safe-reading layer every reader goes through: files the user named, and the text in them.

Files (`open_regular`, `read_bytes`, `read_text`): the path is checked with `os.stat` before it is
opened, so a FIFO, a device or a socket is refused at once and never opened for a blocking read;
it is then opened with O_NONBLOCK and checked again on the open descriptor (a path swapped in
between is refused too). Sizes are checked before reading, and reads are bounded to the cap.

Text (`load_json`, `load_toml`, `load_yaml`): parsed with nesting, size and number limits, then
walked once (iteratively, counting every visit, so a YAML alias that expands a subtree many times
counts each expansion): at most MAX_DEPTH levels, MAX_NODES values, integers of at most
MAX_INT_DIGITS digits, and (unless asked otherwise) finite floats only. YAML is read with
PyYAML's safe loader limited to MAX_ALIASES alias references and MAX_DEPTH levels while it
composes (the "billion laughs" document is refused before it is built).

Names (`clean_name`): control, format and bidi characters escaped before a name from a file
reaches a terminal; rich markup is escaped where it is printed (`rich.markup.escape`).

Every failure is one GpuplanError line naming what was read. Pure standard library (PyYAML is
imported only when YAML is read), so the engine may parse text through it without I/O.
"""

from __future__ import annotations

import json
import math
import os
import stat
import unicodedata
from typing import Any, BinaryIO

from gpuplan.errors import GpuplanError

MAX_DEPTH = 64  # the deepest real config (torchtune, DeepSpeed, config.json) nests < 10
MAX_NODES = 200_000  # values in one document, aliases expanded (a config.json has < 10^4)
MAX_ALIASES = 100  # YAML alias references in one document
MAX_INT_DIGITS = 40  # |n| < 10^40: far above any size; a 5,000-digit integer is refused
MAX_TEXT_BYTES = 4 * 1024 * 1024  # a config file of any kind


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], shown: str | None = None) -> BinaryIO:
    """A regular file opened for reading, binary; anything else refused before it is opened."""
    shown = clean_name(str(path) if shown is None else shown)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GpuplanError(f"{shown}: no such file") from None
    except (OSError, ValueError) as err:
        raise GpuplanError(f"{shown}: cannot read ({_why(err)})") from None
    if not stat.S_ISREG(mode):
        raise GpuplanError(f"{shown} is {_kind(mode)}, not a file gpuplan reads")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise GpuplanError(f"{shown}: cannot read ({_why(err)})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # swapped between the stat and the open
        os.close(fd)
        raise GpuplanError(f"{shown} is {_kind(mode)}, not a file gpuplan reads")
    return os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike[str], cap: int, shown: str | None = None) -> bytes:
    """A regular file's bytes, refused (before reading) when larger than `cap`."""
    shown = clean_name(str(path) if shown is None else shown)
    with open_regular(path, shown) as f:
        if os.fstat(f.fileno()).st_size > cap:
            raise GpuplanError(f"{shown} is larger than {_size(cap)}; not read")
        try:
            data = f.read(cap + 1)
        except OSError as err:
            raise GpuplanError(f"{shown}: cannot read ({_why(err)})") from None
    if len(data) > cap:  # grew while read
        raise GpuplanError(f"{shown} is larger than {_size(cap)}; not read")
    return data


def read_text(
    path: str | os.PathLike[str], cap: int = MAX_TEXT_BYTES, shown: str | None = None
) -> str:
    """A regular file's UTF-8 text (at most `cap` bytes)."""
    shown = clean_name(str(path) if shown is None else shown)
    data = read_bytes(path, cap, shown)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{shown}: not UTF-8 text (byte {err.start:,})") from None


def _why(err: BaseException) -> str:
    return getattr(err, "strerror", None) or err.__class__.__name__


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


# --------------------------------------------------------------------------------------
# Parsed documents
# --------------------------------------------------------------------------------------


def check_tree(doc: Any, what: str, *, finite: bool = True, max_nodes: int = MAX_NODES) -> Any:
    """`doc` when it is within the limits (depth, values counted per visit, integer size,
    finite floats when `finite`); else a one-line error naming `what`. Iterative: a tree deeper
    than the interpreter's recursion limit is refused, never overflows the stack."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > max_nodes:
            raise GpuplanError(f"{what}: more than {max_nodes:,} values (aliases expanded)")
        if depth > MAX_DEPTH:
            raise GpuplanError(f"{what}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            for key, value in node.items():
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, list | tuple | set | frozenset):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, bool):
            continue
        elif isinstance(node, int):
            check_int(node, what)
        elif isinstance(node, float) and finite and not math.isfinite(node):
            raise GpuplanError(f"{what}: {node!r} is not a finite number")
    return doc


def check_int(n: int, what: str) -> int:
    """`n` when it has at most MAX_INT_DIGITS digits (bit length checked: no decimal printing)."""
    if n.bit_length() > MAX_INT_DIGITS * 3.33:
        raise GpuplanError(f"{what}: an integer of more than {MAX_INT_DIGITS} digits")
    return n


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooBig(f"an integer of {len(text.lstrip('-')):,} digits")
    return int(text)


def _no_constant(name: str) -> float:
    raise _TooBig(f"{name} is not a finite number")


class _TooBig(ValueError):
    pass


def load_json(
    text: str | bytes,
    what: str,
    *,
    finite: bool = True,
    cap: int = MAX_TEXT_BYTES,
    max_nodes: int = MAX_NODES,
) -> Any:
    """JSON within the limits (module docstring); NaN/Infinity refused when `finite`."""
    if len(text) > cap:
        raise GpuplanError(f"{what}: larger than {_size(cap)}")
    hooks: dict[str, Any] = {"parse_int": _json_int}
    if finite:
        hooks["parse_constant"] = _no_constant
    try:
        doc = json.loads(text, **hooks)
    except json.JSONDecodeError as err:
        raise GpuplanError(
            f"{what}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None
    except _TooBig as err:
        raise GpuplanError(f"{what}: {err}") from None
    except RecursionError:
        raise GpuplanError(f"{what}: nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise GpuplanError(f"{what}: not valid JSON ({_first_line(err)})") from None
    return check_tree(doc, what, finite=finite, max_nodes=max_nodes)


def load_toml(text: str, what: str) -> dict[str, Any]:
    """TOML within the limits; inf/nan refused."""
    import tomllib

    if len(text) > MAX_TEXT_BYTES:
        raise GpuplanError(f"{what}: larger than {_size(MAX_TEXT_BYTES)}")
    if _bracket_depth(text) > MAX_DEPTH:
        raise GpuplanError(f"{what}: nested more than {MAX_DEPTH} levels deep")
    try:
        doc = tomllib.loads(text, parse_float=_toml_float)
    except tomllib.TOMLDecodeError as err:
        raise GpuplanError(f"{what}: not valid TOML ({_first_line(err)})") from None
    except _TooBig as err:
        raise GpuplanError(f"{what}: {err}") from None
    except RecursionError:
        raise GpuplanError(f"{what}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError:  # an integer past the interpreter's digit limit
        raise GpuplanError(f"{what}: an integer of more than {MAX_INT_DIGITS} digits") from None
    return check_tree(doc, what)


def _toml_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _TooBig(f"{text} is not a finite number")
    return value


def _bracket_depth(text: str) -> int:
    """The deepest run of opening brackets/braces (strings included: an over-estimate that only
    a pathological file reaches), found without parsing."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def load_yaml(text: str, what: str) -> Any:
    """YAML through PyYAML's safe loader with alias and depth limits, then `check_tree`."""
    import yaml

    if len(text) > MAX_TEXT_BYTES:
        raise GpuplanError(f"{what}: larger than {_size(MAX_TEXT_BYTES)}")
    loader = _yaml_loader()(text)
    try:
        doc = loader.get_single_data()
    except _TooBig as err:
        raise GpuplanError(f"{what}: {err}") from None
    except yaml.YAMLError as err:
        raise GpuplanError(f"{what}: not valid YAML ({_first_line(err)})") from None
    except RecursionError:
        raise GpuplanError(f"{what}: nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, TypeError, OverflowError) as err:  # a constructor refusing a value
        raise GpuplanError(f"{what}: not valid YAML ({_first_line(err)})") from None
    finally:
        loader.dispose()
    return check_tree(doc, what)


_LOADER: Any = None


def _yaml_loader() -> Any:
    """yaml.SafeLoader counting alias references and nesting while it composes the document,
    and refusing integers longer than MAX_INT_DIGITS before converting them."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    class Loader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0
            self._aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self._aliases += 1
                if self._aliases > MAX_ALIASES:
                    raise _TooBig(f"more than {MAX_ALIASES} YAML aliases")
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _TooBig(f"nested more than {MAX_DEPTH} levels deep")
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_yaml_int(self, node: Any) -> int:
            digits = sum(ch.isdigit() for ch in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise _TooBig(f"an integer of {digits:,} digits")
            return int(super().construct_yaml_int(node))

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    _LOADER = Loader
    return Loader


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return clean_name(text[0] if text else err.__class__.__name__, 200)


# --------------------------------------------------------------------------------------
# Names shown on a terminal
# --------------------------------------------------------------------------------------


def clean_name(text: str, limit: int = 300) -> str:
    """`text` with control, format (bidi) and surrogate characters shown as escapes, cut to
    `limit` characters: safe to print (rich markup is escaped where it is printed)."""
    if text.isprintable() and len(text) <= limit:
        return text
    out = []
    for ch in text[: limit + 1]:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif unicodedata.category(ch) in ("Zs",):
            out.append(" ")
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    shown = "".join(out)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
