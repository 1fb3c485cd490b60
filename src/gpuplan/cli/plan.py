"""`gpuplan plan`: rank the layouts that fit, and export a launch command for an engine."""

from __future__ import annotations

import click

from gpuplan.cli.options import units_option
from gpuplan.cli.render import console, print_json
from gpuplan.units import format_bytes


@click.command("plan")
@click.argument("model")
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    help="GPU types to consider (repeat). [default: h100 h200 b200 a100-80gb l40s mi300x]",
)
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    help="Weight formats to consider (repeat). [default: the checkpoint's, and fp8 linear weights]",
)
@click.option("--kv-dtype", default=None, help="KV-cache dtype.")
@click.option("--context", type=int, default=4096, show_default=True)
@click.option("--users", type=int, default=1, show_default=True)
@click.option("--headroom", type=float, default=0.9, show_default=True)
@click.option(
    "--export",
    "engine",
    type=click.Choice(["vllm", "sglang"]),
    default=None,
    help="Print the launch command for this engine.",
)
@click.option("--top", type=int, default=10, show_default=True)
@units_option
@click.option("--json", "as_json", is_flag=True)
def plan_command(
    model: str,
    gpus: tuple[str, ...],
    dtypes: tuple[str, ...],
    kv_dtype: str | None,
    context: int,
    users: int,
    headroom: float,
    engine: str | None,
    top: int,
    units: str,
    as_json: bool,
) -> None:
    """Rank the ways to serve MODEL: per GPU type and weight format, the fewest GPUs that fit."""
    from rich.table import Table

    from gpuplan.api import DEFAULT_PLAN_GPUS, plan

    options = plan(
        model,
        gpus=gpus or DEFAULT_PLAN_GPUS,
        dtypes=dtypes or None,
        kv_dtype=kv_dtype,
        context=context,
        users=users,
        headroom=headroom,
    )[: max(1, top)]
    rows = [o.to_dict(units, engine) for o in options]
    if as_json:
        print_json(
            {
                "schema": "gpuplan.plan/1",
                "model": model,
                "context": context,
                "users": users,
                "options": rows,
            }
        )
        return
    out = console()
    if not rows:
        out.print("nothing fits: try more GPU types (--gpu) or lower precision (--dtype)")
        return
    table = Table(box=None, header_style="bold")
    for col in (
        "#",
        "GPUs",
        "layout",
        "weights",
        "KV",
        "per GPU",
        "KV capacity",
        f"users × {context:,}",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["rank"]),
            f"{r['gpus']} × {r['gpu']}",
            f"tp={r['tp']} pp={r['pp']}",
            r["dtype"],
            r["kv_dtype"],
            format_bytes(r["per_gpu_total_bytes"], units),
            f"{r['kv_capacity_tokens']:,} tokens",
            f"{r['max_concurrent_sequences']:,}",
        )
    out.print(table)
    if engine:
        out.print(f"\nLaunch the top plan with {engine}:")
        click.echo(rows[0]["launch"])
