"""`gpuplan inspect MODEL`: where the model came from, its family, parameters and headers."""

from __future__ import annotations

from typing import Any

import click

from gpuplan.cli.options import units_option
from gpuplan.cli.render import console, print_json
from gpuplan.units import format_bytes, format_count


@click.command("inspect")
@click.argument("model")
@click.option("--revision", default=None, help="Branch, tag or commit of a Hugging Face model.")
@units_option
@click.option("--json", "as_json", is_flag=True)
def inspect_command(model: str, revision: str | None, units: str, as_json: bool) -> None:
    """Where MODEL comes from, its family and assumptions, parameters by kind, the checkpoint's
    bytes by dtype (from its headers), quantisation and context limit."""
    from gpuplan.api.inspection import inspect

    data = inspect(model, revision).to_dict()
    if as_json:
        print_json(data)
        return
    _render(data, units)


def _render(d: dict[str, Any], units: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    fam = d["family"]
    src = d["source"]
    out.print(f"[bold]{escape(d['model'])}[/bold]  {format_count(d['params_total'])} params")
    if src:
        out.print(f"source      {escape(src['describe'])}")
        if src["tried"]:
            out.print(f"tried first {escape(', '.join(src['tried']))}")
    experts = (
        f" · {fam['experts']} experts, {fam['experts_per_token']} active" if fam["experts"] else ""
    )
    out.print(
        f"family      {escape(fam['model_type'])} · {fam['attention']} · {fam['layers']} layers ·"
        f" hidden {fam['hidden_size']:,} · {fam['heads']} heads / {fam['kv_heads']} KV heads ×"
        f" {fam['head_dim']}{experts}"
    )
    out.print(
        f"context     {d['context_limit']:,} tokens · KV {format_bytes(d['kv_bytes_per_token'], units)}/token"
    )
    q = d["quantization"]
    out.print(
        f"weights     {escape(d['weights_format'])}" + (f" · {escape(q['source'])}" if q else "")
    )
    table = Table(box=None, header_style="bold", title="parameters by kind", title_justify="left")
    table.add_column("kind")
    table.add_column("architecture", justify="right")
    headers = d["headers"]
    if headers:
        table.add_column("headers", justify="right")
        table.add_column("stored bytes", justify="right")
    kinds = sorted(set(d["params_by_kind"]) | set(headers["params_by_kind"] if headers else {}))
    for kind in kinds:
        row = [kind, format_count(d["params_by_kind"].get(kind, 0))]
        if headers:
            row += [
                format_count(headers["params_by_kind"].get(kind, 0)),
                format_bytes(headers["bytes_by_kind"].get(kind, 0), units),
            ]
        table.add_row(*row)
    out.print(table)
    if headers:
        by_dtype = ", ".join(
            f"{k} {format_bytes(v, units)}" for k, v in headers["bytes_by_dtype"].items()
        )
        out.print(
            f"headers     {headers['format']}: {headers['tensors']:,} tensors in {headers['files']}"
            f" file(s), {format_bytes(headers['total_bytes'], units)} stored"
            f" ({format_bytes(headers['loaded_bytes'], units)} loaded; architecture math"
            f" {format_bytes(d['architecture_weight_bytes'], units)})"
        )
        out.print(f"by dtype    {escape(by_dtype)}")
        agree = headers["agreement"]
        verdict = "[red]differs[/red]" if agree["flagged"] else "agrees"
        out.print(
            f"agreement   architecture {format_count(agree['architecture_params'])} vs headers"
            f" {format_count(agree['header_params'])} ({agree['difference']:+.2%}): {verdict}"
        )
        for line in agree["explanations"]:
            out.print(f"  · {escape(line)}")
    else:
        out.print(
            f"headers     none read (no weight files); weights by architecture math"
            f" {format_bytes(d['architecture_weight_bytes'], units)}"
        )
    for note in fam["assumptions"]:
        out.print(f"[dim]note: {escape(note)}[/dim]")
