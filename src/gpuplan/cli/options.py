"""Options shared by several commands."""

from __future__ import annotations

import click

units_option = click.option(
    "--units",
    type=click.Choice(["GB", "GiB"], case_sensitive=False),
    default="GB",
    show_default=True,
    callback=lambda ctx, param, v: "GiB" if v.lower() == "gib" else "GB",
    help="Display units: GB (10^9, as in the lesson) or GiB (2^30).",
)
gpus_option = click.option(
    "--gpus", default=None, help="GPU count or 'auto' (fewest that fit). [default: auto]"
)


def parse_gpus(value: str | None) -> int | str | None:
    """--gpus as the API takes it: None, "auto", or a count."""
    if value is None or value == "auto":
        return value
    if value.isdigit():
        return int(value)
    raise click.BadParameter(f"--gpus takes a number or 'auto', got {value!r}")


headroom_option = click.option(
    "--headroom",
    type=float,
    default=0.9,
    show_default=True,
    help="Fraction of GPU memory the plan may use.",
)
gpu_memory_option = click.option(
    "--gpu-memory",
    default=None,
    help="The GPU memory a plan is measured against: a size (80GB, 79.2GiB), or marketed / driver for the catalog's round or driver-reported figure (default: driver).",
)
