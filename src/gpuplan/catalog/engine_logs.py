"""Read the memory figures an engine printed in its startup log.

Regular expressions over the lines documented in tests/data/engine_logs/README.md: vLLM V1
(gpu_worker.py / gpu_model_runner.py / kv_cache_utils.py, 0.19 era; older V0 lines are
recognised to say so), SGLang (model_runner.py, memory_pool.py, scheduler) and TensorRT-LLM
(`[MemUsageChange]`, "paged KV cache"). Figures are kept as printed (GiB = 2^30 bytes), with
the launch arguments vLLM prints as "non-default args: {...}".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

_NUM = r"(-?[\d.]+)"

VLLM_PATTERNS: dict[str, str] = {
    "weights_gib": r"Model loading took " + _NUM + r" ?Gi?B",
    "weights_gib_v0": r"Loading model weights took " + _NUM + r" ?Gi?B",
    "initial_free_gib": r"Initial free memory: " + _NUM + r" ?GiB",
    "utilization": r"Requested memory: " + _NUM + r" \(util\)",
    "requested_gib": r"Requested memory: [\d.]+ \(util\), " + _NUM + r" ?GiB",
    "total_non_kv_gib": r"Total non KV cache memory: " + _NUM + r" ?GiB",
    "activation_peak_gib": r"torch peak memory increase: " + _NUM + r" ?GiB",
    "non_torch_gib": r"non-torch forward increase memory: " + _NUM + r" ?GiB",
    "kv_cache_gib": r"Available KV cache memory: " + _NUM + r" ?GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "concurrency_len": r"Maximum concurrency for ([\d,]+) tokens per request",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: " + _NUM + r"x",
    "cudagraph_gib": r"Graph capturing finished in [\d.]+ secs?, took " + _NUM + r" ?GiB",
    "total_gib": r"Free memory on device \([\d.]+/" + _NUM + r" ?GiB\)",
    "gpu_blocks_v0": r"GPU blocks: (\d+)",
}
SGLANG_PATTERNS: dict[str, str] = {
    "kv_cache_tokens": r"KV Cache is allocated\. #tokens: (\d+)",
    "k_size_gb": r"KV Cache is allocated\. #tokens: \d+, K size: " + _NUM + r" GB",
    "v_size_gb": r"V size: " + _NUM + r" GB",
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "mem_fraction_static": r"mem_fraction_static=" + _NUM,
    "weights_gb": r"Load weight end\..*?mem usage=" + _NUM + r" GB",
    "avail_after_load_gb": r"Load weight end\..*?avail mem=" + _NUM + r" GB",
}
TRTLLM_PATTERNS: dict[str, str] = {
    "kv_cache_gib": r"Allocated " + _NUM + r" GiB for max tokens in paged KV cache",
    "kv_cache_tokens": r"for max tokens in paged KV cache \((\d+)\)",
    "kv_cache_tokens_old": r"Using (\d+) tokens in paged KV cache",
    "free_gpu_memory_fraction": r"fraction is set " + _NUM,
}
ERRORS: tuple[tuple[str, str], ...] = (
    (r"No available memory for the cache blocks", "no memory left for the KV cache"),
    (r"torch\.OutOfMemoryError|CUDA out of memory", "CUDA out of memory"),
    (
        r"larger than the maximum number of tokens that can be stored in KV cache"
        r"|larger than the KV cache token capacity|KV cache is needed, which is larger than",
        "KV cache too small for max_model_len",
    ),
    (r"Engine core initialization failed|EngineCore failed to start", "engine failed to start"),
)


@dataclass(frozen=True)
class LogFigures:
    """What one startup log says: the engine, its version, its launch arguments, its figures."""

    engine: str
    version: str | None
    args: dict[str, Any]
    figures: dict[str, float]  # as printed; *_gib in GiB, tokens as counts
    errors: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # why the log cannot be fully compared
    v0: bool = False

    @property
    def model(self) -> str | None:
        m = self.args.get("model") or self.args.get("model_tag") or self.args.get("model_path")
        return str(m) if m else None

    @property
    def failed(self) -> bool:
        return bool(self.errors) or self.figures.get("kv_cache_gib", 1.0) <= 0


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text)
    return m.group(1) if m else None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def detect_engine(text: str) -> str | None:
    if re.search(
        r"vllm|vLLM|gpu_worker\.py|gpu_model_runner\.py|kv_cache_utils\.py|v1/worker"
        r"|Loading model weights took|Model loading took|GPU blocks:|GPU KV cache size"
        r"|Available KV cache memory|Maximum concurrency for",
        text,
    ):
        return "vllm"
    if re.search(r"sglang|KV Cache is allocated|max_total_num_tokens", text):
        return "sglang"
    if re.search(r"TensorRT-LLM|tensorrt_llm|paged KV cache|\[TRT-LLM\]", text):
        return "trtllm"
    return None


def _args(text: str) -> dict[str, Any]:
    """vLLM's "non-default args: {...}" line (a Python dict literal), or SGLang's ServerArgs."""
    m = re.search(r"non-default args: (\{.*\})", text)
    if m:
        try:
            value = ast.literal_eval(m.group(1))
            if isinstance(value, dict):
                return value
        except (ValueError, SyntaxError):
            pass
    m = re.search(r"server_args=ServerArgs\((.*)\)", text)
    if m:
        out: dict[str, Any] = {}
        for key, raw in re.findall(r"(\w+)=('[^']*'|[^,]+)", m.group(1)):
            try:
                out[key] = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                out[key] = raw
        return out
    return {}


def _version(text: str, engine: str) -> str | None:
    patterns = {
        "vllm": (
            r"vLLM API server version (\S+)",
            r"V1 LLM engine \((v[\w.+-]+)\)",
            r"vllm[ =-]v?(\d+\.\d+\.\d+\S*)",
        ),
        "sglang": (r"sglang[ =-]v?(\d+\.\d+\.\d+\S*)", r"SGLang v?(\d+\.\d+\S*)"),
        "trtllm": (r"TensorRT-LLM version: (\S+)", r"TensorRT-LLM v?(\d+\.\d+\S*)"),
    }[engine]
    for p in patterns:
        v = _first(p, text)
        if v:
            return v.rstrip(")").lstrip("v")
    return None


def parse_log(text: str) -> LogFigures:
    """Extract an engine's startup figures from log text. Never raises on odd logs: what could
    not be read is listed in `problems`."""
    engine = detect_engine(text)
    if engine is None:
        raise GpuplanError(
            "this does not look like a vLLM, SGLang or TensorRT-LLM startup log"
            " (none of their memory lines found)"
        )
    patterns = {"vllm": VLLM_PATTERNS, "sglang": SGLANG_PATTERNS, "trtllm": TRTLLM_PATTERNS}[engine]
    figures: dict[str, float] = {}
    for key, pattern in patterns.items():
        raw = _first(pattern, text)
        if raw is not None:
            try:
                figures[key] = _number(raw)
            except ValueError:
                continue
    problems: list[str] = []
    v0 = False
    if engine == "vllm":
        if "weights_gib" not in figures and "weights_gib_v0" in figures:
            figures["weights_gib"] = figures["weights_gib_v0"]
        figures.pop("weights_gib_v0", None)
        v0 = "gpu_blocks_v0" in figures and "kv_cache_tokens" not in figures
        if v0:
            problems.append(
                "a vLLM V0 log ('# GPU blocks'): V0 sized the KV cache differently;"
                " gpuplan models V1 (0.19), so the KV figures are not comparable"
            )
        if "kv_cache_gib" not in figures and "kv_cache_tokens" not in figures and not v0:
            problems.append(
                "the log ends before vLLM sized the KV cache (no 'Available KV cache memory'"
                " or 'GPU KV cache size' line): truncated, or the start failed earlier"
            )
    elif engine == "sglang":
        if "kv_cache_tokens" not in figures and "max_total_num_tokens" in figures:
            figures["kv_cache_tokens"] = figures["max_total_num_tokens"]
        if "kv_cache_tokens" not in figures:
            problems.append("no 'KV Cache is allocated' line: truncated or failed before")
    else:
        if "kv_cache_tokens" not in figures and "kv_cache_tokens_old" in figures:
            figures["kv_cache_tokens"] = figures["kv_cache_tokens_old"]
        figures.pop("kv_cache_tokens_old", None)
        if "kv_cache_tokens" not in figures:
            problems.append("no paged-KV-cache allocation line: truncated or failed before")
    errors = tuple(label for pattern, label in ERRORS if re.search(pattern, text))
    version = _version(text, engine)
    return LogFigures(engine, version, _args(text), figures, errors, tuple(problems), v0)


def read_log(path: str | Path) -> LogFigures:
    """Read a log file (any encoding noise replaced) and parse it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise GpuplanError(f"no such log file: {p}") from None
    except IsADirectoryError:
        raise GpuplanError(f"{p} is a directory, not a log file") from None
    except OSError as err:
        raise GpuplanError(f"cannot read {p}: {err.strerror}") from None
    if not text.strip():
        raise GpuplanError(f"{p} is empty")
    return parse_log(text)


@dataclass(frozen=True)
class LogCase:
    """One case of tests/data/engine_logs/*.json: the recorded figures and the log excerpt."""

    case_id: str
    record: dict[str, Any] = field(repr=False)

    @property
    def text(self) -> str:
        return str(self.record.get("verbatim_excerpt") or "")
