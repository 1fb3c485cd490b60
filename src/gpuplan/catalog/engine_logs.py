"""Read the memory figures an engine printed in its startup log.

The lines are those documented in tests/data/engine_logs/README.md: vLLM V1 (gpu_worker.py,
gpu_model_runner.py, kv_cache_utils.py), the legacy V0 engine (worker.py "Memory profiling
results" / "# GPU blocks"), SGLang (model_runner.py, memory_pool.py, scheduler) and TensorRT-LLM
(`[MemUsageChange]`, "paged KV cache"). Figures are kept as printed (GiB = 2^30 bytes), with
the launch arguments the engine prints ("non-default args: {...}", "args: Namespace(...)",
"with config: model=...").

Bounded and linear: at most `MAX_LOG_BYTES` are read, each line is cut at `MAX_LINE_CHARS`,
every pattern is a literal needle plus a short regular expression applied in a bounded window
after it. Text kept from a log (version, argument values) has control characters removed;
nothing a log names is opened.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

from gpuplan.engine.frozen import field, record
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import open_regular

MAX_LOG_BYTES = 16 * 2**20
MAX_LINE_CHARS = 20_000
MAX_LINES = 200_000  # non-blank lines read: a startup log has a few thousand
MAX_ARGS_CHARS = 100_000
WINDOW = 400  # characters after a needle a figure must lie in

_NUM = r"(-?\d{1,9}(?:\.\d{1,9})?)"
_INT = r"(\d[\d,]{0,18})"


@record
class Pattern:
    """A figure: the literal text that precedes it, then a short regex for the number."""

    key: str
    needle: str
    regex: re.Pattern[str]


def _p(key: str, needle: str, regex: str) -> Pattern:
    return Pattern(key, needle, re.compile(regex))


VLLM_PATTERNS: tuple[Pattern, ...] = (
    _p("weights_gib", "Model loading took ", r"Model loading took " + _NUM + r" ?Gi?B"),
    _p(
        "weights_gib",
        "Loading model weights took ",
        r"Loading model weights took " + _NUM + r" ?Gi?B",
    ),
    _p("initial_free_gib", "Initial free memory", r"Initial free memory:? " + _NUM + r" ?GiB"),
    _p("utilization", "Requested memory: ", r"Requested memory: " + _NUM + r" \(util\)"),
    _p(
        "requested_gib",
        "Requested memory: ",
        r"Requested memory: [\d.]+ \(util\), " + _NUM + r" ?GiB",
    ),
    _p(
        "total_non_kv_gib",
        "Total non KV cache memory: ",
        r"Total non KV cache memory: " + _NUM + r" ?GiB",
    ),
    _p(
        "activation_peak_gib",
        "torch peak memory increase: ",
        r"torch peak memory increase: " + _NUM + r" ?GiB",
    ),
    _p(
        "non_torch_gib",
        "non-torch forward increase memory: ",
        r"non-torch forward increase memory: " + _NUM + r" ?GiB",
    ),
    _p(
        "kv_cache_gib",
        "Available KV cache memory: ",
        r"Available KV cache memory: " + _NUM + r" ?GiB",
    ),
    _p("kv_cache_tokens", "GPU KV cache size: ", r"GPU KV cache size: " + _INT + r" tokens"),
    # the failed-start message (V0 and V1 to 0.8: worker.py / kv_cache_utils.py
    # raise_if_cache_size_invalid): the KV capacity in tokens that was too small
    _p(
        "kv_cache_tokens_limit",
        "can be stored in KV cache (",
        r"can be stored in KV cache \((\d{1,12})\)",
    ),
    _p(
        "concurrency_len",
        "Maximum concurrency for ",
        r"Maximum concurrency for " + _INT + r" tokens per request",
    ),
    _p(
        "max_concurrency",
        "Maximum concurrency for ",
        r"Maximum concurrency for [\d,]+ tokens per request: " + _NUM + r"x",
    ),
    _p("cudagraph_gib", "Graph capturing finished", r"took " + _NUM + r" ?GiB"),
    _p(
        "total_gib",
        "Free memory on device (",
        r"Free memory on device \([\d.]+/" + _NUM + r" ?GiB\)",
    ),
    # V0 (0.5–0.9): the worker's profiling summary and the block count
    _p("gpu_blocks_v0", "GPU blocks: ", r"GPU blocks: " + _INT),
    _p("total_gib", "total_gpu_memory=", r"total_gpu_memory=" + _NUM + r" ?GiB"),
    _p("total_gib", "total_gpu_memory (", r"total_gpu_memory \(" + _NUM + r" ?GiB\)"),
    _p(
        "utilization",
        "gpu_memory_utilization (",
        r"gpu_memory_utilization \(" + _NUM + r"\)",
    ),
    _p("utilization", "gpu_memory_utilization=", r"gpu_memory_utilization=" + _NUM),
    _p("peak_torch_gib_v0", "peak_torch_memory=", r"peak_torch_memory=" + _NUM + r" ?GiB"),
    _p("non_torch_gib", "non_torch_memory=", r"non_torch_memory=" + _NUM + r" ?GiB"),
    _p("non_torch_gib", "non_torch_memory takes ", r"non_torch_memory takes " + _NUM + r" ?GiB"),
    _p(
        "activation_peak_gib",
        "PyTorch activation peak memory takes ",
        r"PyTorch activation peak memory takes " + _NUM + r" ?GiB",
    ),
    _p("kv_cache_gib", "kv_cache_size=", r"kv_cache_size=" + _NUM + r" ?GiB"),
    _p(
        "kv_cache_gib",
        "reserved for KV Cache is ",
        r"reserved for KV Cache is " + _NUM + r" ?GiB",
    ),
)
SGLANG_PATTERNS: tuple[Pattern, ...] = (
    _p("kv_cache_tokens", "KV Cache is allocated. #tokens: ", r"#tokens: (\d{1,12})"),
    _p("k_size_gb", "KV Cache is allocated.", r"K size: " + _NUM + r" GB"),
    _p("v_size_gb", "KV Cache is allocated.", r"V size: " + _NUM + r" GB"),
    _p("max_total_num_tokens", "max_total_num_tokens=", r"max_total_num_tokens=(\d{1,12})"),
    _p("mem_fraction_static", "mem_fraction_static=", r"mem_fraction_static=" + _NUM),
    _p("weights_gb", "Load weight end.", r"mem usage=" + _NUM + r" GB"),
    _p("avail_after_load_gb", "Load weight end.", r"avail mem=" + _NUM + r" GB"),
    _p("avail_before_load_gb", "Load weight begin.", r"avail mem=" + _NUM + r" GB"),
    _p("cuda_graph_gb", "Capture cuda graph end.", r"mem usage=" + _NUM + r" GB"),
    _p("context_len", "context_len=", r"context_len=(\d{1,12})"),
)
TRTLLM_PATTERNS: tuple[Pattern, ...] = (
    _p(
        "kv_cache_gib",
        "for max tokens in paged KV cache",
        r"Allocated " + _NUM + r" GiB for max tokens in paged KV cache",
    ),
    _p(
        "kv_cache_tokens",
        "for max tokens in paged KV cache (",
        r"for max tokens in paged KV cache \((\d{1,12})\)",
    ),
    _p("kv_cache_tokens", "tokens in paged KV cache", r"Using (\d{1,12}) tokens in paged KV cache"),
    _p("free_gpu_memory_fraction", "fraction is set ", r"fraction is set " + _NUM),
)
PATTERNS = {"vllm": VLLM_PATTERNS, "sglang": SGLANG_PATTERNS, "trtllm": TRTLLM_PATTERNS}
ERRORS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("No available memory for the cache blocks",), "no memory left for the KV cache"),
    (("torch.OutOfMemoryError", "CUDA out of memory"), "CUDA out of memory"),
    (
        (
            "larger than the maximum number of tokens that can be stored in KV cache",
            "larger than the KV cache token capacity",
            "KV cache is needed, which is larger than",
        ),
        "KV cache too small for max_model_len",
    ),
    (("Engine core initialization failed", "EngineCore failed to start"), "engine failed to start"),
)
_ENGINE_NEEDLES = {
    "vllm": (
        "vllm",
        "vLLM",
        "gpu_worker.py",
        "gpu_model_runner.py",
        "kv_cache_utils.py",
        "Loading model weights took",
        "Model loading took",
        "GPU blocks:",
        "GPU KV cache size",
        "Available KV cache memory",
        "Maximum concurrency for",
        "maximum number of tokens that can be stored in KV cache",
        "non-default args: {",
        "LLM engine (v",
    ),
    "sglang": (
        "KV Cache is allocated",
        "max_total_num_tokens",
        "server_args=ServerArgs(",
        "sglang.launch_server",
        "sglang is using nccl",
    ),
    "trtllm": ("TensorRT-LLM", "tensorrt_llm", "paged KV cache", "[TRT-LLM]"),
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e]")


def clean_text(text: str, limit: int = 500) -> str:
    """Text from a log made safe to print: control and direction characters removed, cut."""
    out = _CONTROL.sub("", str(text))
    return out if len(out) <= limit else out[: limit - 1] + "…"


@record
class LogFigures:
    """What one startup log says: the engine, its version, its launch arguments, its figures."""

    engine: str
    version: str | None
    args: dict[str, Any]
    figures: dict[str, float]  # as printed; *_gib in GiB, tokens as counts
    errors: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # why the log cannot be fully compared
    v0: bool = False  # a vLLM V0-engine log
    args_source: str | None = None  # the line the launch arguments were read from
    observed: dict[str, str] = field(default_factory=dict)  # engine choices the log reveals

    @property
    def model(self) -> str | None:
        m = self.args.get("model") or self.args.get("model_tag") or self.args.get("model_path")
        return clean_text(str(m)) if m else None

    @property
    def failed(self) -> bool:
        return bool(self.errors) or self.figures.get("kv_cache_gib", 1.0) <= 0


def _lines(text: str) -> list[str]:
    """The first MAX_LINES non-blank lines, each cut to MAX_LINE_CHARS: every later pass over
    them is bounded, whatever the file holds (5M empty lines cost one split)."""
    lines: list[str] = []
    for line in text.splitlines():
        if line and not line.isspace():
            lines.append(line[:MAX_LINE_CHARS])
            if len(lines) >= MAX_LINES:
                break
    return lines


def detect_engine(text: str) -> str | None:
    """The engine whose lines the text holds (SGLang and TRT-LLM first: their logs often carry
    lines of the vLLM packages they import)."""
    for engine in ("sglang", "trtllm", "vllm"):
        needles = _ENGINE_NEEDLES[engine]
        if any(n in text for n in needles):
            return engine
    return None


def _figures(lines: list[str], patterns: tuple[Pattern, ...]) -> dict[str, float]:
    """The first value of each key, in line order; linear in the text's length."""
    found: dict[str, float] = {}
    for line in lines:
        for p in patterns:
            if p.key in found:
                continue
            i = line.find(p.needle)
            if i < 0:
                continue
            m = p.regex.search(line, i, i + len(p.needle) + WINDOW)
            if m:
                try:
                    found[p.key] = float(m.group(1).replace(",", ""))
                except ValueError:
                    continue
    return found


