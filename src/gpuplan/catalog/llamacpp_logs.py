"""Read the memory figures llama.cpp prints when it loads a model (llama-server, llama-cli,
llama-perplexity, and wrappers that pass its log through: llama-cpp-python, Ollama).

The lines, across the 2023-2026 builds (src/llama-model.cpp print_info / llm_load_print_meta,
src/llama-context.cpp, src/llama-kv-cache.cpp, ggml-backend's scheduler reserve):

    print_info: n_layer = 32        hyperparameters (also `llm_load_print_meta:`)
    print_info: file size = 4.58 GiB (4.89 BPW)          (older: `model size = …`)
    llama_context: n_ctx = 4096     context settings (also `llama_new_context_with_model:`,
                                    `llama_init_from_model:`): n_ctx, n_ubatch, flash_attn, …
    … kv_size = 4096, … type_k = 'f16', type_v = 'f16', n_layer = 28 …
    llama_kv_cache:      CUDA0 KV buffer size =   448.00 MiB       (one line per device and
                                    cache: an iSWA model prints two caches, summed here)
    llama_kv_cache: size = 448.00 MiB (4096 cells, 28 layers, 1/1 seqs), K (f16): …
    … KV self size  =  448.00 MiB, K (f16):  224.00 MiB, V (f16):  224.00 MiB   (older)
    llama_context:      CUDA0 compute buffer size =   298.75 MiB
    load_tensors:        CUDA0 model buffer size =   604.15 MiB   (older: `CUDA0 buffer size`)

Figures are kept as printed (MiB = 2^20 bytes, GiB = 2^30). Only the first occurrence of each
hyperparameter and context setting is kept, every buffer line is summed per device. Linear in
the text: each line is tested against literal needles before any regular expression.
"""

from __future__ import annotations

import re
from typing import Any

from gpuplan.engine.frozen import field, record

MAX_LINES = 200_000
MAX_LINE_CHARS = 4_000

_META_PREFIXES = ("print_info:", "llm_load_print_meta:")
_META_INT = (
    "n_ctx_train",
    "n_embd",
    "n_layer",
    "n_head",
    "n_head_kv",
    "n_embd_head_k",
    "n_embd_head_v",
    "n_embd_k_gqa",
    "n_embd_v_gqa",
    "n_ff",
    "n_vocab",
    "n_swa",
    "n_expert",
)
_CTX_KEYS = ("n_ctx", "n_ctx_seq", "n_ctx_per_seq", "n_batch", "n_ubatch", "n_seq_max")
_DEVICE = r"(CUDA\d+|ROCm\d+|Vulkan\d+|SYCL\d+|MTL\d+|Metal|CPU|CUDA_Host|ROCm_Host|CPU_Mapped|CUDA_Split|ROCm_Split)"
_MIB = r"(\d{1,9}(?:\.\d{1,4})?) MiB"
_BUFFER = re.compile(_DEVICE + r" +(model |KV |compute |)buffer size *= *" + _MIB)
_META = re.compile(r"(?:print_info|llm_load_print_meta): +([a-z_]+) += +(.{0,80})")
_CTX = re.compile(
    r"(?:llama_context|llama_new_context_with_model|llama_init_from_model): +([a-z_]+) += +(\S{1,20})"
)
_KV_SIZE = re.compile(r"kv_size = (\d+),.*type_k = '(\w+)', type_v = '(\w+)', n_layer = (\d+)")
_KV_TOTAL = re.compile(
    r"size = +" + _MIB + r" \( *(\d+) cells, +(\d+) layers, +(\d+)(?:/(\d+))? seqs\), +"
    r"K \((\w+)\): +" + _MIB + r", +V \((\w+)\): +" + _MIB
)
_KV_SELF = re.compile(
    r"KV self size += +" + _MIB + r", K \((\w+)\): +" + _MIB + r", V \((\w+)\): +" + _MIB
)
_FILE_SIZE = re.compile(
    r"(?:file size|model size) += +(\d+(?:\.\d+)?) (GiB|MiB) \((\d+\.\d+) BPW\)"
)
_BUILD = re.compile(r"(?:build|version)(?::| =) (\d{3,5}) \(")
_GPU = re.compile(r"Device \d+: ([^,]{2,80}),")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_ROUNDED = re.compile(r"n_ctx is not divisible by n_seq_max - rounding down to (\d+)")
_ALLOC_FAIL = re.compile(r"allocating (\d+(?:\.\d+)?) MiB on device (\d+): cudaMalloc failed")


@record
class LlamaCppLog:
    """What one llama.cpp load log says: its build, devices, hyperparameters, context settings
    and every buffer it allocated (MiB per device)."""

    build: int | None
    devices: tuple[str, ...]
    meta: dict[str, Any]  # print_info hyperparameters (ints), file_type, file_size_gib, bpw
    context: dict[str, Any]  # n_ctx, n_ubatch, flash_attn, …, kv_size, type_k, type_v
    kv_mib: dict[str, float] = field(default_factory=dict)
    compute_mib: dict[str, float] = field(default_factory=dict)
    model_mib: dict[str, float] = field(default_factory=dict)
    kv_total: dict[str, Any] = field(default_factory=dict)  # the summary line(s): size, K, V, cells
    offloaded: tuple[int, int] | None = None
    failed_alloc_mib: dict[str, float] = field(default_factory=dict)  # CUDA<i>: MiB refused

    @property
    def kv_gpu_mib(self) -> float:
        return sum(v for k, v in self.kv_mib.items() if not _is_host(k))


