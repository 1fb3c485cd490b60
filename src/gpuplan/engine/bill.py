"""An itemised bill: each line its bytes, its formula, and the numbers it was computed from."""

from __future__ import annotations

from typing import Any

from gpuplan.engine.frozen import field, record
from gpuplan.units import format_bytes, format_count

CATEGORIES = ("weights", "kv_cache", "gradients", "optimizer", "activations", "overhead", "other")


@record
class LineItem:
    """One line of a bill.

    `formula` is the symbolic rule ("params × bytes/param ÷ (tp × pp)"); `template` is the same
    rule with `{name}` slots for the entries of `inputs` and `{bytes}` for the result, so the
    arithmetic can be shown with the numbers substituted in whichever unit the reader chose:
    inputs whose names end in `_bytes` are sizes, those ending in `params` are counts.
    """

    key: str
    label: str
    bytes: int
    formula: str
    template: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    category: str = "other"

    def explain(self, units: str = "GB") -> str:
        """The formula with its numbers substituted: '8.03 B × 2 bytes = 16.06 GB'."""
        if not self.template:
            return f"{self.formula} = {format_bytes(self.bytes, units)}"
        values: dict[str, str] = {"bytes": format_bytes(self.bytes, units)}
        for name, value in self.inputs.items():
            values[name] = _render(name, value, units)
        return self.template.format(**values)

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.label,
            "category": self.category,
            "bytes": self.bytes,
            "formula": self.formula,
            "explain": self.explain(units),
            "inputs": self.inputs,
        }


def _render(name: str, value: Any, units: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if name.endswith("bytes"):
        return format_bytes(value, units)
    if name.endswith("params"):
        return format_count(value)
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}"


def total_bytes(items: tuple[LineItem, ...] | list[LineItem]) -> int:
    """Σ of the lines: the parts add up to the total by construction."""
    return sum(item.bytes for item in items)


class Bill:
    """What serving, engine and training bills share: itemised lines against a budget.

    Subclasses are frozen records with `items` (the lines on the GPU, summing to the
    per-GPU total), `budget_bytes` and `notes`; `extra_lines` names further lines that are
    listed but not on the GPU budget (host memory, allocations made after KV sizing).
    """

    items: tuple[LineItem, ...]
    budget_bytes: int
    notes: tuple[str, ...]

    def extra_lines(self) -> tuple[LineItem, ...]:
        return ()

    @property
    def per_gpu_total_bytes(self) -> int:
        return total_bytes(self.items)

    def item(self, key: str) -> LineItem:
        """The line named `key`, on the GPU budget or beside it."""
        for line in self.items + self.extra_lines():
            if line.key == key:
                return line
        raise KeyError(key)

    def by_category(self) -> dict[str, int]:
        """Bytes per category (weights, kv_cache, ...) of the lines on the GPU budget."""
        out: dict[str, int] = {}
        for line in self.items:
            out[line.category] = out.get(line.category, 0) + line.bytes
        return out
