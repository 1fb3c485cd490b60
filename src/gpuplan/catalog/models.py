"""The model catalog (data/models.toml + data/models/*.json) and reading a user's config.json.

MODEL on the command line is a catalog name ('llama-3.1-8b'), a Hugging Face id in the catalog
('meta-llama/Llama-3.1-8B'), a path to a config.json, or a path to a directory holding one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpuplan.catalog.compiled import load_data
from gpuplan.catalog.lookup import did_you_mean, normalise
from gpuplan.engine.architecture import Architecture, architecture_from_config
from gpuplan.errors import GpuplanError

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; refuse anything absurd


@dataclass(frozen=True)
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


def parse_config_text(text: str, name: str) -> dict[str, Any]:
    """Parse config.json text, with a one-line error for anything that is not a JSON object."""
    if len(text) > MAX_CONFIG_BYTES:
        raise GpuplanError(f"{name}: config.json is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise GpuplanError(
            f"{name}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None
    if not isinstance(data, dict):
        raise GpuplanError(f"{name}: config.json must be a JSON object")
    return data


@cache
def _catalog_config(model_id: str) -> dict[str, Any]:
    entry = _table()[0][model_id]
    data = load_data(entry.config)
    if not isinstance(data, dict):
        raise GpuplanError(f"{entry.id}: config.json must be a JSON object")
    return data


def read_config(path: str | Path) -> dict[str, Any]:
    """Read the config.json at `path`, or in the directory `path` (as the user named it)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise GpuplanError(f"{path}: directory has no config.json")
    if not p.is_file():
        raise GpuplanError(f"{path}: no such file")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise GpuplanError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a config.json")
    try:
        text = p.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise GpuplanError(f"{path}: cannot read ({err.__class__.__name__})") from None
    return parse_config_text(text, str(path))


def resolve_model(model: str) -> tuple[dict[str, Any], str, ModelEntry | None]:
    """The config dict, display name and catalog entry (if any) for what the user typed.

    Catalog names and HF ids are looked up first; then an existing path is read; anything else
    fails with the closest catalog names.
    """
    by_id, names = _table()
    key = names.get(normalise(model))
    if key is not None:
        return _catalog_config(key), key, by_id[key]
    path = Path(model).expanduser()
    if path.exists():
        return read_config(path), _display_name(path), None
    if model.endswith(".json") or model.startswith((".", "/", "~")):
        raise GpuplanError(f"{model}: no such file or directory")
    error = did_you_mean("model", model, names)
    if model.count("/") == 1:  # a Hugging Face id we do not ship
        raise GpuplanError(
            f"{error}; for a model outside the catalog pass the path to its config.json"
        )
    raise error


def _display_name(path: Path) -> str:
    """'Llama-3.1-8B' for .../Llama-3.1-8B/config.json or that directory; 'my-model' for my-model.json."""
    path = path.resolve()
    if path.is_file() and path.name != "config.json":
        return path.stem
    return (path.parent if path.is_file() else path).name or "config.json"


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
