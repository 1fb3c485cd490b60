"""Options as data: each knob's spellings, destination, type, default, help and reader, defined
once; and the request and answer of serve's own bill built from their values.

click reads this table through `cli/options.py` (`click_option`), and the fast path
(`cli/fast.py`) reads it directly to answer `serve MODEL … --json` without importing click
(cold start, issue 14); both build serve's request with `serve_ask` and its answer with
`serve_data`. A reader turns an option's text into its value or raises BadValue with the
message both paths show. Nothing here imports click.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Opt:
    """One command-line option: `kind` is str, int, float, or bool for a flag; `reader` turns
    its text into its value (raising ValueError) after click's own type check."""

    __slots__ = (
        "names",
        "dest",
        "kind",
        "default",
        "help",
        "show_default",
        "choices",
        "metavar",
        "reader",
    )

    def __init__(
        self,
        names: tuple[str, ...],
        dest: str,
        kind: type = str,
        default: Any = None,
        help: str = "",
        show_default: bool = False,
        choices: tuple[str, ...] = (),
        metavar: str | None = None,
        reader: Callable[[str], Any] | None = None,
    ) -> None:
        self.names = names
        self.dest = dest
        self.kind = kind
        self.default = False if kind is bool else default
        self.help = help
        self.show_default = show_default
        self.choices = choices
        self.metavar = metavar
        self.reader = reader


