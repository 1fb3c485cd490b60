"""`gpuplan serve`: the serving bill per GPU."""

from __future__ import annotations

from typing import Any

import click

from gpuplan.cli import specs
from gpuplan.cli.errors import EXIT_WILL_NOT_START
from gpuplan.cli.jsonout import print_json
from gpuplan.cli.options import LazyChoice, click_option, memory_fraction_option, parse_gpus
from gpuplan.cli.serve_render import render_serving
from gpuplan.units import format_bytes


def _engine_choices() -> list[str]:
    from gpuplan.engine.profiles import engine_names

    return ["generic", *engine_names()]


def _read_config(path: str) -> str:
    """A config file the user named in `--from` (`--config serve.yaml`): YAML only, bounded."""
    from pathlib import Path

    from gpuplan.errors import GpuplanError
    from gpuplan.safe_read import clean_name, read_bytes

    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise GpuplanError(f"--config {clean_name(path)}: a config file must be .yaml or .yml")
    data = read_bytes(p, MAX_CONFIG_BYTES, f"--config {clean_name(path)}")
    return data.decode("utf-8", errors="replace")


MAX_CONFIG_BYTES = 1_000_000


def _own_bill_options(command: Any) -> Any:
    """The options of serve's own bill, from the option table (the fast path reads it too)."""
    for opt in reversed(specs.SERVE_OWN_BILL):
        command = click_option(opt)(command)
    return command


@click.command("serve")
@click.argument("model", required=False)
@click.option(
    "--engine",
    type=LazyChoice(_engine_choices),
    default=None,
    help="Whose accounting: generic (the lesson's bill) or the engine's own rules. [default: generic]",
)
@click.option(
    "--engine-version",
    default=None,
    metavar="VERSION",
    help="The engine version whose rules apply, e.g. 0.10.1 or 0.8.5 (vLLM V0). [default: newest]",
)
@click.option(
    "--from",
    "launch_line",
    default=None,
    metavar="LINE",
    help='An engine launch line: "vllm serve MODEL --tensor-parallel-size 4 …" or'
    ' "python -m sglang.launch_server --model-path MODEL …".',
)
@memory_fraction_option
@click.option("--max-num-seqs", type=int, help="Engines: concurrent sequences (profile, graphs).")
@click.option(
    "--max-num-batched-tokens", help="Engines: tokens per step (profile run), e.g. 8192 or 16k."
)
@click.option("--block-size", type=int, help="Engines: KV block (page) size in tokens.")
@click.option("--enforce-eager", is_flag=True, default=False, help="Engines: no CUDA graphs.")
@click.option(
    "--n-gpu-layers",
    "-ngl",
    "gpu_layers",
    default=None,
    help="llama.cpp: layers on GPU (auto, all, N).",
)
@click.option("--split-mode", default=None, help="llama.cpp: none | layer | row across GPUs.")
@click.option("--tensor-split", default=None, help="llama.cpp: the GPUs' shares, e.g. 3,1.")
@_own_bill_options
def serve_command(
    model: str | None,
    engine: str | None,
    engine_version: str | None,
    launch_line: str | None,
    memory_fraction: float | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: str | None,
    block_size: int | None,
    enforce_eager: bool,
    gpu_layers: str | None,
    split_mode: str | None,
    tensor_split: str | None,
    revision: str | None,
    gpu: str,
    gpus: str | None,
    tp: int | None,
    pp: int | None,
    dtype: str | None,
    kv_dtype: str | None,
    context: str | None,
    users: int,
    headroom: float,
    gpu_memory: str | None,
    workspace: str | None,
    cuda_context: str | None,
    units: str,
    as_json: bool,
    explain: bool,
    speed: bool,
    prompt: int | None,
    output: int | None,
    request_rate: float | None,
    eager: bool,
    calibration: str | None,
) -> None:
    """Will MODEL fit for serving, and on how many GPUs?

    MODEL is a catalog name (llama-3.1-8b, see `gpuplan models`), a local config.json, model
    folder, .safetensors or .gguf file, or a Hugging Face repo id (meta-llama/Llama-3.1-8B),
    read from the local Hugging Face cache, else from the Hub (config and safetensors headers
    only; --revision picks a branch, tag or commit; HF_HUB_OFFLINE=1 stays offline). With --engine vllm|sglang|trtllm, or
    --from "LAUNCH LINE", the bill follows that engine's own rules and reports the KV-cache
    size it will log. vLLM's own option names (--tensor-parallel-size, --max-model-len,
    --kv-cache-dtype, --quantization, --gpu-memory-utilization) are accepted as written.
    """
    own = dict(locals())  # the own-bill options' values, by destination (cli/specs.py)
    knobs = {
        "memory_fraction": memory_fraction,
        "max_seqs": max_num_seqs,
        "max_batched_tokens": max_num_batched_tokens,
        "block_size": block_size,
        "enforce_eager": enforce_eager or None,
        "gpu_layers": gpu_layers,
        "split_mode": split_mode,
        "tensor_split": tensor_split,
    }
    if launch_line is not None or (engine is not None and engine.lower() != "generic"):
        _engine_answer(model, engine, engine_version, launch_line, knobs, own)
        return
    model = _refuse_engine_settings(model, knobs, engine_version)
    values = {opt.dest: own[opt.dest] for opt in specs.SERVE_OWN_BILL}
    try:
        ask = specs.serve_ask(model, values)
        speed_ask = specs.speed_ask(values)
    except specs.BadValue as err:
        raise click.BadParameter(str(err), param_hint=err.hint) from None
    _show(specs.serve_data(ask, units, speed_ask), as_json, render_serving, units, explain)