_SAFE_TYPES = (str, int, float, bool, type(None))


def _safe_value(value: Any, depth: int = 0) -> Any:
    """A value read from a log, kept only if it is plain data (strings cleaned)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, _SAFE_TYPES):
        return value
    if depth < 4 and isinstance(value, dict):
        return {clean_text(str(k), 100): _safe_value(v, depth + 1) for k, v in value.items()}
    if depth < 4 and isinstance(value, list | tuple):
        return [_safe_value(v, depth + 1) for v in value[:64]]
    return clean_text(repr(value), 200)


def _literal(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


_PAIR = re.compile(r"(\w{1,64})=('(?:[^'\\]|\\.){0,2000}'|\"[^\"]{0,2000}\"|[^,()\[\]{}]{0,200})")
_ENGINE_CONFIG_KEYS = {
    "model": "model",
    "dtype": "dtype",
    "max_seq_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "kv_cache_dtype": "kv_cache_dtype",
}


def _pairs(body: str) -> dict[str, Any]:
    """key=value pairs of a `Namespace(...)` / `ServerArgs(...)` / engine-config line."""
    out: dict[str, Any] = {}
    for key, raw in _PAIR.findall(body[:MAX_ARGS_CHARS]):
        raw = raw.strip()
        if raw.startswith("torch."):
            raw = repr(raw[len("torch.") :])
        value = _literal(raw) if raw[:1] in "'\"-0123456789" or raw in _KEYWORDS else raw
        out[key] = value if value is not None or raw == "None" else raw
    return out


_KEYWORDS = ("True", "False", "None")


def _args(lines: list[str], engine: str) -> tuple[dict[str, Any], str | None, bool]:
    """The launch arguments a log prints, where it came from, and whether a line was found
    but could not be read."""
    unreadable = False
    for needle, source in (
        ("non-default args: {", "non-default args"),
        ("args: Namespace(", "args: Namespace"),
        ("server_args=ServerArgs(", "server_args"),
    ):
        for line in lines:
            i = line.find(needle)
            if i < 0:
                continue
            body = line[i + len(needle) - 1 :]
            if source == "non-default args":
                value = _literal(body[:MAX_ARGS_CHARS])
                if isinstance(value, dict):
                    return _safe_value(value), source, False
                unreadable = True
                continue
            pairs = _pairs(body[1:])
            if pairs:
                return _safe_value(pairs), source, False
            unreadable = True
    for line in lines:
        i = line.find("engine (v")
        j = line.find("with config: ", i if i >= 0 else 0)
        if j < 0 or engine != "vllm":
            continue
        pairs = _pairs(line[j + len("with config: ") :])
        args = {new: pairs[old] for old, new in _ENGINE_CONFIG_KEYS.items() if old in pairs}
        if args:
            return _safe_value(args), "engine config", unreadable
    return {}, None, unreadable


_VERSION_PATTERNS = {
    "vllm": (
        ("vLLM API server version ", r"version v?(\d+\.\d+[\w.+-]*)"),
        ("LLM engine (v", r"engine \(v(\d+\.\d+[\w.+-]*)\)"),
        ("vllm==", r"vllm==(\d+\.\d+[\w.+-]*)"),
        ("vllm version", r"vllm version:? v?(\d+\.\d+[\w.+-]*)"),
    ),
    "sglang": (
        ("sglang==", r"sglang==(\d+\.\d+[\w.+-]*)"),
        ("SGLang v", r"SGLang v(\d+\.\d+[\w.+-]*)"),
        ("sglang version", r"sglang version:? v?(\d+\.\d+[\w.+-]*)"),
    ),
    "trtllm": (
        ("TensorRT-LLM version: ", r"version: v?(\d+\.\d+[\w.+-]*)"),
        ("TensorRT-LLM v", r"TensorRT-LLM v(\d+\.\d+[\w.+-]*)"),
    ),
}


def _version(lines: list[str], engine: str) -> str | None:
    for needle, regex in _VERSION_PATTERNS[engine]:
        pattern = re.compile(regex, re.IGNORECASE)
        for line in lines:
            i = line.find(needle)
            if i < 0:
                continue
            m = pattern.search(line, max(0, i - 20), i + len(needle) + 60)
            if m:
                return clean_text(m.group(1).rstrip(").,"), 40)
    return None


def _is_v0(lines: list[str], figures: dict[str, float]) -> bool:
    """A V0-engine log: the V0 worker's lines, or its "Initializing an LLM engine" banner."""
    if "gpu_blocks_v0" in figures and "kv_cache_tokens" not in figures:
        return True
    return any(
        "Initializing an LLM engine" in line or "Memory profiling results:" in line
        for line in lines
    ) and not any("V1 LLM engine" in line for line in lines)


