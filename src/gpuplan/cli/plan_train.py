"""`gpuplan plan --train`: the ranked training layouts of a GPU count, and the top one's config."""

from __future__ import annotations

import json
from typing import Any

import click

from gpuplan.cli.render import console, print_json
from gpuplan.units import format_bytes


def run_plan_training(
    model: str,
    gpu: str,
    options: dict[str, Any],
    engine: str | None,
    top: int,
    units: str,
    as_json: bool,
) -> None:
    """Search, then print the table (or `gpuplan.plan-train/1` JSON) and the export."""
    from gpuplan.api import PLAN_TRAIN_SCHEMA_VERSION, plan_training
    from gpuplan.api.common import gpu_dict

    ranked = plan_training(model, gpu=gpu, engine=engine, top=top, **options)
    rows = [o.to_dict(units, engine) for o in ranked]
    first = ranked[0].plan
    s = first.bill.setup
    data = {
        "schema": PLAN_TRAIN_SCHEMA_VERSION,
        "model": first.model_id,
        "gpu": gpu_dict(s.gpu),
        "gpus": s.layout.gpus,
        "seq": s.seq,
        "global_batch_tokens": s.tokens_per_step,
        "recipe": s.recipe.id,
        "lora": None
        if s.lora is None
        else {"rank": s.lora.rank, "targets": list(s.lora.targets), "qlora": s.lora.quantized},
        "headroom": s.headroom,
        "engine": engine,
        "options": rows,
    }
    if as_json:
        print_json(data)
        return
    render_plan_training(data, units)


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
    cols = ["#", "layout", "ZeRO/FSDP", "micro × accum", "checkpointing"]
    cols += (["offload"] if offload else []) + ["per GPU", "tokens/s", "step"]
    for col in cols:
        table.add_column(col, justify="right" if col in ("per GPU", "tokens/s", "step") else "left")
    for r in rows:
        layout = f"dp={r['dp']} tp={r['tp']} pp={r['pp']}" + (" sp" if r["sp"] else "")
        sharding = f"ZeRO-{r['zero']} / {r['fsdp_strategy'] or '(no FSDP twin)'}"
        speed = f"{r['tokens_per_second']:,.0f}" if r["tokens_per_second"] else "-"
        step = f"{r['step_time_s']:.2f} s" if r["step_time_s"] else "-"
        cells = [str(r["rank"]), layout, sharding, f"{r['micro_batch']} × {r['grad_accum']}"]
        cells += [r["checkpointing"]] + ([r["offload"]] if offload else [])
        cells += [format_bytes(r["per_gpu_total_bytes"], units), speed, step]
        table.add_row(*cells)
    out.print(table)
    out.print(
        f"[dim]per GPU against a budget of {format_bytes(rows[0]['budget_bytes'], units)}"
        f" ({data['headroom']:.0%}); tokens/s at {rows[0]['mfu']:.0%} of peak bf16, the"
        " bill's cost model"
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
