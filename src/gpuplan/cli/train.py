"""`gpuplan train`: the training bill per GPU, the host bill, and what a step costs."""

from __future__ import annotations

from typing import Any

import click

from gpuplan.api import requests
from gpuplan.cli import specs
from gpuplan.cli.jsonout import print_json
from gpuplan.cli.options import click_options, parse_gpus
from gpuplan.cli.train_render import (  # noqa: F401  (re-exported: the renderers lived here)
    PHASE_COLUMNS,
    host_table,
    phase_table,
    render_training,
)


@click.command("train")
@click.argument("model", required=False)
@click_options(specs.TRAIN_OPTIONS)
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
    if config is None:
        if model is None:
            raise click.UsageError("Missing argument MODEL (or --from CONFIG)")
        try:
            data = specs.train_data(model, {"gpus": gpus, "units": units, **kw})
        except specs.BadValue as err:
            raise click.BadParameter(str(err), param_hint=err.hint) from None
    else:
        data = _from_config(config, model, config_format, overrides, gpus, units, kw)
    if as_json:
        print_json(data)
        return
    render_training(data, units, explain)


def _from_config(
    config: str,
    model: str | None,
    config_format: str | None,
    overrides: tuple[str, ...],
    gpus: str | None,
    units: str,
    kw: dict[str, Any],
) -> dict[str, Any]:
    """`--from CONFIG`: the framework config's job, the options given on the command line over
    it (an option left at its default defers to the config); no ways out are looked for."""
    from gpuplan.api import train_from

    given = {k: v for k, v in specs.train_kwargs(kw).items() if v not in (None, False, ())}
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
    data["fixes"] = None  # not looked for from a framework config
    return data


# options left at their declared default defer to the --from config (the GPU is always given)
DEFAULTS = {
    k.name: k.default
    for k in requests.TRAIN
    if k.cli and k.name != "gpu" and k.default not in (None, False)
}


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
    from rich.table import Table

    from gpuplan.cli.render import console

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
    from rich.table import Table

    from gpuplan.cli.render import console

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
