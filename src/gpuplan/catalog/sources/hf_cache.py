"""The local Hugging Face cache: where `huggingface_hub` put a repository's files.

Cache root (huggingface_hub/constants.py): $HF_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub — read at call time, so a
changed environment is honoured. Layout (huggingface_hub docs, "Understand caching"):
models--ORG--NAME/refs/<branch> holds a commit hash, snapshots/<hash>/ holds the files.

A revision is resolved here, inside the cache only: it must be a commit hash or a git ref name
(git-check-ref-format's rules: no '..', no component starting with '.', no control characters,
no '~^:?*[\\'), a refs/ file must hold one 40-hex commit (read through safe_read, at most 256
bytes), and the snapshot folder found must lie inside the repository's cache folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.safe_read import clean_name, read_bytes

COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REF_PART = re.compile(r"^[A-Za-z0-9_+=,-][A-Za-z0-9._+=,-]*$")
MAX_REF_BYTES = 256
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def looks_like_repo_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and ".." not in text and not text.endswith((".json", ".gguf"))


def cache_root() -> Path:
    """The cache folder, or one line naming the variable that cannot be resolved
    (HF_HOME=~nosuchuser/x, a NUL byte, no home directory)."""
    env = os.environ
    for var, tail in (("HF_HUB_CACHE", ()), ("HF_HOME", ("hub",))):
        if env.get(var):
            return _resolvable(var, env[var], tail)
    if env.get("XDG_CACHE_HOME"):
        return _resolvable("XDG_CACHE_HOME", env["XDG_CACHE_HOME"], ("huggingface", "hub"))
    try:
        return Path.home() / ".cache" / "huggingface" / "hub"
    except (RuntimeError, KeyError, OSError):
        raise GpuplanError(
            "no home directory to find the Hugging Face cache in: set HF_HOME"
        ) from None


def _resolvable(var: str, value: str, tail: tuple[str, ...]) -> Path:
    try:
        path = Path(value).expanduser().joinpath(*tail)
        os.fspath(path).encode()
        if "\x00" in value:
            raise ValueError("NUL")
    except (RuntimeError, KeyError, OSError, ValueError, UnicodeError):
        raise GpuplanError(
            f"{var}={clean_name(value, 80)!r} cannot be resolved to a folder"
        ) from None
    return path


def check_revision(revision: str) -> str:
    """`revision` when it is a commit hash or a valid git ref name; else one line."""
    parts = revision.split("/")
    ok = (
        0 < len(revision) <= 255
        and all(_REF_PART.fullmatch(p) for p in parts)
        and ".." not in revision
        and not revision.endswith((".lock", "."))
        and "@{" not in revision
    )
    if not ok:
        raise GpuplanError(
            f"revision {clean_name(revision, 80)!r} is neither a commit hash nor a branch or tag name"
        )
    return revision


def _commit_of_ref(ref: Path, shown: str) -> str | None:
    """The commit a refs/ file names (one 40-hex line), or None when there is no such ref."""
    try:
        if not ref.is_file():
            return None
    except OSError:
        return None
    raw = read_bytes(ref, MAX_REF_BYTES, shown)
    commit = raw.decode("ascii", errors="replace").strip()
    if not COMMIT.fullmatch(commit):
        raise GpuplanError(f"{shown}: not a commit hash (a damaged cache entry); not followed")
    return commit


def snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of `repo_id` at `revision` (default: main) holding a
    config.json or a GGUF file, or None."""
    if revision is not None:
        check_revision(revision)
    if not looks_like_repo_id(repo_id):
        return None
    root = cache_root()
    repo_dir = root / f"models--{repo_id.replace('/', '--')}"
    if not repo_dir.is_dir():
        return None
    snaps = repo_dir / "snapshots"
    name = revision or "main"
    commit = _commit_of_ref(repo_dir / "refs" / name, f"{repo_id}: cached refs/{name}")
    if commit is None and revision is not None and COMMIT.fullmatch(revision):
        commit = revision
    if commit is not None:
        folder = snaps / commit
        if not _inside(folder, repo_dir) or not folder.is_dir():
            return None
        has_model = (folder / "config.json").is_file() or any(folder.glob("*.gguf"))
        return folder if has_model else None
    if revision is None and snaps.is_dir():  # no refs/main: the newest snapshot
        candidates = [
            d
            for d in snaps.iterdir()
            if d.is_dir()
            and _inside(d, repo_dir)
            and ((d / "config.json").exists() or any(d.glob("*.gguf")))
        ]
        if candidates:
            return max(candidates, key=lambda d: d.stat().st_mtime)
    return None


def _inside(folder: Path, repo_dir: Path) -> bool:
    """Whether `folder` resolves inside the repository's cache folder (no symlink out)."""
    try:
        return folder.resolve().is_relative_to(repo_dir.resolve())
    except (OSError, RuntimeError):
        return False


def repo_of_snapshot(path: Path) -> tuple[str, str] | None:
    """('ORG/NAME', commit) when `path` lies inside a cache snapshot folder."""
    parts = path.resolve().parts
    for i, part in enumerate(parts[:-2]):
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            return part[len("models--") :].replace("--", "/", 1), parts[i + 2]
    return None
