"""GGUF headers (llama.cpp, Ollama): metadata and tensor infos, never tensor data.

Layout (ggml/docs/gguf.md): magic "GGUF", version (2 or 3), tensor count, metadata count, the
metadata key/value pairs, then one info per tensor (name, dims, GGML type, offset), padding to
`general.alignment`, then the data. The header is read with bounded sequential reads (at most
`MAX_HEADER_BYTES`), so a file whose data is truncated still reads. Type ids, value types and
block sizes come from the `gguf` package (gguf-py, maintained in the llama.cpp repository):
a tensor of n elements of a block type takes n / block_size × type_size bytes
(GGML_QUANT_SIZES, mirroring ggml.c's type_traits).

`config_from_gguf` maps llama.cpp's metadata keys (llama-arch.cpp LLM_KV_*: block_count,
embedding_length, attention.head_count_kv, ...) onto the Hugging Face config.json keys that
engine/architecture.py reads.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from gpuplan.catalog.sources.bounds import MAX_FILE_TENSORS, check_shape
from gpuplan.engine.checkpoint import StoredTensor
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import clean_name, open_regular

MAX_HEADER_BYTES = 512 * 1024 * 1024  # metadata with a 256k-token vocabulary is ~10 MB
MAX_TENSORS = MAX_FILE_TENSORS
MAX_KV = 100_000
MAX_STRING = 64 * 1024 * 1024
MAX_ARRAY_KEPT = 4096  # longer arrays (token lists, scores) keep only their length
GGUF_MAGIC = b"GGUF"

# GGUF value types (gguf.GGUFValueType): struct format of each scalar
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


class _Reader:
    """Sequential reads with a hard cap on the bytes taken from the file."""

    def __init__(self, f: BinaryIO, name: str, limit: int = MAX_HEADER_BYTES):
        self.f, self.name, self.limit, self.pos = f, name, limit, 0

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.limit:
            raise GpuplanError(f"{self.name}: GGUF header larger than {self.limit // 2**20} MiB")
        data = self.f.read(n)
        if len(data) != n:
            raise GpuplanError(
                f"{self.name}: GGUF header ends early (truncated at byte {self.pos + len(data):,})"
            )
        self.pos += n
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > MAX_STRING:
            raise GpuplanError(f"{self.name}: GGUF string of {n:,} bytes")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY and depth < 2:
            etype = self.unpack("<I")
            count = self.unpack("<Q")
            if etype in _SCALARS:
                size = struct.calcsize(_SCALARS[etype])
                raw = self.read(count * size)
                if count > MAX_ARRAY_KEPT:
                    return _Long(count)
                return list(struct.unpack(f"<{count}{_SCALARS[etype][1]}", raw))
            items = (
                [self.value(etype, depth + 1) for _ in range(count)]
                if count <= MAX_ARRAY_KEPT
                else None
            )
            if items is None:
                for _ in range(count):
                    self.value(etype, depth + 1)
                return _Long(count)
            return items
        raise GpuplanError(f"{self.name}: unknown GGUF value type {vtype}")


class _Long:
    """A long metadata array (a tokenizer's token list): only its length is kept."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"<array of {self.count:,}>"


def _quant_sizes() -> dict[int, tuple[str, int, int]]:
    """GGML type id -> (name, block size, bytes per block), from the gguf package."""
    import gguf

    return {int(t): (t.name, block, size) for t, (block, size) in gguf.GGML_QUANT_SIZES.items()}


def read_gguf(path: Path) -> tuple[dict[str, Any], list[StoredTensor]]:
    """Metadata and tensors of a GGUF file (bounded reads of its header only)."""
    name = clean_name(str(path))
    try:
        with open_regular(path, name) as f:
            return parse_gguf(f, name)
    except OSError as err:
        raise GpuplanError(f"{name}: cannot read ({err.__class__.__name__})") from None


def parse_gguf(f: BinaryIO, name: str) -> tuple[dict[str, Any], list[StoredTensor]]:
    r = _Reader(f, name)
    magic = f.read(4)
    r.pos = len(magic)
    if magic != GGUF_MAGIC:
        raise GpuplanError(f"{name}: not a GGUF file (magic {magic[:4]!r}, expected b'GGUF')")
    version = r.unpack("<I")
    if version not in (2, 3):
        raise GpuplanError(f"{name}: GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise GpuplanError(f"{name}: GGUF header claims {n_tensors:,} tensors and {n_kv:,} keys")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"))
    sizes = _quant_sizes()
    tensors = []
    for _ in range(n_tensors):
        tname = r.string()
        if not tname.isprintable():  # names reach a terminal: control characters escaped
            tname = clean_name(tname)
        n_dims = r.unpack("<I")
        if not 1 <= n_dims <= 4:  # GGML_MAX_DIMS
            raise GpuplanError(f"{name}: tensor {tname[:80]!r} has {n_dims} dimensions")
        ne = [r.unpack("<Q") for _ in range(n_dims)]
        type_id = r.unpack("<I")
        r.unpack("<Q")  # offset into the data section: not needed, nothing is read there
        if type_id not in sizes:
            raise GpuplanError(f"{name}: tensor {tname[:80]!r} has unknown GGML type {type_id}")
        tname_type, block, size = sizes[type_id]
        numel = check_shape(ne, tname, name)
        if ne[0] % block:
            raise GpuplanError(
                f"{name}: tensor {tname[:80]!r} row of {ne[0]} is not a multiple of"
                f" the {tname_type} block of {block}"
            )
        # ne[0] is the fastest-varying dimension; shape is written outermost first
        tensors.append(StoredTensor(tname, tname_type, tuple(reversed(ne)), numel // block * size))
    meta["__gguf_version__"] = version
    return meta, tensors


# --------------------------------------------------------------------------------------
# GGUF metadata → config.json keys
# --------------------------------------------------------------------------------------

# llama.cpp architecture name -> transformers model_type (architectures gpuplan sizes)
_MODEL_TYPE = {
    "llama": "llama",
    "mistral3": "mistral",
    "qwen2": "qwen2",
    "qwen2moe": "qwen2_moe",
    "qwen3": "qwen3",
    "qwen3moe": "qwen3_moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "phi3": "phi3",
    "phi2": "phi",
    "gpt2": "gpt2",
    "deepseek2": "deepseek_v3",
    "gpt-oss": "gpt_oss",
    "llama4": "llama4_text",
    "mixtral": "mixtral",
}

# {arch}.<key> -> config.json key
_KEYS = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "context_length": "max_position_embeddings",
    "vocab_size": "vocab_size",
    "expert_count": "num_local_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
    "expert_shared_count": "n_shared_experts",
    "leading_dense_block_count": "first_k_dense_replace",
    "attention.sliding_window": "sliding_window",
    "attention.q_lora_rank": "q_lora_rank",
    "attention.kv_lora_rank": "kv_lora_rank",
    "attention.value_length": "v_head_dim",
    "rope.dimension_count": "qk_rope_head_dim",
}


# llama.cpp architectures with recurrent layers (llama_memory_recurrent / _hybrid): their
# ssm.* / shortconv.* metadata is not read here, so they are refused rather than sized as Llama
_RECURRENT = frozenset(
    {
        "mamba",
        "mamba2",
        "jamba",
        "falcon-h1",
        "granitehybrid",
        "nemotron_h",
        "nemotron_h_moe",
        "plamo2",
        "qwen3next",
        "qwen35",
        "qwen35moe",
        "lfm2",
        "lfm2moe",
        "kimi-linear",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "arwkv7",
    }
)


def config_from_gguf(
    meta: dict[str, Any], tensors: list[StoredTensor], name: str
) -> dict[str, Any]:
    """A config.json-style dict from GGUF metadata, for engine/architecture.py to read."""
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise GpuplanError(f"{name}: GGUF metadata has no general.architecture")
    if arch in _RECURRENT:
        raise GpuplanError(
            f"{name}: GGUF architecture {arch!r} has recurrent (state) layers, which gpuplan does"
            " not read from GGUF metadata: size the model from its config.json"
        )
    config: dict[str, Any] = {"model_type": _MODEL_TYPE.get(arch, arch)}
    for key, hf_key in _KEYS.items():
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values (e.g. head_count_kv): the largest
            value = max(value) if value else None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            # a NaN / inf / fractional count stays a float: config_schema refuses it by name
            config[hf_key] = value
    if "vocab_size" not in config:
        tokens = meta.get("tokenizer.ggml.tokens")
        if tokens is not None:
            config["vocab_size"] = len(tokens)
    names = {t.name for t in tensors}
    config["tie_word_embeddings"] = "output.weight" not in names
    if config.get("kv_lora_rank"):  # MLA: key_length is nope + rope
        rope = config.get("qk_rope_head_dim", 64)
        config["qk_nope_head_dim"] = config.get("head_dim", 192) - rope
    if config.get("num_local_experts") and config["model_type"] == "llama":
        config["model_type"] = "mixtral"  # Mixtral GGUFs are 'llama' with experts
        config.setdefault("moe_intermediate_size", config.get("intermediate_size"))
    if any(".attn_q.bias" in n for n in names) and config["model_type"] == "llama":
        config["attention_bias"] = True
    config["torch_dtype"] = (
        "float16"  # llama.cpp computes in f16/f32; weights are sized from the file
    )
    config["_gguf_architecture"] = arch
    return config