_OBSERVED: tuple[tuple[str, str, str], ...] = (
    # (needle, key, value): choices an engine prints that change its memory
    ("V1 LLM engine", "vllm_engine", "v1"),
    ("V0 LLM engine", "vllm_engine", "v0"),
    ("Initializing an LLM engine", "vllm_engine", "v0"),
    ("Using FlashInfer for top-p & top-k sampling", "sampler_backend", "flashinfer"),
    ("Falling back to the PyTorch-native implementation of top-p", "sampler_backend", "native"),
)


def _observed(lines: list[str], v0: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for needle, key, value in _OBSERVED:
        if key not in out and any(needle in line for line in lines):
            out[key] = value
    if v0:
        out["vllm_engine"] = "v0"
    return out


def parse_log(text: str) -> LogFigures:
    """Extract an engine's startup figures from log text. Never raises on odd logs (other than
    "not a log"): what could not be read is listed in `problems`."""
    problems: list[str] = []
    if len(text) > MAX_LOG_BYTES:
        text = text[:MAX_LOG_BYTES]
        problems.append(f"only the first {MAX_LOG_BYTES // 2**20} MiB of the log were read")
    engine = detect_engine(text)
    if engine is None:
        raise GpuplanError(
            "this does not look like a vLLM, SGLang or TensorRT-LLM startup log"
            " (none of their memory lines found)"
        )
    lines = _lines(text)
    if len(lines) >= MAX_LINES:
        problems.append(f"only the first {MAX_LINES:,} non-blank lines of the log were read")
    figures = _figures(lines, PATTERNS[engine])
    args, args_source, unreadable = _args(lines, engine)
    v0 = False
    if engine == "vllm":
        v0 = _is_v0(lines, figures)
        sized = {"kv_cache_gib", "kv_cache_tokens", "kv_cache_tokens_limit"} & figures.keys()
        if not sized and not v0:
            problems.append(
                "the log ends before vLLM sized the KV cache (no 'Available KV cache memory'"
                " or 'GPU KV cache size' line): truncated, or the start failed earlier"
            )
    elif engine == "sglang":
        if "kv_cache_tokens" not in figures and "max_total_num_tokens" in figures:
            figures["kv_cache_tokens"] = figures["max_total_num_tokens"]
        if "kv_cache_tokens" not in figures:
            problems.append("no 'KV Cache is allocated' line: truncated or failed before")
    elif "kv_cache_tokens" not in figures:
        problems.append("no paged-KV-cache allocation line: truncated or failed before")
    if unreadable:
        problems.append(
            "the log's launch-arguments line could not be read (cut or malformed):"
            " the engine's defaults were assumed for what it would have said"
        )
    elif args_source is None:
        problems.append(
            "the log prints no launch arguments: the engine's defaults were assumed"
            " (a launch line may have set others)"
        )
    errors = tuple(
        label for needles, label in ERRORS if any(n in line for line in lines for n in needles)
    )
    version = _version(lines, engine)
    observed = _observed(lines, v0) if engine == "vllm" else {}
    return LogFigures(
        engine, version, args, figures, errors, tuple(problems), v0, args_source, observed
    )


def read_log(path: str | Path) -> LogFigures:
    """Read a log file (at most MAX_LOG_BYTES; encoding noise replaced) and parse it."""
    p = Path(path)
    shown = clean_text(str(p), 200)
    if not os.path.lexists(p):
        raise GpuplanError(f"no such log file: {shown}")
    with open_regular(p, shown) as fh:  # a FIFO or device is refused before it is opened
        try:
            data = fh.read(MAX_LOG_BYTES + 1)
        except OSError as err:
            raise GpuplanError(f"cannot read {shown}: {err.strerror}") from None
    return parse_log_bytes(data, shown)


def parse_log_bytes(data: bytes, name: str = "the log") -> LogFigures:
    """A log given as bytes (a file, stdin): bounded, NUL-free text, then `parse_log`."""
    cut = len(data) > MAX_LOG_BYTES
    data = data[:MAX_LOG_BYTES]
    if data.count(b"\x00") > len(data) // 100:
        raise GpuplanError(f"{name} is binary, not a log")
    text = data.decode("utf-8", errors="replace")
    if not text.strip():
        raise GpuplanError(f"{name} is empty")
    log = parse_log(text)
    if cut:
        note = f"only the first {MAX_LOG_BYTES // 2**20} MiB of the log were read"
        log = LogFigures(
            log.engine,
            log.version,
            log.args,
            log.figures,
            log.errors,
            (note, *log.problems),
            log.v0,
            log.args_source,
            log.observed,
        )
    return log
