"""`gpuplan serve`'s table for the lesson's bill (no click: the fast path, cli/fast.py, renders
with it too; the engines' bills are cli/serve.py's `render_engine`)."""

from __future__ import annotations

from typing import Any

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
    if "speed" in data:
        render_speed(out, data["speed"])


def _secs(s: float) -> str:
    return f"{s * 1e3:,.1f} ms" if s < 1 else f"{s:,.2f} s"


def render_speed(out: Any, sp: dict) -> None:
    """The `speed` object (api/serving_speed.py) as `vllm bench serve` prints it, then where the
    time goes and the sources of the figures."""
    from rich.markup import escape

    ld = sp["load"]
    how = (
        f"Poisson {ld['request_rate']:g} req/s"
        if ld["mode"] == "rate"
        else f"{ld['concurrency']} in flight"
    )
    graphs = "CUDA graphs" if sp["cuda_graphs"] else "eager"
    out.print(
        f"\n[bold]Speed[/bold] (vllm bench serve: {how}, {ld['prompt_tokens']:,} → {ld['output_tokens']:,}"
        f" tokens, {ld['num_prompts']} prompts; {sp['engine']} scheduler, {graphs}, tp={sp['tp']} pp={sp['pp']})"
    )
    out.print(f"  {'':6}{'mean':>12}{'median':>12}{'p99':>12}")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E")):
        st = sp[key]
        out.print(
            f"  {label:6}" + "".join(f"{_secs(st[k]):>12}" for k in ("mean", "median", "p99"))
        )
    out.print(
        f"  Throughput: {sp['output_tokens_per_s']:,.0f} output tokens/s, {sp['total_tokens_per_s']:,.0f}"
        f" total tokens/s over a {_secs(sp['duration_s'])} run"
    )
    out.print("  Where the GPU time goes (seconds of the run):")
    for phase, parts in sp["breakdown"]["phases_s"].items():
        items = " · ".join(
            f"{k} {parts[k]:,.2f}" for k in ("compute", "memory", "comm", "overhead")
        )
        out.print(f"    {phase:8} {parts['share']:6.1%}  {items}")
    q = sp["breakdown"]["queueing_s"]
    out.print(
        f"    queueing before prefill (per request, in TTFT): mean {_secs(q['mean'])},"
        f" median {_secs(q['median'])}, p99 {_secs(q['p99'])}"
    )
    src = sp["sources"]
    figures = ", ".join(f"{k} {v:g}" for k, v in sp["figures"].items())
    out.print(f"  Fitted figures: {figures} ({escape(src['fitted'])})")
    out.print(
        f"  Kernel figures ({src['kernel_architecture']}, engine/speed/kernels.toml):"
        f" {', '.join(src['kernel_source_keys'])}"
    )
    for note in sp["notes"]:
        out.print(f"  [yellow]Note:[/yellow] {escape(note)}")
