"""`gpuplan plan`: rank the layouts that fit, and export a launch command for an engine.

Serving by default (vLLM/SGLang commands); with `--train`, the training layouts of a GPU count
(`cli/plan_train.py`: DeepSpeed, FSDP or Megatron-LM configs).
"""

from __future__ import annotations

from typing import Any

import click

from gpuplan.cli.options import headroom_option, units_option
from gpuplan.cli.render import console, print_json
from gpuplan.errors import GpuplanError
from gpuplan.units import format_bytes

SERVING_ENGINES = ("vllm", "sglang")
TRAINING_ENGINES = ("deepspeed", "fsdp", "megatron")


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
@headroom_option
@click.option(
    "--export",
    "engine",
    type=click.Choice([*SERVING_ENGINES, *TRAINING_ENGINES]),
    default=None,
    help="Print the launch command (serving: vllm, sglang) or config (--train: deepspeed,"
    " fsdp, megatron) for the top option.",
)
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option(
    "--train",
    is_flag=True,
    help="Rank training layouts (ZeRO/FSDP, tp, pp, micro-batch, recompute).",
)
@click.option(
    "--gpus", "gpu_count", type=int, default=None, help="--train: GPU count. [default: 8]"
)
@click.option("--seq", type=int, default=None, help="--train: sequence length. [default: 4096]")
@click.option(
    "--global-batch-tokens",
    type=int,
    default=None,
    help="--train: tokens per optimizer step. [default: gpus × seq × 8]",
)
@click.option("--recipe", default=None, help="--train: training recipe. [default: adamw-bf16]")
@click.option("--lora-rank", type=int, default=None, help="--train: LoRA adapters of this rank.")
@click.option("--qlora", is_flag=True, default=None, help="--train: QLoRA (NF4 base).")
@click.option("--gpu-memory", default=None, help="--train: override the GPU's memory, e.g. 80GB.")
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
    train: bool,
    units: str,
    as_json: bool,
    **training: Any,
) -> None:
    """Rank the ways to serve MODEL: per GPU type and weight format, the fewest GPUs that fit.

    With --train: rank the training layouts of --gpus GPUs that fit, fastest first.
    """
    from rich.table import Table

    from gpuplan.api import DEFAULT_PLAN_GPUS, plan

    given = {k: v for k, v in training.items() if v is not None}
    if train:
        _plan_training(model, gpus, dtypes, kv_dtype, headroom, engine, top, units, as_json, given)
        return
    if engine in TRAINING_ENGINES:
        raise GpuplanError(f"--export {engine} is a training engine; add --train")
    if given:
        flags = ", ".join("--" + k.replace("_", "-").replace("gpu-count", "gpus") for k in given)
        raise GpuplanError(f"{flags}: only with --train")

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


def _plan_training(
    model: str,
    gpus: tuple[str, ...],
    dtypes: tuple[str, ...],
    kv_dtype: str | None,
    headroom: float,
    engine: str | None,
    top: int,
    units: str,
    as_json: bool,
    given: dict[str, Any],
) -> None:
    from gpuplan.cli.plan_train import run_plan_training

    if engine in SERVING_ENGINES:
        raise GpuplanError(
            f"--export {engine} is a serving engine; with --train export to"
            f" {', '.join(TRAINING_ENGINES)}"
        )
    if len(gpus) > 1:
        raise GpuplanError("--train plans one GPU type: give a single --gpu")
    if dtypes or kv_dtype:
        raise GpuplanError("--dtype and --kv-dtype are serving options; --train uses --recipe")
    options: dict[str, Any] = {"headroom": headroom}
    for key, value in given.items():
        options["gpus" if key == "gpu_count" else key] = value
    run_plan_training(model, gpus[0] if gpus else "h100", options, engine, top, units, as_json)
