"""The Hugging Face Hub: a repository's config.json and safetensors headers (or one GGUF file's
header), by range reads.

Nothing is downloaded whole but small JSON files (config.json, hf_quant_config.json, the
safetensors index); each weight file gives only its first 8 + N bytes, and a GGUF file its
metadata and tensor infos read from the front in growing blocks (HTTP Range requests
on `{endpoint}/{repo}/resolve/{revision}/{file}`, as huggingface_hub's
get_safetensors_metadata does), read as a bounded stream so a server that ignores Range still
costs no more. Nothing is written to disk. `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE` are
read at call time; `huggingface_hub` supplies the session, URLs, auth headers and the
repository listing (`HfApi.model_info`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from gpuplan import progress
from gpuplan.catalog.sources import safetensors_header as st
from gpuplan.catalog.sources.gguf_header import parse_gguf
from gpuplan.catalog.sources.hf_cache import check_revision
from gpuplan.engine.checkpoint import StoredTensor
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_json

DEADLINE_S = 20.0  # one model's whole resolution: the listing and every header read
READ_TIMEOUT_S = 5.0  # one socket read; a stream is also cut when the deadline passes
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_LISTING_BYTES = 64 * 1024 * 1024
WORKERS = 8

# A Hub that is slow to answer is said, once, after NOTICE_AFTER_S (gpuplan.progress: the CLI
# prints it as one stderr line; a library caller hears nothing unless it listens).
NOTICE_AFTER_S = 1.0
_noticed: list[bool] = []


@contextmanager
def _waiting(what: str) -> Iterator[None]:
    """Around one Hub request: if it takes longer than NOTICE_AFTER_S, say what is awaited,
    where, for how long at most, and how to skip the Hub."""
    if progress.listener is None or _noticed:
        yield
        return
    line = (
        f"waiting for the Hugging Face Hub ({endpoint()}) for {what}, up to {DEADLINE_S:g} s"
        " in all (HF_HUB_OFFLINE=1 skips the Hub)"
    )

    def tell() -> None:
        if not _noticed:
            _noticed.append(True)
            progress.say(line)

    timer = threading.Timer(NOTICE_AFTER_S, tell)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), as huggingface_hub reads it, but now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _session() -> Any:
    """huggingface_hub's HTTP session, its offline switch set from the environment as it is
    now (huggingface_hub reads HF_HUB_OFFLINE once, at import)."""
    from huggingface_hub import constants, get_session

    constants.HF_HUB_OFFLINE = offline()
    return get_session()


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


@record
class HubRepo:
    repo_id: str
    revision: str  # the commit the listing answered for (or the revision asked)
    files: tuple[str, ...]
    deadline: float = 0.0  # time.monotonic() by which every request for this model ends


def _deadline() -> float:
    return time.monotonic() + DEADLINE_S


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers(token=_token(), library_name="gpuplan")
    headers.update(extra or {})
    return headers


def _fail(repo_id: str, err: Exception) -> GpuplanError:
    kind = err.__class__.__name__
    text = {
        "RepositoryNotFoundError": "no such repository (or private: set HF_TOKEN)",
        "GatedRepoError": "gated repository: accept its terms and set HF_TOKEN",
        "RevisionNotFoundError": "no such revision",
    }.get(kind)
    if text is None:
        detail = str(err).splitlines()[0][:120] if str(err) else kind
        text = f"Hub request failed ({kind}: {detail})"
    return GpuplanError(f"{repo_id}: {text}")


def repo_listing(repo_id: str, revision: str | None) -> HubRepo:
    """The repository's files and commit (the model-info API `HfApi.model_info` calls:
    /api/models/{repo}[/revision/{rev}]), streamed under the resolution's deadline."""
    deadline = _deadline()
    url = f"{endpoint()}/api/models/{repo_id}"
    if revision is not None:
        check_revision(revision)
        url += f"/revision/{quote(revision, safe='')}"
    with _waiting(repo_id):
        raw = _get(url, _headers(), deadline, MAX_LISTING_BYTES + 1, 0, repo_id)
    if len(raw) > MAX_LISTING_BYTES:
        raise GpuplanError(f"{repo_id}: the Hub's listing is larger than 64 MiB")
    info = load_json(raw, f"{repo_id}: the Hub's listing", cap=MAX_LISTING_BYTES)
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(siblings, list):
        raise GpuplanError(f"{repo_id}: the Hub's listing has no file list")
    files = tuple(
        s["rfilename"]
        for s in siblings
        if isinstance(s, dict) and isinstance(s.get("rfilename"), str)
    )
    sha = info.get("sha")
    return HubRepo(repo_id, sha if isinstance(sha, str) else revision or "main", files, deadline)


def _url(repo_id: str, revision: str, filename: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint())


def read_range(repo: HubRepo, filename: str, start: int, length: int) -> bytes:
    """Bytes [start, start + length) of a file, never more, even if Range is ignored."""
    headers = _headers({"Range": f"bytes={start}-{start + length - 1}"})
    url = _url(repo.repo_id, repo.revision, filename)
    return _get(url, headers, repo.deadline, length, start, f"{repo.repo_id}/{filename}")