def _engine_answer(
    model: str | None,
    engine: str | None,
    version: str | None,
    launch_line: str | None,
    knobs: dict[str, Any],
    own: dict[str, Any],
) -> None:
    """--engine / --from: the engine's own bill (its flags in `knobs`, serve's options by
    destination in `own`); exit EXIT_WILL_NOT_START when it would not start."""
    if own["speed"]:
        raise click.UsageError(
            "--speed goes without --engine/--from: it times serve's own layout under"
            " vLLM V1's default scheduler"
        )
    gpu, gpu_memory, units = own["gpu"], own["gpu_memory"], own["units"]
    if launch_line is not None:
        plan, fixes = _launch_plan(launch_line, model, engine, gpu, gpu_memory, version)
    else:
        layout = {k: own[k] for k in ("tp", "pp", "dtype", "kv_dtype", "context")}
        plan, fixes = _engine_plan(
            model, engine, knobs, layout, own["gpus"], gpu, gpu_memory, version, own["revision"]
        )
    data = plan.to_dict(units)
    if fixes is not None:
        data["fixes"] = fixes
    _show(data, own["as_json"], render_engine, units, own["explain"])
    if not plan.fits:
        raise click.exceptions.Exit(EXIT_WILL_NOT_START)


def _show(data: dict, as_json: bool, render: Any, units: str, explain: bool) -> None:
    """The answer as the JSON of docs/json.md or through its table renderer."""
    if as_json:
        print_json(data)
        return
    render(data, units, explain)


def _launch_plan(
    line: str,
    model: str | None,
    engine: str | None,
    gpu: str,
    gpu_memory: str | None,
    version: str | None,
) -> Any:
    """`--from LAUNCH_LINE`: the engine's bill for that launch (MODEL is in the line)."""
    from gpuplan.api.engines import serve_launch

    if model:
        raise click.UsageError("give either MODEL or --from, not both")
    plan = serve_launch(line, gpu, gpu_memory, version=version, read_config=_read_config)
    if engine and engine.lower() not in ("generic", plan.bill.engine):
        raise click.UsageError(
            f"--engine {engine} disagrees with the launch line ({plan.bill.engine})"
        )
    return plan, (None if plan.fits else _launch_ways_out(line, gpu, gpu_memory, version))


