"""`gpuplan plan --train`: the ranked training layouts of a GPU count, and the top one's config."""

from __future__ import annotations

import json
from typing import Any

import click

from gpuplan.cli.jsonout import print_json
from gpuplan.errors import GpuplanError
from gpuplan.units import format_bytes


def console() -> Any:
    from gpuplan.cli.render import console as make

    return make()


def run_plan_training(
    model: str,
    gpu: str,
    options: dict[str, Any],
    engine: str | None,
    top: int,
    units: str,
    as_json: bool,
    deploy: str | None = None,
) -> None:
    """Search, then print the table (or `gpuplan.plan-train/1` JSON) and the export; with
    `deploy`, the top layout's manifest alone."""
    from gpuplan.api import plan_training
    from gpuplan.api.plan_data import training_plan_data

    try:
        ranked = plan_training(model, gpu=gpu, engine=engine, top=top, **options)
    except GpuplanError:
        if not as_json:
            _print_answers(model, gpu, options, units)
        raise
    manifest = None
    if deploy:  # the deployment code loads only for a manifest
        from gpuplan.api.manifests import training_manifest_for

        manifest = training_manifest_for(deploy)
    data = training_plan_data(ranked, engine=engine, units=units, manifest=manifest)
    if as_json:
        print_json(data)
        return
    if "manifest" in data:
        click.echo(data["manifest"]["text"], nl=False)
        return
    render_plan_training(data, units)


def _print_answers(model: str, gpu: str, options: dict[str, Any], units: str) -> None:
    """Nothing fits on these GPUs: the three answers for the same ask as `train` sees it."""
    from gpuplan.api.train_answers import training_three_answers
    from gpuplan.cli.render import print_answers

    asked = ("gpus", "seq", "recipe", "headroom", "lora_rank", "qlora", "gpu_memory", "mfu")
    answers = training_three_answers(model, gpu, **{k: options[k] for k in asked if k in options})
    out = console()
    out.print("[bold red]no layout fits[/bold red]")
    print_answers(out, answers, units, flags=False)


def render_plan_training(data: dict[str, Any], units: str) -> None:
    from rich.table import Table

    out = console()
    gpu = data["gpu"]
    lora = data["lora"]
    what = f"{'QLoRA' if lora['qlora'] else 'LoRA'} r={lora['rank']} · " if lora else ""
    out.print(
        f"[bold]{data['model']}[/bold]  {data['gpus']} × {gpu['name']}"
        f" ({format_bytes(gpu['memory_bytes'], units)}, {gpu['memory_basis']})"
        f" · {what}{data['recipe']} · seq {data['seq']:,} · global batch {data['global_batch_tokens']:,}"
        " tokens"
    )
    rows = data["options"]
    offload = any(r["offload"] != "none" for r in rows)
    table = Table(box=None, header_style="bold")
    cols = ["#", "layout", "ep", "ZeRO/FSDP", "micro × accum", "checkpointing"]
    cols += (["offload"] if offload else []) + ["per GPU", "tokens/s", "step"]
    for col in cols:
        table.add_column(col, justify="right" if col in ("per GPU", "tokens/s", "step") else "left")
    for r in rows:
        sharding = f"ZeRO-{r['zero']} / {r['fsdp_strategy'] or '(no FSDP twin)'}"
        speed = f"{r['tokens_per_second']:,.0f}" if r["tokens_per_second"] else "-"
        step = f"{r['step_time_s']:.2f} s" if r["step_time_s"] else "-"
        cells = [str(r["rank"]), _layout_cell(r), str(r["ep"]), sharding]
        cells += [f"{r['micro_batch']} × {r['grad_accum']}"]
        cells += [r["checkpointing"]] + ([r["offload"]] if offload else [])
        cells += [format_bytes(r["per_gpu_total_bytes"], units), speed, step]
        table.add_row(*cells)
    out.print(table)
    out.print(
        f"[dim]per GPU against a budget of {format_bytes(rows[0]['budget_bytes'], units)}"
        f" ({data['headroom']:.0%}); tokens/s from the bill's step time"
        + (
            f" at a pinned {rows[0]['mfu']:.0%} MFU"
            if rows[0].get("mfu_pinned")
            else f" from operators ({rows[0]['mfu']:.0%} MFU for the first, engine/train_speed.py)"
        )
        + ("; CPU offload's PCIe traffic is not priced" if offload else "")
        + "[/dim]"
    )
    export = rows[0].get("export")
    if not export:
        return
    out.print(f"\nLaunch the top layout with {export['engine']}:")
    if export["config"] is not None:
        name = "ds_config.json" if export["engine"] == "deepspeed" else "accelerate_fsdp.json"
        out.print(f"{name}:")
        click.echo(json.dumps(export["config"], indent=2))
    click.echo(export["command"])
    for note in export["notes"]:
        out.print(f"[dim]note: {note}[/dim]")


def _goal_ranked_by(objective: str) -> str:
    """What a token goal's objective ranks by (its tokens are fixed: cost is the job's price)."""
    figure = {
        "gpus": "fewest GPUs",
        "cost": "the job's total price",
        "token-cost": "the job's total price",
        "throughput": "tokens/s per GPU",
        "latency": "days to train",
    }.get(objective)
    return f"{objective} ({figure})" if figure else objective


def _layout_cell(r: dict[str, Any]) -> str:
    """dp, tp, pp and, where used, context parallelism, virtual stages and sequence parallelism
    (expert parallelism has its own column)."""
    parts = [f"dp={r['dp']}", f"tp={r['tp']}", f"pp={r['pp']}"]
    parts += [f"cp={r['cp']}"] if r["cp"] > 1 else []
    parts += [f"vpp={r['vpp']}"] if r["vpp"] > 1 else []
    return " ".join(parts) + (" sp" if r["sp"] else "")


