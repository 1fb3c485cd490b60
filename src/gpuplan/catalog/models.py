"""The model catalog (data/models.toml + data/models/*.json) and resolving any model name.

MODEL on the command line is, in the order tried: a catalog name ('llama-3.1-8b') or a Hugging
Face id in the catalog; a local path (config.json, model folder, .safetensors or .gguf file); a
Hugging Face repo id in the local HF cache; the same id on the Hub (config.json and
safetensors headers only). catalog/sources/ holds the readers.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuplan.catalog.sources import ModelSource
from gpuplan.datafiles import load_data
from gpuplan.engine.architecture import Architecture, architecture_from_config
from gpuplan.engine.frozen import record, replace
from gpuplan.errors import GpuplanError
from gpuplan.lookup import normalise

__all__ = ["ModelEntry", "load_architecture", "resolve_model", "resolve_source"]


@record
class ModelEntry:
    id: str
    hf_id: str
    config: str  # path inside the package data
    aliases: tuple[str, ...] = ()
    source: str = ""


@cache
def _table() -> tuple[dict[str, ModelEntry], dict[str, str]]:
    data = load_data("models.toml")
    by_id: dict[str, ModelEntry] = {}
    names: dict[str, str] = {}
    for row in data["model"]:
        entry = ModelEntry(
            row["id"],
            row["hf_id"],
            row["config"],
            tuple(row.get("aliases", [])),
            row.get("source", ""),
        )
        by_id[entry.id] = entry
        for alias in (entry.id, entry.hf_id, entry.hf_id.split("/")[-1], *entry.aliases):
            names[normalise(alias)] = entry.id
    return by_id, names


def list_models() -> list[ModelEntry]:
    return list(_table()[0].values())


@cache
def _catalog_config(model_id: str) -> dict[str, Any]:
    entry = _table()[0][model_id]
    data = load_data(entry.config)
    if not isinstance(data, dict):
        raise GpuplanError(f"{entry.id}: config.json must be a JSON object")
    return data


def resolve_source(model: str, revision: str | None = None) -> ModelSource:
    """Find `model`, trying in order: the catalog, a local path (config.json, model folder,
    .safetensors or .gguf file), the local Hugging Face cache, the Hub (unless HF_HUB_OFFLINE);
    fails in one line naming everything it tried. `revision` (branch, tag or commit) applies
    to the cache and the Hub."""
    if not isinstance(model, str) or not model.strip():
        raise GpuplanError("model name is empty")
    if len(model) > 4096 or "\x00" in model:
        raise GpuplanError("model name is not a name or a path (too long or a NUL byte)")
    by_id, names = _table()
    key = names.get(normalise(model))
    if key is not None and revision is None:
        entry = by_id[key]
        return ModelSource(
            "catalog", key, _catalog_config(key), f"data/{entry.config}", entry=entry
        )
    # the one lazy import of the catalog: a catalog name never loads the readers (pathlib,
    # the safetensors, GGUF and Hub readers, the checkpoint model: cold start, issue 25)
    from gpuplan.catalog.sources.find import find_source

    return find_source(model, revision, by_id[key].hf_id if key is not None else None, names)


def resolve_model(
    model: str, revision: str | None = None
) -> tuple[dict[str, Any], str, ModelEntry | None]:
    """The config dict, display name and catalog entry (if any) for what the user typed."""
    src = resolve_source(model, revision)
    return src.config, src.name, src.entry


@cache
def _catalog_architecture(model_id: str) -> Architecture:
    return architecture_from_config(_catalog_config(model_id), model_id)


def load_architecture(model: str | dict[str, Any], name: str | None = None) -> Architecture:
    """An `Architecture` from a catalog name, HF id, config path, or an already-parsed dict."""
    if isinstance(model, dict):
        return architecture_from_config(
            model, name or str(model.get("_name_or_path") or "config.json")
        )
    by_id, names = _table()
    key = names.get(normalise(model))
    if key is not None:
        return _catalog_architecture(key)
    config, display, _ = resolve_model(model)
    return architecture_from_config(config, name or display)


def source_architecture(src: ModelSource, name: str | None = None) -> Architecture:
    """The architecture of a resolved source (catalog ones are cached), with the source's own
    notes (which GGUF file of a repository was read)."""
    if src.kind == "catalog":
        return _catalog_architecture(src.name)
    arch = architecture_from_config(src.config, name or src.name)
    return replace(arch, notes=(*arch.notes, *src.notes)) if src.notes else arch
