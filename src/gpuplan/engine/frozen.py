"""Frozen dataclasses that hash once: the bills' caches are keyed by them, and a dataclass
recomputes its hash over every field on each lookup.

    @hash_once
    @dataclass(frozen=True)
    class Spec: ...

The hash is the dataclass's own (of the tuple of its compared fields), computed on first use and
kept in the instance's `__dict__`; equality is untouched.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def hash_once(cls: type[T]) -> type[T]:
    """Give the frozen dataclass `cls` a hash computed once per instance (module docstring)."""
    names = [
        f.name
        for f in fields(cls)  # type: ignore[arg-type]
        if (f.compare if f.hash is None else f.hash)
    ]
    values = "".join(f"self.{n}," for n in names)
    source = (
        "def __hash__(self):\n"
        "    d = self.__dict__\n"
        "    h = d.get('_hash')\n"
        "    if h is None:\n"
        f"        h = d['_hash'] = hash(({values}))\n"
        "    return h\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)  # the dataclass's own way: one tuple of the fields, inline
    cls.__hash__ = namespace["__hash__"]  # type: ignore[method-assign]
    return cls
