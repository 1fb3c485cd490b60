"""Frozen records: gpuplan's value types, frozen dataclasses that are cheap to define and to build.

    @record                      # a frozen dataclass
    class Spec: ...

    @record(cache_hash=True)     # and its hash computed once per instance
    class Architecture: ...

Why not `@dataclass(frozen=True)`: a frozen dataclass compiles six methods from source text when
its module is imported (`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`,
`__delattr__`), about a millisecond a class, and a serving answer imports some thirty classes: a
third of the CLI's cold start (issue 14). A record compiles one method, its `__init__`, which
stores the fields straight into the instance's `__dict__` (several times faster per object than
the dataclass's `object.__setattr__` per field, and the bills build objects per call). Equality,
hash, repr and the frozen guard are four functions shared by every record, reading the fields
through one C-level `operator.attrgetter` per class. The semantics are the dataclass's own:

- `==` compares the fields with `compare=True` of two objects of the same class;
- `hash()` hashes the fields with `hash=True` (or, unset, `compare=True`);
- `repr()` is `Name(field=value, ...)` over the fields with `repr=True`;
- assigning or deleting an attribute raises `dataclasses.FrozenInstanceError`;
- `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work as on any dataclass, and a
  class's own `__eq__`, `__hash__` or `__repr__` is kept.

`cache_hash=True` keeps the hash in the instance's `__dict__` after its first use: bills are
memoised by deep objects (an Architecture holds every layer), and a dataclass recomputes its hash
over every field on each lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")

__all__ = ["record"]


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, cache_hash: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: Any = None, /, *, cache_hash: bool = False) -> Any:
    """Make `cls` a frozen record (module docstring); `cache_hash` keeps its hash once computed."""

    def wrap(c: type[T]) -> type[T]:
        made: type[T] = _make_record(c, cache_hash)
        return made

    return wrap if cls is None else wrap(cls)


def _make_record(cls: Any, cache_hash: bool) -> Any:
    """The dataclass's field table without its generated methods, then the shared ones."""
    dataclass(init=False, repr=False, eq=False)(cls)
    fs = fields(cls)
    compared = [f.name for f in fs if f.compare]
    hashed = [f.name for f in fs if (f.compare if f.hash is None else f.hash)]
    shown = tuple(f.name for f in fs if f.repr)
    own = cls.__dict__
    cls.__init__ = _init(cls, fs)
    cls._record_eq = staticmethod(_getter(compared))
    cls._record_hash = staticmethod(_getter(hashed))
    cls._record_repr = shown
    if "__eq__" not in own:
        cls.__eq__ = _eq
    if "__hash__" not in own or own["__hash__"] is None:  # a class-level __eq__ sets it to None
        cls.__hash__ = _hash_cached if cache_hash else _hash
    if "__repr__" not in own:
        cls.__repr__ = _repr
    cls.__setattr__ = _setattr
    cls.__delattr__ = _delattr
    return cls


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A function from an object to the tuple of its fields `names` (C code for two or more)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self._record_eq
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(self._record_hash(self))


def _hash_cached(self: Any) -> int:
    d = self.__dict__
    h: int | None = d.get("_hash")
    if h is None:
        h = d["_hash"] = hash(self._record_hash(self))
    return h


def _repr(self: Any) -> str:
    inside = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_repr)
    return f"{self.__class__.__qualname__}({inside})"


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


_NO_VALUE = object()  # a default_factory field's parameter when the caller gives none


def _init(cls: type, fs: tuple[Any, ...]) -> Callable[..., None]:
    """`__init__` for `cls`: its fields in order as parameters, each stored into `__dict__`.

    Defaults and default factories as the dataclass's own; fields with `init=False` take their
    default; keyword-only fields follow a `*`; `__post_init__` is called last."""
    env: dict[str, Any] = {"_NO_VALUE": _NO_VALUE}
    params: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for f in fs:
        if f.default is not MISSING:
            env[f"_default_{f.name}"] = f.default
            value, param = f.name, f"{f.name}=_default_{f.name}"
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            value = f"_factory_{f.name}() if {f.name} is _NO_VALUE else {f.name}"
            param = f"{f.name}=_NO_VALUE"
        else:
            value, param = f.name, f.name
        if not f.init:  # not a parameter: the default (or the factory's value)
            value = f"_default_{f.name}" if f.default is not MISSING else f"_factory_{f.name}()"
        elif f.kw_only:
            keyword_only.append(param)
        else:
            params.append(param)
        body.append(f"    d[{f.name!r}] = {value}")
    if keyword_only:
        params += ["*", *keyword_only]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n" + "\n".join(body)
    namespace: dict[str, Any] = {}
    exec(source + "\n", env, namespace)  # one compiled method per class (module docstring)
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init
