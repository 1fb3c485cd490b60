"""Where a model comes from: a local path, the Hugging Face cache, the Hub (and GGUF files).

Each reader returns a `ModelSource`: the config dict engine/architecture.py reads, the name to
display (the repo id, never a snapshot hash), where it was found, and the checkpoint's tensors
from its headers when it has weight files. catalog/models.py tries them in order after the
built-in catalog. Nothing here imports huggingface_hub or gguf until a source needs it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuplan.engine.frozen import field, record, replace
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from pathlib import Path

    from gpuplan.engine.checkpoint import Checkpoint, StoredTensor

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; refuse anything absurd
_SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")

# llama.cpp's `-hf <user>/<model>[:quant]` (common/arg.cpp): the quant tag is case-insensitive;
# without one, Q4_K_M, or the repository's first GGUF file when it has no Q4_K_M. A projector
# (mmproj) file is not the model.
DEFAULT_GGUF_QUANT = "Q4_K_M"
_REPO_QUANT = re.compile(r"^(?P<repo>[^:\s]{1,200}):(?P<quant>[A-Za-z0-9_.-]{1,64})$")


@record
class ModelSource:
    """A resolved model: its config, how to name it, where it was found, its stored tensors."""

    kind: str  # "catalog", "path", "hf-cache", "hub"
    name: str  # catalog id, repo id, or the file/folder name
    config: dict[str, Any]
    location: str  # package data path, local path, cache snapshot or Hub URL
    repo_id: str | None = None
    revision: str | None = None  # commit hash when known
    entry: Any = None  # catalog.models.ModelEntry for a catalog model
    checkpoint: Checkpoint | None = None
    gguf: dict[str, Any] | None = None  # GGUF metadata (llama.cpp files)
    tried: tuple[str, ...] = ()  # sources looked at before this one answered
    notes: tuple[str, ...] = field(default=())

    @property
    def hf_id(self) -> str | None:
        return self.entry.hf_id if self.entry is not None else self.repo_id

    def describe(self) -> str:
        where = {
            "catalog": "gpuplan's catalog",
            "path": "local path",
            "hf-cache": "Hugging Face cache",
            "hub": "Hugging Face Hub",
        }[self.kind]
        rev = f" @ {self.revision[:12]}" if self.revision else ""
        return f"{where}: {self.location}{rev}"


def parse_config_text(text: str, name: str) -> dict[str, Any]:
    """Parse config.json text, with a one-line error for anything that is not a JSON object."""
    from gpuplan.safe_read import clean_name, load_json

    name = clean_name(name)
    if len(text) > MAX_CONFIG_BYTES:
        raise GpuplanError(f"{name}: config.json is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    data = load_json(text, name, cap=MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise GpuplanError(f"{name}: config.json must be a JSON object")
    return data


def read_config_file(p: Path, shown: str) -> dict[str, Any]:
    """A config.json on disk: a regular file of at most MAX_CONFIG_BYTES (safe_read)."""
    from gpuplan.safe_read import read_text

    return parse_config_text(read_text(p, MAX_CONFIG_BYTES, shown), shown)


def weight_bits(config: dict[str, Any]) -> int | None:
    """Bits of packed integer weights the quantisation config declares (GPTQ/AWQ `bits`,
    compressed-tensors `num_bits`), to unpack `qweight` / `weight_packed` element counts."""
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        inner = config.get("text_config")
        qc = inner.get("quantization_config") if isinstance(inner, dict) else None
    if not isinstance(qc, dict):
        return None
    for key in ("bits", "w_bit"):
        if isinstance(qc.get(key), int):
            return int(qc[key])
    if str(qc.get("quant_method", "")).lower() in ("bitsandbytes",) and qc.get("load_in_4bit"):
        return 4
    algo = str(qc.get("quant_algo", "")).upper()
    if "FP4" in algo or "W4" in algo:
        return 4
    groups = qc.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            w = group.get("weights") if isinstance(group, dict) else None
            if isinstance(w, dict) and isinstance(w.get("num_bits"), int):
                return int(w["num_bits"])
    return None


# --------------------------------------------------------------------------------------
# Local files and folders
# --------------------------------------------------------------------------------------


def display_name(path: Path) -> str:
    """The repo id for a path inside the HF cache; else the folder (or file stem) name."""
    from gpuplan.catalog.sources.hf_cache import repo_of_snapshot

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
        return _from_folder(path, shown, display_name(path))
    if not path.is_file():
        raise GpuplanError(f"{shown}: no such file or directory")
    if path.suffix == ".gguf":
        return from_gguf(path, shown)
    if path.suffix == ".safetensors":
        config_path = path.parent / "config.json"
        if not config_path.is_file():
            raise GpuplanError(f"{shown}: no config.json beside this safetensors file")
        config = read_config_file(config_path, str(config_path))
        from gpuplan.catalog.sources import safetensors_header as st
        from gpuplan.engine.checkpoint import Checkpoint

        ckpt = Checkpoint(
            "safetensors", tuple(st.read_file_header(path)), 1, weight_bits(config), str(path)
        )
        return _source("path", display_name(path.parent), config, path, ckpt)
    config = read_config_file(path, shown)
    if path.name == "config.json":  # a checkpoint folder's config: read its weights too
        return replace(_from_folder(path.parent, shown, display_name(path)), location=str(path))
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
    from gpuplan.catalog.sources.hf_cache import repo_of_snapshot

    return repo_of_snapshot(path)


def _from_folder(
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
            first = [g for g in ggufs if not _SPLIT_GGUF.match(g) or "-00001-of-" in g]
            if len(first) == 1:
                src = from_gguf(folder / first[0], str(folder / first[0]))
                return replace(src, kind=kind, name=name)
            listed = ", ".join(first[:6])
            raise GpuplanError(f"{shown}: several GGUF files ({listed}); name one of them")
        if quant is not None:
            raise GpuplanError(f"{shown}: no GGUF files for the quant :{quant}")
        raise GpuplanError(f"{shown}: directory has no config.json")
    from gpuplan.catalog.sources import safetensors_header as st
    from gpuplan.catalog.sources.modelopt import read_modelopt, with_modelopt
    from gpuplan.engine.checkpoint import Checkpoint

    config = with_modelopt(read_config_file(config_path, str(config_path)), read_modelopt(folder))
    shards = st.local_shards(folder)
    ckpt = None
    if shards:
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise GpuplanError(f"{shown}: the safetensors index names missing shard {missing[0]}")
        from pathlib import Path

        tensors = st.read_headers([str(s) for s in shards], lambda f: st.read_file_header(Path(f)))
        ckpt = Checkpoint(
            "safetensors", tuple(tensors), len(shards), weight_bits(config), str(folder)
        )
    return _source(kind, name, config, folder, ckpt)


def split_quant(model: str) -> tuple[str, str | None]:
    """`user/repo:Q4_K_M` → ("user/repo", "Q4_K_M"); anything else → (model, None)."""
    m = _REPO_QUANT.match(model)
    return (m["repo"], m["quant"]) if m else (model, None)


def pick_gguf(names: list[str], quant: str | None, where: str) -> tuple[list[str], str]:
    """The GGUF file (all its parts, when split) that llama.cpp's `-hf REPO[:QUANT]` would run,
    and why it was chosen (a note for the bill)."""
    firsts = sorted(
        n
        for n in names
        if n.endswith(".gguf")
        and "mmproj" not in n.rsplit("/", 1)[-1].lower()
        and (not _SPLIT_GGUF.match(n.rsplit("/", 1)[-1]) or "-00001-of-" in n)
    )
    if not firsts:
        raise GpuplanError(f"{where}: no GGUF model file")
    wanted = quant or DEFAULT_GGUF_QUANT
    tag = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(wanted)}(?![A-Za-z0-9_])", re.IGNORECASE)
    hits = [n for n in firsts if tag.search(n)]
    if quant and not hits:
        listed = ", ".join(f.rsplit("/", 1)[-1] for f in firsts[:8])
        raise GpuplanError(f"{where}: no GGUF file for quant {quant!r} (files: {listed})")
    chosen = (hits or firsts)[0]
    if quant:
        why = f"the file for :{quant}"
    elif hits:
        why = f"llama.cpp's default quant {DEFAULT_GGUF_QUANT}"
    elif len(firsts) == 1:
        why = "the repository's only GGUF file"
    else:
        why = (
            f"the first of {len(firsts)} GGUF files, as llama.cpp picks without a"
            f" {DEFAULT_GGUF_QUANT}; name another as REPO:QUANT"
        )
    return _gguf_parts(chosen, names, where), f"GGUF file {chosen}: {why}"


def _gguf_parts(first: str, names: list[str], where: str) -> list[str]:
    """A GGUF file, or every part of a split one (model-00001-of-00003.gguf …)."""
    folder, _, base = first.rpartition("/")
    split = _SPLIT_GGUF.match(base)
    if not split:
        return [first]
    n, prefix = int(split["n"]), f"{folder}/" if folder else ""
    parts = [f"{prefix}{split['stem']}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
    missing = [p for p in parts if p not in names]
    if missing:
        raise GpuplanError(f"{where}: split GGUF part {missing[0]} is missing")
    return parts


def _gguf_source(
    meta: dict[str, Any], tensors: list[StoredTensor], files: int, shown: str, location: str
) -> tuple[dict[str, Any], Checkpoint]:
    """The config.json a GGUF's metadata stands for, and its stored tensors."""
    from gpuplan.catalog.sources.gguf_header import config_from_gguf
    from gpuplan.engine.checkpoint import Checkpoint

    config = config_from_gguf(meta, tensors, shown)
    ckpt = Checkpoint(
        "gguf", tuple(tensors), files, None, location, {"file_type": meta.get("general.file_type")}
    )
    return config, ckpt


