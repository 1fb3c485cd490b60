"""GPU prices per GPU-hour (data/prices.toml, sourced), and the user's overrides (`--price`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from gpuplan.catalog.gpus import get_gpu
from gpuplan.datafiles import load_data
from gpuplan.errors import GpuplanError


@cache
def price_table() -> dict[str, dict[str, Any]]:
    """GPU id → its price row (usd_per_gpu_hour, source, as_read, source_url)."""
    data = load_data("prices.toml")
    sources = data.get("sources", {})
    rows = {}
    for row in data["price"]:
        src = sources.get(row["source"], {})
        rows[row["gpu"]] = {
            **row,
            "source_url": src.get("url", ""),
            "source_title": src.get("title", ""),
        }
    return rows


def parse_prices(items: Iterable[str] | Mapping[str, float] | None) -> dict[str, float]:
    """`["H100=2.5", "b200=6"]` (or a mapping) → {catalog gpu id: usd per GPU-hour}."""
    if not items:
        return {}
    pairs: list[tuple[str, Any]]
    if isinstance(items, Mapping):
        pairs = list(items.items())
    else:
        pairs = []
        for item in items:
            name, sep, value = str(item).partition("=")
            if not sep or not name.strip():
                raise GpuplanError(
                    f"--price takes GPU=DOLLARS_PER_HOUR, e.g. H100=2.5; got {item!r}"
                )
            pairs.append((name.strip(), value.strip().lstrip("$")))
    out: dict[str, float] = {}
    for name, value in pairs:
        try:
            price = float(value)
        except (TypeError, ValueError):
            raise GpuplanError(
                f"price for {name} must be a number of dollars, got {value!r}"
            ) from None
        if not price >= 0 or price == float("inf"):
            raise GpuplanError(f"price for {name} must be a non-negative number, got {value!r}")
        out[get_gpu(name).id] = price
    return out


def gpu_price(gpu_id: str, overrides: Mapping[str, float] | None = None) -> float | None:
    """Dollars per GPU-hour: the user's figure, else the catalog's, else None (no price known)."""
    if overrides and gpu_id in overrides:
        return float(overrides[gpu_id])
    row = price_table().get(gpu_id)
    return float(row["usd_per_gpu_hour"]) if row else None
