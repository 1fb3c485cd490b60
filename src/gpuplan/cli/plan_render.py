"""`gpuplan plan` output: the ranked serving plans with their speed and price, and the budget
tables of `--matrix`, as a table, CSV or JSON (the terminal library is loaded only for tables)."""

from __future__ import annotations

import csv
import sys
from typing import Any

from gpuplan.cli.jsonout import print_json
from gpuplan.units import format_bytes

PLAN_SCHEMA_VERSION = "gpuplan.plan/1"


def serving_plan_data(
    model: str,
    gpus: tuple[str, ...],
    dtypes: tuple[str, ...],
    kv_dtype: str | None,
    context: int,
    users: int,
    headroom: float,
    tpot: str | None,
    ttft: str | None,
    prompt_tokens: int | None,
    output_tokens: int | None,
    goal: dict[str, Any],
    top: int,
    units: str,
    engine: str | None,
) -> dict[str, Any]:
    """Call the planner and shape `gpuplan.plan/1` (docs/json.md)."""
    from gpuplan.api.planning import DEFAULT_PLAN_GPUS, parse_duration, plan

    extra = {"max_gpus": goal["max_gpus"]} if goal["max_gpus"] else {}
    options = plan(
        model,
        gpus=gpus or DEFAULT_PLAN_GPUS,
        dtypes=dtypes or None,
        kv_dtype=kv_dtype,
        context=context,
        users=users,
        headroom=headroom,
        tpot=tpot,
        ttft=ttft,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        objective=goal["objective"],
        prices=list(goal["prices"]),
        **extra,
    )[: max(1, top)]
    rows = [o.to_dict(units, engine) for o in options]
    speed = rows[0]["speed"] if rows else {}
    data: dict[str, Any] = {
        "schema": PLAN_SCHEMA_VERSION,
        "model": model,
        "context": context,
        "users": users,
        "prompt_tokens": speed.get("prompt_tokens"),
        "output_tokens": speed.get("output_tokens"),
        "tpot_s": parse_duration(tpot, "tpot"),
        "ttft_s": parse_duration(ttft, "ttft"),
        "objective": goal["objective"],
        "options": rows,
        "fixes": [],
    }
    if not rows:
        data["fixes"] = _fixes(model, gpus, context, users)
    return data


def _fixes(model: str, gpus: tuple[str, ...], context: int, users: int) -> list[dict[str, Any]]:
    """The three answers when nothing meets the ask: fewer bytes, a bigger GPU, more GPUs
    (planner/fixes.py asks the engine for each)."""
    from gpuplan.api.planning import three_answers

    return three_answers(model, gpus[0] if gpus else "h100", context=context, users=users)


def render_serving_plans(data: dict[str, Any], units: str, as_csv: bool) -> None:
    rows = data["options"]
    if as_csv:
        fields = [
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
        ]
        writer = csv.writer(sys.stdout)
        writer.writerow(
            [
                *fields,
                "ttft_s",
                "tpot_s",
                "tokens_per_s",
                "tokens_per_s_per_gpu",
                "usd_per_hour",
                "usd_per_million_tokens",
            ]
        )
        for r in rows:
            s = r["speed"]
            writer.writerow(
                [
                    *(r[f] for f in fields),
                    s["ttft_s"],
                    s["tpot_s"],
                    s["tokens_per_s"],
                    s["tokens_per_s_per_gpu"],
                    r["usd_per_hour"],
                    r["usd_per_million_tokens"],
                ]
            )
        return
    from rich.table import Table

    from gpuplan.cli.render import console

    out = console()
    if not rows:
        out.print("[bold red]nothing meets the ask[/bold red] on the GPU types and formats tried")
        for fix in data["fixes"]:
            out.print(f"  {fix['answer']}: {fix['label']}")
        return
    targets = []
    if data["tpot_s"]:
        targets.append(f"TPOT ≤ {data['tpot_s'] * 1e3:g} ms")
    if data["ttft_s"]:
        targets.append(f"TTFT ≤ {data['ttft_s']:g} s")
    out.print(
        f"[bold]{data['model']}[/bold]  {data['users']:,} users × {data['context']:,} tokens"
        f" (prompt {data['prompt_tokens']:,}, output {data['output_tokens']:,})"
        + (f" · {', '.join(targets)}" if targets else "")
        + f" · ranked by {data['objective']}"
    )
    table = Table(box=None, header_style="bold")
    for col in (
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
    ):
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
            f"{1 / s['tpot_s']:,.0f}",
            f"{s['tokens_per_s_per_gpu']:,.0f}",
            "-" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:,.2f}",
            "-" if r["usd_per_million_tokens"] is None else f"{r['usd_per_million_tokens']:,.3f}",
        )
    out.print(table)
    out.print(
        "[dim]speed: engine/perf.py roofline (prefill compute-bound, decode memory-bound, TP"
        " comm) at fitted efficiencies, median 4.5 % from 23 published measurements; $ from"
        " catalog/data/prices.toml or --price; users/replica of what its memory holds[/dim]"
    )
    if "launch" in rows[0]:
        out.print("\nLaunch one replica of the top plan:")
        sys.stdout.write(rows[0]["launch"] + "\n")


def render_matrix(data: dict[str, Any], units: str, as_json: bool, as_csv: bool) -> None:
    """`gpuplan.plan-matrix/1` as JSON, CSV (one row per cell) or a table (rows × columns)."""
    if as_json:
        print_json(data)
        return
    row_key, col_key = data["rows"], data["cols"]
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow([row_key, col_key, "per_gpu_total_bytes", "budget_bytes", "fits"])
        for c in data["cells"]:
            writer.writerow(
                [c[row_key], c[col_key], c["per_gpu_total_bytes"], c["budget_bytes"], c["fits"]]
            )
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