def from_gguf(path: Path, shown: str) -> ModelSource:
    """A GGUF file (all parts of a split GGUF: model-00001-of-00003.gguf …)."""
    from gpuplan.catalog.sources.gguf_header import read_gguf

    meta, tensors = read_gguf(path)
    files = [path]
    split = _SPLIT_GGUF.match(path.name)
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
    config, ckpt = _gguf_source(meta, tensors, len(files), shown, str(path))
    from gpuplan.safe_read import clean_name

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


# --------------------------------------------------------------------------------------
# The Hugging Face cache and the Hub
# --------------------------------------------------------------------------------------


def from_cache(repo_id: str, revision: str | None, quant: str | None = None) -> ModelSource | None:
    """A repository in the local Hugging Face cache (`quant`: which GGUF file, as `-hf` takes it)."""
    from gpuplan.catalog.sources.hf_cache import snapshot

    folder = snapshot(repo_id, revision)
    if folder is None:
        return None
    src = _from_folder(folder, repo_id, repo_id, kind="hf-cache", quant=quant)
    return replace(src, repo_id=repo_id, revision=folder.name)


def from_hub(repo_id: str, revision: str | None, quant: str | None = None) -> ModelSource:
    """A Hub repository: config.json and safetensors headers, or (a GGUF repository, or a
    `:QUANT` asked) one GGUF file's header, chosen as llama.cpp's `-hf` chooses it."""
    from gpuplan.catalog.sources import hub
    from gpuplan.catalog.sources.modelopt import quantization_config_from_modelopt, with_modelopt
    from gpuplan.engine.checkpoint import Checkpoint

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
    from gpuplan.catalog.sources import hub

    parts, why = pick_gguf(list(repo.files), quant, repo.repo_id)
    meta, tensors = hub.gguf_header(repo, parts[0])
    for part in parts[1:]:
        tensors = tensors + hub.gguf_header(repo, part)[1]
    location = f"{hub.endpoint()}/{repo.repo_id}/{parts[0]}"
    config, ckpt = _gguf_source(meta, tensors, len(parts), f"{repo.repo_id}/{parts[0]}", location)
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
