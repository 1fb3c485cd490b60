"""Read an engine launch line (`vllm serve …`, `python -m sglang.launch_server …`, `trtllm-serve …`)
into the engine's own argument names, with the engine's defaults left out.

The line is split with `shlex` (quotes, backslash-newlines); the engine is found by its entry
point (each adapter's flag table lists them) and the rest is read by that engine's flag table
(engine/profiles/<engine>/flags.toml): spellings, value kinds (`16k`, `4G`, `auto`), switches
and their `--no-` forms. Flags are sorted into modelled, unmodelled (they change memory and
gpuplan does not follow them) and no effect; a flag the table does not know is unmodelled.

A `--config FILE` is read only through the `read_config` callback the caller passes (the CLI
does, for a file the user named on its command line); otherwise it is reported, not opened.
"""

from __future__ import annotations

import shlex
from typing import Any

from gpuplan.engine.frozen import field, record
from gpuplan.engine.profiles import EngineAdapter, all_adapters
from gpuplan.engine.profiles.flags import MAX_TOKENS, ConfigReader
from gpuplan.errors import GpuplanError

MAX_LINE_CHARS = 100_000


@record
class LaunchLine:
    """A parsed launch line: the engine, the model argument and the flags, sorted by effect."""

    engine: str  # vllm | sglang | trtllm | …
    model: str
    args: dict[str, Any]  # engine argument names (underscored), only those given
    unmodelled: tuple[str, ...] = field(default=())  # change memory; not followed (as written)
    no_effect: tuple[str, ...] = field(default=())  # known not to change GPU memory
    config_file: str | None = None


def split_line(line: str) -> list[str]:
    """The words of a shell command line (quotes and backslash-newlines as a shell reads them)."""
    if not line or not line.strip():
        raise GpuplanError("launch line is empty")
    if len(line) > MAX_LINE_CHARS:
        raise GpuplanError(f"launch line is longer than {MAX_LINE_CHARS:,} characters")
    try:
        tokens = shlex.split(line.replace("\\\n", " "))
    except ValueError as err:
        raise GpuplanError(f"launch line: cannot split it ({err})") from None
    if len(tokens) > MAX_TOKENS:
        raise GpuplanError(f"launch line: more than {MAX_TOKENS} words")
    return tokens


def find_engine(tokens: list[str]) -> tuple[EngineAdapter, list[str]]:
    """The engine whose entry point comes first in `tokens`, and the words after it."""
    # leading environment assignments (CUDA_VISIBLE_DEVICES=0,1 vllm serve …) are skipped
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens = tokens[1:]
    best: tuple[int, EngineAdapter] | None = None
    for adapter in all_adapters():
        end = adapter.flags.matches(tokens)
        if end is not None and (best is None or end < best[0]):
            best = (end, adapter)
    if best is None:
        raise GpuplanError(
            "launch line: no engine found; expected `vllm serve MODEL …`,"
            " `python -m sglang.launch_server --model-path MODEL …`, `trtllm-serve MODEL …`"
            " or `llama-server -m MODEL.gguf …`"
        )
    return best[1], tokens[best[0] :]


def parse_launch(line: str, read_config: ConfigReader | None = None) -> LaunchLine:
    """Parse one launch line; bad values raise GpuplanError (one line)."""
    adapter, rest = find_engine(split_line(line))
    return parse_engine_args(adapter, rest, read_config)


def parse_engine_args(
    adapter: EngineAdapter, rest: list[str], read_config: ConfigReader | None = None
) -> LaunchLine:
    """The words after an engine's entry point, read by its flag table."""
    table = adapter.flags
    parsed = table.parse(rest)
    args = dict(parsed.args)
    unmodelled = list(parsed.unmodelled) + list(parsed.unrecognised)
    no_effect = list(parsed.no_effect)
    if parsed.config_file is not None:
        if read_config is None:
            unmodelled.append(f"--config {parsed.config_file} (file not read)")
        else:
            from_file = adapter.config_args(read_config(parsed.config_file))
            # the command line wins over the file, the file over the defaults
            args = {**from_file.args, **args}
            unmodelled += [*from_file.unmodelled, *from_file.unrecognised]
            no_effect += list(from_file.no_effect)
    positionals = list(parsed.positionals)
    model = args.pop(table.model_flag, None) if table.model_flag else None
    if table.model_positional and positionals:
        model = positionals.pop(0)  # `vllm serve MODEL` wins over --model, as vLLM does
    if positionals:
        raise GpuplanError(f"launch line: unexpected argument {_short(positionals[0])}")
    if not model:
        raise GpuplanError(f"launch line: no model given to {adapter.name}")
    return LaunchLine(
        adapter.name,
        str(model),
        args,
        tuple(dict.fromkeys(unmodelled)),
        tuple(dict.fromkeys(no_effect)),
        parsed.config_file,
    )


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
