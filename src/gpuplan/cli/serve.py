"""`gpuplan serve`: the serving bill per GPU."""

from __future__ import annotations

import click

from gpuplan.cli.options import gpus_option, units_option
from gpuplan.cli.render import bill_table, console, memory_bar, print_json
from gpuplan.units import format_bytes, format_count


@click.command("serve")
@click.argument("model")
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
@click.option(
    "--headroom",
    type=float,
    default=0.9,
    show_default=True,
    help="Fraction of GPU memory the plan may use.",
)
@click.option("--gpu-memory", default=None, help="Override the GPU's memory, e.g. 79.2GiB.")
@click.option("--workspace", default=None, help="Workspace allowance per GPU [default: 1.5GB].")
@click.option("--cuda-context", default=None, help="CUDA context allowance per GPU [default: 1GB].")
@units_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON schema of docs/json.md.")
@click.option(
    "--explain", is_flag=True, help="Show each line's arithmetic with the numbers substituted."
)
def serve_command(
    model: str,
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
    config.json or to a model directory holding one.
    """
    from gpuplan.api import serve

    plan = serve(
        model,
        gpu,
        gpus=_gpus(gpus),
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
    )
    data = plan.to_dict(units)
    if as_json:
        print_json(data)
        return
    render_serving(data, units, explain)


def _gpus(value: str | None) -> int | str | None:
    if value is None or value == "auto":
        return value
    if value.isdigit():
        return int(value)
    raise click.BadParameter(f"--gpus takes a number or 'auto', got {value!r}")


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
    items = data["per_gpu"]["items"]
    out.print(memory_bar(items, gpu["memory_bytes"], data["budget_bytes"]))
    out.print(bill_table(items, data["per_gpu_total_bytes"], data["budget_bytes"], units, explain))
    verdict = (
        "[bold green]fits[/bold green]" if data["fits"] else "[bold red]does not fit[/bold red]"
    )
    pct = data["per_gpu_total_bytes"] / gpu["memory_bytes"]
    out.print(
        f"{verdict}: {format_bytes(data['per_gpu_total_bytes'], units)} of {format_bytes(gpu['memory_bytes'], units)}"
        f" per GPU ({pct:.0%}; headroom line at {data['headroom']:.0%})"
    )
    per_token = (
        f"{data['kv_bytes_per_token'] / 1e6:.2f} MB"
        if units == "GB"
        else f"{data['kv_bytes_per_token'] / 2**20:.3f} MiB"
    )
    out.print(
        f"KV capacity: {data['kv_capacity_tokens']:,} tokens → {data['max_concurrent_sequences']:,} concurrent"
        f" sequences of {data['context']:,} tokens ({per_token} of KV cache per token)"
    )
    rejected = [a for a in data["search"] if not a["fits"]]
    if rejected:
        out.print(f"Why {data['gpus']} and not fewer:")
        for a in rejected:
            out.print(f"  {a['gpus']} GPU{'s' if a['gpus'] > 1 else ''}: {a['reason']}")
    for note in data["notes"]:
        out.print(f"[dim]note: {note}[/dim]")