class BadValue(ValueError):
    """An option's text that its reader cannot take; `hint` names the option for click."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def read_units(text: str) -> str:
    """--units: GB or GiB, in any case."""
    for choice in UNITS.choices:
        if text.lower() == choice.lower():
            return choice
    raise BadValue(f"{text!r} is not one of 'GB', 'GiB'", "--units")


# shared by several commands
UNITS = Opt(
    ("--units",),
    "units",
    default="GB",
    show_default=True,
    choices=("GB", "GiB"),
    reader=read_units,
    help="Display units: GB (10^9, as in the lesson) or GiB (2^30).",
)
GPUS = Opt(("--gpus",), "gpus", help="GPU count or 'auto' (fewest that fit). [default: auto]")
HEADROOM = Opt(
    ("--headroom",),
    "headroom",
    float,
    0.9,
    show_default=True,
    help="Fraction of GPU memory the plan may use.",
)
GPU_MEMORY = Opt(
    ("--gpu-memory",),
    "gpu_memory",
    help="The GPU memory a plan is measured against: a size (80GB, 79.2GiB), or marketed /"
    " driver for the catalog's round or driver-reported figure (default: driver).",
)
JSON = Opt(("--json",), "as_json", bool, help="Print the JSON schema of docs/json.md.")

# `gpuplan serve`'s own bill (no engine): what the fast path answers
REVISION = Opt(("--revision",), "revision", help="Branch, tag or commit of a Hugging Face model.")
GPU = Opt(
    ("--gpu",),
    "gpu",
    default="h100",
    show_default=True,
    help="GPU name or alias (see `gpuplan gpus`).",
)
TP = Opt(("--tp", "--tensor-parallel-size"), "tp", int, help="Tensor-parallel degree.")
PP = Opt(("--pp", "--pipeline-parallel-size"), "pp", int, help="Pipeline-parallel degree.")
DTYPE = Opt(
    ("--dtype", "--quantization"),
    "dtype",
    help="Weight format: bf16, fp16, fp8, int4, awq, gptq, nf4, mxfp4... [default: the checkpoint's]",
)
KV_DTYPE = Opt(
    ("--kv-dtype", "--kv-cache-dtype"),
    "kv_dtype",
    help="KV-cache dtype: bf16, fp16, fp8, int8, fp32. Only this option sets it: --dtype fp8/int8/int4"
    " quantises the weights, never the KV cache. [default: the model's compute dtype, 16-bit]",
)
CONTEXT = Opt(
    ("--context", "--max-model-len"),
    "context",
    help="Tokens per sequence, e.g. 8192 or 32k; engines also take auto / -1 (the longest that"
    " fits). [default: 4096; engines: the model's]",
)
USERS = Opt(("--users",), "users", int, 1, show_default=True, help="Concurrent sequences.")
WORKSPACE = Opt(("--workspace",), "workspace", help="Workspace allowance per GPU [default: 1.5GB].")
CUDA_CONTEXT = Opt(
    ("--cuda-context",), "cuda_context", help="CUDA context allowance per GPU [default: 1GB]."
)
EXPLAIN = Opt(
    ("--explain",),
    "explain",
    bool,
    help="Show each line's arithmetic with the numbers substituted.",
)

SERVE_OWN_BILL = (
    REVISION,
    GPU,
    GPUS,
    TP,
    PP,
    DTYPE,
    KV_DTYPE,
    CONTEXT,
    USERS,
    HEADROOM,
    GPU_MEMORY,
    WORKSPACE,
    CUDA_CONTEXT,
    UNITS,
    JSON,
    EXPLAIN,
)

DEFAULT_CONTEXT = 4096  # tokens per sequence of the lesson's bill when --context is not given


# `gpuplan plan`'s token counts, read as serve's --context is (read_count)
PLAN_CONTEXT = Opt(
    ("--context",),
    "context",
    default="4096",
    show_default=True,
    reader=lambda text: read_count(text, "--context"),
    help="Tokens per sequence, e.g. 4096 or 32k (k = 1,000, K = 1,024, as vLLM reads them).",
)
PLAN_PROMPT = Opt(
    ("--prompt",),
    "prompt_tokens",
    reader=lambda text: None if text is None else read_count(text, "--prompt"),
    help="Prompt tokens per request for the speed model, e.g. 3k. [default: 3/4 of --context]",
)
PLAN_OUTPUT = Opt(
    ("--output",),
    "output_tokens",
    reader=lambda text: None if text is None else read_count(text, "--output"),
    help="Output tokens per request. [default: the rest of --context]",
)
SEQ = Opt(
    ("--seq",),
    "seq",
    reader=lambda text: None if text is None else read_count(text, "--seq"),
    help="--train: sequence length, e.g. 4096 or 8K. [default: 4096]",
)
GLOBAL_BATCH_TOKENS = Opt(
    ("--global-batch-tokens",),
    "global_batch_tokens",
    reader=lambda text: (
        None if text is None else read_count(text, "--global-batch-tokens", MAX_STEP_TOKENS)
    ),
    help="--train: tokens per optimizer step, e.g. 4M or 16M (M = 2^20). [default: gpus × seq × 8]",
)
TPOT = Opt(
    ("--tpot",),
    "tpot",
    help="Time per output token target, with its unit: 33ms or 0.05s (a bare number is refused).",
)
TTFT = Opt(
    ("--ttft",),
    "ttft",
    help="Time to first token target, with its unit: 500ms or 2s (a bare number is refused).",
)


def read_gpus(text: str | None) -> int | str | None:
    """--gpus as the API takes it: None, "auto", or a count."""
    if text is None or text == "auto":
        return text
    if text.isdigit():
        return int(text)
    raise BadValue(f"--gpus takes a number or 'auto', got {text!r}")


MAX_TOKENS = 10**9  # tokens per sequence, prompt or output: the API's bound (api/common.py)
MAX_STEP_TOKENS = 10**16  # tokens per optimizer step: MAX_TOKENS × the API's most sequences


def read_count(text: str, flag: str, limit: int = MAX_TOKENS, hint: str = "") -> int:
    """One grammar for every token count a command takes (--context, --seq, --prompt, --output,
    --global-batch-tokens): a whole number, or with vLLM's suffixes (human_readable_int: 32k =
    32,000, 32K = 32,768, 16M = 16,777,216); from 1 to `limit`, and a value out of range is
    echoed as typed with its reading beside it."""
    from gpuplan.units import human_int, shown

    try:
        value = human_int(text)
    except ValueError:
        raise BadValue(f"{shown(text)} is not a token count{hint}", flag) from None
    if not 1 <= value <= limit:
        reading = f" ({value:,})" if str(value) != text.strip() else ""
        raise BadValue(
            f"{flag.lstrip('-')} must be a token count from 1 to {limit:,}, got {shown(text)}{reading}",
            flag,
        )
    return value


def count_reader(flag: str, limit: int = MAX_TOKENS) -> Callable[[str | None], int | None]:
    """The reader of one token-count option (None stays None: the option's default applies)."""

    def read(text: str | None) -> int | None:
        return None if text is None else read_count(text, flag, limit)

    return read


def read_context(text: str | None) -> int:
    """--context for the lesson's bill: a token count (k/K suffixes as vLLM reads them)."""
    if text is None:
        return DEFAULT_CONTEXT
    return read_count(text, "--context", hint=" (auto needs --engine)")


def serve_ask(model: str, values: dict[str, Any]) -> dict[str, Any]:
    """The request `gpuplan.api.serving.serve` takes, from the options' values by destination
    (raises BadValue on a bad --gpus or --context)."""
    return {
        "model": model,
        "gpu": values["gpu"],
        "gpus": read_gpus(values["gpus"]),
        "tp": values["tp"],
        "pp": values["pp"],
        "dtype": values["dtype"],
        "kv_dtype": values["kv_dtype"],
        "context": read_context(values["context"]),
        "users": values["users"],
        "headroom": values["headroom"],
        "gpu_memory": values["gpu_memory"],
        "workspace": values["workspace"],
        "cuda_context": values["cuda_context"],
        "revision": values["revision"],
    }


def serve_data(ask: dict[str, Any], units: str) -> dict[str, Any]:
    """`gpuplan.serve/1` for the lesson's bill, with the ways out (`fixes`) when it does not fit:
    fewer bytes, a bigger GPU, more GPUs."""
    from gpuplan.api.serving import serve

    generic = serve(**ask)
    data = generic.to_dict(units)
    data["fixes"] = []
    if not generic.fits:
        from gpuplan.api.planning import serving_answers

        data["fixes"] = serving_answers(ask, generic)
    return data