def _launch_ways_out(
    line: str, gpu: str, gpu_memory: str | None, version: str | None
) -> list | None:
    """The ways out of a launch line that will not start, each the engine's bill for the line
    changed (fp8 weights, more GPUs, a bigger GPU)."""
    from gpuplan.api import engine_sizing
    from gpuplan.api.common import resolve_gpu
    from gpuplan.api.engines import engine_serve
    from gpuplan.catalog.launch import parse_launch
    from gpuplan.engine.profiles import get_adapter

    parsed = parse_launch(line, _read_config)
    adapter = get_adapter(parsed.engine)
    if adapter.knob("gpus"):  # llama.cpp places layers itself: its ways out are -ngl and -c
        return None

    def serve(a: dict[str, Any], g: Any = None) -> Any:
        return engine_serve(
            parsed.model,
            g or gpu,
            engine=parsed.engine,
            args=a,
            gpu_memory=gpu_memory,
            version=version,
        )

    return engine_sizing.ways_out(serve, adapter, dict(parsed.args), resolve_gpu(gpu, gpu_memory))


def _engine_plan(
    model: str | None,
    engine: str | None,
    knobs: dict[str, Any],
    layout: dict[str, Any],
    gpus: str | None,
    gpu: str,
    gpu_memory: str | None,
    version: str | None,
    revision: str | None,
) -> Any:
    """`--engine NAME`: the engine's bill for MODEL with gpuplan's options as its arguments. With
    no GPU count and no tp/pp, `--gpus auto` as --help says: the fewest GPUs on which the engine
    starts (api.engine_sizing); a launch that does not start carries its ways out."""
    from gpuplan.api import engine_sizing
    from gpuplan.api.common import resolve_gpu
    from gpuplan.api.engines import UnknownSetting, engine_args, engine_serve
    from gpuplan.engine.profiles import get_adapter

    if not model:
        raise click.UsageError("Missing argument MODEL (or --from LAUNCH_LINE)")
    assert engine is not None
    name = engine.lower()
    adapter = get_adapter(name)
    count = parse_gpus(gpus)
    auto = count in (None, "auto") and layout["tp"] is None and layout["pp"] is None
    auto = auto and not adapter.knob("gpus")  # llama.cpp places layers on the GPUs it is given
    try:
        args = engine_args(name, knobs, gpus=None if auto else count, **layout)
    except UnknownSetting as err:
        raise click.UsageError(str(err)) from None

    def serve(a: dict[str, Any], g: Any = None) -> Any:
        return engine_serve(
            model,
            g or gpu,
            engine=name,
            args=a,
            gpu_memory=gpu_memory,
            version=version,
            revision=revision,
        )

    spec = resolve_gpu(gpu, gpu_memory)
    if auto:
        plan, args = engine_sizing.fewest_gpus(serve, adapter, args, spec.gpus_per_node)
    else:
        plan = serve(args)
    fixes = [] if plan.fits else engine_sizing.ways_out(serve, adapter, args, spec)
    return plan, fixes


def _refuse_engine_settings(
    model: str | None, knobs: dict[str, Any], engine_version: str | None
) -> str:
    """The lesson's bill takes MODEL and none of the engine-only options: MODEL, checked."""
    if not model:
        raise click.UsageError("Missing argument MODEL (or --from LAUNCH_LINE)")
    used = [k for k, v in knobs.items() if v is not None]
    if engine_version is not None:
        used.insert(0, "engine_version")
    if used:
        raise click.UsageError(
            f"--{used[0].replace('_', '-')} needs --engine {'|'.join(_engine_choices()[1:])} or --from"
        )
    return model


