"""The training-recipe catalog (data/recipes.toml)."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuplan.catalog.precisions import get_precision
from gpuplan.datafiles import load_data  # parsed once, cached (cold start)
from gpuplan.engine.precision import Precision
from gpuplan.engine.recipes import OptimizerState, TrainingRecipe
from gpuplan.lookup import did_you_mean, normalise


def _format(row: dict[str, Any], recipe: str) -> Precision:
    if "format" in row:
        return get_precision(row["format"])
    bits = int(row["bits"])
    group = int(row.get("group_size", 0))
    scale = int(row.get("scale_bits", 0))
    name = f"int{bits}" + (f"-block{group}" if group else "")
    return Precision(
        id=name, bits=bits, group_size=group, scale_bits=scale, source=f"recipe {recipe}"
    )


@cache
def _table() -> tuple[dict[str, TrainingRecipe], dict[str, str]]:
    by_id: dict[str, TrainingRecipe] = {}
    names: dict[str, str] = {}
    for row in load_data("recipes.toml")["recipe"]:
        recipe = TrainingRecipe(
            id=row["id"],
            name=row["name"],
            weights=get_precision(row["weights"]),
            grads=get_precision(row["grads"]),
            master=get_precision(row["master"]) if row.get("master") else None,
            states=tuple(OptimizerState(s["name"], _format(s, row["id"])) for s in row["state"]),
            factored=bool(row.get("factored", False)),
            autocast=bool(row.get("autocast", False)),
            paged=bool(row.get("paged", False)),
            quantize_min=int(row.get("quantize_min", 0)),
            small_state=get_precision(row["small_state"]) if row.get("small_state") else None,
            whole_blocks=bool(row.get("whole_blocks", False)),
            qmap_bytes=int(row.get("qmap_bytes", 0)),
            paged_min=int(row.get("paged_min", 0)),
            source=row.get("source", ""),
        )
        by_id[recipe.id] = recipe
        for alias in [recipe.id, *row.get("aliases", [])]:
            names[normalise(alias)] = recipe.id
    return by_id, names


def list_recipes() -> list[TrainingRecipe]:
    return list(_table()[0].values())


def get_recipe(name: str) -> TrainingRecipe:
    """A recipe by id or alias ('adamw-bf16', 'megatron', 'adam8bit', ...)."""
    by_id, names = _table()
    key = names.get(normalise(name))
    if key is None:
        raise did_you_mean("recipe", name, names)
    return by_id[key]
