"""engine/frozen.py: a record behaves as the frozen dataclass of the same body (construction,
defaults and factories, keyword-only and init=False fields, __post_init__, ==, hash, repr, the
frozen guard, fields/replace/asdict from either module, pickling, extension), while compiling
one method instead of six and never importing `dataclasses` itself."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from typing import Any, ClassVar, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.engine import frozen
from gpuplan.engine.frozen import record


def _body(decorate: Any, field: Any) -> Any:
    """One class body, decorated either way; both classes get the same qualified name."""

    class Spec:
        kind: ClassVar[str] = "spec"
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


Rec = _body(record, frozen.field)
Ref = _body(dataclasses.dataclass(frozen=True), dataclasses.field)


@record(cache_hash=True)
class Point:  # at module level, so pickle finds it
    x: int
    tags: tuple[str, ...] = ()


class Pair(NamedTuple):
    left: Point
    right: int


@record
class Line:
    start: Point
    points: list[Point] = frozen.field(default_factory=list)
    labels: dict[str, Point] = frozen.field(default_factory=dict)
    pair: Pair | None = None


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
    assert hash(r1) == hash(d1)  # the same tuple of fields is hashed
    assert r1 != d1 and (r1 == 1) is False  # another class is never equal


def test_construction_defaults_factories_and_post_init() -> None:
    rec, ref = Rec(3), Ref(3)
    expected = {"a": 3, "b": "x", "c": [], "note": "", "weight": 1.0, "tag": "t", "derived": 6}
    assert frozen.asdict(rec) == dataclasses.asdict(rec) == dataclasses.asdict(ref) == expected
    assert rec.c is not Rec(3).c and Rec.kind == "spec"  # a fresh list per object; a ClassVar
    assert Rec(1, "y", [2], tag="u") == Rec(a=1, b="y", c=[2], tag="u")
    for cls in (Rec, Ref):
        with pytest.raises(TypeError):
            cls()  # a required field
        with pytest.raises(TypeError):
            cls(1, "y", [], "", 1.0, "u")  # `tag` is keyword-only
        with pytest.raises(TypeError):
            cls(1, derived=4)  # not a parameter


def test_frozen_guard_fields_and_replace_from_either_module() -> None:
    rec = Rec(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del rec.a
    names = [f.name for f in dataclasses.fields(Ref)]
    assert [f.name for f in frozen.fields(rec)] == [f.name for f in dataclasses.fields(rec)]
    assert [f.name for f in frozen.fields(Rec)] == names and dataclasses.is_dataclass(rec)
    for replace in (frozen.replace, dataclasses.replace):
        moved = replace(rec, a=5, tag="u")
        assert (moved.a, moved.tag, moved.derived, rec.a) == (5, "u", 10, 1)
        with pytest.raises(ValueError):
            replace(rec, derived=3)


def test_nested_asdict_cached_hash_and_pickling() -> None:
    p = Point(1, ("a",))
    line = Line(p, [Point(2)], {"end": Point(3)}, Pair(Point(4), 5))
    assert frozen.asdict(line) == dataclasses.asdict(line)
    assert hash(p) == hash((1, ("a",))) and p.__dict__["_hash"] == hash(p)
    assert pickle.loads(pickle.dumps(line)) == line
    assert repr(p) == "Point(x=1, tags=('a',))"


def test_own_methods_identity_records_and_extension() -> None:
    @record
    class Own:
        x: int

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

        def __repr__(self) -> str:
            return "own"

    @record(eq=False)
    class Read:
        x: int

    @record
    class Point3(Point):
        z: int = 0

    assert Own(1) == Own(2) and hash(Own(1)) == 7 and repr(Own(1)) == "own"
    assert Read(1) != Read(1) and len({Read(1), Read(1)}) == 2
    q = Point3(1, ("b",), 4)
    assert [f.name for f in frozen.fields(q)] == ["x", "tags", "z"] and q != Point(1, ("b",))


def test_bad_declarations_fail_as_a_dataclass_does() -> None:
    with pytest.raises(TypeError, match="non-default argument"):

        @record
        class Order:
            a: int = 1
            b: int

    with pytest.raises(TypeError, match="frozen.field"):

        @record
        class Foreign:
            a: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(ValueError):
        frozen.field(default=1, default_factory=int)


def test_a_record_compiles_one_method(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    calls: list[str] = []
    real = builtins.exec

    def counting(source: Any, *args: Any) -> Any:
        calls.append(str(source)[:20])
        return real(source, *args)

    monkeypatch.setattr(builtins, "exec", counting)
    _body(record, frozen.field)
    assert len(calls) == 1 and calls[0].startswith("def __init__")
    calls.clear()
    _body(dataclasses.dataclass(frozen=True), dataclasses.field)
    assert len(calls) == 6  # what the cold start saves per class (module docstring)


def test_a_serving_answer_does_not_import_dataclasses() -> None:
    code = (
        "import sys\n"
        "import gpuplan\n"
        "gpuplan.serve('llama-3.1-8b').to_dict('GB')\n"
        "assert 'dataclasses' not in sys.modules and 'inspect' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
