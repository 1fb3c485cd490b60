"""`gpuplan calibrate RESULT...`: refit the speed model's fitted figures on a benchmark of your
own (`vllm bench serve --save-result` JSON, SGLang `bench_serving --output-file` JSON lines) and
write a calibration file for `plan --calibration`."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from gpuplan.cli.options import memory_fraction_option
from gpuplan.cli.render import console, print_json


@click.command("calibrate")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--model", required=True, help="The model the run served (catalog id or config).")
@click.option("--gpu", required=True, help="The GPU the run used.")
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree of the run.")
@click.option("--pp", default=1, show_default=True, help="Pipeline-parallel degree of the run.")
@click.option("--dtype", default=None, help="Weight format [default: the checkpoint's].")
@click.option("--kv-dtype", default=None, help="KV-cache format [default: the weights'].")
@click.option("--engine", default="vllm", show_default=True, help="vllm, sglang or trtllm.")
@click.option("--engine-version", default=None, metavar="VERSION", help="The engine's version.")
@click.option("--eager", is_flag=True, help="The run used --enforce-eager (no CUDA graphs).")
@click.option(
    "--disable-radix-cache",
    is_flag=True,
    help="SGLang: the server ran with --disable-radix-cache (its admission of EOS-ignoring"
    " requests changes with it).",
)
@memory_fraction_option
@click.option(
    "--fit-on",
    multiple=True,
    type=int,
    help="Run number(s) to fit on, 1-based over the files' runs [default: 1]; the rest are"
    " predicted.",
)
@click.option("--out", default=None, help="Write the calibration file here (JSON).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def calibrate_command(
    results: tuple[str, ...],
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    dtype: str | None,
    kv_dtype: str | None,
    engine: str,
    engine_version: str | None,
    eager: bool,
    disable_radix_cache: bool,
    memory_fraction: float | None,
    fit_on: tuple[int, ...],
    out: str | None,
    as_json: bool,
) -> None:
    """Fit the speed model to RESULT files of one GPU, engine and layout; print every run's median
    |error| before and after, on the fitted run and on the others."""
    from gpuplan.api.calibration import (
        calibrate,
        measured_runs,
        read_results,
        request_knob,
        save_calibration,
    )
    from gpuplan.api.engines import engine_args

    runs = read_results(results)
    launch = engine_args(engine, {"memory_fraction": memory_fraction})
    measured = measured_runs(
        runs,
        model,
        gpu,
        tp,
        pp,
        dtype,
        kv_dtype,
        engine,
        engine_version,
        not eager,
        radix_cache=not disable_radix_cache,
        engine_args=launch,
    )
    report = calibrate(measured, tuple(i - 1 for i in fit_on) or (0,))
    if out:
        save_calibration(report, out)
    if as_json:
        print_json(report.to_dict())
        return
    con = console()
    con.print(f"[bold]{escape(report.model)}[/bold] · {report.gpu} · {escape(report.engine)}")
    table = Table(show_edge=False, pad_edge=False)
    for col in ("#", "run", "median |error| before", "after", ""):
        table.add_column(col)
    for i, (label, b, a) in enumerate(zip(report.labels, report.before, report.after, strict=True)):
        mark = "fitted" if i in report.fitted_on else "predicted"
        table.add_row(str(i + 1), escape(label), f"{b:.1%}", f"{a:.1%}", mark)
    con.print(table)
    k = report.knobs
    request = getattr(k, request_knob(measured))
    con.print(
        f"fitted: HBM {k.hbm:.2f} of peak, {k.kernel_graph_us:.1f} µs per kernel (graphs),"
        f" {k.kernel_eager_us:.1f} µs (eager), {k.step_ms:.2f} ms per step,"
        f" {request:.1f} ms per request, {k.seq_us:.0f} µs per sequence per step"
    )
    if out:
        con.print(f"wrote {escape(out)}")
