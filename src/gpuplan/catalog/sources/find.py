"""A model name that is not a catalog name, tried in order: a local path (config.json, model
folder, .safetensors or .gguf file: local.py), a repository id in the local Hugging Face cache,
the same id on the Hub unless HF_HUB_OFFLINE (remote.py). Fails in one line naming everything it
tried and the closest catalog names. catalog/models.py's `resolve_source` comes here after the
catalog (the readers load only then).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from gpuplan.catalog.sources import ModelSource, hub, split_quant
from gpuplan.catalog.sources.hf_cache import cache_root, looks_like_repo_id
from gpuplan.catalog.sources.local import from_path
from gpuplan.catalog.sources.remote import from_cache, from_hub
from gpuplan.engine.frozen import replace
from gpuplan.errors import GpuplanError
from gpuplan.lookup import did_you_mean


def find_source(
    model: str, revision: str | None, catalog_hf_id: str | None, names: dict[str, str]
) -> ModelSource:
    """`model` as a local path, then a Hugging Face repository (`catalog_hf_id`: the catalog
    model's repository, when a revision of a catalog model is asked); `names` are the catalog's
    names, for the "did you mean"."""
    tried = ["catalog"]
    path = Path(model).expanduser()
    if _exists(path):
        return replace(_path_lookup(str(path.resolve()), _mtime(path), model), tried=("catalog",))
    if model.endswith((".json", ".gguf", ".safetensors")) or model.startswith((".", "/", "~")):
        raise GpuplanError(f"{model}: no such file or directory")
    repo_id, quant = split_quant(catalog_hf_id or model)
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
