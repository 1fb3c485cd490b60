"""What a framework's config file says about memory, as gpuplan.train() arguments.

Each reader (torchtitan.py, torchtune.py, megatron.py, deepspeed.py, hf_trainer.py) turns the
text of one config into `TrainOverrides`: the framework, the model when the config defines it,
the train() arguments it sets, and notes for settings it reads but gpuplan does not model. A
config that contradicts itself or names an impossible value is refused with a one-line
GpuplanError naming the setting.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.config_schema import FIELDS
from gpuplan.engine.frozen import field, record
from gpuplan.errors import GpuplanError


@record
class TrainOverrides:
    """A framework config read into gpuplan's terms."""

    framework: str
    model: Architecture | str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def train_kwargs(self) -> dict[str, Any]:
        """train() keyword arguments: the framework and everything the config set."""
        return {"framework": self.framework, **self.kwargs}


MAX_SETTING = 1 << 40  # any count a framework config sets (batch, steps, bucket elements)


def positive_int(name: str, value: Any, field: str | None = None) -> int:
    """A whole number ≥ 1 (at most MAX_SETTING, or within the bounds of config_schema's `field`
    when given: the same table config.json is read through), or a one-line error naming the
    setting."""
    if isinstance(value, str) and len(value) > 40:
        raise GpuplanError(f"{name} must be a whole number, got a {len(value):,}-character value")
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise GpuplanError(f"{name} must be a whole number, got {_shown(value)}") from None
    if isinstance(value, bool) or n < 1 or (isinstance(value, float) and value != n):
        raise GpuplanError(f"{name} must be a whole number ≥ 1, got {_shown(value)}")
    lo, hi = 1, MAX_SETTING
    if field is not None:
        rule = FIELDS[field]
        lo, hi = max(1, int(rule.lo)), int(rule.hi)
    if not lo <= n <= hi:
        raise GpuplanError(
            f"{name} must be a whole number in [{lo:,}, {hi:,}], got {_shown(value)}"
        )
    return n


def _shown(value: Any) -> str:
    """A value for a message: its repr, cut short (no decimal printing of a huge integer)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def section(doc: Any, name: str) -> dict[str, Any]:
    """The mapping at `name` (absent or null: empty), or a one-line error naming its type."""
    node = doc.get(name)
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise GpuplanError(f"{name} must be a mapping, got {type(node).__name__} {_shown(node)}")
    return node


def str_list(name: str, value: Any) -> list[str]:
    """A list of names (a single name is a list of one), or a one-line error."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GpuplanError(f"{name} must be a list of names, got {_shown(value)}")
    return list(value)


def boolean(name: str, value: Any) -> bool:
    """true/false in any of the spellings configs use, or a one-line error."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "none", ""):
        return False
    raise GpuplanError(f"{name} must be true or false, got {_shown(value)}")
