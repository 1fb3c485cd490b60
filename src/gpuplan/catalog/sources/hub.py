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

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpuplan.catalog.sources import safetensors_header as st
from gpuplan.engine.checkpoint import StoredTensor
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError

TIMEOUT_S = 15.0
MAX_JSON_BYTES = 16 * 1024 * 1024
WORKERS = 8

# A Hub that is slow to answer is said, once, after NOTICE_AFTER_S (gpuplan.progress: the CLI
# prints it as one stderr line; a library caller hears nothing unless it listens).
NOTICE_AFTER_S = 1.0
_noticed: list[bool] = []


@contextmanager
def _waiting(what: str) -> Iterator[None]:
    """Around one Hub request: if it takes longer than NOTICE_AFTER_S, say what is awaited,
    where, for how long at most, and how to skip the Hub."""
    from gpuplan import progress

    if progress.listener is None or _noticed:
        yield
        return
    line = (
        f"waiting for the Hugging Face Hub ({endpoint()}) for {what}, up to {TIMEOUT_S:g} s per"
        " request (HF_HUB_OFFLINE=1 skips the Hub)"
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
    from huggingface_hub import HfApi

    _session()
    try:
        with _waiting(repo_id):
            info = HfApi(endpoint=endpoint(), token=_token()).model_info(
                repo_id, revision=revision, timeout=TIMEOUT_S
            )
    except Exception as err:  # network, HTTP and Hub errors alike become one line
        raise _fail(repo_id, err) from None
    files = tuple(s.rfilename for s in (info.siblings or []))
    return HubRepo(repo_id, info.sha or revision or "main", files)


def _url(repo_id: str, revision: str, filename: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint())


def read_range(repo_id: str, revision: str, filename: str, start: int, length: int) -> bytes:
    """Bytes [start, start + length) of a file, never more, even if Range is ignored."""
    headers = _headers({"Range": f"bytes={start}-{start + length - 1}"})
    try:
        with (
            _waiting(f"{repo_id}/{filename}"),
            _session().stream(
                "GET",
                _url(repo_id, revision, filename),
                headers=headers,
                timeout=TIMEOUT_S,
                follow_redirects=True,
            ) as r,
        ):
            if r.status_code >= 400:
                from huggingface_hub.utils import hf_raise_for_status

                r.read()
                hf_raise_for_status(r)
            skip = start if r.status_code == 200 else 0  # Range ignored: skip to start
            out = bytearray()
            for chunk in r.iter_bytes():
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                out += chunk
                if len(out) >= length:
                    break
            return bytes(out[:length])
    except GpuplanError:
        raise
    except Exception as err:
        raise _fail(f"{repo_id}/{filename}", err) from None


def read_json(repo: HubRepo, filename: str) -> dict[str, Any]:
    raw = read_range(repo.repo_id, repo.revision, filename, 0, MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise GpuplanError(f"{repo.repo_id}/{filename}: larger than {MAX_JSON_BYTES // 2**20} MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise GpuplanError(f"{repo.repo_id}/{filename}: not valid JSON") from None
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
            chunk = read_range(
                self.repo.repo_id, self.repo.revision, self.filename, self.next_start, self.block
            )
            self.ended = len(chunk) < self.block
            self.next_start += len(chunk)
            self.buffer, self.at = self.buffer[self.at :] + chunk, 0
            self.block = min(self.block * 2, self.LARGEST)
        out = self.buffer[self.at : self.at + n]
        self.at += len(out)
        return out


def gguf_header(repo: HubRepo, filename: str) -> tuple[dict[str, Any], list[StoredTensor]]:
    """One GGUF file's metadata and tensor infos, read from the front of the file."""
    from gpuplan.catalog.sources.gguf_header import parse_gguf

    return parse_gguf(RangeStream(repo, filename), f"{repo.repo_id}/{filename}")  # type: ignore[arg-type]


def shard_header(repo: HubRepo, filename: str) -> list[StoredTensor]:
    """One safetensors file's header: bytes 0-7 (its length N), then bytes 8 to 8 + N: two
    range requests, never a byte of tensor data."""
    name = f"{repo.repo_id}/{filename}"
    n = st.header_length(read_range(repo.repo_id, repo.revision, filename, 0, 8), name)
    raw = read_range(repo.repo_id, repo.revision, filename, 8, n) if n else b""
    if len(raw) < n:
        raise GpuplanError(f"{name}: safetensors header length {n:,} runs past the end of the file")
    return st.parse_header(raw, name)


def safetensors_files(repo: HubRepo) -> list[str]:
    if "model.safetensors.index.json" in repo.files:
        raw = read_range(
            repo.repo_id, repo.revision, "model.safetensors.index.json", 0, st.MAX_INDEX_BYTES
        )
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