def render_engine(data: dict, units: str, explain: bool) -> None:
    """The engine's startup bill, in its own terms."""
    from rich.markup import escape
    from rich.table import Table

    from gpuplan.cli.render import console

    out = console()
    e = data["engine"]
    m, gpu = data["model"], data["gpu"]
    out.print(
        f"[bold]{escape(m['id'])}[/bold] on {data['gpus']} × {gpu['name']}  tp={data['tp']} pp={data['pp']}"
        f" · {e['name']} ({e['version']})"
    )
    settings = ", ".join(f"{k} {v}" for k, v in e["settings"].items() if k != "devices")
    out.print(f"[dim]{settings}[/dim]")
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("per GPU (rank 0)")
    table.add_column("size", justify="right")
    table.add_column("range", justify="right")
    table.add_column("rule")
    table.add_row(
        "Total memory", format_bytes(e["total_bytes"], units), "", "as the CUDA runtime reports it"
    )
    table.add_row("Budget", format_bytes(e["budget_bytes"], units), "", "the engine's share")
    ranges = e["ranges"]
    for item in e["lines"] + e["outside_budget"]:
        r = ranges.get(item["key"])
        span = f"{format_bytes(r['low'], units)}–{format_bytes(r['high'], units)}" if r else ""
        bytes_text = format_bytes(item["bytes"], units)
        if item["key"] == "kv_cache" and e["kv_cache_bytes"] < 0:
            bytes_text = "-" + format_bytes(-e["kv_cache_bytes"], units)
        rule = item["explain"] if explain else item["formula"]
        table.add_row(item["name"], bytes_text, span, rule)
    out.print(table)
    if e["settings"].get("devices"):
        _render_devices(out, e["settings"]["devices"], units)
    r = ranges.get("kv_capacity_tokens")
    span = f" (range {r['low']:,}–{r['high']:,}; moved by {r['moved_by']})" if r else ""
    out.print(f"GPU KV cache size: [bold]{e['kv_capacity_tokens']:,}[/bold] tokens{span}")
    out.print(
        f"Maximum concurrency for {e['max_model_len']:,} tokens per request: {e['max_concurrency']:.2f}x"
        " (KV capacity ÷ tokens per request)"
    )
    if e.get("slots"):
        out.print(f"Parallel slots: {e['slots']} (requests the engine runs at once, however short)")
    if e["failure"]:
        out.print(f"[bold red]will not start[/bold red]: {e['failure']}")
    else:
        out.print("[bold green]starts[/bold green]")
    for note in e["notes"]:
        out.print(f"[dim]note: {escape(note)}[/dim]")
    if e["failure"] and "fixes" in data:
        _render_engine_fixes(out, data["fixes"], units)
    if e.get("unmodelled_flags"):
        out.print(
            "[yellow]unmodelled (these change memory; gpuplan does not follow them):"
            f" {' '.join(escape(f) for f in e['unmodelled_flags'])}[/yellow]"
        )


def _render_engine_fixes(out: Any, fixes: list, units: str) -> None:
    """The ways out of a launch that does not start, each the engine's own bill for the change."""
    from rich.markup import escape

    from gpuplan.cli.render import change_flags

    if not fixes:
        out.print("No way out found: fp8 weights, more GPUs and a bigger GPU all fail to start.")
        return
    out.print("Ways out, each checked with the engine's rules:")
    width = max(len(f["answer"]) for f in fixes)
    for f in fixes:
        out.print(
            f"  [bold]{f['answer']:<{width}}[/bold]  {escape(f['label'])}: starts,"
            f" KV cache {format_bytes(f['kv_cache_bytes'], units)} ="
            f" {f['kv_capacity_tokens']:,} tokens  [dim]({escape(change_flags(f['change']))})[/dim]"
        )


def _render_devices(out: Any, devices: list, units: str) -> None:
    """Where each layer, and its KV cache, lives (an engine that places layers: llama.cpp)."""
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for col in ("device", "layers", "weights", "KV cache", "compute", "total"):
        table.add_column(col, justify="left" if col in ("device", "layers") else "right")
    for d in devices:
        table.add_row(
            d["device"],
            d["layers"] or "—",
            format_bytes(d["weights_bytes"], units),
            format_bytes(d["kv_bytes"], units),
            format_bytes(d["compute_bytes"], units),
            format_bytes(d["total_bytes"], units),
        )
    out.print(table)
