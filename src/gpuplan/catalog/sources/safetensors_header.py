"""safetensors headers: every tensor's dtype, shape and exact stored bytes, without its data.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the data
(format spec: huggingface/safetensors README, "Format"). Only the first 8 + N bytes are read, so
a file whose data section is missing or truncated still reads. N is capped at 100 MB, the
limit the reference implementation enforces (safetensors/src/tensor.rs, MAX_HEADER_SIZE).
A sharded checkpoint lists its files in `model.safetensors.index.json` ("weight_map").
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpuplan.catalog.sources.bounds import MAX_FILE_TENSORS, MAX_TENSORS, check_count, check_shape
from gpuplan.engine.checkpoint import StoredTensor
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import clean_name, load_json, open_regular, read_text

MAX_HEADER_BYTES = 100_000_000  # safetensors' own MAX_HEADER_SIZE
MAX_INDEX_BYTES = 64 * 1024 * 1024  # an index of a 1,000-shard checkpoint is a few MB
MAX_DIMS = 8
MAX_SHARDS = 10_000

# bits per element of every dtype the format defines (safetensors/src/tensor.rs `Dtype`)
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


def header_length(first8: bytes, name: str, file_size: int | None = None) -> int:
    """The JSON header's length from the file's first 8 bytes, checked against the file."""
    if len(first8) < 8:
        raise GpuplanError(
            f"{name}: not a safetensors file (shorter than its 8-byte header length)"
        )
    (n,) = struct.unpack("<Q", first8[:8])
    if n > MAX_HEADER_BYTES:
        raise GpuplanError(
            f"{name}: safetensors header claims {n:,} bytes, over the format's"
            f" {MAX_HEADER_BYTES:,}-byte limit; not a safetensors file"
        )
    if file_size is not None and 8 + n > file_size:
        raise GpuplanError(
            f"{name}: safetensors header length {n:,} runs past the end of the"
            f" {file_size:,}-byte file"
        )
    return n


def parse_header(raw: bytes, name: str) -> list[StoredTensor]:
    """The tensors a header describes; any malformed entry is a one-line error."""
    name = clean_name(name)
    # every entry is an object: more braces than MAX_FILE_TENSORS is refused before parsing
    check_count(raw.count(b"{") - 2, name, MAX_FILE_TENSORS)
    try:
        data = json.loads(raw.decode("utf-8"), parse_int=_int, parse_constant=_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise GpuplanError(f"{name}: safetensors header is not valid JSON") from None
    if not isinstance(data, dict):
        raise GpuplanError(f"{name}: safetensors header must be a JSON object")
    tensors = []
    for key, info in data.items():
        if key == "__metadata__":
            continue
        tensors.append(_tensor(key, info, name))
    return tensors


def _int(text: str) -> int:
    if len(text) > 24:  # offsets are < 2^62 (19 digits): a longer integer is not a header
        raise ValueError(text[:20])
    return int(text)


def _constant(text: str) -> float:
    raise ValueError(text)


def _tensor(key: str, info: Any, name: str) -> StoredTensor:
    """One header entry, checked: a known dtype, a shape of whole numbers, data_offsets whose
    span is exactly what the dtype and shape need (a fast path: 50,000 entries per checkpoint)."""
    if type(info) is not dict:
        raise GpuplanError(f"{name}: tensor {key[:80]!r} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    bits = DTYPE_BITS.get(dtype) if type(dtype) is str else None
    if bits is None:
        raise GpuplanError(f"{name}: tensor {key[:80]!r} has unknown dtype {str(dtype)[:20]!r}")
    if type(shape) is not list or len(shape) > MAX_DIMS:
        raise GpuplanError(f"{name}: tensor {key[:80]!r} has an invalid shape")
    if not all(type(d) is int for d in shape):
        raise GpuplanError(f"{name}: tensor {key[:80]!r} has an invalid shape")
    numel = check_shape(shape, key, name)
    if type(offsets) is not list or len(offsets) != 2:
        raise GpuplanError(f"{name}: tensor {key[:80]!r} has invalid data_offsets")
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end < 2**62:
        raise GpuplanError(f"{name}: tensor {key[:80]!r} has invalid data_offsets")
    need = -(-numel * bits // 8)
    if end - begin != need:
        raise GpuplanError(
            f"{name}: tensor {key[:80]!r}: data_offsets span {end - begin:,} bytes, but"
            f" {dtype} {shape} needs {need:,}"
        )
    return StoredTensor(
        key if key.isprintable() else clean_name(key), str(dtype), tuple(shape), need
    )


def read_file_header(path: Path) -> list[StoredTensor]:
    """Read one local .safetensors file's header: 8 + N bytes, never the tensor data."""
    name = clean_name(str(path))
    try:
        with open_regular(path, name) as f:
            size = os.fstat(f.fileno()).st_size
            n = header_length(f.read(8), name, size)
            raw = f.read(n)
    except OSError as err:
        raise GpuplanError(f"{name}: cannot read ({err.__class__.__name__})") from None
    return parse_header(raw, name)


def parse_index(text: str, name: str) -> list[str]:
    """The shard files a `model.safetensors.index.json` names, in order."""
    data = load_json(text, name, cap=MAX_INDEX_BYTES, max_nodes=4 * MAX_TENSORS)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise GpuplanError(f"{name}: no weight_map")
    files: list[str] = []
    for value in dict.fromkeys(v if type(v) is str else repr(v) for v in weight_map.values()):
        if not _safe_name(value) or not value.endswith(".safetensors"):
            raise GpuplanError(f"{name}: weight_map names an invalid file {value[:60]!r}")
        files.append(value)
    if len(files) > MAX_SHARDS:
        raise GpuplanError(f"{name}: more than {MAX_SHARDS:,} shards")
    return files


def _safe_name(file: str) -> bool:
    """A shard name inside the checkpoint folder: no absolute path, no '..'."""
    return bool(file) and not file.startswith(("/", "\\")) and ".." not in Path(file).parts


def read_index_file(path: Path) -> list[str]:
    return parse_index(read_text(path, MAX_INDEX_BYTES), clean_name(str(path)))


def local_shards(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder: its index's shards, else every
    *.safetensors file in it (consolidated/original copies left aside when an index exists)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return [folder / f for f in read_index_file(index)]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    return sorted(p for p in folder.glob("*.safetensors") if p.is_file())


def read_headers(
    files: Iterable[str], read_one: Callable[[str], list[StoredTensor]], workers: int = 1
) -> list[StoredTensor]:
    """Headers of all shards, in order; `read_one` reads one (local file or HTTP range)."""
    names = list(files)
    if workers > 1 and len(names) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(workers, len(names))) as pool:
            parts = list(pool.map(read_one, names))
    else:
        parts = []
        for n in names:  # stop as soon as the checkpoint passes MAX_TENSORS
            parts.append(read_one(n))
            check_count(sum(map(len, parts)), "the checkpoint")
    tensors = [t for part in parts for t in part]
    check_count(len(tensors), "the checkpoint")
    return tensors
