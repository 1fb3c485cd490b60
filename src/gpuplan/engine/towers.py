"""Encoder towers of multimodal checkpoints (vision, audio) counted from a table of records.

catalog/data/towers.toml holds one record per wrapper model type (see the comments at its top):
the config fields a tower reads (dotted paths into the wrapper's config.json, with transformers'
defaults), and its parameters as named integer expressions over those fields, one per module
group (embeddings, layers, merger, projector, ...), written from the modelling file the record
cites. A record may also give the tokens one image (or one second of audio) adds to a request.

    count = tower_count(config, name)     # None when no record reads this wrapper
    count.params, count.parts, count.tokens

A record may mount shared tower kinds (the `[kinds.*]` tables: a CLIP or Whisper encoder written
once, its fields relative to the sub-config it sits in) under `uses`, alias -> "kind@path"; their
parts are counted as "alias.part" beside the record's own (its projector, say).

Expressions use integers, + - * // ( ) **, min/max/len/entries and the record's field names; booleans
count as 0 / 1; `sum(expr for i in range(a, b))` adds a term per stage of a tower whose widths
follow a list (ConvNeXt stages, a chain of convolutions). Nothing is evaluated but that arithmetic
(an `ast` walk, no `eval`).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from gpuplan.datafiles import load_data
from gpuplan.engine.frozen import field as record_field
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError
from gpuplan.lookup import dotted

_RECORD_KEYS = {
    "wrappers",
    "source",
    "kind",
    "fields",
    "defaults",
    "params",
    "tokens",
    "token_unit",
    "uses",
    "not_counted",
    "counted_when",
}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_CALLS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "len": len,
    # a field that is one number or a list of them (vision_feature_layer): how many it names
    "entries": lambda value: len(value) if isinstance(value, list) else 1,
    # 1 when a number is one of a list's entries (a VQ-GAN's attn_resolutions), else 0
    "among": lambda value, values: int(value in values),
    "total": sum,  # a list's sum (a conv stack's channel counts)
}


class TowerTableError(Exception):
    """A malformed record in towers.toml (a packaging bug, caught by the tests)."""


@record
class Tower:
    """One record: where its fields live, their defaults, and its parameter expressions."""

    name: str
    wrappers: tuple[str, ...]
    source: str
    kind: str  # "vision" | "audio" | "vision+audio"
    fields: Mapping[str, Any]  # name -> config path, list of paths, or {path, prefix}
    defaults: Mapping[str, Any]
    params: Mapping[str, str]
    tokens: str = ""
    token_unit: str = "image"
    # alias -> (kind, sub-config path, the wrapper's own defaults for that kind's fields)
    uses: Mapping[str, tuple[str, str, Mapping[str, Any]]] = record_field(default_factory=dict)
    not_counted: tuple[str, ...] = ()  # sub-configs whose towers the record does not count
    # sub-config -> a 0/1 field (or a list of them): its tower is counted only when each is 1
    # (a tower the config names by an architecture string the record knows); else it is named
    # as not counted
    counted_when: Mapping[str, str | list[str]] = record_field(default_factory=dict)


@record
class TowerCount:
    """A tower's parameters by module group, and the tokens one input adds to a request."""

    tower: str
    kind: str
    parts: Mapping[str, int]
    tokens: int
    token_unit: str
    source: str
    not_counted: tuple[str, ...] = ()  # sub-configs present whose towers are not counted

    @property
    def params(self) -> int:
        return sum(self.parts.values())


def tower_count(config: Mapping[str, Any], name: str = "model") -> TowerCount | None:
    """The tower record for this wrapper's `model_type`, evaluated on its config (None if the
    table has no record for it)."""
    tower = _by_wrapper().get(str(config.get("model_type") or ""))
    if tower is None:
        return None
    parts = _mounted(tower, config, name)
    values = _values(tower, config, name)
    parts |= {part: _evaluate(expr, values, tower, name) for part, expr in tower.params.items()}
    bad = [part for part, n in parts.items() if n < 0]
    if bad:
        raise GpuplanError(f"{name}: the {tower.name} tower's {bad[0]} comes out negative")
    tokens = _evaluate(tower.tokens, values, tower, name) if tower.tokens else 0
    unknown = [
        key
        for key, flags in tower.counted_when.items()
        if not all(values[f] for f in ([flags] if isinstance(flags, str) else flags))
    ]
    missing = tuple(
        key for key in (*tower.not_counted, *unknown) if isinstance(config.get(key), Mapping)
    )
    return TowerCount(
        tower.name, tower.kind, parts, tokens, tower.token_unit, tower.source, missing
    )


def _values(tower: Tower, config: Mapping[str, Any], name: str) -> dict[str, Any]:
    return field_values(tower.fields, tower.defaults, config, name, f"the {tower.name} tower")