def _get(
    url: str, headers: dict[str, str], deadline: float, length: int, start: int, shown: str
) -> bytes:
    """A GET streamed under a whole-request deadline: each socket read waits at most
    READ_TIMEOUT_S and the stream is cut once `deadline` passes, so a server that sends one
    byte at a time ends in one line, as one that never answers does. At most `length` bytes
    (from `start` when the server ignored Range)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _late(shown)
    try:
        with (
            _waiting(shown),
            _session().stream(
                "GET",
                url,
                headers=headers,
                timeout=min(READ_TIMEOUT_S, remaining),
                follow_redirects=True,
            ) as r,
        ):
            if r.status_code >= 400:  # the body is never read: the Hub's error headers say it
                raise _status(shown, r.status_code, r.headers.get("X-Error-Code", ""))
            skip = start if r.status_code == 200 else 0  # Range ignored: skip to start
            out = bytearray()
            for chunk in r.iter_bytes():
                if time.monotonic() > deadline:
                    raise _late(shown)
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                out += chunk
                if len(out) >= length:
                    break
            return bytes(out[:length])
    except GpuplanError:
        raise
    except Exception as err:  # network, HTTP and Hub errors alike become one line
        raise _fail(shown, err) from None


# X-Error-Code values the Hub sends (huggingface_hub/utils/_http.py hf_raise_for_status)
_ERROR_CODES = {
    "RepoNotFound": "no such repository (or private: set HF_TOKEN)",
    "GatedRepo": "gated repository: accept its terms and set HF_TOKEN",
    "RevisionNotFound": "no such revision",
    "EntryNotFound": "no such file in the repository",
}


def _status(shown: str, status: int, code: str) -> GpuplanError:
    text = _ERROR_CODES.get(code)
    if text is None and status in (401, 403):
        text = _ERROR_CODES["RepoNotFound"]
    if text is None:
        text = f"Hub request failed (HTTP {status})"
    return GpuplanError(f"{shown}: {text}")


def _late(shown: str) -> GpuplanError:
    return GpuplanError(
        f"{shown}: the Hub did not answer within {DEADLINE_S:g} s (HF_HUB_OFFLINE=1 to use the cache only)"
    )


def read_json(repo: HubRepo, filename: str) -> dict[str, Any]:
    raw = read_range(repo, filename, 0, MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise GpuplanError(f"{repo.repo_id}/{filename}: larger than {MAX_JSON_BYTES // 2**20} MiB")
    data = load_json(raw, f"{repo.repo_id}/{filename}", cap=MAX_JSON_BYTES)
    if not isinstance(data, dict):
        raise GpuplanError(f"{repo.repo_id}/{filename}: must be a JSON object")
    return data


class RangeStream:
    """A Hub file read front to back by range requests of growing size (1 MiB, doubling up to
    16 MiB): a GGUF header (metadata, then tensor infos) takes a few requests and little more
    than its own bytes, never the tensor data behind it."""

    FIRST, LARGEST = 2**20, 16 * 2**20

    def __init__(self, repo: HubRepo, filename: str) -> None:
        self.repo, self.filename = repo, filename
        self.buffer, self.at, self.next_start = b"", 0, 0
        self.block, self.ended = self.FIRST, False

    def read(self, n: int) -> bytes:
        while len(self.buffer) - self.at < n and not self.ended:
            chunk = read_range(self.repo, self.filename, self.next_start, self.block)
            self.ended = len(chunk) < self.block
            self.next_start += len(chunk)
            self.buffer, self.at = self.buffer[self.at :] + chunk, 0
            self.block = min(self.block * 2, self.LARGEST)
        out = self.buffer[self.at : self.at + n]
        self.at += len(out)
        return out


def gguf_header(repo: HubRepo, filename: str) -> tuple[dict[str, Any], list[StoredTensor]]:
    """One GGUF file's metadata and tensor infos, read from the front of the file."""
    return parse_gguf(RangeStream(repo, filename), f"{repo.repo_id}/{filename}")  # type: ignore[arg-type]


def shard_header(repo: HubRepo, filename: str) -> list[StoredTensor]:
    """One safetensors file's header: bytes 0-7 (its length N), then bytes 8 to 8 + N: two
    range requests, never a byte of tensor data."""
    name = f"{repo.repo_id}/{filename}"
    n = st.header_length(read_range(repo, filename, 0, 8), name)
    raw = read_range(repo, filename, 8, n) if n else b""
    if len(raw) < n:
        raise GpuplanError(f"{name}: safetensors header length {n:,} runs past the end of the file")
    return st.parse_header(raw, name)


def safetensors_files(repo: HubRepo) -> list[str]:
    if "model.safetensors.index.json" in repo.files:
        raw = read_range(repo, "model.safetensors.index.json", 0, st.MAX_INDEX_BYTES)
        return st.parse_index(
            raw.decode("utf-8", errors="replace"), f"{repo.repo_id}/model.safetensors.index.json"
        )
    if "model.safetensors" in repo.files:
        return ["model.safetensors"]
    return sorted(f for f in repo.files if f.endswith(".safetensors") and "/" not in f)


def read_headers(repo: HubRepo) -> tuple[list[StoredTensor], int]:
    files = safetensors_files(repo)
    tensors = st.read_headers(files, lambda f: shard_header(repo, f), workers=WORKERS)
    return tensors, len(files)
