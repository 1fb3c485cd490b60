"""`gpuplan check LOGFILE`: an engine's startup log beside gpuplan's prediction, line by line."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from gpuplan.catalog.engine_logs import clean_text
from gpuplan.cli.options import units_option
from gpuplan.cli.render import console, print_json
from gpuplan.errors import GpuplanError


@click.command("check")
@click.argument("logfile", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--model",
    default=None,
    help="The model to size, if the log's is not in the catalog: a config.json or its directory.",
)
@click.option("--gpu", default="h100", show_default=True, help="GPU the log was taken on.")
@click.option(
    "--gpu-memory", default=None, help="GPU total, e.g. 79.19GiB [default: the log's figure]."
)
@click.option(
    "--engine-version",
    default=None,
    metavar="VERSION",
    help="The engine version whose rules apply [default: the version the log prints].",
)
@units_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def check_command(
    logfile: str,
    model: str | None,
    gpu: str,
    gpu_memory: str | None,
    engine_version: str | None,
    units: str,
    as_json: bool,
) -> None:
    """Compare an engine's startup LOGFILE (vLLM, SGLang, TensorRT-LLM) with gpuplan's figures.

    Run it after an out-of-memory start: it reads the launch arguments and the memory lines the
    engine printed, predicts the same launch, and shows both, line by line.
    """
    import sys

    from gpuplan.api import check_log
    from gpuplan.catalog.engine_logs import MAX_LOG_BYTES, parse_log_bytes, read_log

    if logfile == "-":
        log = parse_log_bytes(sys.stdin.buffer.read(MAX_LOG_BYTES + 1), "stdin")
    else:
        log = read_log(logfile)
    try:
        report = check_log(log, model, gpu, gpu_memory, version=engine_version)
    except GpuplanError as err:
        if model is None and "--model" not in str(err):
            raise GpuplanError(f"{err} (pass --model PATH/TO/config.json)") from None
        raise
    if as_json:
        print_json(report.to_dict(units))
        return
    out = console()
    version = report.plan.bill.version if report.plan else (log.version or "version not printed")
    out.print(f"[bold]{escape(log.model or str(model))}[/bold] · {log.engine} ({escape(version)})")
    table = Table(show_edge=False, pad_edge=False)
    for col, just in (
        ("figure", "left"),
        ("log", "right"),
        ("gpuplan", "right"),
        ("error", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in report.rows:
        fmt = (
            "{:,.0f}"
            if row.unit in ("tokens", "blocks")
            else ("{:.2f}x" if row.unit == "x" else "{:.2f} GiB")
        )
        logged = "—" if row.logged is None else fmt.format(row.logged)
        error = "" if row.error is None else f"{row.error * 100:+.1f}%"
        table.add_row(row.label, logged, fmt.format(row.predicted), error)
    out.print(table)
    assert report.plan is not None
    bill = report.plan.bill
    r = bill.ranges.get("kv_capacity_tokens")
    if r:
        out.print(f"gpuplan KV tokens range {r.low:,}–{r.high:,} (moved by {r.moved_by})")
    logged = "failed" if log.failed else "started"
    predicted = f"fails: {bill.failure}" if bill.failure else "starts"
    out.print(escape(f"log: {logged}" + (f" ({', '.join(log.errors)})" if log.errors else "")))
    out.print(escape(f"gpuplan: {predicted}"))
    for p in report.problems:
        out.print(f"[yellow]note: {escape(clean_text(p))}[/yellow]")
