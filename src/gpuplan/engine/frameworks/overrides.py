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


def positive_int(name: str, value: Any) -> int:
    """A whole number ≥ 1, or a one-line error naming the setting."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise GpuplanError(f"{name} must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or n < 1 or (isinstance(value, float) and value != n):
        raise GpuplanError(f"{name} must be a whole number ≥ 1, got {value!r}")
    return n


def boolean(name: str, value: Any) -> bool:
    """true/false in any of the spellings configs use, or a one-line error."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "none", ""):
        return False
    raise GpuplanError(f"{name} must be true or false, got {value!r}")
