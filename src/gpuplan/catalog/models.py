"""The model catalog (data/models.toml + data/models/*.json) and resolving any model name.

MODEL on the command line is, in the order tried: a catalog name ('llama-3.1-8b') or a Hugging
Face id in the catalog; a local path (config.json, model folder, .safetensors or .gguf file); a
Hugging Face repo id in the local HF cache; the same id on the Hub (config.json and
safetensors headers only). catalog/sources/ holds the readers.
"""

from __future__ import annotations

import os
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from gpuplan.catalog.sources import (
    MAX_CONFIG_BYTES,
    ModelSource,
    from_cache,
    from_hub,
    from_path,
    parse_config_text,
    read_config_file,
)
from gpuplan.datafiles import load_data
from gpuplan.engine.architecture import Architecture, architecture_from_config
from gpuplan.engine.frozen import record, replace
from gpuplan.errors import GpuplanError
from gpuplan.lookup import did_you_mean, normalise

if TYPE_CHECKING:  # pathlib is imported only when a model is not in the catalog (cold start)
    from pathlib import Path

__all__ = ["MAX_CONFIG_BYTES", "ModelEntry", "parse_config_text", "resolve_model", "resolve_source"]


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


def read_config(path: str | Path) -> dict[str, Any]:
    """Read the config.json at `path`, or in the directory `path` (as the user named it)."""
    from pathlib import Path

    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise GpuplanError(f"{path}: directory has no config.json")
    return read_config_file(p, str(path))


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
    from pathlib import Path

    tried = ["catalog"]
    path = Path(model).expanduser()
    if _exists(path):
        return replace(_path_lookup(str(path.resolve()), _mtime(path), model), tried=("catalog",))
    if model.endswith((".json", ".gguf", ".safetensors")) or model.startswith((".", "/", "~")):
        raise GpuplanError(f"{model}: no such file or directory")
    from gpuplan.catalog.sources import split_quant
    from gpuplan.catalog.sources.hf_cache import looks_like_repo_id

    repo_id, quant = split_quant(by_id[key].hf_id if key is not None else model)
    if not looks_like_repo_id(repo_id):
        raise did_you_mean("model", model, names)
    tried.append("local path")
    return _from_hf(repo_id, revision, tried, model, names, quant)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _mtime(path: Path) -> tuple[int, int]:
    """The path's and its folder's modification times: a changed file, or a file added to or
    removed from its folder (a shard, a split GGUF part), is read again."""
    try:
        return path.stat().st_mtime_ns, path.resolve().parent.stat().st_mtime_ns
    except OSError:
        return 0, 0


@lru_cache(maxsize=32)
def _path_lookup(resolved: str, _mtime_ns: tuple[int, int], shown: str) -> ModelSource:
    """A local path is read once per change (serve resolves a model more than once)."""
    from pathlib import Path

    return from_path(Path(resolved), shown)


def _env_key() -> tuple[str, ...]:
    keys = (
        "HF_HOME",
        "HF_HUB_CACHE",
        "XDG_CACHE_HOME",
        "HF_HUB_OFFLINE",
        "HF_ENDPOINT",
        "HF_TOKEN",
    )
    return tuple(os.environ.get(k, "") for k in keys)


def _from_hf(
    repo_id: str,
    revision: str | None,
    tried: list[str],
    model: str,
    names: dict[str, str],
    quant: str | None = None,
) -> ModelSource:
    """The local Hugging Face cache, then the Hub; `quant` picks a GGUF file (REPO:QUANT, as
    llama.cpp's `-hf` takes it)."""
    from gpuplan.catalog.sources import hub
    from gpuplan.catalog.sources.hf_cache import cache_root

    found = _cached_lookup(repo_id, revision, quant, _env_key())
    if found is not None:
        return replace(found, tried=tuple(tried))
    at = f" at revision {revision}" if revision else ""
    tried.append(f"Hugging Face cache {cache_root()}{at}")
    if hub.offline():
        tried.append("Hub skipped (HF_HUB_OFFLINE is set)")
        raise GpuplanError(_not_found(model, names, tried))
    try:
        src = _hub_lookup(repo_id, revision, quant, _env_key())
    except GpuplanError as err:
        tried.append(f"Hub {hub.endpoint()}: {str(err).removeprefix(repo_id + ': ')}")
        raise GpuplanError(_not_found(model, names, tried)) from None
    return replace(src, tried=tuple(tried))


def _not_found(model: str, names: dict[str, str], tried: list[str]) -> str:
    close = str(did_you_mean("model", model, names))
    return f"{close}; tried: {'; '.join(tried)}"


@lru_cache(maxsize=32)
def _cached_lookup(
    repo_id: str, revision: str | None, quant: str | None, _env: tuple[str, ...]
) -> ModelSource | None:
    return from_cache(repo_id, revision, quant)


@lru_cache(maxsize=32)
def _hub_lookup(
    repo_id: str, revision: str | None, quant: str | None, _env: tuple[str, ...]
) -> ModelSource:
    return from_hub(repo_id, revision, quant)


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
