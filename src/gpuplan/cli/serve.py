"""`gpuplan serve`: the serving bill per GPU."""

from __future__ import annotations

import click
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


@click.command("serve")
@click.argument("model", required=False)
@click.option(
    "--engine",
    type=click.Choice(["generic", "vllm", "sglang", "trtllm", "llamacpp"], case_sensitive=False),
    default=None,
    help="Whose accounting: generic (the lesson's bill) or the engine's own rules. [default: generic]",
)
@click.option(
    "--from",
    "launch_line",
    default=None,
    metavar="LINE",
    help='An engine launch line: "vllm serve MODEL --tensor-parallel-size 4 …" or'
    ' "python -m sglang.launch_server --model-path MODEL …".',
)
@click.option("--gpu-memory-utilization", type=float, help="vLLM: fraction of total memory.")
@click.option("--max-model-len", type=int, help="Engines: tokens per request (default: model's).")
@click.option("--max-num-seqs", type=int, help="vLLM: concurrent sequences (profile, graphs).")
@click.option("--max-num-batched-tokens", type=int, help="vLLM: tokens per step (profile run).")
@click.option("--block-size", type=int, help="vLLM: KV block size in tokens [default: 16].")
@click.option("--enforce-eager", is_flag=True, default=False, help="vLLM: no CUDA graphs.")
@click.option("--mem-fraction-static", type=float, help="SGLang: static memory fraction.")
@click.option(
    "--free-gpu-memory-fraction", type=float, help="TensorRT-LLM: KV share of free memory."
)
@click.option(
    "--n-gpu-layers", "-ngl", default=None, help="llama.cpp: layers on GPU (auto, all, N)."
)
@click.option("--split-mode", default=None, help="llama.cpp: none | layer | row across GPUs.")
@click.option("--tensor-split", default=None, help="llama.cpp: GPU shares, e.g. 3,1.")
@click.option("--revision", default=None, help="Branch, tag or commit of a Hugging Face model.")
@click.option(
    "--gpu", default="h100", show_default=True, help="GPU name or alias (see `gpuplan gpus`)."
)
@gpus_option
@click.option("--tp", type=int, help="Tensor-parallel degree (fixes the layout).")
@click.option("--pp", type=int, help="Pipeline-parallel degree (fixes the layout).")
@click.option(
    "--dtype",
    default=None,
    help="Weight format: bf16, fp16, fp8, int4, awq, gptq, nf4, mxfp4... [default: the checkpoint's]",
)
@click.option(
    "--kv-dtype",
    default=None,
    help="KV-cache dtype: bf16, fp16, fp8, fp32. [default: weights' 16-bit]",
)
@click.option("--context", type=int, default=4096, show_default=True, help="Tokens per sequence.")
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
    launch_line: str | None,
    gpu_memory_utilization: float | None,
    max_model_len: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    block_size: int | None,
    enforce_eager: bool,
    mem_fraction_static: float | None,
    free_gpu_memory_fraction: float | None,
    n_gpu_layers: str | None,
    split_mode: str | None,
    tensor_split: str | None,
    revision: str | None,
    gpu: str,
    gpus: str | None,
    tp: int | None,
    pp: int | None,
    dtype: str | None,
    kv_dtype: str | None,
    context: int,
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
    size it will log.
    """
    from gpuplan.api import engine_serve, serve, serve_launch

    engine_flags = {
        "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "block_size": block_size,
        "enforce_eager": enforce_eager or None,
        "mem_fraction_static": mem_fraction_static,
        "free_gpu_memory_fraction": free_gpu_memory_fraction,
        "n_gpu_layers": n_gpu_layers,
        "split_mode": split_mode,
        "tensor_split": tensor_split,
    }
    if launch_line is not None or (engine and engine.lower() != "generic"):
        if launch_line is not None:
            if model:
                raise click.UsageError("give either MODEL or --from, not both")
            plan = serve_launch(launch_line, gpu, gpu_memory)
            if engine and engine.lower() not in ("generic", plan.bill.engine):
                raise click.UsageError(
                    f"--engine {engine} disagrees with the launch line ({plan.bill.engine})"
                )
        else:
            if not model:
                raise click.UsageError("Missing argument MODEL (or --from LAUNCH_LINE)")
            assert engine is not None
            if engine.lower() == "llamacpp":
                args = _llamacpp_args(engine_flags, gpus, kv_dtype, context, users, max_model_len)
            else:
                args = _engine_args(
                    engine.lower(), engine_flags, tp, pp, dtype, kv_dtype, context, max_model_len
                )
            plan = engine_serve(
                model,
                gpu,
                engine=engine.lower(),
                args=args,
                gpu_memory=gpu_memory,
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
    used = [k for k, v in engine_flags.items() if v is not None]
    if used:
        raise click.UsageError(
            f"--{used[0].replace('_', '-')} needs --engine vllm|sglang|trtllm or --from"
        )

    generic = serve(
        model,
        gpu,
        gpus=parse_gpus(gpus),
        tp=tp,
        pp=pp,
        dtype=dtype,
        kv_dtype=kv_dtype,
        context=context,
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


_ENGINE_NAMES = {
    "vllm": {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "len": "max_model_len"},
    "sglang": {"tp": "tp_size", "pp": "pp_size", "len": "context_length"},
    "trtllm": {"tp": "tp_size", "pp": "pp_size", "len": "max_seq_len"},
}


def _llamacpp_args(
    flags: dict,
    gpus: str | None,
    kv_dtype: str | None,
    context: int,
    users: int,
    max_model_len: int | None,
) -> dict:
    """gpuplan's flags as llama-server's: --context/--max-model-len → -c (when given),
    --users → -np (when given), --kv-dtype → -ctk and -ctv, --gpus → the GPU count."""
    ctx = click.get_current_context()
    args = {k: flags[k] for k in ("n_gpu_layers", "split_mode", "tensor_split") if flags[k]}
    if max_model_len:
        args["ctx_size"] = max_model_len
    elif ctx.get_parameter_source("context") != click.core.ParameterSource.DEFAULT:
        args["ctx_size"] = context
    if ctx.get_parameter_source("users") != click.core.ParameterSource.DEFAULT:
        args["n_parallel"] = users
    if kv_dtype:
        key = {"fp16": "f16", "fp32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(
            kv_dtype.lower(), kv_dtype
        )
        args["cache_type_k"] = args["cache_type_v"] = key
    if gpus and gpus != "auto":
        args["gpus"] = parse_gpus(gpus)
    return args


_PLAIN_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "auto": "auto"}


def _engine_args(
    engine: str,
    flags: dict,
    tp: int | None,
    pp: int | None,
    dtype: str | None,
    kv_dtype: str | None,
    context: int,
    max_model_len: int | None,
) -> dict:
    """gpuplan's flags in the engine's own argument names."""
    names = _ENGINE_NAMES[engine]
    args = {k: v for k, v in flags.items() if v is not None and k != "max_model_len"}
    if tp:
        args[names["tp"]] = tp
    if pp:
        args[names["pp"]] = pp
    args[names["len"]] = max_model_len or context
    if dtype:
        key = dtype.lower()
        if key in _PLAIN_DTYPES or key in ("bfloat16", "float16", "float32", "half"):
            args["dtype"] = _PLAIN_DTYPES.get(key, key)
        else:
            args["quantization"] = "fp8" if key.startswith("fp8") else key
    if kv_dtype:
        args["kv_cache_dtype"] = _PLAIN_DTYPES.get(kv_dtype.lower(), kv_dtype)
    return args


def render_engine(data: dict, units: str, explain: bool) -> None:
    """The engine's startup bill, in its own terms."""
    out = console()
    e = data["engine"]
    m, gpu = data["model"], data["gpu"]
    out.print(
        f"[bold]{m['id']}[/bold] on {data['gpus']} × {gpu['name']}  tp={data['tp']} pp={data['pp']}"
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
    if e.get("ignored_flags"):
        out.print(f"[dim]ignored flags (no effect on memory): {' '.join(e['ignored_flags'])}[/dim]")


def _render_devices(out: object, devices: list, units: str) -> None:
    """Where each layer, and its KV cache, lives (llama.cpp's placement)."""
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
