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
@click.argument("model", required=False)
@click.option(
    "--gpu", default="h100", show_default=True, help="GPU name or alias (see `gpuplan gpus`)."
)
@gpus_option
@click.option(
    "--from",
    "config",
    default=None,
    help="A framework config to read: torchtitan TOML, torchtune YAML, Megatron-LM flags or"
    " model_config.yaml, DeepSpeed JSON, TrainingArguments JSON.",
)
@click.option(
    "--format",
    "config_format",
    type=click.Choice(["torchtitan", "torchtune", "megatron", "deepspeed", "hf-trainer"]),
    default=None,
    help="The --from config's framework. [default: from its name and content]",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    help="torchtune key=value override of the --from config (repeatable).",
)
@click.option(
    "--framework",
    default=None,
    help="How the job runs: generic (the lesson), torchtitan, torchtune, megatron, deepspeed,"
    " hf-trainer, fsdp2, ddp (see `gpuplan frameworks`). [default: generic]",
)
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
    "--virtual-stages",
    "vpp",
    type=int,
    default=1,
    show_default=True,
    help="Model chunks per pipeline rank: interleaved 1F1B (Megatron's virtual pipeline).",
)
@click.option(
    "--recipe",
    default=None,
    help="Training recipe (see `gpuplan recipes`). [default: the framework's; adamw-bf16]",
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
    default=None,
    help="Recompute: none, selective (Megatron core attention), op (torchtitan op-level),"
    " full, every:K (each K-th layer), block:N, uniform:K. [default: the framework's; none]",
)
@click.option(
    "--loss",
    default=None,
    help="Loss: standard, plain, chunked:N, linear_chunked:N, compiled, fused,"
    " vocab_parallel. [default: the framework's]",
)
@click.option(
    "--compile/--no-compile", "compile_", default=None, help="torch.compile the model and loss."
)
@click.option(
    "--grads",
    type=click.Choice(["set_to_none", "persistent"]),
    default=None,
    help="Gradient lifetime: freed after each step, or a persistent buffer.",
)
@click.option(
    "--reshard-after-forward/--no-reshard-after-forward",
    default=None,
    help="FSDP2: free gathered units after their forward.",
)
@click.option(
    "--optimizer-in-backward", is_flag=True, default=None, help="Step each parameter in backward."
)
@click.option(
    "--optimizer-kernel",
    type=click.Choice(["fused", "foreach", "for-loop"]),
    default=None,
    help="The optimizer implementation (its step's temporaries).",
)
@click.option(
    "--fp8", type=click.Choice(["none", "te", "torchao"]), default=None, help="fp8 training."
)
@click.option("--stage", default=None, help="Bill this pipeline stage: first, last or an index.")
@click.option(
    "--attention",
    type=click.Choice(["flash", "sdpa", "eager"]),
    default="flash",
    show_default=True,
    help="Attention and state-mixer kernels: flash/sdpa (no s² scores; fused mamba_ssm, fla,"
    " causal-conv1d kernels) or eager (s² scores; the transformers torch fallbacks).",
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
    "--explain",
    is_flag=True,
    help="Show each line's arithmetic and every phase of the step.",
)
def train_command(
    model: str | None,
    gpus: str | None,
    as_json: bool,
    explain: bool,
    units: str,
    config: str | None,
    config_format: str | None,
    overrides: tuple[str, ...],
    **kw: Any,
) -> None:
    """Will training MODEL fit, on how many GPUs, and how fast?

    MODEL is a catalog name (llama-3.1-8b, see `gpuplan models`), a local config.json, model
    folder, .safetensors or .gguf file, or a Hugging Face repo id (meta-llama/Llama-3.1-8B),
    read from the local Hugging Face cache, else from the Hub (config and safetensors headers
    only; HF_HUB_OFFLINE=1 stays offline). With --from, the config may name it.
    """
    from gpuplan.api import train, train_from

    kw["network_bandwidth"] = kw.pop("network")
    kw["compile"] = kw.pop("compile_")
    stage = kw.pop("stage")
    kw["stage"] = int(stage) if stage and stage.lstrip("-").isdigit() else stage
    ask: dict[str, Any] | None = None
    if config is None:
        if model is None:
            raise click.UsageError("Missing argument MODEL (or --from CONFIG)")
        ask = {"model": model, "gpus": parse_gpus(gpus), **kw}
        plan = train(**ask)
    else:
        given = {k: v for k, v in kw.items() if v not in (None, False, ())}
        for name, default in DEFAULTS.items():  # flags left at their default defer to the config
            if given.get(name) == default:
                given.pop(name)
        plan = train_from(
            config,
            model,
            format=config_format,
            overrides=list(overrides),
            gpus=parse_gpus(gpus),
            **given,
        )
    data = plan.to_dict(units)
    data["fixes"] = [] if ask is not None else None  # not looked for from a framework config
    if not plan.fits and ask is not None:  # the three answers (fewer bytes, bigger GPU, more GPUs)
        from gpuplan.api.planning import training_answers

        data["fixes"] = training_answers(ask, plan)
    if as_json:
        print_json(data)
        return
    render_training(data, units, explain)


DEFAULTS = {
    "seq": 4096,
    "micro_batch": 1,
    "cp": 1,
    "ep": 1,
    "vpp": 1,
    "attention": "flash",
    "capacity_factor": 1.0,
    "headroom": 0.9,
    "mfu": 0.4,
}


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


@click.command("frameworks")
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
def frameworks_command(as_json: bool) -> None:
    """The training frameworks' memory profiles, each value with where it was read."""
    from gpuplan.catalog.frameworks import list_frameworks
    from gpuplan.engine.frozen import asdict

    profiles = list_frameworks()
    if as_json:
        rows = []
        for p in profiles:
            row = asdict(p)
            row["sources"] = dict(p.sources)
            rows.append(row)
        print_json({"frameworks": rows})
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("framework", "grads", "loss", "recompute", "recipe", "source"):
        table.add_column(col, overflow="fold")
    for p in profiles:
        table.add_row(p.id, p.grads, p.loss, p.recompute, p.recipe, p.source)
    console().print(table)


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
