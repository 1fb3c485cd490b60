"""Where a model comes from: a local path (local.py), the Hugging Face cache or the Hub
(remote.py), GGUF files among them.

Each reader returns a `ModelSource`: the config dict engine/architecture.py reads, the name to
display (the repo id, never a snapshot hash), where it was found, and the checkpoint's tensors
from its headers when it has weight files. catalog/models.py tries them in order after the
built-in catalog. This module holds what a catalog model needs too (the record, the `REPO:QUANT`
and GGUF-file rules) and imports no reader: a catalog name loads none of them (cold start).
huggingface_hub and gguf are imported only when a source needs them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuplan.engine.frozen import field, record
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.engine.checkpoint import Checkpoint

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; refuse anything absurd
SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")

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
        and (not SPLIT_GGUF.match(n.rsplit("/", 1)[-1]) or "-00001-of-" in n)
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
    split = SPLIT_GGUF.match(base)
    if not split:
        return [first]
    n, prefix = int(split["n"]), f"{folder}/" if folder else ""
    parts = [f"{prefix}{split['stem']}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
    missing = [p for p in parts if p not in names]
    if missing:
        raise GpuplanError(f"{where}: split GGUF part {missing[0]} is missing")
    return parts
