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

from gpuplan.api import requests
from gpuplan.api.common import MAX_TOKENS
from gpuplan.api.requests import Knob
from gpuplan.engine.frozen import MISSING


class Opt:
    """One command-line option: `kind` is str, int, float, or bool for a flag; `reader` turns
    its text into its value (raising ValueError) after click's own type check. `multiple`: the
    option repeats and its value is the tuple of what was given; `off`: a flag's negative
    spellings (`--no-compile`), its value then True, False or None (not given); `unset`: a flag
    whose value is None, not False, when not given."""

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
        "multiple",
        "off",
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
        multiple: bool = False,
        off: tuple[str, ...] = (),
        unset: bool = False,
    ) -> None:
        self.names = names
        self.dest = dest
        self.kind = kind
        self.multiple = multiple
        self.off = off
        if kind is bool:
            default = None if (off or unset) else False
        self.default = () if multiple else default
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


def read_units(text: str) -> str:
    """--units: GB or GiB, in any case."""
    for choice in UNITS.choices:
        if text.lower() == choice.lower():
            return choice
    raise BadValue(f"{text!r} is not one of 'GB', 'GiB'", "--units")


def opt(knob: Knob, *, reader: Any = MISSING, **cli: Any) -> Opt:
    """The CLI option of a request's knob (gpuplan.api.requests): its spellings, destination
    (the knob's name), closed set, default and help. A token count is read as text
    (`read_count`, bounded by the knob); `reader` replaces the generated reader (None: the
    command reads the text itself, as serve's --context, which engines also take as auto)."""
    if reader is MISSING:
        reader = (
            count_reader(knob.cli[0], int(knob.le or MAX_TOKENS)) if knob.kind == "tokens" else None
        )
    kind = cli.pop("kind", str if knob.kind == "tokens" else _CLI_KIND.get(knob.kind, str))
    default = knob.default
    if kind is str and reader is not None and default is not None:
        default = str(default)  # read by its reader, as a value typed
    return Opt(
        knob.cli,
        knob.name,
        kind,
        default,
        knob.help,
        show_default=default not in (None, ()) and kind is not bool,
        choices=knob.choices,
        reader=reader,
        multiple=knob.kind == "names",
        off=knob.off,
        unset=kind is bool and knob.default is None,
        **cli,
    )


_CLI_KIND: dict[str, type] = {"count": int, "number": float, "flag": bool}


def opts(knobs: tuple[Knob, ...], **special: Opt) -> tuple[Opt, ...]:
    """The CLI options of a request's knobs that have CLI spellings, in its order; `special`
    replaces the generated option of the knob named."""
    return tuple(special.get(k.name) or opt(k) for k in knobs if k.cli)


# CLI-only display options, shared by several commands
UNITS = Opt(
    ("--units",),
    "units",
    default="GB",
    show_default=True,
    choices=("GB", "GiB"),
    reader=read_units,
    help="Display units: GB (10^9, as in the lesson) or GiB (2^30).",
)
JSON = Opt(("--json",), "as_json", bool, help="Print the JSON schema of docs/json.md.")
EXPLAIN = Opt(
    ("--explain",),
    "explain",
    bool,
    help="Show each line's arithmetic with the numbers substituted.",
)
GPUS = opt(requests.GPUS)
HEADROOM = opt(requests.HEADROOM)
GPU_MEMORY = opt(requests.GPU_MEMORY)


def read_rate(value: Any) -> float | None:
    """--request-rate: requests per second, above 0 (vllm bench serve's Poisson mode); click and
    the fast path hand it the float their type check made."""
    if value is not None and not 0 < value < float("inf"):
        raise BadValue(f"--request-rate must be above 0 requests/s, got {value}", "--request-rate")
    return value


# `gpuplan serve`'s own bill (no engine): what the fast path answers; --context stays None when
# not given (serve_ask: 4096, or prompt + output with --speed)
SPEED = opt(requests.TIME)
_SPEED = requests.by_name(requests.SPEED)
SERVE_OWN_BILL = (
    *opts(
        requests.SERVE,
        context=opt(requests.by_name(requests.SERVE)["context"], reader=None),
    ),
    UNITS,
    JSON,
    EXPLAIN,
    SPEED,
    *opts(requests.SPEED, request_rate=opt(_SPEED["request_rate"], reader=read_rate)),
)
DEFAULT_CONTEXT = requests.DEFAULT_CONTEXT


def read_top(text: str) -> int:
    """--top: how many options to show, within the knob's bounds (1 to 1000)."""
    try:
        value = int(text)
    except ValueError:
        raise BadValue(f"{text!r} is not a valid integer.", "--top") from None
    low, high = int(_PLAN["top"].ge or 1), int(_PLAN["top"].le or 1000)
    if not low <= value <= high:
        raise BadValue(f"{value} is not in the range {low}<=x<={high}.", "--top")
    return value


_PLAN = requests.by_name(requests.PLAN)
MATRIX = Opt(
    ("--matrix",),
    "matrix",
    bool,
    help="Budget table: context × users (serving) or memory vs GPUs per ZeRO stage (--train).",
)
CSV = Opt(("--csv",), "as_csv", bool, help="With --matrix or a ranking: CSV output.")
TRAIN_FLAG = Opt(
    ("--train",),
    "train",
    bool,
    help="Rank training layouts (ZeRO/FSDP, tp, pp, micro-batch, recompute).",
)
_PLAN_OPTS = {
    o.dest: o
    for o in opts(requests.PLAN, top=opt(_PLAN["top"], reader=read_top, metavar="1-1000", kind=str))
}
_MODES = {"max_gpus": (MATRIX, CSV), "top": (TRAIN_FLAG,)}  # the plan command's own modes

