"""Frozen records: gpuplan's value types, frozen dataclasses that are cheap to define and to build.

    @record                      # a frozen dataclass
    class Spec:
        name: str
        sizes: tuple[int, ...] = ()
        notes: list[str] = field(default_factory=list, compare=False)

    @record(cache_hash=True)     # and its hash computed once per instance
    class Architecture: ...

    replace(spec, name="x"); fields(spec); asdict(spec)

Why not `@dataclass(frozen=True)`: the `dataclasses` module imports `inspect` (and with it `ast`,
`dis`, `tokenize`), and a frozen dataclass compiles six methods from source text when its module
is imported (`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`, `__delattr__`), about
a millisecond a class. A serving answer imports some thirty classes: together half of the CLI's
cold start (issue 14). A record reads its fields from the class annotations itself and compiles
one method, its `__init__`, which stores the fields straight into the instance's `__dict__`
(several times faster per object than the dataclass's `object.__setattr__` per field; the bills
build objects per call). Equality, hash, repr and the frozen guard are functions shared by every
record, reading the fields through one C-level `operator.attrgetter` per class.

The semantics are the dataclass's own (tests/test_frozen.py compares the two on one class body):

- `==` compares the fields with `compare=True` of two objects of the same class;
- `hash()` hashes the tuple of the fields with `hash=True` (or, unset, `compare=True`);
- `repr()` is `Name(field=value, ...)` over the fields with `repr=True`;
- assigning or deleting an attribute raises `dataclasses.FrozenInstanceError`;
- defaults, `field(default_factory=…)`, `init=False`, `kw_only=True` and `__post_init__` as in a
  dataclass; a class's own `__eq__`, `__hash__` or `__repr__` is kept; a record may extend a record;
- `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work on records too: the
  dataclass field table (`__dataclass_fields__`) is built on first use, importing `dataclasses`
  only then. Within gpuplan, this module's `fields`, `replace` and `asdict` do the same without it.

`cache_hash=True` keeps the hash in the instance's `__dict__` after its first use: bills are
memoised by deep objects (an Architecture holds every layer), and a dataclass recomputes its hash
over every field on each lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, dataclass_transform, get_origin, overload

T = TypeVar("T")

__all__ = ["MISSING", "Field", "asdict", "field", "fields", "record", "replace"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # no default given


class Field:
    """One field of a record: what `field()` declares, with its name and annotation."""

    __slots__ = (
        "name",
        "type",
        "default",
        "default_factory",
        "init",
        "repr",
        "hash",
        "compare",
        "kw_only",
    )

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        init: bool = True,
        repr: bool = True,
        hash: bool | None = None,
        compare: bool = True,
        kw_only: bool = False,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.hash = hash
        self.compare = compare
        self.kw_only = kw_only

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    init: bool = True,
    repr: bool = True,
    hash: bool | None = None,
    compare: bool = True,
    kw_only: bool = False,
) -> Any:
    """A field's default, default factory and flags, as `dataclasses.field` takes them."""
    return Field(default, default_factory, init, repr, hash, compare, kw_only)


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, cache_hash: bool = False, eq: bool = True) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: Any = None, /, *, cache_hash: bool = False, eq: bool = True) -> Any:
    """Make `cls` a frozen record (module docstring); `cache_hash` keeps its hash once computed;
    `eq=False` compares and hashes by identity (one object per thing read, as a checkpoint)."""

    def wrap(c: type[T]) -> type[T]:
        made: type[T] = _make_record(c, cache_hash, eq)
        return made

    return wrap if cls is None else wrap(cls)


