"""The training-framework catalog (data/frameworks.toml): one memory profile per framework."""

from __future__ import annotations

from functools import cache

from gpuplan.datafiles import load_data  # parsed once, cached (cold start)
from gpuplan.engine.frameworks.profile import FrameworkProfile, validate_profile
from gpuplan.engine.frozen import fields
from gpuplan.lookup import did_you_mean, normalise

_FIELDS = {f.name for f in fields(FrameworkProfile)} - {"sources"}


@cache
def _table() -> tuple[dict[str, FrameworkProfile], dict[str, str]]:
    by_id: dict[str, FrameworkProfile] = {}
    names: dict[str, str] = {}
    for row in load_data("frameworks.toml")["framework"]:
        values = {k: v for k, v in row.items() if k in _FIELDS}
        unknown = set(row) - _FIELDS - {"aliases", "sources"}
        if unknown:  # a typo in the data file must not pass silently
            raise ValueError(f"frameworks.toml {row['id']}: unknown fields {sorted(unknown)}")
        sources = tuple(sorted((row.get("sources") or {}).items()))
        profile = FrameworkProfile(**values, sources=sources)
        validate_profile(profile)
        by_id[profile.id] = profile
        for alias in [profile.id, *row.get("aliases", [])]:
            names[normalise(alias)] = profile.id
    return by_id, names


def list_frameworks() -> list[FrameworkProfile]:
    return list(_table()[0].values())


def get_framework(name: str) -> FrameworkProfile:
    """A framework profile by id or alias ('torchtitan', 'megatron-lm', 'hf', ...)."""
    by_id, names = _table()
    key = names.get(normalise(name))
    if key is None:
        raise did_you_mean("framework", name, names)
    return by_id[key]
