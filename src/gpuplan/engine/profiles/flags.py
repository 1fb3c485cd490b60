"""An engine's flag table: its own spellings, value types, defaults and what each does to memory.

Every engine adapter carries one (`flags.toml` beside it). The table reads a launch line's
tokens into the engine's own argument names (`tensor_parallel_size`, `mem_fraction_static`) and
writes them back (`emit`), so a configuration survives a round trip through its command line.

Value kinds (how the engine itself parses them):

    int      plain integer                     float   plain number
    count    integer with k/m/g/t (×1000ⁿ, decimals allowed) or K/M/G/T (×1024ⁿ) suffix,
             vLLM's utils/argparse_utils.py::human_readable_int ("16k" = 16,000)
    size     bytes, same suffixes (vLLM --kv-cache-memory-bytes "4G" = 4 × 2^30)
    length   a count, or "auto" / -1 (the engine fits the length to memory) → "auto"
    bool     a switch; `negation` spells the off form (--no-enable-prefix-caching)
    str      text; `choices` limits it          json    a JSON object (--speculative-config)
    ints     one or more integers (--cudagraph-capture-sizes 1 2 4)
    words    one or more words (--lora-modules a=path b=path)
    config   a file of more flags (vLLM --config serve.yaml), never opened by the table itself

Effects: "modelled" (gpuplan's bill uses it), "unmodelled" (it changes memory, gpuplan does not
follow it: the output says so), "none" (no effect on memory: ports, names, logging). A flag the
table does not know is reported as unrecognised, which counts as unmodelled.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuplan.engine.frozen import field, record
from gpuplan.errors import GpuplanError
from gpuplan.units import MAX_INT, human_int

KINDS = (
    "int",
    "float",
    "count",
    "size",
    "length",
    "bool",
    "str",
    "json",
    "ints",
    "words",
    "config",
)
EFFECTS = ("modelled", "unmodelled", "none")
MAX_TOKENS = 4096  # tokens one launch line may hold
MAX_VALUE_CHARS = 10_000  # one flag value (a JSON config) may hold


@record
class Flag:
    """One engine argument: its name (underscored), its spellings, kind, default and effect."""

    name: str
    spellings: tuple[str, ...]
    kind: str = "str"
    default: Any = None  # the engine's default; None where the engine computes it
    effect: str = "modelled"
    negation: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False  # the value must exceed `minimum` (a fraction > 0)
    help: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"flag {self.name}: unknown kind {self.kind!r}")
        if self.effect not in EFFECTS:
            raise ValueError(f"flag {self.name}: unknown effect {self.effect!r}")

    @property
    def spelling(self) -> str:
        """The spelling the launch builder writes (the first, long form)."""
        return self.spellings[0]

    def convert(self, raw: str) -> Any:
        """The value of `raw` (as typed on a command line), or a one-line GpuplanError."""
        if len(raw) > MAX_VALUE_CHARS:
            raise GpuplanError(f"launch line: {self.spelling} value is too long")
        try:
            return self._check(self._convert(raw))
        except (ValueError, TypeError, OverflowError) as err:
            raise GpuplanError(f"launch line: {self.spelling} {_short(raw)}: {err}") from None

    def _convert(self, raw: str) -> Any:
        k = self.kind
        if k == "int":
            if not re.fullmatch(r"\s*[+-]?\d{1,20}\s*", raw):
                raise ValueError("invalid int value")
            return int(raw)
        if k == "float":
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError("not a finite number")
            return value
        if k in ("count", "size"):
            return human_int(raw)
        if k == "length":
            if raw.strip().lower() in ("auto", "-1"):
                return "auto"
            return human_int(raw)
        if k == "bool":
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if k == "json":
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
            return value
        if k == "ints":
            return tuple(human_int(x) for x in raw.replace(",", " ").split())
        if k == "words":
            return tuple(raw.split())
        return raw

    def _check(self, value: Any) -> Any:
        if self.choices and isinstance(value, str) and value not in self.choices:
            raise ValueError(f"not one of {', '.join(self.choices)}")
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, int | float) and not isinstance(v, bool):
                self._bound(v)
        return value

    def _bound(self, value: float) -> None:
        if self.minimum is not None:
            if self.exclusive_minimum and value <= self.minimum:
                raise ValueError(f"must be greater than {self.minimum:g}")
            if value < self.minimum:
                raise ValueError(f"must be at least {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be at most {self.maximum:g}")

    def coerce(self, value: Any) -> Any:
        """A value given as data (an API call, a log's "non-default args") in this flag's kind."""
        if value is None:
            return None
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            return self.convert(str(value))
        if self.kind == "json" and isinstance(value, dict):
            return value
        if self.kind in ("ints", "words") and isinstance(value, list | tuple):
            return tuple(self.convert(str(v))[0] for v in value)
        if self.kind == "length" and isinstance(value, int) and not isinstance(value, bool):
            if value == -1:
                return "auto"
            try:
                return self._check(value)
            except ValueError as err:
                raise GpuplanError(f"{self.name}: {err}") from None
        if self.kind in ("int", "count", "size") and isinstance(value, float):
            if not value.is_integer():
                raise GpuplanError(f"{self.name} must be a whole number, got {value!r}")
            value = int(value)
        if isinstance(value, bool) and self.kind != "str":
            raise GpuplanError(f"{self.name} must be a {self.kind}, got {value!r}")
        if isinstance(value, int | float) and self.kind in ("int", "float", "count", "size"):
            value = float(value) if self.kind == "float" else int(value)
            if self.kind == "float" and not math.isfinite(value):
                raise GpuplanError(f"{self.name} must be a finite number")
            if abs(value) > MAX_INT:  # as human_int bounds a typed one
                raise GpuplanError(f"{self.name}: {str(value)[:24]}… is too large")
            try:
                return self._check(value)
            except ValueError as err:
                raise GpuplanError(f"{self.name}: {err}") from None
        if self.kind == "json":
            raise GpuplanError(f"{self.name} must be a JSON object")
        return self.convert(str(value))

    def emit(self, value: Any) -> list[str]:
        """The tokens that give this flag `value` on a command line."""
        if self.kind == "bool":
            if value:
                return [self.spelling]
            return [self.negation[0]] if self.negation else []
        if self.kind == "json":
            return [self.spelling, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        if self.kind in ("ints", "words"):
            return [self.spelling, *(str(v) for v in value)]
        if self.kind == "float":
            return [self.spelling, repr(float(value))]
        return [self.spelling, str(value)]


@record
class ParsedFlags:
    """What a flag table read from tokens: values by argument name, and what it did not model."""

    args: dict[str, Any]
    positionals: tuple[str, ...]
    unmodelled: tuple[str, ...]  # known to change memory, not followed by gpuplan
    unrecognised: tuple[str, ...]  # not in the table at all
    no_effect: tuple[str, ...]  # known not to change memory
    config_file: str | None = None


@record
class FlagTable:
    """The flags of one engine, with its entry points (`vllm serve`, `-m sglang.launch_server`)."""

    engine: str
    flags: tuple[Flag, ...]
    commands: tuple[tuple[str, ...], ...] = ()
    launcher: tuple[str, ...] = ()  # how the launch builder starts the line (default: commands[0])
    model_flag: str | None = None  # the argument that names the model
    model_positional: bool = False  # the model may come first, without a flag
    underscores: bool = False  # `--tensor_parallel_size` = `--tensor-parallel-size` (vLLM)
    source: str = ""
    _by_spelling: dict[str, Flag] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by: dict[str, Flag] = {}
        for f in self.flags:
            for s in f.spellings + f.negation:
                key = self._key(s)
                if key in by and by[key].name != f.name:
                    raise ValueError(f"{self.engine}: spelling {s} given twice")
                by[key] = f
        object.__setattr__(self, "_by_spelling", by)

    def _key(self, spelling: str) -> str:
        if self.underscores and spelling.startswith("--"):
            return "--" + spelling[2:].replace("_", "-")
        return spelling

    def get(self, name: str) -> Flag:
        for f in self.flags:
            if f.name == name:
                return f
        raise KeyError(name)

    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.flags)

    def lookup(self, spelling: str) -> Flag | None:
        return self._by_spelling.get(self._key(spelling))

    def parse(self, tokens: list[str]) -> ParsedFlags:
        """Read tokens left to right (the last of a repeated flag wins, as argparse does).

        Linear in the number of tokens; a value is converted by its flag's kind; an unknown
        flag followed by a token that is not a flag takes that token as its value."""
        if len(tokens) > MAX_TOKENS:
            raise GpuplanError(f"launch line: more than {MAX_TOKENS} words")
        args: dict[str, Any] = {}
        positionals: list[str] = []
        unmodelled: list[str] = []
        unrecognised: list[str] = []
        no_effect: list[str] = []
        config: str | None = None
        i, n = 0, len(tokens)
        while i < n:
            tok = tokens[i]
            i += 1
            if tok == "--":
                positionals.extend(tokens[i:])
                break
            if not tok.startswith("-") or _is_number(tok) or tok == "-":
                positionals.append(tok)
                continue
            text, eq, inline = tok.partition("=")
            flag = self.lookup(text)
            if flag is None:
                unrecognised.append(text)
                if not eq and i < n and not tokens[i].startswith("-"):
                    i += 1  # its value
                continue
            if flag.kind == "bool":
                negated = self._key(text) in {self._key(s) for s in flag.negation}
                value: Any = flag.convert(inline) if eq else True
                if negated:
                    value = not value
            elif flag.kind in ("ints", "words") and not eq:
                vals = []
                while i < n and not tokens[i].startswith("-"):
                    vals.append(tokens[i])
                    i += 1
                if not vals:
                    raise GpuplanError(f"launch line: {text} needs at least one value")
                value = flag.convert(" ".join(vals))
            else:
                if eq:
                    raw = inline
                elif i < n:
                    raw = tokens[i]
                    i += 1
                else:
                    raise GpuplanError(f"launch line: {text} needs a value")
                value = flag.convert(raw)
            if flag.kind == "config":
                config = str(value)
                continue
            args[flag.name] = value
            target = {"unmodelled": unmodelled, "none": no_effect}.get(flag.effect)
            if target is not None and text not in target:
                target.append(text)
        return ParsedFlags(
            args,
            tuple(positionals),
            tuple(unmodelled),
            tuple(dict.fromkeys(unrecognised)),
            tuple(no_effect),
            config,
        )

    def emit(self, args: Mapping[str, Any]) -> list[str]:
        """Tokens for `args`, in table order (the model flag excluded)."""
        out: list[str] = []
        for f in self.flags:
            if f.name in args and f.name != self.model_flag and args[f.name] is not None:
                out += f.emit(args[f.name])
        return out

    def coerce(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments given as data, in the table's kinds; names not in the table are kept."""
        out: dict[str, Any] = {}
        for name, value in args.items():
            try:
                flag = self.get(name)
            except KeyError:
                out[name] = value
                continue
            if value is not None:
                out[name] = flag.coerce(value)
        return out

    def matches(self, tokens: list[str]) -> int | None:
        """Where the engine's entry point ends in `tokens` (None if absent)."""
        for start in range(len(tokens)):
            for cmd in self.commands:
                end = start + len(cmd)
                if end <= len(tokens) and _command_equal(tokens[start:end], cmd):
                    return end
        return None


def _command_equal(tokens: list[str], cmd: tuple[str, ...]) -> bool:
    first = tokens[0].rsplit("/", 1)[-1]
    return first == cmd[0] and tuple(tokens[1:]) == cmd[1:]


def _is_number(tok: str) -> bool:
    return bool(re.fullmatch(r"-\d+(\.\d+)?", tok))


def _short(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def load_flag_table(path: Path) -> FlagTable:
    """A flag table from its TOML file (package data beside the adapter)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    flags = tuple(
        Flag(
            name=f["name"],
            spellings=tuple(f["spellings"]),
            kind=f.get("kind", "str"),
            default=f.get("default"),
            effect=f.get("effect", "modelled"),
            negation=tuple(f.get("negation", ())),
            choices=tuple(f.get("choices", ())),
            minimum=f.get("minimum"),
            maximum=f.get("maximum"),
            exclusive_minimum=bool(f.get("exclusive_minimum", False)),
            help=f.get("help", ""),
            source=f.get("source", ""),
        )
        for f in data.get("flag", ())
    )
    return FlagTable(
        engine=data["engine"],
        flags=flags,
        commands=tuple(tuple(c) for c in data.get("commands", ())),
        launcher=tuple(data.get("launcher", ())),
        model_flag=data.get("model_flag"),
        model_positional=bool(data.get("model_positional", False)),
        underscores=bool(data.get("underscores", False)),
        source=data.get("source", ""),
    )


ConfigReader = Callable[[str], str]
"""Reads a config file the user named (`--config serve.yaml`): path → text. The CLI passes one;
the web API and the log reader pass none, so nothing a user typed is opened from there."""
