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


_MISSING = object()


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen dataclass `cls` an `__init__` that stores its fields straight into the
    instance's `__dict__`: the dataclass's own goes through `object.__setattr__` once per field
    (to get past the frozen `__setattr__`), several times slower for the wide ones the bills
    build per call. The same parameters, defaults and default factories; a class with
    `__post_init__`, slots, init=False or keyword-only fields is left as it is."""
    fs = fields(cls)  # type: ignore[arg-type]
    if (
        hasattr(cls, "__post_init__")
        or hasattr(cls, "__slots__")
        or any(not f.init or f.kw_only for f in fs)
    ):
        return cls
    from dataclasses import MISSING

    env: dict[str, Any] = {"_MISSING": _MISSING}
    params, body = [], []
    for f in fs:
        if f.default is not MISSING:
            env[f"_dflt_{f.name}"] = f.default
            params.append(f"{f.name}=_dflt_{f.name}")
            body.append(f"    d['{f.name}'] = {f.name}")
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(
                f"    d['{f.name}'] = _factory_{f.name}() if {f.name} is _MISSING else {f.name}"
            )
        else:
            params.append(f.name)
            body.append(f"    d['{f.name}'] = {f.name}")
    source = f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n" + "\n".join(
        body or ["    pass"]
    )
    namespace: dict[str, Any] = {}
    exec(source + "\n", env, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
