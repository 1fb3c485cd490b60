"""`gpuplan plan`: rank the layouts that fit, and export a launch command for an engine.

Serving by default (vLLM/SGLang commands); with `--train`, the training layouts of a GPU count
(`cli/plan_train.py`: DeepSpeed, FSDP or Megatron-LM configs).
"""

from __future__ import annotations

from typing import Any

import click

from gpuplan.cli.jsonout import print_json
from gpuplan.cli.options import headroom_option, units_option
from gpuplan.errors import GpuplanError

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
@click.option("--users", type=int, default=1, show_default=True, help="Concurrent users.")
@click.option("--tpot", default=None, help="Time per output token target, e.g. 33ms.")
@click.option("--ttft", default=None, help="Time to first token target, e.g. 2s.")
@click.option(
    "--prompt",
    "prompt_tokens",
    type=int,
    default=None,
    help="Prompt tokens per request for the speed model. [default: 3/4 of --context]",
)
@click.option(
    "--output",
    "output_tokens",
    type=int,
    default=None,
    help="Output tokens per request. [default: the rest of --context]",
)
@click.option(
    "--objective",
    type=click.Choice(["gpus", "cost", "throughput", "latency"]),
    default="gpus",
    show_default=True,
    help="What to rank plans by.",
)
@click.option(
    "--price",
    "prices",
    multiple=True,
    help="GPU price per GPU-hour, e.g. H100=2.5 (repeat); overrides the price table.",
)
@click.option("--max-gpus", type=int, default=None, help="Most GPUs a plan may use.")
@click.option(
    "--matrix",
    is_flag=True,
    help="Budget table: context × users (serving) or memory vs GPUs per ZeRO stage (--train).",
)
@click.option("--csv", "as_csv", is_flag=True, help="With --matrix or a ranking: CSV output.")
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
@click.option("--gpu-memory", default=None, help="Override the GPU's memory, e.g. 80GB.")
@click.option("--tokens", default=None, help="--train: tokens to train, e.g. 2T.")
@click.option("--days", type=float, default=None, help="--train: deadline in days.")
@click.option("--mfu", type=float, default=None, help="--train: assumed MFU. [default: 0.4]")
@click.option(
    "--calibration",
    default=None,
    help="A `gpuplan calibrate` file: its fitted speed figures replace the defaults.",
)
@units_option
@click.option("--json", "as_json", is_flag=True)
def plan_command(
    model: str,
    gpus: tuple[str, ...],
    dtypes: tuple[str, ...],
    kv_dtype: str | None,
    context: int,
    users: int,
    tpot: str | None,
    ttft: str | None,
    prompt_tokens: int | None,
    output_tokens: int | None,
    objective: str,
    prices: tuple[str, ...],
    max_gpus: int | None,
    matrix: bool,
    as_csv: bool,
    headroom: float,
    engine: str | None,
    top: int,
    train: bool,
    calibration: str | None,
    units: str,
    as_json: bool,
    **training: Any,
) -> None:
    """Rank the ways to serve MODEL to --users users within --tpot and --ttft: per GPU type and
    weight format, the best layout (tp, pp, expert parallelism) and number of replicas.

    With --train: rank the training layouts of --gpus GPUs that fit, fastest first; with
    --tokens (and --days), the fewest GPUs per GPU type that train that many tokens in time.
    """
    given = {k: v for k, v in training.items() if v is not None}
    goal: dict[str, Any] = {"objective": objective, "prices": prices, "max_gpus": max_gpus}
    if train:
        if calibration:
            raise GpuplanError("--calibration calibrates serving speed; --train does not use it")
        _refuse_serving_asks(tpot, ttft, prompt_tokens, output_tokens)
        _plan_training(
            model,
            gpus,
            dtypes,
            kv_dtype,
            headroom,
            engine,
            top,
            units,
            as_json,
            given,
            goal,
            matrix,
            as_csv,
        )
        return
    if engine in TRAINING_ENGINES:
        raise GpuplanError(f"--export {engine} is a training engine; add --train")
    gpu_memory = _serving_gpu_memory(given)
    if matrix:
        _serving_matrix(model, gpus, dtypes, kv_dtype, headroom, gpu_memory, units, as_json, as_csv)
        return
    if gpu_memory is not None:
        raise GpuplanError("--gpu-memory: with --train or --matrix (a ranking compares GPU types)")
    from gpuplan.api.plan_data import serving_plan_data
    from gpuplan.cli.plan_render import render_serving_plans

    data = serving_plan_data(
        model,
        gpus=gpus,
        dtypes=dtypes,
        kv_dtype=kv_dtype,
        context=context,
        users=users,
        headroom=headroom,
        tpot=tpot,
        ttft=ttft,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        top=top,
        units=units,
        engine=engine,
        calibration=calibration,
        **goal,
    )
    if as_json:
        print_json(data)
        return
    render_serving_plans(data, units, as_csv)


