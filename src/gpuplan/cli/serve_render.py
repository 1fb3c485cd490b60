"""`gpuplan serve`'s table for the lesson's bill (no click: the fast path, cli/fast.py, renders
with it too; the engines' bills are cli/serve.py's `render_engine`)."""

from __future__ import annotations

from gpuplan.units import format_bytes, format_count, format_per_token


def render_serving(data: dict, units: str, explain: bool) -> None:
    from rich.markup import escape

    from gpuplan.cli.render import console, print_answers, print_bill, print_search_and_notes

    out = console()
    gpu = data["gpu"]
    m = data["model"]
    active = (
        f", {format_count(data['params_active'])} active"
        if data["params_active"] != data["params_total"]
        else ""
    )
    out.print(
        f"[bold]{escape(m['id'])}[/bold]  {format_count(data['params_total'])} params{active} · {m['attention']}"
        f" · {m['layers']} layers · weights {data['weights_format']} · KV {data['kv_dtype']}"
    )
    out.print(
        f"{data['gpus']} × {gpu['name']} ({format_bytes(gpu['memory_bytes'], units)}, {gpu['memory_basis']})"
        f"  tp={data['tp']} pp={data['pp']}  context {data['context']:,} × {data['users']} user(s)"
    )
    print_bill(out, data, units, explain)
    per_token = format_per_token(data["kv_bytes_per_token"], units)
    out.print(
        f"KV capacity: {data['kv_capacity_tokens']:,} tokens → {data['max_concurrent_sequences']:,} concurrent"
        f" sequences of {data['context']:,} tokens ({per_token} of KV cache per token)"
    )
    print_search_and_notes(out, data)
    if not data["fits"]:
        print_answers(out, data["fixes"], units)
