"""`gpuplan serve`: the serving bill per GPU."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from gpuplan.cli.options import (
    gpu_memory_option,
    gpus_option,
    headroom_option,
    parse_gpus,
    units_option,
)
from gpuplan.cli.render import console, print_bill, print_json, print_search_and_notes
from gpuplan.units import format_bytes, format_count


def _engine_choices() -> list[str]:
    from gpuplan.engine.profiles import engine_names

    return ["generic", *engine_names()]


def _read_config(path: str) -> str:
    """A config file the user named in `--from` (`--config serve.yaml`): YAML only, bounded."""
    from pathlib import Path

    from gpuplan.errors import GpuplanError

    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise GpuplanError(f"--config {path}: a config file must be .yaml or .yml")
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise GpuplanError(f"--config {path}: {err.strerror or 'cannot read it'}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise GpuplanError(f"--config {path} is larger than {MAX_CONFIG_BYTES:,} bytes")
    return data.decode("utf-8", errors="replace")


MAX_CONFIG_BYTES = 1_000_000


@click.command("serve")
@click.argument("model", required=False)
@click.option(
    "--engine",
    type=click.Choice(_engine_choices(), case_sensitive=False),
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
@click.option(
    "--memory-fraction",
    "--gpu-memory-utilization",
    "--mem-fraction-static",
    "--free-gpu-memory-fraction",
    "memory_fraction",
    type=float,
    help="Engines: the engine's memory share (vLLM of total; SGLang of free at start;"
    " TensorRT-LLM of free after loading).",
)
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
@click.option("--revision", default=None, help="Branch, tag or commit of a Hugging Face model.")
@click.option(
    "--gpu", default="h100", show_default=True, help="GPU name or alias (see `gpuplan gpus`)."
)
@gpus_option
@click.option("--tp", "--tensor-parallel-size", "tp", type=int, help="Tensor-parallel degree.")
@click.option("--pp", "--pipeline-parallel-size", "pp", type=int, help="Pipeline-parallel degree.")
@click.option(
    "--dtype",
    "--quantization",
    "dtype",
    default=None,
    help="Weight format: bf16, fp16, fp8, int4, awq, gptq, nf4, mxfp4... [default: the checkpoint's]",
)
@click.option(
    "--kv-dtype",
    "--kv-cache-dtype",
    "kv_dtype",
    default=None,
    help="KV-cache dtype: bf16, fp16, fp8, fp32. [default: weights' 16-bit]",
)
@click.option(
    "--context",
    "--max-model-len",
    "context",
    default=None,
    help="Tokens per sequence, e.g. 8192 or 32k; engines also take auto / -1 (the longest that"
    " fits). [default: 4096; engines: the model's]",
)
@click.option("--users", type=int, default=1, show_default=True, help="Concurrent sequences.")
@headroom_option
@gpu_memory_option
@click.option("--workspace", default=None, help="Workspace allowance per GPU [default: 1.5GB].")
@click.option("--cuda-context", default=None, help="CUDA context allowance per GPU [default: 1GB].")
@units_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON schema of docs/json.md.")
@click.option(
    "--explain", is_flag=True, help="Show each line's arithmetic with the numbers substituted."
)
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
) -> None:
    """Will MODEL fit for serving, and on how many GPUs?

    MODEL is a catalog name (llama-3.1-8b), a Hugging Face id in the catalog, or a path to a
    config.json or to a model directory holding one. With --engine vllm|sglang|trtllm, or
    --from "LAUNCH LINE", the bill follows that engine's own rules and reports the KV-cache
    size it will log. vLLM's own option names (--tensor-parallel-size, --max-model-len,
    --kv-cache-dtype, --quantization, --gpu-memory-utilization) are accepted as written.
    """
    from gpuplan.api import engine_serve, serve, serve_launch

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
    on_engine = engine is not None and engine.lower() != "generic"
    if launch_line is not None or on_engine:
        if launch_line is not None:
            if model:
                raise click.UsageError("give either MODEL or --from, not both")
            plan = serve_launch(
                launch_line, gpu, gpu_memory, version=engine_version, read_config=_read_config
            )
            if engine and engine.lower() not in ("generic", plan.bill.engine):
                raise click.UsageError(
                    f"--engine {engine} disagrees with the launch line ({plan.bill.engine})"
                )
        else:
            if not model:
                raise click.UsageError("Missing argument MODEL (or --from LAUNCH_LINE)")
            assert engine is not None
            name = engine.lower()
            plan = engine_serve(
                model,
                gpu,
                engine=name,
                args=_engine_args(name, knobs, tp, pp, dtype, kv_dtype, context, gpus),
                gpu_memory=gpu_memory,
                version=engine_version,
                revision=revision,
            )
        data = plan.to_dict(units)
        if as_json:
            print_json(data)
            return
        render_engine(data, units, explain)
        return
    if not model:
        raise click.UsageError("Missing argument MODEL (or --from LAUNCH_LINE)")
    used = [k for k, v in knobs.items() if v is not None]
    if engine_version is not None:
        used.insert(0, "engine_version")
    if used:
        raise click.UsageError(
            f"--{used[0].replace('_', '-')} needs --engine {'|'.join(_engine_choices()[1:])} or --from"
        )

    generic = serve(
        model,
        gpu,
        gpus=parse_gpus(gpus),
        tp=tp,
        pp=pp,
        dtype=dtype,
        kv_dtype=kv_dtype,
        context=_generic_context(context),
        users=users,
        headroom=headroom,
        gpu_memory=gpu_memory,
        workspace=workspace,
        cuda_context=cuda_context,
        revision=revision,
    )
    data = generic.to_dict(units)
    if as_json:
        print_json(data)
        return
    render_serving(data, units, explain)


_PLAIN_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "auto": "auto"}


def _generic_context(context: str | None) -> int:
    """--context for the lesson's bill: a token count (k/K suffixes as vLLM reads them)."""
    from gpuplan.engine.profiles.flags import human_int

    if context is None:
        return 4096
    try:
        value = human_int(context)
    except ValueError:
        raise click.BadParameter(
            f"{context!r} is not a token count (auto needs --engine)", param_hint="--context"
        ) from None
    return value  # the API refuses values below 1 with its own message