def _is_host(device: str) -> bool:
    return device.startswith("CPU") or device.endswith("_Host")


def _lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.strip():
            out.append(line[:MAX_LINE_CHARS])
            if len(out) >= MAX_LINES:
                break
    return out


def _int(text: str) -> int | None:
    m = re.match(r"\d{1,12}", text.strip())
    return int(m.group(0)) if m else None


def _meta(line: str, meta: dict[str, Any]) -> None:
    m = _META.search(line)
    if not m:
        return
    key, value = m.group(1), m.group(2).strip()
    if key in _META_INT and key not in meta:
        number = _int(value)
        if number is not None and value.strip().isdigit():
            meta[key] = number
    elif key in ("file_type", "model_ftype", "ftype") and "file_type" not in meta:
        meta["file_type"] = value
    elif key == "file" and value.startswith("type") and "file_type" not in meta:
        meta["file_type"] = value.split("=", 1)[-1].strip()
    fs = _FILE_SIZE.search(line)
    if fs and "file_size_gib" not in meta:
        size = float(fs.group(1))
        meta["file_size_gib"] = size if fs.group(2) == "GiB" else size / 1024
        meta["bpw"] = float(fs.group(3))


def _context(line: str, ctx: dict[str, Any]) -> None:
    m = _CTX.search(line)
    if m:
        key, value = m.group(1), m.group(2)
        if key in _CTX_KEYS and key not in ctx and value.isdigit():
            ctx[key] = int(value)
        elif key == "flash_attn" and key not in ctx:
            ctx[key] = value in ("1", "enabled", "true")
        elif key == "kv_unified" and key not in ctx:
            ctx[key] = value == "true"
    r = _ROUNDED.search(line)
    if r and "n_ctx" not in ctx:
        ctx["n_ctx"] = int(r.group(1))  # the cells of all streams after per-sequence padding
    k = _KV_SIZE.search(line)
    if k and "kv_size" not in ctx:
        ctx.update(kv_size=int(k.group(1)), type_k=k.group(2), type_v=k.group(3))
        ctx["kv_n_layer"] = int(k.group(4))


def _kv_summary(line: str, total: dict[str, Any]) -> None:
    m = _KV_TOTAL.search(line)
    if m:
        total["size_mib"] = total.get("size_mib", 0.0) + float(m.group(1))
        total.setdefault("cells", []).append(int(m.group(2)))
        total.setdefault("layers", []).append(int(m.group(3)))
        total["seqs"] = int(m.group(4))
        total["streams"] = int(m.group(5)) if m.group(5) else 1  # "10/1 seqs": one stream
        total["type_k"], total["type_v"] = m.group(6), m.group(8)
        total["k_mib"] = total.get("k_mib", 0.0) + float(m.group(7))
        total["v_mib"] = total.get("v_mib", 0.0) + float(m.group(9))
        return
    s = _KV_SELF.search(line)
    if s and "size_mib" not in total:
        total.update(size_mib=float(s.group(1)), type_k=s.group(2), type_v=s.group(4))
        total.update(k_mib=float(s.group(3)), v_mib=float(s.group(5)))


def _buffer(line: str, log: dict[str, dict[str, float]]) -> None:
    m = _BUFFER.search(line)
    if not m:
        return
    device, kind, mib = m.group(1), m.group(2).strip(), float(m.group(3))
    if kind == "":  # llm_load_tensors: CUDA0 buffer size (older builds: the model buffer)
        if "llm_load_tensors" not in line and "load_tensors" not in line:
            return
        kind = "model"
    table = log[kind]
    table[device] = round(table.get(device, 0.0) + mib, 4)


def parse_llamacpp_log(text: str) -> LlamaCppLog:
    """Every figure above that the text holds; lines it does not hold are simply absent."""
    build: int | None = None
    devices: list[str] = []
    meta: dict[str, Any] = {}
    ctx: dict[str, Any] = {}
    total: dict[str, Any] = {}
    buffers: dict[str, dict[str, float]] = {"model": {}, "KV": {}, "compute": {}}
    offloaded = None
    failed: dict[str, float] = {}
    for line in _lines(text):
        if build is None and ("build" in line or "version" in line):
            b = _BUILD.search(line)
            build = int(b.group(1)) if b else None
        if "Device " in line and "compute capability" in line or "gfx" in line:
            g = _GPU.search(line)
            if g:
                devices.append(g.group(1).strip())
        if line.lstrip().startswith(_META_PREFIXES) or any(p in line for p in _META_PREFIXES):
            _meta(line, meta)
        if "=" in line:
            _context(line, ctx)
        if "size" in line and "MiB" in line:
            _kv_summary(line, total)
            if "buffer size" in line:
                _buffer(line, buffers)
        if "cudaMalloc failed" in line:
            f = _ALLOC_FAIL.search(line)
            if f:
                failed[f"CUDA{f.group(2)}"] = float(f.group(1))
        if "offloaded" in line:
            o = _OFFLOADED.search(line)
            offloaded = (int(o.group(1)), int(o.group(2))) if o else offloaded
    return LlamaCppLog(
        build,
        tuple(devices),
        meta,
        ctx,
        buffers["KV"],
        buffers["compute"],
        buffers["model"],
        total,
        offloaded,
        failed,
    )
