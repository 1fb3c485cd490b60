"""`gpuplan train`'s table output: the bill, the host bill, the step and its phases (no click:
the fast path, cli/fast.py, renders with it too)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuplan.cli.render import console, print_answers, print_bill, print_search_and_notes
from gpuplan.units import format_bytes, format_count


def host_table(host: dict[str, Any], units: str, explain: bool) -> Table:
    """The host (CPU) bill of one GPU's offloaded states and activations."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("per GPU, on the host")
    table.add_column(units, justify="right")
    table.add_column("formula" if explain else "how", overflow="fold")
    for item in host["items"]:
        how = item["explain"] if explain else item["formula"]
        table.add_row(item["name"], format_bytes(item["bytes"], units), how)
    table.add_row(
        Text("total", style="bold"),
        Text(format_bytes(host["per_gpu_bytes"], units), style="bold"),
        f"per node {format_bytes(host['per_node_bytes'], units)}",
    )
    return table


def render_training(data: dict[str, Any], units: str, explain: bool) -> None:
    out = console()
    gpu, m, lo = data["gpu"], data["model"], data["layout"]
    lora = data["lora"]
    what = (
        f"{'QLoRA' if lora['qlora'] else 'LoRA'} r={lora['rank']} ({format_count(data['params_trainable'])} trainable)"
        if lora
        else "full training"
    )
    out.print(
        f"[bold]{escape(m['id'])}[/bold]  {format_count(data['params_total'])} params · {what}"
        f" · {data['recipe']['describe']}"
    )
    out.print(
        f"{data['gpus']} × {gpu['name']} ({format_bytes(gpu['memory_bytes'], units)}, {gpu['memory_basis']})"
        f"  {lo['describe']}  seq {data['seq']:,} × micro-batch {data['micro_batch']}"
        f" × {data['grad_accum']} micro-batches · checkpointing {data['checkpointing']}"
        f" · {data['attention_kernel']} attention"
    )
    print_bill(
        out,
        data,
        units,
        explain,
        f"; model states {format_bytes(data['model_states_bytes'], units)},"
        f" activations {format_bytes(data['activations_bytes'], units)}",
    )
    host = data["host"]
    if host["items"]:
        out.print(
            f"Host memory (offload): {format_bytes(host['per_gpu_bytes'], units)} per GPU,"
            f" {format_bytes(host['per_node_bytes'], units)} per node"
        )
        out.print(host_table(host, units, explain))
    comm = data["comm_bytes_by_kind"]
    parts = ", ".join(f"{k} {format_bytes(v, units)}" for k, v in comm.items() if v)
    out.print(
        f"Step: {data['step_flops'] / 1e15:,.1f} PFLOP over {data['tokens_per_step']:,} tokens;"
        f" communication per GPU {format_bytes(data['comm_bytes_per_step'], units)}"
        + (f" ({parts})" if parts else "")
    )
    if data["tokens_per_second"]:
        out.print(
            f"Estimated step {data['step_time_s']:.2f} s (compute {data['compute_time_s']:.2f} s at"
            f" {data['mfu']:.0%} utilisation, exposed communication {data['exposed_comm_time_s']:.2f} s)"
            f" → {data['tokens_per_second']:,.0f} tokens/s"
        )
    figures = data["memory_figures"]
    out.print(
        f"Peak: the {data['peak_phase'].replace('_', ' ')} phase — allocated"
        f" {format_bytes(figures['allocated_bytes'], units)}, reserved"
        f" {format_bytes(figures['reserved_bytes'], units)}, nvidia-smi"
        f" {format_bytes(figures['nvidia_smi_bytes'], units)} ({data['framework']['name']};"
        f" {data['loss']['describe']})"
    )
    if explain:
        out.print(phase_table(data["phases"], data["peak_phase"], units))
    print_search_and_notes(out, data)
    if not data["fits"] and data.get("fixes") is not None:
        print_answers(out, data["fixes"], units)


PHASE_COLUMNS = ("weights", "gradients", "master", "optimizer", "activations", "transient", "comm")


def phase_table(phases: list[dict[str, Any]], peak: str, units: str) -> Table:
    """The step as a timeline: each phase's live bytes by category, the peak marked."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("phase")
    for col in PHASE_COLUMNS:
        table.add_column(col, justify="right")
    table.add_column(f"total {units}", justify="right")
    for p in phases:
        style = "bold" if p["name"] == peak else ""
        cats = p["bytes_by_category"]
        table.add_row(
            Text(p["label"] + (" ◀ peak" if p["name"] == peak else ""), style=style),
            *[format_bytes(cats.get(c, 0), units) for c in PHASE_COLUMNS],
            Text(format_bytes(p["total_bytes"], units), style=style),
        )
    return table