def _engine_args(
    engine: str,
    knobs: dict,
    tp: int | None,
    pp: int | None,
    dtype: str | None,
    kv_dtype: str | None,
    context: str | None,
    gpus: str | None = None,
) -> dict:
    """gpuplan's options in the engine's own argument names (its adapter's knobs)."""
    from gpuplan.engine.profiles import get_adapter

    adapter = get_adapter(engine)
    values = {**knobs, "tp": tp, "pp": pp, "max_model_len": context}
    if adapter.knob("gpus") and gpus not in (None, "auto"):
        values["gpus"] = parse_gpus(gpus)
    if dtype:
        key = dtype.lower()
        if key in _PLAIN_DTYPES or key in ("bfloat16", "float16", "float32", "half"):
            values["dtype"] = _PLAIN_DTYPES.get(key, key)
        else:
            values["quantization"] = "fp8" if key.startswith("fp8") else key
    if kv_dtype:
        values["kv_cache_dtype"] = _PLAIN_DTYPES.get(kv_dtype.lower(), kv_dtype)
    args: dict = {}
    for knob, value in values.items():
        if value is None:
            continue
        if adapter.knob(knob) is None:
            raise click.UsageError(f"{adapter.title} has no {knob.replace('_', ' ')} setting")
        for name, v in adapter.knob_args(knob, value).items():
            args[name] = adapter.flags.get(name).coerce(v)
    return args


def render_engine(data: dict, units: str, explain: bool) -> None:
    """The engine's startup bill, in its own terms."""
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
    )
    if e["failure"]:
        out.print(f"[bold red]will not start[/bold red]: {e['failure']}")
    else:
        out.print("[bold green]starts[/bold green]")
    for note in e["notes"]:
        out.print(f"[dim]note: {note}[/dim]")
    if e.get("unmodelled_flags"):
        out.print(
            "[yellow]unmodelled (these change memory; gpuplan does not follow them):"
            f" {' '.join(escape(f) for f in e['unmodelled_flags'])}[/yellow]"
        )


def _render_devices(out: object, devices: list, units: str) -> None:
    """Where each layer, and its KV cache, lives (an engine that places layers: llama.cpp)."""
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
    out.print(table)  # type: ignore[attr-defined]


def render_serving(data: dict, units: str, explain: bool) -> None:
    out = console()
    gpu = data["gpu"]
    m = data["model"]
    active = (
        f", {format_count(data['params_active'])} active"
        if data["params_active"] != data["params_total"]
        else ""
    )
    out.print(
        f"[bold]{m['id']}[/bold]  {format_count(data['params_total'])} params{active} · {m['attention']}"
        f" · {m['layers']} layers · weights {data['weights_format']} · KV {data['kv_dtype']}"
    )
    out.print(
        f"{data['gpus']} × {gpu['name']} ({format_bytes(gpu['memory_bytes'], units)}, {gpu['memory_basis']})"
        f"  tp={data['tp']} pp={data['pp']}  context {data['context']:,} × {data['users']} user(s)"
    )
    print_bill(out, data, units, explain)
    per_token = (
        f"{data['kv_bytes_per_token'] / 1e6:.2f} MB"
        if units == "GB"
        else f"{data['kv_bytes_per_token'] / 2**20:.3f} MiB"
    )
    out.print(
        f"KV capacity: {data['kv_capacity_tokens']:,} tokens → {data['max_concurrent_sequences']:,} concurrent"
        f" sequences of {data['context']:,} tokens ({per_token} of KV cache per token)"
    )
    print_search_and_notes(out, data)
