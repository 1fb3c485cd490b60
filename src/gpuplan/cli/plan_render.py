"""`gpuplan plan` output: the ranked serving plans with their speed and price (`gpuplan.plan/1`,
shaped by api/plan_data.py), and the budget tables of `--matrix`, as a table, CSV or JSON (the
terminal library is loaded only for tables)."""

from __future__ import annotations

import csv
import sys
from typing import Any

from gpuplan.cli.jsonout import print_json
from gpuplan.units import format_bytes

PLAN_CSV_FIELDS = (
    "rank",
    "gpu",
    "gpus",
    "replicas",
    "tp",
    "pp",
    "expert_parallel",
    "dtype",
    "kv_dtype",
    "users_per_replica",
    "per_gpu_total_bytes",
)
PLAN_CSV_SPEED = ("ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_gpu")
PLAN_CSV_PRICE = ("usd_per_hour", "usd_per_million_tokens")
PLAN_COLUMNS = (
    "#",
    "GPUs",
    "layout",
    "weights",
    "KV",
    "per GPU",
    "users/replica",
    "TTFT",
    "TPOT",
    "tok/s/user",
    "tok/s/GPU",
    "$/h",
    "$/M tok",
)


def render_serving_plans(data: dict[str, Any], units: str, as_csv: bool) -> None:
    """`gpuplan.plan/1` as CSV, or as a heading, the ranked table and the top plan's launch line
    (the three answers when nothing meets the ask)."""
    rows = data["options"]
    if as_csv:
        _write_plans_csv(rows)
        return
    from gpuplan.cli.render import console, print_answers

    out = console()
    if not rows:
        out.print("[bold red]nothing meets the ask[/bold red] on the GPU types and formats tried")
        print_answers(out, data["fixes"], units, flags=False)
        return
    out.print(_plans_heading(data))
    out.print(_plans_table(rows, units))
    if data.get("speed_note"):
        out.print(f"[yellow]note: {data['speed_note']}[/yellow]")
    out.print(
        "[dim]speed: engine/speed operator model (GEMMs, attention, experts, TP comm, launch"
        " costs; kernels.toml) on a static batch per replica, TTFT one prompt alone; accuracy:"
        " bench/serving_speed_accuracy.py --fit; $ from catalog/data/prices.toml or --price;"
        " users/replica of what its memory holds[/dim]"
    )
    if "launch" in rows[0]:
        out.print("\nLaunch one replica of the top plan:")
        sys.stdout.write(rows[0]["launch"] + "\n")


def _write_plans_csv(rows: list[dict[str, Any]]) -> None:
    """One CSV row per plan: its layout, then its speed and price."""
    writer = csv.writer(sys.stdout)
    writer.writerow([*PLAN_CSV_FIELDS, *PLAN_CSV_SPEED, *PLAN_CSV_PRICE])
    for r in rows:
        s = r["speed"]
        writer.writerow(
            [
                *(r[f] for f in PLAN_CSV_FIELDS),
                *(s[f] for f in PLAN_CSV_SPEED),
                *(r[f] for f in PLAN_CSV_PRICE),
            ]
        )


def _plans_heading(data: dict[str, Any]) -> str:
    """The ask: users × context (prompt, output), the speed targets and the ranking."""
    targets = []
    if data["tpot_s"]:
        targets.append(f"TPOT ≤ {data['tpot_s'] * 1e3:g} ms")
    if data["ttft_s"]:
        targets.append(f"TTFT ≤ {data['ttft_s']:g} s")
    return (
        f"[bold]{data['model']}[/bold]  {data['users']:,} users × {data['context']:,} tokens"
        f" (prompt {data['prompt_tokens']:,}, output {data['output_tokens']:,})"
        + (f" · {', '.join(targets)}" if targets else "")
        + f" · ranked by {ranked_by(data['objective'])}"
    )


def ranked_by(objective: str) -> str:
    """The objective and the figure it ranks by: 'cost ($/hour for all the users)'."""
    from gpuplan.planner.goals import RANKED_BY

    return f"{objective} ({RANKED_BY[objective]})" if objective in RANKED_BY else objective


