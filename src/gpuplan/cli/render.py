"""Rendering bills for the terminal: a table of lines, a bar of the GPU's memory, the arithmetic."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuplan.cli.jsonout import print_json
from gpuplan.units import format_bytes

__all__ = [
    "COLOURS",
    "bill_table",
    "change_flags",
    "console",
    "memory_bar",
    "print_answers",
    "print_bill",
    "print_json",
]

# one colour per bill category, shared with the web app's legend
COLOURS = {
    "weights": "blue",
    "kv_cache": "magenta",
    "gradients": "yellow",
    "optimizer": "red",
    "activations": "green",
    "overhead": "bright_black",
    "other": "white",
}

BAR_WIDTH = 60


class _Console(Console):
    """A console on which text from the user (a model name, a launch flag, a log line) that
    happens to read as broken markup ('[/]') prints as plain text instead of failing."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        try:
            super().print(*objects, **kwargs)
        except MarkupError:
            super().print(*objects, **{**kwargs, "markup": False})


def console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    out = _Console(highlight=False)
    if not out.is_terminal:
        out = _Console(highlight=False, width=160)
    return out


def memory_bar(
    items: list[dict[str, Any]], memory: int, budget: int, width: int = BAR_WIDTH
) -> Text:
    """A bar of the GPU's memory: one coloured run per bill line, '|' at the headroom line
    (red when the plan crosses it), '▶ OOM' when the plan exceeds the memory itself."""
    cells: list[tuple[str, str]] = []
    for item in items:
        n = round(item["bytes"] / memory * width) if memory else 0
        n = min(n, width - len(cells))
        cells += [("█", COLOURS.get(item["category"], "white"))] * n
    used = len(cells)
    cells += [("·", "bright_black")] * (width - used)
    mark = min(width - 1, round(budget / memory * width)) if memory else width - 1
    cells[mark] = ("|", "bold red" if mark < used else "bright_black")
    bar = Text()
    for char, style in cells:
        bar.append(char, style=style)
    if sum(i["bytes"] for i in items) > memory:
        bar.append(" ▶ OOM", style="bold red")
    return bar


def bill_table(
    items: list[dict[str, Any]], total: int, budget: int, units: str, explain: bool
) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("per GPU")
    table.add_column(units, justify="right")
    table.add_column("formula" if explain else "how", overflow="fold")
    for item in items:
        colour = COLOURS.get(item["category"], "white")
        how = item["explain"] if explain else item["formula"]
        table.add_row(
            Text("■ ", style=colour) + Text(item["name"]), format_bytes(item["bytes"], units), how
        )
    table.add_row(
        Text("total", style="bold"),
        Text(format_bytes(total, units), style="bold"),
        f"budget {format_bytes(budget, units)}",
    )
    return table


def print_bill(
    out: Console, data: dict[str, Any], units: str, explain: bool, extra: str = ""
) -> None:
    """The shared body of a serving or training answer: memory bar, bill table, verdict line."""
    gpu = data["gpu"]
    items = data["per_gpu"]["items"]
    out.print(memory_bar(items, gpu["memory_bytes"], data["budget_bytes"]))
    out.print(bill_table(items, data["per_gpu_total_bytes"], data["budget_bytes"], units, explain))
    verdict = (
        "[bold green]fits[/bold green]" if data["fits"] else "[bold red]does not fit[/bold red]"
    )
    pct = data["per_gpu_total_bytes"] / gpu["memory_bytes"]
    out.print(
        f"{verdict}: {format_bytes(data['per_gpu_total_bytes'], units)} of"
        f" {format_bytes(gpu['memory_bytes'], units)} per GPU ({pct:.0%}; headroom line at"
        f" {data['headroom']:.0%}){extra}"
    )


def print_search_and_notes(out: Console, data: dict[str, Any]) -> None:
    """The tail of a serving or training answer: why fewer GPUs did not do, then the notes."""
    rejected = [a for a in data["search"] if not a["fits"]]
    if rejected:
        out.print(f"Why {data['gpus']} and not fewer:")
        for a in rejected:
            out.print(f"  {a['gpus']} GPU{'s' if a['gpus'] > 1 else ''}: {a['reason']}")
    for note in data["notes"]:  # notes name tensors and files: their markup is text
        out.print(f"[dim]note: {escape(note)}[/dim]")


def print_answers(
    out: Console, answers: list[dict[str, Any]], units: str, flags: bool = True
) -> None:
    """The ways out of a plan that does not fit (api.answers.serving_answers / train_answers.training_answers:
    planner/fixes.py asks the engine for each), under the lesson's three answers; with `flags`,
    each with the `serve` / `train` options that give it."""
    if not answers:
        out.print(
            "No way out found on this GPU type: fewer bytes, a bigger GPU and more GPUs all fail."
        )
        return
    out.print("Ways out, each checked with the engine:")
    width = max(len(a["answer"]) for a in answers)
    for a in answers:
        options = change_flags(a["change"]) if flags else ""
        out.print(
            f"  [bold]{a['answer']:<{width}}[/bold]  {escape(a['label'])}:"
            f" {format_bytes(a['per_gpu_total_bytes'], units)} of"
            f" {format_bytes(a['budget_bytes'], units)} per GPU"
            + (f"  [dim]({escape(options)})[/dim]" if options else "")
        )


def change_flags(change: dict[str, Any]) -> str:
    """A fix's change as command-line options: {"dtype": "fp8", "gpus": 2} → '--dtype fp8 --gpus 2'
    (a value of None, back to the default, is left out)."""
    parts = []
    for key, value in change.items():
        if key == "method":
            parts += ["--qlora"] if value == "qlora" else []
        elif value is True:
            parts.append(f"--{key.replace('_', '-')}")
        elif value is not None and value is not False:
            parts.append(f"--{key.replace('_', '-')} {value}")
    return " ".join(parts)
