"""`gpuplan train`: the training bill per GPU, the host bill, and what a step costs."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from gpuplan.cli.options import (
    gpu_memory_option,
    gpus_option,
    headroom_option,
    parse_gpus,
    units_option,
)
from gpuplan.cli.render import (
    console,
    print_answers,
    print_bill,
    print_json,
    print_search_and_notes,
)
from gpuplan.units import format_bytes, format_count


@click.command("train")
@click.argument("model")
@click.option(
    "--gpu", default="h100", show_default=True, help="GPU name or alias (see `gpuplan gpus`)."
)
@gpus_option
@click.option(
    "--zero", type=int, default=None, help="ZeRO stage 0-3 (DeepSpeed). [default: searched]"
)
@click.option(
    "--fsdp",
    default=None,
    help="FSDP sharding strategy: full_shard (=ZeRO-3), shard_grad_op (=ZeRO-2), hybrid_shard, no_shard.",
)
@click.option("--tp", type=int, help="Tensor-parallel degree.")
@click.option("--pp", type=int, help="Pipeline-parallel degree.")
@click.option(
    "--sp", is_flag=True, help="Sequence parallelism (splits norm/residual activations over tp)."
)
@click.option("--cp", type=int, default=1, show_default=True, help="Context-parallel degree.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel degree (MoE).")
@click.option(
    "--recipe",
    default="adamw-bf16",
    show_default=True,
    help="Training recipe (see `gpuplan recipes`).",
)
@click.option("--seq", type=int, default=4096, show_default=True, help="Sequence length.")
@click.option(
    "--micro-batch",
    type=int,
    default=1,
    show_default=True,
    help="Sequences per micro-batch per GPU.",
)
@click.option("--grad-accum", type=int, default=None, help="Micro-batches per step. [default: pp]")
@click.option(
    "--checkpointing",
    type=click.Choice(["none", "selective", "full"]),
    default="none",
    show_default=True,
    help="Activation checkpointing (recompute).",
)
@click.option(
    "--attention",
    type=click.Choice(["flash", "sdpa", "eager"]),
    default="flash",
    show_default=True,
    help="Attention kernel: flash/sdpa store no s² scores; eager does.",
)
@click.option(
    "--lora-rank", type=int, default=None, help="Train LoRA adapters of this rank on a frozen base."
)
@click.option(
    "--lora-targets",
    default=None,
    help="Comma-separated modules, or all-linear. [default: q,k,v,o]",
)
@click.option(
    "--qlora", is_flag=True, help="QLoRA: NF4 base with double quantisation (rank 64 unless given)."
)
@click.option(
    "--offload", type=click.Choice(["optimizer", "params"]), default=None, help="CPU offload."
)
@click.option("--offload-activations", is_flag=True, help="Offload saved activations to CPU.")
@click.option(
    "--capacity-factor",
    type=float,
    default=1.0,
    show_default=True,
    help="MoE expert capacity factor.",
)
@headroom_option
@gpu_memory_option
@click.option(
    "--mfu", type=float, default=0.4, show_default=True, help="Utilisation of peak bf16 FLOP/s."
)
@click.option(
    "--network",
    default=None,
    help="Inter-node bandwidth per GPU per direction [default: 50GB (/s)].",
)
@units_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON schema of docs/json.md.")
@click.option(
    "--explain", is_flag=True, help="Show each line's arithmetic with the numbers substituted."
)
def train_command(
    model: str, gpus: str | None, as_json: bool, explain: bool, units: str, **kw: Any
) -> None:
    """Will training MODEL fit, on how many GPUs, and how fast?

    MODEL is a catalog name (llama-3.1-8b), a Hugging Face id in the catalog, or a path to a
    config.json or to a model directory holding one.
    """
    from gpuplan.api import train

    network = kw.pop("network")
    ask = {"model": model, "gpus": parse_gpus(gpus), "network_bandwidth": network, **kw}
    plan = train(**ask)
    data = plan.to_dict(units)
    data["fixes"] = []
    if not plan.fits:  # the three answers (fewer bytes, a bigger GPU, more GPUs)
        from gpuplan.api.planning import training_answers

        data["fixes"] = training_answers(ask, plan)
    if as_json:
        print_json(data)
        return
    render_training(data, units, explain)


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
        f"[bold]{m['id']}[/bold]  {format_count(data['params_total'])} params · {what}"
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
    print_search_and_notes(out, data)
    if not data["fits"]:
        print_answers(out, data["fixes"], units)


@click.command("recipes")
@click.option("--json", "as_json", is_flag=True, help="Print the recipes as JSON.")
def recipes_command(as_json: bool) -> None:
    """The training recipes: bytes per parameter of weights, gradients, master and states."""
    from gpuplan.catalog.recipes import list_recipes

    rows = [
        {
            "id": r.id,
            "name": r.name,
            "weights": r.weights.id,
            "grads": r.grads.id,
            "master": r.master.id if r.master else None,
            "states": [{"name": s.name, "format": s.format.id} for s in r.states],
            "factored": r.factored,
            "bytes_per_param": float(r.bytes_per_param),
            "source": r.source,
        }
        for r in list_recipes()
    ]
    if as_json:
        print_json({"recipes": rows})
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("recipe", "bytes/param", "weights + grads + master + states"):
        table.add_column(col)
    for r in list_recipes():
        b = float(r.bytes_per_param)
        parts = [r.weights.id, r.grads.id, r.master.id if r.master else "-"]
        parts.append(", ".join(f"{s.name} {s.format.id}" for s in r.states) or "-")
        if r.factored:
            parts[-1] = "factored 2nd moment"
        table.add_row(r.id, f"{b:g}" if b == round(b, 3) else f"{b:.3f}", " + ".join(parts))
    console().print(table)