def _mounted(tower: Tower, config: Mapping[str, Any], name: str) -> dict[str, int]:
    """The parts of each shared kind the record mounts, its fields read under the mount path."""
    parts: dict[str, int] = {}
    for alias, (kind_name, at, defaults) in tower.uses.items():
        kind = _kinds()[kind_name]
        fields = {f: _under(spec, at) for f, spec in kind.fields.items()}
        reader = f"the {tower.name} tower's {kind_name} {alias}"
        values = field_values(fields, {**kind.defaults, **defaults}, config, name, reader)
        for part, expr in kind.params.items():
            parts[f"{alias}.{part}"] = _evaluate(expr, values, kind, name)
    return parts


def _under(spec: Any, at: str) -> Any:
    """A kind's field spec with each config path moved under the mount path `at`."""
    if isinstance(spec, Mapping):
        return {**spec, "path": _under(spec["path"], at)}
    if isinstance(spec, list | tuple):
        return [_under(path, at) for path in spec]
    return f"{at}.{spec}" if at else spec


def field_values(
    fields: Mapping[str, Any],
    defaults: Mapping[str, Any],
    config: Mapping[str, Any],
    name: str,
    reader: str,
) -> dict[str, Any]:
    """Each field's value: the first of its config paths present, else its default. A field
    given as {path, prefix} is 1 when that string value starts with prefix, else 0; one given
    as {path, in} is 1 when the value is one of the list, else 0; one given as
    {path, reciprocal = true} is int(1 / value); one given as {path, count} is how many entries
    of that list equal count (layer_types' "full_attention", say); one given as
    {path, values = true} is the list of that table's values (with key = "name", that entry of
    each value that is a table holding it: per-layer overrides of one setting)."""
    out: dict[str, Any] = {}
    for field, spec in fields.items():
        prefix = spec.get("prefix") if isinstance(spec, Mapping) else None
        among = spec.get("in") if isinstance(spec, Mapping) else None
        inverse = isinstance(spec, Mapping) and spec.get("reciprocal")
        counted = spec.get("count") if isinstance(spec, Mapping) else None
        values_of = isinstance(spec, Mapping) and spec.get("values")
        paths = _paths(spec)
        value: Any = None
        for path in paths:
            value = dotted(config, path)
            if value is not None:
                break
        if prefix is not None:
            out[field] = int(isinstance(value, str) and value.startswith(prefix))
            continue
        if among is not None:
            out[field] = int(value in among)
            continue
        if values_of and isinstance(value, Mapping):  # a table's values (its keys dropped)
            value = _table_values(value, spec.get("key"))
        if counted is not None and isinstance(value, list | tuple):
            out[field] = sum(entry == counted for entry in value)
            continue
        if value is None:
            if field not in defaults:
                raise GpuplanError(
                    f"{name}: config.json has no {paths[0]!r}, which {reader} needs;"
                    " cannot size this model"
                )
            value = defaults[field]
        out[field] = (
            _reciprocal(value, paths[0], name) if inverse else _checked(value, paths[0], name)
        )
    return out


def _table_values(table: Mapping[str, Any], key: str | None) -> list[Any]:
    if key is None:
        return list(table.values())
    return [v[key] for v in table.values() if isinstance(v, Mapping) and key in v]


def _paths(spec: Any) -> tuple[str, ...]:
    if isinstance(spec, Mapping):
        spec = spec["path"]
    return tuple(spec) if isinstance(spec, list | tuple) else (spec,)


def _checked(value: Any, key: str, name: str) -> Any:
    """An integer (booleans as 0/1) or a list of them, bounded; anything else fails naming it.
    (Negative integers pass: layer indices such as vision_feature_layers; a part that comes
    out negative is refused by tower_count.)"""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and -(1 << 40) < value < 1 << 40:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value < 1 << 40:
        return int(value)
    if isinstance(value, list | tuple) and len(value) <= 4096:
        return [_checked(v, key, name) for v in value]
    raise GpuplanError(
        f"{name}: config field {key!r} must be a whole number (or a list of them), got"
        f" {str(value)[:40]!r}"
    )