def _refuse_serving_asks(
    tpot: str | None, ttft: str | None, prompt: int | None, output: int | None
) -> None:
    """--train sizes a training step: the serving targets and asks (given, not defaulted) are
    refused with the training option to use instead."""
    for flag, value in (
        ("--tpot", tpot),
        ("--ttft", ttft),
        ("--prompt", prompt),
        ("--output", output),
    ):
        if value is not None:
            raise GpuplanError(f"{flag} is a serving target; --train plans to --tokens/--days")
    ctx = click.get_current_context()
    for name, instead in (("context", "--seq"), ("users", "--global-batch-tokens")):
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            raise GpuplanError(
                f"--{name} is a serving ask; --train sizes a training step: give {instead}"
            )


def _serving_gpu_memory(given: dict[str, Any]) -> Any:
    """The one training option a serving plan takes (--gpu-memory); any other is refused."""
    gpu_memory = given.pop("gpu_memory", None)
    if given:
        flags = ", ".join("--" + k.replace("_", "-").replace("gpu-count", "gpus") for k in given)
        raise GpuplanError(f"{flags}: only with --train")
    return gpu_memory


def _serving_matrix(
    model: str,
    gpus: tuple[str, ...],
    dtypes: tuple[str, ...],
    kv_dtype: str | None,
    headroom: float,
    gpu_memory: Any,
    units: str,
    as_json: bool,
    as_csv: bool,
) -> None:
    """`plan --matrix`: memory per GPU over context × users, for one GPU type and format."""
    from gpuplan.api.planning import serving_budget_matrix
    from gpuplan.cli.plan_render import render_matrix

    if len(gpus) > 1 or len(dtypes) > 1:
        raise GpuplanError("--matrix takes one --gpu and one --dtype")
    data = serving_budget_matrix(
        model,
        gpus[0] if gpus else "h100",
        dtype=dtypes[0] if dtypes else None,
        kv_dtype=kv_dtype,
        headroom=headroom,
        gpu_memory=gpu_memory,
    )
    render_matrix(data, units, as_json, as_csv)


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
    goal: dict[str, Any],
    matrix: bool,
    as_csv: bool,
) -> None:
    from gpuplan.cli.plan_train import run_plan_training, run_training_goal, run_training_matrix

    if engine in SERVING_ENGINES:
        raise GpuplanError(
            f"--export {engine} is a serving engine; with --train export to"
            f" {', '.join(TRAINING_ENGINES)}"
        )
    if len(gpus) > 1 and "tokens" not in given:
        raise GpuplanError("--train plans one GPU type: give a single --gpu (or plan to --tokens)")
    if dtypes or kv_dtype:
        raise GpuplanError("--dtype and --kv-dtype are serving options; --train uses --recipe")
    options: dict[str, Any] = {"headroom": headroom}
    for key, value in given.items():
        options["gpus" if key == "gpu_count" else key] = value
    if matrix:
        run_training_matrix(model, gpus[0] if gpus else "h100", options, units, as_json, as_csv)
        return
    if "tokens" in options or "days" in options:
        if "tokens" not in options:
            raise GpuplanError("--days needs --tokens: how many tokens to train")
        run_training_goal(model, gpus or ("h100",), options, goal, top, units, as_json, as_csv)
        return
    options.pop("mfu", None) if options.get("mfu") is None else None
    run_plan_training(model, gpus[0] if gpus else "h100", options, engine, top, units, as_json)
