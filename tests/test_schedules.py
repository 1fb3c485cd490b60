"""The layer-schedule and MoE-layer rules (engine/schedules.py) are one registry: the family
table's header documents exactly the registered names, the table's checker accepts exactly them,
and every family record names a registered rule (issue 25: no third list to drift)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from gpuplan.engine.families import TRAITS, FamilyTableError, _check_trait, all_families
from gpuplan.engine.schedules import MOE_LAYERS, SCHEDULES


def _documented(trait: str, next_trait: str) -> set[str]:
    """The quoted names in families.toml's header comment for `trait`."""
    text = resources.files("gpuplan.catalog").joinpath("data/families.toml").read_text("utf-8")
    start = text.index(f"#   {trait} ")
    block = text[start : text.index(f"#   {next_trait}", start)]
    return set(re.findall(r'"([a-z0-9_]+)"', block))


def test_header_documents_exactly_the_registered_rules() -> None:
    assert _documented("schedule", "layer_kinds") == set(SCHEDULES)
    assert _documented("moe_layers", "expert_mlp") == set(MOE_LAYERS)


def test_checker_accepts_exactly_the_registered_rules() -> None:
    assert set(TRAITS["schedule"]) == set(SCHEDULES)  # type: ignore[arg-type]
    assert set(TRAITS["moe_layers"]) == set(MOE_LAYERS)  # type: ignore[arg-type]
    with pytest.raises(FamilyTableError):
        _check_trait("test", "moe_layers", "first_dense")


def test_every_family_names_registered_rules() -> None:
    for family in all_families().values():
        assert family.traits["schedule"] in SCHEDULES, family.name
        assert family.traits["moe_layers"] in MOE_LAYERS, family.name