GOAL_OPTIONS = (
    "tokens",
    "days",
    "seq",
    "global_batch_tokens",
    "recipe",
    "lora_rank",
    "qlora",
    "headroom",
    "mfu",
)
GOAL_CSV_FIELDS = (
    "rank",
    "gpu",
    "gpus",
    "layout",
    "ep",
    "micro_batch",
    "grad_accum",
    "checkpointing",
    "per_gpu_total_bytes",
    "tokens_per_second",
)
GOAL_CSV_TIME = ("days", "gpu_hours", "cost_usd", "mfu_achieved")
GOAL_COLUMNS = (
    "#",
    "GPUs",
    "layout",
    "ep",
    "micro × accum",
    "recompute",
    "per GPU",
    "tokens/s",
    "days",
    "GPU-hours",
    "MFU",
    "cost",
)


def run_training_goal(
    model: str,
    gpus: tuple[str, ...],
    options: dict[str, Any],
    goal: dict[str, Any],
    top: int,
    units: str,
    as_json: bool,
    as_csv: bool,
) -> None:
    """`plan --train --tokens 2T --days 7`: per GPU type, the fewest GPUs that make it."""
    from gpuplan.api.plan_data import training_goal_data
    from gpuplan.api.training_plans import plan_training_goal

    ranked = plan_training_goal(model, gpus=list(gpus) or None, **_goal_arguments(options, goal))
    data = training_goal_data(
        ranked[: max(1, top)], days=options.get("days"), objective=goal["objective"], units=units
    )
    if as_json:
        print_json(data)
    elif as_csv:
        _write_goal_csv(data["options"])
    else:
        render_training_goal(data, units)


def _goal_arguments(options: dict[str, Any], goal: dict[str, Any]) -> dict[str, Any]:
    """`plan_training_goal`'s keyword arguments: the training options that apply to a token
    goal (any other is refused), the ranking, the prices and the GPU cap."""
    extra = sorted(set(options) - set(GOAL_OPTIONS))
    if extra:
        raise click.UsageError(f"--{extra[0].replace('_', '-')} does not apply with --tokens")
    kw = {k: v for k, v in options.items() if k in GOAL_OPTIONS}
    if goal["max_gpus"]:
        kw["max_gpus"] = goal["max_gpus"]
    return {**kw, "objective": goal["objective"], "prices": list(goal["prices"])}


def _write_goal_csv(rows: list[dict[str, Any]]) -> None:
    """One CSV row per GPU type: its plan, then its time, GPU-hours, cost and achieved MFU."""
    import csv
    import sys

    writer = csv.writer(sys.stdout)
    writer.writerow([*GOAL_CSV_FIELDS, *GOAL_CSV_TIME])
    for r in rows:
        writer.writerow([*(r[c] for c in GOAL_CSV_FIELDS), *(r["time"][c] for c in GOAL_CSV_TIME)])


def render_training_goal(data: dict[str, Any], units: str) -> None:
    """`gpuplan.plan-train-goal/1` as a heading and one table row per GPU type."""
    from rich.table import Table

    out = console()
    when = f" within {data['days']:g} days" if data["days"] else ""
    out.print(
        f"[bold]{data['model']}[/bold]  train {data['tokens']:,} tokens{when}"
        f" · ranked by {_goal_ranked_by(data['objective'])}"
    )
    table = Table(box=None, header_style="bold")
    for col in GOAL_COLUMNS:
        table.add_column(col, justify="left" if col in ("GPUs", "layout", "recompute") else "right")
    for r in data["options"]:
        t = r["time"]
        table.add_row(
            str(r["rank"]),
            f"{r['gpus']} × {r['gpu']}",
            _layout_cell(r),
            str(r["ep"]),
            f"{r['micro_batch']} × {r['grad_accum']}",
            r["checkpointing"],
            format_bytes(r["per_gpu_total_bytes"], units),
            f"{t['tokens_per_second']:,.0f}",
            f"{t['days']:,.2f}",
            f"{t['gpu_hours']:,.0f}",
            f"{t['mfu_achieved']:.0%}"
            + ("" if t["mfu_assumed"] is None else f" (pinned {t['mfu_assumed']:.0%})"),
            "-" if t["cost_usd"] is None else f"${t['cost_usd']:,.0f}",
        )
    out.print(table)
    for r in data["options"][:1]:
        where = r["time"].get("where")
        if where:
            parts = ", ".join(f"{k} {v:.0%}" for k, v in where.items() if v >= 0.005)
            out.print(f"Where the time goes (rank 1): {parts}")
    out.print(f"GPU counts: {data['gpu_counts']}; {data['global_batch']}")
    for line in data["left_out"]:
        out.print(f"[dim]not ranked: {line}[/dim]")
    out.print(
        "[dim]time = steps × step time (engine/train_speed.py: GEMMs, attention, elementwise,"
        " recompute, optimizer, pipeline bubble, exposed communication per dimension; --mfu"
        " pins it); MFU achieved = model FLOPs ÷ (GPUs × peak × time); cost from"
        " catalog/data/prices.toml or --price[/dim]"
    )


def run_training_matrix(
    model: str, gpu: str, options: dict[str, Any], units: str, as_json: bool, as_csv: bool
) -> None:
    """`plan --train --matrix`: memory per GPU vs GPU count for ZeRO 0-3."""
    from gpuplan.api.plan_matrix import training_budget_matrix
    from gpuplan.cli.plan_render import render_matrix

    kw = {
        k: options[k]
        for k in ("seq", "recipe", "lora_rank", "qlora", "headroom", "gpu_memory")
        if k in options
    }
    data = training_budget_matrix(model, gpu, **kw)
    render_matrix(data, units, as_json, as_csv)