def _reciprocal(value: Any, key: str, name: str) -> int:
    """1 / value as a whole number (InternVL's downsample_ratio 0.5 -> 2), as transformers'
    int(1 / ratio) takes it; anything but a positive number fails naming the field."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
        return int(1 / value)
    raise GpuplanError(f"{name}: config field {key!r} must be a number in (0, 1], got {value!r}")


def _evaluate(expr: str, values: Mapping[str, Any], tower: Tower, name: str) -> int:
    return evaluate(expr, values, name, f"towers.toml [{tower.name}]")


def evaluate(expr: str, values: Mapping[str, Any], name: str, where: str) -> int:
    """One integer expression of a record over its field values."""
    try:
        result = _walk(_parsed(expr), values)
    except ZeroDivisionError:
        raise GpuplanError(f"{name}: {where} divides by zero ({expr})") from None
    except TypeError:  # a list where a number belongs, or the reverse
        raise GpuplanError(
            f"{name}: a config field {where} reads has the wrong shape for {expr!r}"
        ) from None
    if not isinstance(result, int):
        raise TowerTableError(f"{where}: {expr!r} is not a whole number")
    return result


@cache
def _parsed(expr: str) -> ast.expr:
    return ast.parse(expr, mode="eval").body


def _walk(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise TowerTableError(f"towers.toml: {node.id!r} is not a field of its record")
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_walk(node.left, values), _walk(node.right, values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, values)
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
        seq, index = _walk(node.value, values), _walk(node.slice, values)
        if (
            not isinstance(seq, list)
            or not isinstance(index, int)
            or not -len(seq) <= index < len(seq)
        ):
            raise TypeError(index)  # evaluate() names the config and the expression
        return seq[index]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        return _CALLS[node.func.id](*(_walk(a, values) for a in node.args))
    if isinstance(node, ast.Call) and _is_stage_sum(node):
        return _stage_sum(node, values)
    raise TowerTableError(f"towers.toml: {ast.unparse(node)!r} is not tower arithmetic")


_MAX_STAGES = 4096


def _is_stage_sum(node: ast.Call) -> bool:
    """`sum(<expr> for <name> in range(<a>[, <b>]))`: one generator, no filters."""
    if not (
        isinstance(node.func, ast.Name)
        and node.func.id == "sum"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.GeneratorExp)
    ):
        return False
    gens = node.args[0].generators
    if len(gens) != 1 or gens[0].ifs or not isinstance(gens[0].target, ast.Name):
        return False
    it = gens[0].iter
    return (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id == "range"
        and 1 <= len(it.args) <= 2
    )


def _stage_sum(node: ast.Call, values: Mapping[str, Any]) -> Any:
    """The sum of the generator's term over its range, the loop name bound to each index."""
    gen = node.args[0]
    assert isinstance(gen, ast.GeneratorExp)
    loop = gen.generators[0]
    assert isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call)
    bounds = [_walk(a, values) for a in loop.iter.args]
    if not all(isinstance(b, int) for b in bounds):
        raise TypeError(bounds)
    span = range(*bounds)
    if len(span) > _MAX_STAGES:
        raise TypeError(len(span))
    return sum(_walk(gen.elt, {**values, loop.target.id: i}) for i in span)


@cache
def _table() -> dict[str, Tower]:
    raw = load_data("towers.toml")
    out = {name: _parsed_record(name, rec) for name, rec in raw.items() if name != "kinds"}
    for tower in out.values():
        missing = [use[0] for use in tower.uses.values() if use[0] not in _kinds()]
        if missing:
            raise TowerTableError(f"towers.toml [{tower.name}]: no kind {missing[0]!r}")
    return out


@cache
def _kinds() -> dict[str, Tower]:
    raw = load_data("towers.toml").get("kinds", {})
    return {name: _parsed_record(name, rec, ()) for name, rec in raw.items()}


def _parsed_record(
    tower_name: str, rec: Mapping[str, Any], wrappers: tuple[str, ...] | None = None
) -> Tower:
    unknown = set(rec) - _RECORD_KEYS
    if unknown or not rec.get("source") or not (rec.get("params") or rec.get("uses")):
        raise TowerTableError(
            f"towers.toml [{tower_name}]: unknown {sorted(unknown)} or no source/params"
        )
    uses = {}
    for alias, mount in rec.get("uses", {}).items():  # "kind@path" or {mount, defaults}
        table = mount if isinstance(mount, Mapping) else {"mount": mount}
        kind, _, at = str(table["mount"]).partition("@")
        uses[alias] = (kind.strip(), at.strip(), dict(table.get("defaults", {})))
    return Tower(
        name=tower_name,
        wrappers=tuple(rec.get("wrappers", (tower_name,))) if wrappers is None else wrappers,
        source=rec["source"],
        kind=rec.get("kind", "vision"),
        fields=dict(rec.get("fields", {})),
        defaults=dict(rec.get("defaults", {})),
        params=dict(rec.get("params", {})),
        tokens=rec.get("tokens", ""),
        token_unit=rec.get("token_unit", "image"),
        uses=uses,
        not_counted=tuple(rec.get("not_counted", ())),
        counted_when=dict(rec.get("counted_when", {})),
    )


@cache
def _by_wrapper() -> dict[str, Tower]:
    out: dict[str, Tower] = {}
    for tower in _table().values():
        for wrapper in tower.wrappers:
            if wrapper in out:
                raise TowerTableError(f"towers.toml: {wrapper!r} is read by two records")
            out[wrapper] = tower
    return out


def all_towers() -> dict[str, Tower]:
    """Every record by name (tests check each parses and names only its own fields)."""
    return dict(_table())


def all_kinds() -> dict[str, Tower]:
    """Every shared tower kind by name (records mount them under `uses`)."""
    return dict(_kinds())
