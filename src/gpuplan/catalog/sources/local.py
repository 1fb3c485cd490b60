"""A model on local disk: a config.json, a model folder (config.json with safetensors shards, or
GGUF files), a .safetensors file or a .gguf file; each read into a `ModelSource` with the
checkpoint's tensors from their headers (safetensors_header.py, gguf_header.py, modelopt.py).
catalog/models.py comes here only for a name that is not in the catalog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.catalog.sources import (
    MAX_CONFIG_BYTES,
    SPLIT_GGUF,
    ModelSource,
    pick_gguf,
    weight_bits,
)
from gpuplan.catalog.sources import safetensors_header as st
from gpuplan.catalog.sources.gguf_header import config_from_gguf, read_gguf
from gpuplan.catalog.sources.hf_cache import repo_of_snapshot
from gpuplan.catalog.sources.modelopt import read_modelopt, with_modelopt
from gpuplan.catalog.sources.quant_files import read_quant_file, with_quant_file
from gpuplan.engine.checkpoint import Checkpoint, StoredTensor
from gpuplan.engine.frozen import replace
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import clean_name, load_json, read_text


def parse_config_text(text: str, name: str) -> dict[str, Any]:
    """Parse config.json text, with a one-line error for anything that is not a JSON object."""
    name = clean_name(name)
    if len(text) > MAX_CONFIG_BYTES:
        raise GpuplanError(f"{name}: config.json is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    data = load_json(text, name, cap=MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise GpuplanError(f"{name}: config.json must be a JSON object")
    return data


def read_config_file(p: Path, shown: str) -> dict[str, Any]:
    """A config.json on disk: a regular file of at most MAX_CONFIG_BYTES (safe_read)."""
    return parse_config_text(read_text(p, MAX_CONFIG_BYTES, shown), shown)


def display_name(path: Path) -> str:
    """The repo id for a path inside the HF cache; else the folder (or file stem) name."""
    found = repo_of_snapshot(path)
    if found:
        return found[0]
    path = path.resolve()
    if path.is_file() and path.name != "config.json":
        return path.stem
    return (path.parent if path.is_file() else path).name or "config.json"


def from_path(path: Path, shown: str) -> ModelSource:
    """A config.json, a model folder, a .safetensors file or a .gguf file on disk."""
    if path.is_dir():
        return from_folder(path, shown, display_name(path))
    if not path.is_file():
        raise GpuplanError(f"{shown}: no such file or directory")
    if path.suffix == ".gguf":
        return from_gguf(path, shown)
    if path.suffix == ".safetensors":
        config_path = path.parent / "config.json"
        if not config_path.is_file():
            raise GpuplanError(f"{shown}: no config.json beside this safetensors file")
        config = read_config_file(config_path, str(config_path))
        ckpt = Checkpoint(
            "safetensors", tuple(st.read_file_header(path)), 1, weight_bits(config), str(path)
        )
        return _source("path", display_name(path.parent), config, path, ckpt)
    config = read_config_file(path, shown)
    if path.name == "config.json":  # a checkpoint folder's config: read its weights too
        return replace(from_folder(path.parent, shown, display_name(path)), location=str(path))
    return ModelSource("path", display_name(path), config, str(path))


def _source(
    kind: str, name: str, config: dict[str, Any], path: Path, ckpt: Checkpoint | None
) -> ModelSource:
    found = _repo(path)
    return ModelSource(
        kind,
        name,
        config,
        str(path),
        repo_id=found[0] if found else None,
        revision=found[1] if found else None,
        checkpoint=ckpt,
    )


def _repo(path: Path) -> tuple[str, str] | None:
    return repo_of_snapshot(path)


def from_folder(
    folder: Path, shown: str, name: str, kind: str = "path", quant: str | None = None
) -> ModelSource:
    """A model folder: config.json and safetensors, or GGUF files. A folder the user named must
    hold one GGUF model; a cached repository (`kind` hf-cache) picks one as llama.cpp's `-hf`
    does (`pick_gguf`)."""
    config_path = folder / "config.json"
    if quant is not None or not config_path.is_file():
        ggufs = sorted(g.name for g in folder.glob("*.gguf"))
        if ggufs and kind == "hf-cache":
            parts, why = pick_gguf(ggufs, quant, shown)
            src = from_gguf(folder / parts[0], str(folder / parts[0]))
            return replace(src, kind=kind, name=name, notes=(*src.notes, why))
        if ggufs:
            first = [g for g in ggufs if not SPLIT_GGUF.match(g) or "-00001-of-" in g]
            if len(first) == 1:
                src = from_gguf(folder / first[0], str(folder / first[0]))
                return replace(src, kind=kind, name=name)
            listed = ", ".join(first[:6])
            raise GpuplanError(f"{shown}: several GGUF files ({listed}); name one of them")
        if quant is not None:
            raise GpuplanError(f"{shown}: no GGUF files for the quant :{quant}")
        raise GpuplanError(f"{shown}: directory has no config.json")
    config = with_modelopt(read_config_file(config_path, str(config_path)), read_modelopt(folder))
    config = with_quant_file(config, read_quant_file(folder))
    shards = st.local_shards(folder)
    ckpt = None
    if shards:
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise GpuplanError(f"{shown}: the safetensors index names missing shard {missing[0]}")
        tensors = st.read_headers([str(s) for s in shards], lambda f: st.read_file_header(Path(f)))
        ckpt = Checkpoint(
            "safetensors", tuple(tensors), len(shards), weight_bits(config), str(folder)
        )
    return _source(kind, name, config, folder, ckpt)


def gguf_source(
    meta: dict[str, Any], tensors: list[StoredTensor], files: int, shown: str, location: str
) -> tuple[dict[str, Any], Checkpoint]:
    """The config.json a GGUF's metadata stands for, and its stored tensors."""
    config = config_from_gguf(meta, tensors, shown)
    ckpt = Checkpoint(
        "gguf", tuple(tensors), files, None, location, {"file_type": meta.get("general.file_type")}
    )
    return config, ckpt


def from_gguf(path: Path, shown: str) -> ModelSource:
    """A GGUF file (all parts of a split GGUF: model-00001-of-00003.gguf …)."""
    meta, tensors = read_gguf(path)
    files = [path]
    split = SPLIT_GGUF.match(path.name)
    if split:
        n = int(split.group("n"))
        for i in range(1, n + 1):
            part = path.parent / f"{split.group('stem')}-{i:05d}-of-{n:05d}.gguf"
            if part == path:
                continue
            if not part.is_file():
                raise GpuplanError(f"{shown}: split GGUF part {part.name} is missing")
            tensors = tensors + read_gguf(part)[1]
            files.append(part)
    config, ckpt = gguf_source(meta, tensors, len(files), shown, str(path))
    name = clean_name(str(meta.get("general.name") or ""), 200) or display_name(path)
    found = _repo(path)
    return ModelSource(
        "path",
        found[0] if found else name,
        config,
        str(path),
        repo_id=found[0] if found else None,
        revision=found[1] if found else None,
        checkpoint=ckpt,
        gguf=meta,
    )


def read_config(path: str | Path) -> dict[str, Any]:
    """Read the config.json at `path`, or in the directory `path` (as the user named it)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise GpuplanError(f"{path}: directory has no config.json")
    return read_config_file(p, str(path))
