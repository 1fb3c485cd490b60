"""The local Hugging Face cache: where `huggingface_hub` put a repository's files.

Cache root (huggingface_hub/constants.py): $HF_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub — read at call time, so a
changed environment is honoured. Layout (huggingface_hub docs, "Understand caching"):
models--ORG--NAME/refs/<branch> holds a commit hash, snapshots/<hash>/ holds the files.
`huggingface_hub.try_to_load_from_cache` resolves a revision (branch, tag or hash) to a file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def looks_like_repo_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and ".." not in text and not text.endswith((".json", ".gguf"))


def cache_root() -> Path:
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of `repo_id` at `revision` (default: main) holding a
    config.json or a GGUF file, or None."""
    root = cache_root()
    repo_dir = root / f"models--{repo_id.replace('/', '--')}"
    if not repo_dir.is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=root, revision=revision)
    if isinstance(found, str):
        return Path(found).parent
    # no config.json at that revision: a GGUF-only repository, or a ref missing
    snaps = repo_dir / "snapshots"
    ref = repo_dir / "refs" / (revision or "main")
    if ref.is_file():
        commit = ref.read_text("utf-8").strip()
        folder = snaps / commit
        return folder if folder.is_dir() and any(folder.glob("*.gguf")) else None
    if revision and re.fullmatch(r"[0-9a-f]{40}", revision):
        folder = snaps / revision
        return folder if folder.is_dir() else None
    if revision is None and snaps.is_dir():  # no refs/main: the newest snapshot
        candidates = [
            d
            for d in snaps.iterdir()
            if d.is_dir() and ((d / "config.json").exists() or any(d.glob("*.gguf")))
        ]
        if candidates:
            return max(candidates, key=lambda d: d.stat().st_mtime)
    return None


def repo_of_snapshot(path: Path) -> tuple[str, str] | None:
    """('ORG/NAME', commit) when `path` lies inside a cache snapshot folder."""
    parts = path.resolve().parts
    for i, part in enumerate(parts[:-2]):
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            return part[len("models--") :].replace("--", "/", 1), parts[i + 2]
    return None