# `gpuplan plan`: every option, in --help's order (cli/plan.py builds its click command from it)
PLAN_OPTIONS = (
    *(o for dest, row in _PLAN_OPTS.items() for o in (row, *_MODES.get(dest, ()))),
    UNITS,
    JSON,
)


# `gpuplan train`: every option, in --help's order (cli/train.py builds its click command from it)
TRAIN_OPTIONS = (
    *opts(requests.TRAIN[:2]),
    Opt(
        ("--from",),
        "config",
        help="A framework config to read: torchtitan TOML, torchtune YAML, Megatron-LM flags or"
        " model_config.yaml, DeepSpeed JSON, TrainingArguments JSON.",
    ),
    Opt(
        ("--format",),
        "config_format",
        choices=("torchtitan", "torchtune", "megatron", "deepspeed", "hf-trainer"),
        help="The --from config's framework. [default: from its name and content]",
    ),
    Opt(
        ("--override",),
        "overrides",
        multiple=True,
        help="torchtune key=value override of the --from config (repeatable).",
    ),
    *opts(requests.TRAIN[2:]),
    UNITS,
    JSON,
    Opt(
        ("--explain",),
        "explain",
        bool,
        help="Show each line's arithmetic and every phase of the step.",
    ),
)
# the train options that are not arguments of `gpuplan.api.train` (the command reads them)
TRAIN_OWN = ("gpus", "config", "config_format", "overrides", "units", "as_json", "explain")


def train_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """`gpuplan.api.train`'s keyword arguments from the train options' values."""
    kw = {k: v for k, v in values.items() if k not in TRAIN_OWN}
    stage = kw.pop("stage")
    kw["stage"] = int(stage) if stage and stage.lstrip("-").isdigit() else stage
    return kw


def train_data(model: str, values: dict[str, Any]) -> dict[str, Any]:
    """`gpuplan.train/1` for MODEL from the train options' values (no --from config), with the
    ways out (`fixes`) when it does not fit."""
    from gpuplan.api import train

    ask = {"model": model, "gpus": read_gpus(values["gpus"]), **train_kwargs(values)}
    plan = train(**ask)
    data = plan.to_dict(values["units"])
    data["fixes"] = []
    if not plan.fits:  # the three answers (fewer bytes, bigger GPU, more GPUs)
        from gpuplan.api.train_answers import training_answers

        data["fixes"] = training_answers(ask, plan)
    return data


def read_gpus(text: str | None) -> int | str | None:
    """--gpus as the API takes it: None, "auto", or a count."""
    if text is None or text == "auto":
        return text
    if text.isdigit():
        return int(text)
    raise BadValue(f"--gpus takes a number or 'auto', got {text!r}")


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
        "context": _serve_context(values),
        "users": values["users"],
        "headroom": values["headroom"],
        "gpu_memory": values["gpu_memory"],
        "workspace": values["workspace"],
        "cuda_context": values["cuda_context"],
        "revision": values["revision"],
    }


def _serve_context(values: dict[str, Any]) -> int:
    """--context (read as a token count); without it, with --speed the request's prompt +
    output, else the lesson's 4096 (requests.serve_context)."""
    speed = speed_ask(values) or {}
    if values["context"] is not None:
        return read_context(values["context"])
    return int(requests.serve_context(None, speed.get("prompt"), speed.get("output")))


SPEED_ONLY = (
    ("prompt", "--prompt"),
    ("output", "--output"),
    ("request_rate", "--request-rate"),
    ("eager", "--eager"),
    ("calibration", "--calibration"),
)


def speed_ask(values: dict[str, Any]) -> dict[str, Any] | None:
    """`layout_speed`'s load and knobs (api/serving_speed.py) with --speed, else None; a speed
    option without --speed is refused (BadValue)."""
    if not values.get("speed"):
        for dest, flag in SPEED_ONLY:
            if values.get(dest):
                raise BadValue(f"{flag} goes with --speed", flag)
        return None
    context = (
        read_context(values["context"])
        if values["context"] is not None
        else requests.serve_context(None, values["prompt"], values["output"])
    )
    prompt, output = requests.speed_tokens(context, values["prompt"], values["output"])
    return {
        "users": values["users"],
        "prompt": prompt,
        "output": output,
        "request_rate": values["request_rate"],
        "eager": bool(values["eager"]),
        "calibration": values["calibration"],
    }


def serve_data(
    ask: dict[str, Any], units: str, speed: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`gpuplan.serve/1` for the lesson's bill, with the ways out (`fixes`) when it does not fit:
    fewer bytes, a bigger GPU, more GPUs; with `speed` (speed_ask), the layout's `speed`."""
    from gpuplan.api.serving import serve

    generic = serve(**ask)
    data = generic.to_dict(units)
    data["fixes"] = []
    if not generic.fits:
        from gpuplan.api.answers import serving_answers

        data["fixes"] = serving_answers(ask, generic)
    if speed is not None:
        from gpuplan.api.serving_speed import layout_speed, refuse_unfit

        refuse_unfit(generic.fits, generic.bill.setup)
        data["speed"] = layout_speed(generic.bill.setup, **speed)
    return data
