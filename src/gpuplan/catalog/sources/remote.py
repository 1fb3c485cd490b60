"""A model in the local Hugging Face cache or on the Hub: a cached snapshot read as a local
folder (local.py), or the Hub's listing, config.json and the headers of its safetensors or GGUF
files by range reads (hub.py). catalog/models.py comes here only for a repository id that is not
in the catalog.
"""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.sources import ModelSource, hub, pick_gguf, weight_bits
from gpuplan.catalog.sources.hf_cache import snapshot
from gpuplan.catalog.sources.local import from_folder, gguf_source
from gpuplan.catalog.sources.modelopt import quantization_config_from_modelopt, with_modelopt
from gpuplan.catalog.sources.quant_files import (
    QUANT_FILES,
    quantization_config_from_file,
    with_quant_file,
)
from gpuplan.engine.checkpoint import Checkpoint, StoredTensor
from gpuplan.engine.frozen import replace
from gpuplan.errors import GpuplanError


def from_cache(repo_id: str, revision: str | None, quant: str | None = None) -> ModelSource | None:
    """A repository in the local Hugging Face cache (`quant`: which GGUF file, as `-hf` takes it)."""
    folder = snapshot(repo_id, revision)
    if folder is None:
        return None
    src = from_folder(folder, repo_id, repo_id, kind="hf-cache", quant=quant)
    return replace(src, repo_id=repo_id, revision=folder.name)


def from_hub(repo_id: str, revision: str | None, quant: str | None = None) -> ModelSource:
    """A Hub repository: config.json and safetensors headers, or (a GGUF repository, or a
    `:QUANT` asked) one GGUF file's header, chosen as llama.cpp's `-hf` chooses it."""
    repo = hub.repo_listing(repo_id, revision)
    if quant is not None or "config.json" not in repo.files:
        if any(f.endswith(".gguf") for f in repo.files):
            return _hub_gguf(repo, quant)
        if quant is not None:
            raise GpuplanError(f"{repo_id}: no GGUF files for the quant :{quant}")
        raise GpuplanError(f"{repo_id}: the Hub repository has no config.json")
    config = hub.read_json(repo, "config.json")
    if "hf_quant_config.json" in repo.files:
        modelopt = quantization_config_from_modelopt(
            hub.read_json(repo, "hf_quant_config.json"), f"{repo_id}/hf_quant_config.json"
        )
        config = with_modelopt(config, modelopt)
    for filename in QUANT_FILES:
        if filename in repo.files and not config.get("quantization_config"):
            data = hub.read_json(repo, filename)
            beside = quantization_config_from_file(data, filename, f"{repo_id}/{filename}")
            config = with_quant_file(config, beside)
    tensors: list[StoredTensor]
    tensors, files = hub.read_headers(repo)
    ckpt = (
        Checkpoint(
            "safetensors", tuple(tensors), files, weight_bits(config), f"{hub.endpoint()}/{repo_id}"
        )
        if files
        else None
    )
    return ModelSource(
        "hub",
        repo_id,
        config,
        f"{hub.endpoint()}/{repo_id}",
        repo_id=repo_id,
        revision=repo.revision,
        checkpoint=ckpt,
    )


def _hub_gguf(repo: Any, quant: str | None) -> ModelSource:
    """The GGUF file `-hf REPO[:QUANT]` would run, from its header's range reads."""
    parts, why = pick_gguf(list(repo.files), quant, repo.repo_id)
    meta, tensors = hub.gguf_header(repo, parts[0])
    for part in parts[1:]:
        tensors = tensors + hub.gguf_header(repo, part)[1]
    location = f"{hub.endpoint()}/{repo.repo_id}/{parts[0]}"
    config, ckpt = gguf_source(meta, tensors, len(parts), f"{repo.repo_id}/{parts[0]}", location)
    return ModelSource(
        "hub",
        repo.repo_id,
        config,
        location,
        repo_id=repo.repo_id,
        revision=repo.revision,
        checkpoint=ckpt,
        gguf=meta,
        notes=(why,),
    )
