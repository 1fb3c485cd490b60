"""engine/frozen.py: a record behaves as the frozen dataclass of the same body (construction,
defaults and factories, keyword-only and init=False fields, __post_init__, ==, hash, repr, the
frozen guard, fields/replace/asdict, pickling), while compiling one method instead of six."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, asdict, dataclass, field, fields, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.engine.frozen import record


def _body(decorate: Any) -> Any:
    """One class body, decorated either way; both classes get the same qualified name."""

    class Spec:
        a: int
        b: str = "x"
        c: list[int] = field(default_factory=list, hash=False)
        note: str = field(default="", compare=False, repr=False)
        weight: float = field(default=1.0, hash=False)
        tag: str = field(default="t", kw_only=True)
        derived: int = field(default=0, init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "derived", self.a * 2)

    Spec.__qualname__ = "Spec"
    return decorate(Spec)


Rec = _body(record)
Ref = _body(dataclass(frozen=True))


@record(cache_hash=True)
class Point:  # at module level, so pickle finds it
    x: int
    tags: tuple[str, ...] = ()


def _same(make: Any) -> tuple[Any, Any]:
    return make(Rec), make(Ref)


values = st.tuples(
    st.integers(-3, 3), st.sampled_from(["x", "y"]), st.floats(-2, 2), st.sampled_from("tu")
)


@given(values, values)
def test_equality_hash_and_repr_are_the_dataclass_s(left: tuple, right: tuple) -> None:
    def build(cls: Any, v: tuple) -> Any:
        return cls(v[0], v[1], weight=v[2], tag=v[3], note=str(v))

    r1, d1 = build(Rec, left), build(Ref, left)
    r2, d2 = build(Rec, right), build(Ref, right)
    assert (r1 == r2) == (d1 == d2)
    assert repr(r1) == repr(d1)
    assert (hash(r1) == hash(r2)) or r1 != r2  # equal records hash equal
    assert hash(r1) == hash(d1)  # the same tuple of fields is hashed
    assert r1 != d1 and (r1 == 1) is False  # another class is never equal


def test_construction_defaults_factories_and_post_init() -> None:
    rec, ref = _same(lambda cls: cls(3))
    assert (
        asdict(rec)
        == asdict(ref)
        == {"a": 3, "b": "x", "c": [], "note": "", "weight": 1.0, "tag": "t", "derived": 6}
    )
    assert rec.c is not Rec(3).c  # a fresh list per object
    assert Rec(1, "y", [2], tag="u") == Rec(a=1, b="y", c=[2], tag="u")
    for cls in (Rec, Ref):
        with pytest.raises(TypeError):
            cls()  # a required field
        with pytest.raises(TypeError):
            cls(1, "y", [], "", 1.0, "u")  # `tag` is keyword-only
        with pytest.raises(TypeError):
            cls(1, derived=4)  # not a parameter


def test_frozen_guard_fields_and_replace() -> None:
    rec = Rec(1)
    with pytest.raises(FrozenInstanceError):
        rec.a = 2
    with pytest.raises(FrozenInstanceError):
        del rec.a
    assert [f.name for f in fields(rec)] == [f.name for f in fields(Ref)]
    moved = replace(rec, a=5, tag="u")
    assert (moved.a, moved.tag, moved.derived, rec.a) == (5, "u", 10, 1)


def test_cached_hash_pickling_and_own_methods() -> None:
    @record(cache_hash=True)
    class Deep:
        parts: tuple[int, ...]

    @record
    class Own:
        x: int

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

        def __repr__(self) -> str:
            return "own"

    deep = Deep((1, 2, 3))
    assert hash(deep) == hash(((1, 2, 3),)) and deep.__dict__["_hash"] == hash(deep)
    assert repr(deep) == "test_cached_hash_pickling_and_own_methods.<locals>.Deep(parts=(1, 2, 3))"
    point = Point(4, ("a",))
    assert pickle.loads(pickle.dumps(point)) == point
    assert Own(1) == Own(2) and hash(Own(1)) == 7 and repr(Own(1)) == "own"


def test_a_record_compiles_one_method(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    calls: list[str] = []
    real = builtins.exec

    def counting(source: Any, *args: Any) -> Any:
        calls.append(str(source)[:20])
        return real(source, *args)

    monkeypatch.setattr(builtins, "exec", counting)
    _body(record)
    assert len(calls) == 1 and calls[0].startswith("def __init__")
    calls.clear()
    _body(dataclass(frozen=True))
    assert len(calls) == 6  # what the cold start saves per class (module docstring)
