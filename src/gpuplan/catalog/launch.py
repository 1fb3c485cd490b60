"""Read an engine launch line (`vllm serve …`, `python -m sglang.launch_server …`, `trtllm-serve …`)
into the engine's own argument names, with the engine's defaults left as None.

The line is split with `shlex` (quotes, backslash-newlines) and parsed with `argparse`
(`parse_known_args`), declaring only the flags that move memory; every other flag is kept in
`ignored` and reported, never an error. Flag spellings follow vLLM's `EngineArgs`
(engine/arg_utils.py, 0.19), SGLang's `ServerArgs` (server_args.py) and `trtllm-serve`'s click
options / `LlmArgs` (TensorRT-LLM 0.2x).
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import GpuplanError


@dataclass(frozen=True)
class LaunchLine:
    """A parsed launch line: the engine, the model argument and the memory-relevant flags."""

    engine: str  # vllm | sglang | trtllm
    model: str
    args: dict[str, Any]  # engine argument names (underscored), only those given
    ignored: tuple[str, ...] = field(default=())  # flags not modelled, as written


def _bool_flag(p: argparse.ArgumentParser, *names: str, dest: str) -> None:
    p.add_argument(*names, dest=dest, action="store_const", const=True, default=None)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and sys.exit
        raise GpuplanError(f"launch line: {message}")


def _vllm_parser() -> _Parser:
    p = _Parser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    for flag, typ in (
        ("--tensor-parallel-size", int),
        ("--pipeline-parallel-size", int),
        ("--data-parallel-size", int),
        ("--max-model-len", str),
        ("--gpu-memory-utilization", float),
        ("--max-num-seqs", int),
        ("--max-num-batched-tokens", int),
        ("--block-size", int),
        ("--dtype", str),
        ("--kv-cache-dtype", str),
        ("--quantization", str),
        ("--kv-cache-memory-bytes", str),
        ("--num-gpu-blocks-override", int),
    ):
        p.add_argument(flag, type=typ)
    p.add_argument("-tp", dest="tensor_parallel_size", type=int)
    p.add_argument("-pp", dest="pipeline_parallel_size", type=int)
    p.add_argument("-dp", dest="data_parallel_size", type=int)
    p.add_argument("-q", dest="quantization")
    p.add_argument("--kv-cache-memory", dest="kv_cache_memory_bytes")
    _bool_flag(p, "--enforce-eager", dest="enforce_eager")
    _bool_flag(p, "--disable-hybrid-kv-cache-manager", dest="disable_hybrid_kv_cache_manager")
    return p


def _sglang_parser() -> _Parser:
    p = _Parser(prog="sglang.launch_server", add_help=False, allow_abbrev=False)
    p.add_argument("--model-path", "--model", dest="model_path")
    for flag, dest, typ in (
        ("--tp-size", "tp_size", int),
        ("--tensor-parallel-size", "tp_size", int),
        ("--tp", "tp_size", int),
        ("--pp-size", "pp_size", int),
        ("--pipeline-parallel-size", "pp_size", int),
        ("--dp-size", "dp_size", int),
        ("--dp", "dp_size", int),
        ("--mem-fraction-static", "mem_fraction_static", float),
        ("--context-length", "context_length", int),
        ("--max-total-tokens", "max_total_tokens", int),
        ("--max-running-requests", "max_running_requests", int),
        ("--chunked-prefill-size", "chunked_prefill_size", int),
        ("--cuda-graph-max-bs", "cuda_graph_max_bs", int),
        ("--page-size", "page_size", int),
        ("--dtype", "dtype", str),
        ("--kv-cache-dtype", "kv_cache_dtype", str),
        ("--quantization", "quantization", str),
    ):
        p.add_argument(flag, dest=dest, type=typ)
    _bool_flag(p, "--disable-cuda-graph", dest="disable_cuda_graph")
    return p


def _trtllm_parser() -> _Parser:
    p = _Parser(prog="trtllm-serve", add_help=False, allow_abbrev=False)
    p.add_argument("model", nargs="?")
    for flag, dest, typ in (
        ("--tp_size", "tp_size", int),
        ("--tp-size", "tp_size", int),
        ("--pp_size", "pp_size", int),
        ("--pp-size", "pp_size", int),
        ("--kv_cache_free_gpu_memory_fraction", "free_gpu_memory_fraction", float),
        ("--kv-cache-free-gpu-memory-fraction", "free_gpu_memory_fraction", float),
        ("--max_seq_len", "max_seq_len", int),
        ("--max-seq-len", "max_seq_len", int),
        ("--max_num_tokens", "max_num_tokens", int),
        ("--max-num-tokens", "max_num_tokens", int),
        ("--max_batch_size", "max_batch_size", int),
        ("--max-batch-size", "max_batch_size", int),
        ("--tokens_per_block", "tokens_per_block", int),
    ):
        p.add_argument(flag, dest=dest, type=typ)
    return p


def _engine_and_rest(tokens: list[str]) -> tuple[str, list[str]]:
    """Find the engine entry point in the tokens; return the engine and what follows it."""
    # drop leading environment assignments (CUDA_VISIBLE_DEVICES=0,1 vllm serve …)
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens = tokens[1:]
    for i, tok in enumerate(tokens):
        base = tok.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            return "vllm", tokens[i + 2 :]
        if tok == "-m" and i + 1 < len(tokens):
            mod = tokens[i + 1]
            if mod in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
                return "vllm", tokens[i + 2 :]
            if mod in ("sglang.launch_server", "sglang.srt.server"):
                return "sglang", tokens[i + 2 :]
        if base == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            return "sglang", tokens[i + 2 :]
        if base in ("llama-server", "llama-server.exe"):
            return "llamacpp", tokens[i + 1 :]
        if base == "trtllm-serve":
            rest = tokens[i + 1 :]
            if rest and rest[0] == "serve":
                rest = rest[1:]
            return "trtllm", rest
    raise GpuplanError(
        "launch line: no engine found; expected `vllm serve MODEL …`,"
        " `python -m sglang.launch_server --model-path MODEL …`, `trtllm-serve MODEL …`"
        " or `llama-server -m MODEL.gguf …`"
    )


def parse_launch(line: str) -> LaunchLine:
    """Parse one launch line; unknown flags are ignored (listed), bad values raise GpuplanError."""
    if not line or not line.strip():
        raise GpuplanError("launch line is empty")
    try:
        tokens = shlex.split(line.replace("\\\n", " "))
    except ValueError as err:
        raise GpuplanError(f"launch line: cannot split it ({err})") from None
    engine, rest = _engine_and_rest(tokens)
    parsers = {"vllm": _vllm_parser, "sglang": _sglang_parser, "trtllm": _trtllm_parser}
    if engine == "llamacpp":
        from gpuplan.engine.profiles.llamacpp import launch_parser

        parser = launch_parser()
    else:
        parser = parsers[engine]()
    known, unknown = parser.parse_known_args(rest)
    args = {k: v for k, v in vars(known).items() if v is not None}
    if engine == "vllm":
        model = args.pop("model", None) or args.pop("model_tag", None)
        args.pop("model_tag", None)
        if "max_model_len" in args:
            args["max_model_len"] = _vllm_length(args["max_model_len"])
    elif engine == "sglang":
        model = args.pop("model_path", None)
    elif engine == "llamacpp":
        model = args.pop("model", None)
    else:
        model = args.pop("model", None)
    if not model:
        raise GpuplanError(f"launch line: no model given to {engine}")
    ignored = tuple(t for t in unknown if t.startswith("-"))
    stray = [t for t in unknown if not t.startswith("-")]
    # a stray positional after an ignored flag is that flag's value; one before any flag is not
    if stray and (not unknown or not unknown[0].startswith("-")):
        raise GpuplanError(f"launch line: unexpected argument {stray[0]!r}")
    return LaunchLine(engine, str(model), args, ignored)


def _vllm_length(text: str) -> int | None:
    """--max-model-len takes a number with an optional k/m suffix (1k = 1000, 1K = 1024), or
    'auto' / -1 (fit the length to memory)."""
    t = str(text).strip()
    if t in ("auto", "-1"):
        return None
    mult = 1
    for suffix, m in (("k", 1000), ("K", 1024), ("m", 1_000_000), ("M", 2**20)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        value = float(t) * mult
    except ValueError:
        raise GpuplanError(f"launch line: --max-model-len {text!r} is not a length") from None
    if value < 1 or value != int(value):
        raise GpuplanError(f"launch line: --max-model-len {text!r} is not a positive length")
    return int(value)