def fields(obj: Any) -> tuple[Field, ...]:
    """A record's (or record class's) fields in order."""
    try:
        found: tuple[Field, ...] = obj._record_fields
        return found
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the record `obj` with `changes` (`dataclasses.replace`'s rules)."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False")
        elif f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def asdict(obj: Any) -> Any:
    """A record as a dict, recursively through records, lists, tuples (named ones too) and dicts
    (`dataclasses.asdict`'s rules, other values copied with `copy.deepcopy`)."""
    if hasattr(type(obj), "_record_fields"):
        return {f.name: asdict(getattr(obj, f.name)) for f in obj._record_fields}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*[asdict(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(asdict(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((asdict(k), asdict(v)) for k, v in obj.items())
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    import copy  # any other value (rare): not loaded on a serving answer's path

    return copy.deepcopy(obj)


def _make_record(cls: Any, cache_hash: bool, eq: bool) -> Any:
    """The field table from the annotations, one compiled `__init__`, and the shared methods."""
    fs = _collect_fields(cls)
    compared = [f.name for f in fs if f.compare]
    hashed = [f.name for f in fs if (f.compare if f.hash is None else f.hash)]
    own = dict(cls.__dict__)
    cls._record_fields = fs
    cls._record_eq = staticmethod(_getter(compared))
    cls._record_hash = staticmethod(_getter(hashed))
    cls._record_repr = tuple(f.name for f in fs if f.repr)
    cls.__dataclass_fields__ = _DataclassTable()
    setattr(cls, "__match_args__", tuple(f.name for f in fs if f.init and not f.kw_only))  # noqa: B010
    cls.__init__ = _init(cls, fs)
    if eq and "__eq__" not in own:
        cls.__eq__ = _eq
    if eq and ("__hash__" not in own or own["__hash__"] is None):  # an own __eq__ sets it None
        cls.__hash__ = _hash_cached if cache_hash else _hash
    if "__repr__" not in own:
        cls.__repr__ = _repr
    cls.__setattr__ = _setattr
    cls.__delattr__ = _delattr
    return cls


def _collect_fields(cls: Any) -> tuple[Field, ...]:
    """The base records' fields, then this class's annotated ones (ClassVar skipped), in order;
    a field's class attribute becomes its default, as in a dataclass."""
    table: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("_record_fields", ()):
            table[f.name] = f
        if "__dataclass_fields__" in base.__dict__ and "_record_fields" not in base.__dict__:
            raise TypeError(f"record {cls.__name__} cannot extend the dataclass {base.__name__}")
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if _is_class_var(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        if type(value).__module__ == "dataclasses":
            raise TypeError(f"{cls.__name__}.{name}: a record's field comes from frozen.field")
        f = value if isinstance(value, Field) else Field(default=value)
        f.name, f.type = name, annotation
        if f.default is MISSING:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, f.default)
        table[name] = f
    fs = tuple(table.values())
    _check_order(cls, fs)
    return fs


def _is_class_var(annotation: Any) -> bool:
    if isinstance(annotation, str):
        head = annotation.split("[", 1)[0].strip()
        if head.endswith("InitVar"):
            raise TypeError("records do not take InitVar fields")
        return head in ("ClassVar", "typing.ClassVar")
    return annotation is ClassVar or get_origin(annotation) is ClassVar


def _check_order(cls: Any, fs: tuple[Field, ...]) -> None:
    """A positional field without a default may not follow one with a default (dataclass rule)."""
    seen_default = False
    for f in fs:
        if not f.init or f.kw_only:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(
                f"{cls.__name__}: non-default argument {f.name!r} follows default argument"
            )


class _DataclassTable:
    """`__dataclass_fields__`, built on first use (importing `dataclasses` only then), so the
    standard library's `fields`, `replace`, `asdict` and `is_dataclass` accept records."""

    def __get__(self, obj: Any, owner: type) -> dict[str, Any]:
        import dataclasses

        table = {}
        for f in owner._record_fields:  # type: ignore[attr-defined]
            std: Any = dataclasses.field(
                default=dataclasses.MISSING if f.default is MISSING else f.default,
                default_factory=(
                    dataclasses.MISSING if f.default_factory is MISSING else f.default_factory
                ),
                init=f.init,
                repr=f.repr,
                hash=f.hash,
                compare=f.compare,
                kw_only=f.kw_only,
            )
            std.name, std.type = f.name, f.type
            std._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # a plain field
            table[f.name] = std
        type.__setattr__(owner, "__dataclass_fields__", table)
        return table


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
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


_NO_VALUE = object()  # a default_factory field's parameter when the caller gives none


def _init(cls: type, fs: tuple[Field, ...]) -> Callable[..., None]:
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
    source = f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n" + "\n".join(
        body or ["    pass"]
    )
    namespace: dict[str, Any] = {}
    exec(source + "\n", env, namespace)  # one compiled method per class (module docstring)
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init