def _plans_table(rows: list[dict[str, Any]], units: str) -> Any:
    """One table row per plan: GPUs, layout, formats, memory, users, speed and price."""
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in PLAN_COLUMNS:
        table.add_column(
            col, justify="left" if col in ("GPUs", "layout", "weights", "KV") else "right"
        )
    for r in rows:
        s = r["speed"]
        layout = f"tp={r['tp']} pp={r['pp']}" + (" ep" if r["expert_parallel"] else "")
        if r["replicas"] > 1:
            layout = f"{r['replicas']} × ({layout})"
        table.add_row(
            str(r["rank"]),
            f"{r['gpus']} × {r['gpu']}",
            layout,
            r["dtype"],
            r["kv_dtype"],
            format_bytes(r["per_gpu_total_bytes"], units),
            f"{r['users_per_replica']:,} of {r['memory_limit_users']:,}",
            f"{s['ttft_s'] * 1e3:,.0f} ms",
            f"{s['tpot_s'] * 1e3:,.1f} ms",
            f"{1 / s['tpot_s']:,.0f}" if s["tpot_s"] else "-",  # one output token: no TPOT
            f"{s['tokens_per_s_per_gpu']:,.0f}",
            "-" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:,.2f}",
            "-" if r["usd_per_million_tokens"] is None else f"{r['usd_per_million_tokens']:,.3f}",
        )
    return table


def render_matrix(data: dict[str, Any], units: str, as_json: bool, as_csv: bool) -> None:
    """`gpuplan.plan-matrix/1` as JSON, CSV (one row per cell) or a table (rows × columns)."""
    if as_json:
        print_json(data)
        return
    row_key, col_key = data["rows"], data["cols"]
    if as_csv:
        _write_matrix_csv(data, row_key, col_key)
        return
    from rich.table import Table

    from gpuplan.cli.render import console

    out = console()
    where = (
        f"{data['gpus']} × {data['gpu']} (tp={data['tp']} pp={data['pp']}) · {data['dtype']},"
        f" KV {data['kv_dtype']}"
        if data["mode"] == "serve"
        else f"{data['gpu']} · {data['recipe']} · seq {data['seq']:,} · data parallel"
    )
    out.print(f"[bold]{data['model']}[/bold]  {where}: memory per GPU (red: over budget)")
    col_label = {"users": "users", "zero": "ZeRO"}[col_key]
    table = Table(box=None, header_style="bold")
    table.add_column(row_key)
    for v in data["col_values"]:
        table.add_column(f"{col_label} {v}", justify="right")
    by = {(c[row_key], c[col_key]): c for c in data["cells"]}
    for r in data["row_values"]:
        cells = []
        for v in data["col_values"]:
            c = by[(r, v)]
            if c["per_gpu_total_bytes"] is None:
                cells.append("n/a")
                continue
            text = format_bytes(c["per_gpu_total_bytes"], units)
            cells.append(text if c["fits"] else f"[red]{text}[/red]")
        table.add_row(f"{r:,}", *cells)
    out.print(table)
    budget = data["cells"][0]["budget_bytes"]
    out.print(f"[dim]budget {format_bytes(budget, units)} per GPU[/dim]")
    if data.get("largest_context"):
        parts = [f"{u} user(s): {n:,} tokens" for u, n in data["largest_context"].items()]
        out.print("largest context that fits: " + "; ".join(parts))


# the layout every cell of a matrix shares, repeated on each CSV row so a row read alone says
# what it is for (serving: the GPUs, parallel layout and formats; training: GPU, recipe, seq)
MATRIX_CSV_LAYOUT = {
    "serve": ("model", "gpu", "gpus", "tp", "pp", "dtype", "kv_dtype"),
    "train": ("model", "gpu", "recipe", "seq", "checkpointing"),
}


def _write_matrix_csv(data: dict[str, Any], row_key: str, col_key: str) -> None:
    """One CSV row per cell: the shared layout's columns, then the cell's."""
    layout = [k for k in MATRIX_CSV_LAYOUT.get(data["mode"], ()) if k in data]
    writer = csv.writer(sys.stdout)
    writer.writerow([*layout, row_key, col_key, "per_gpu_total_bytes", "budget_bytes", "fits"])
    shared = [data[k] for k in layout]
    for c in data["cells"]:
        writer.writerow(
            [
                *shared,
                c[row_key],
                c[col_key],
                c["per_gpu_total_bytes"],
                c["budget_bytes"],
                c["fits"],
            ]
        )
