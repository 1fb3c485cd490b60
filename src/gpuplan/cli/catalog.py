"""`gpuplan models` and `gpuplan gpus`: what the catalogs hold."""

from __future__ import annotations

import click

from gpuplan.cli import specs
from gpuplan.cli.jsonout import print_json
from gpuplan.cli.options import click_option, units_option
from gpuplan.units import format_bytes, format_count


@click.command("models")
@click_option(specs.JSON)
def models_command(as_json: bool) -> None:
    """List the built-in models (any other config.json works too: pass its path)."""
    from gpuplan.api.common import model_summaries

    rows = model_summaries()
    if as_json:
        print_json({"models": rows})
        return
    from rich.table import Table

    from gpuplan.cli.render import console

    table = Table(box=None, header_style="bold")
    for col in (
        "name",
        "Hugging Face id",
        "type",
        "params",
        "active",
        "layers",
        "attention",
        "checkpoint",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["id"],
            r["hf_id"],
            r["model_type"],
            format_count(r["params_total"]),
            format_count(r["params_active"]),
            str(r["layers"]),
            r["attention"],
            r["quantization"] or "",
        )
    console().print(table)


@click.command("gpus")
@units_option
@click_option(specs.JSON)
def gpus_command(units: str, as_json: bool) -> None:
    """List the GPUs: memory as the driver reports it (what bills use) and as marketed."""
    if as_json:
        from gpuplan.api.common import gpu_summaries

        print_json({"gpus": gpu_summaries()})
        return
    from gpuplan.catalog.gpus import list_gpus

    gpus = list_gpus()
    from rich.table import Table

    from gpuplan.cli.render import console

    table = Table(box=None, header_style="bold")
    for col in ("id", "name", "bill uses", "driver total", "marketed", "BW TB/s", "bf16 TFLOPS"):
        table.add_column(col)
    for g in gpus:
        table.add_row(
            g.id,
            g.name,
            f"{format_bytes(g.memory_bytes, units)} ({g.memory_basis})",
            format_bytes(g.driver_total_bytes, units) if g.driver_total_bytes else "—",
            format_bytes(g.marketed_bytes, units),
            f"{g.memory_bandwidth_bytes_per_s / 1e12:.2f}"
            if g.memory_bandwidth_bytes_per_s
            else "—",
            f"{g.bf16_dense_tflops:g}" if g.bf16_dense_tflops else "—",
        )
    console().print(table)
    console().print(
        "[dim]Bills measure against the driver-reported total where known (nvidia-smi/rocm-smi);"
        " sources in the package's catalog/data/gpus.toml.[/dim]"
    )


@click.command("precisions")
@click_option(specs.JSON)
def precisions_command(as_json: bool) -> None:
    """List the precisions --dtype and --kv-dtype take: bytes per parameter, what each covers."""
    from gpuplan.api.common import precision_summaries

    rows = precision_summaries()
    if as_json:
        print_json({"precisions": rows})
        return
    from rich.table import Table

    from gpuplan.cli.render import console

    table = Table(box=None, header_style="bold")
    for col in ("id", "also", "bytes/param", "covers", "KV cache", "source"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["id"],
            ", ".join(r["aliases"]),
            f"{r['bytes_per_param']:.4g}",
            "every parameter" if r["scope"] == "all" else "linear weights",
            "yes" if r["kv"] else "",
            r["source"],
        )
    console().print(table)
