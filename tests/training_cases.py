"""Published training memory peaks (tests/data/training_measurements/*.toml) and gpuplan's
prediction for each, shared by bench/training_accuracy.py and tests/test_training_accuracy.py.

A case names its source, its exact setup, which figure was measured (`allocated`: PyTorch's
max_memory_allocated, also Megatron-LM's `mem-max-allocated-bytes`; `active`: torchtune's
`peak_memory_active`, allocated plus blocks awaiting a cross-stream free; `reserved`:
max_memory_reserved, torchtitan's `memory:`; `nvidia-smi`: the device's used memory), the value,
and how gpuplan is asked: `config` (the framework's own config text, read by `train_from`)
and/or `[case.train]` (train() arguments). Nothing is fitted per case: every case goes through
the same public API with only what its source states; assumptions a case needs are listed in
its `assumptions`.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "training_measurements"
MODELS = (
    DATA / "models"
)  # config.json copies of models outside gpuplan's catalog, each with its _source
UNITS = {"GiB": 2**30, "GB": 10**9, "MiB": 2**20, "MB": 10**6}
FIGURES = ("allocated", "active", "reserved", "nvidia-smi")


@dataclass(frozen=True)
class Case:
    id: str
    framework: str
    source: str
    setup: str
    figure: str
    measured: int
    config: str = ""
    format: str = ""
    model: str = ""
    train: dict[str, Any] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()


def _bytes(text: str | int) -> int:
    if isinstance(text, int):
        return text
    number, unit = str(text).split()
    return round(float(number) * UNITS[unit])


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(DATA.glob("*.toml")):
        for row in tomllib.loads(path.read_text("utf-8"))["case"]:
            figure = row["figure"]
            if figure not in FIGURES:
                raise ValueError(f"{row['id']}: figure {figure!r} not in {FIGURES}")
            train = dict(row.get("train", {}))
            for key in ("gpus", "gpu", "gpu_memory"):
                if key in row:
                    train.setdefault(key, row[key])
            cases.append(
                Case(
                    id=row["id"],
                    framework=row["framework"],
                    source=row["source"],
                    setup=row["setup"],
                    figure=figure,
                    measured=_bytes(row.get("measured_bytes") or row["measured"]),
                    config=row.get("config", ""),
                    format=row.get("format", ""),
                    model=row.get("model", ""),
                    train=train,
                    overrides=tuple(row.get("overrides", [])),
                    assumptions=tuple(row.get("assumptions", [])),
                )
            )
    return cases


def _model(name: Any) -> Any:
    """A catalog name as is; `<file>.json` is a config.json under MODELS (its `_` keys dropped)."""
    if isinstance(name, str) and name.endswith(".json"):
        config = json.loads((MODELS / name).read_text("utf-8"))
        return {k: v for k, v in config.items() if not k.startswith("_")}
    return name


def plan_for(case: Case) -> Any:
    import gpuplan

    kwargs = dict(case.train)
    model = _model(case.model or kwargs.pop("model", None))
    if case.config:
        return gpuplan.train_from(
            case.config,
            model,
            format=case.format or None,
            overrides=list(case.overrides),
            **kwargs,
        )
    return gpuplan.train(model, **{"framework": case.framework, **kwargs})


def predicted(case: Case, plan: Any) -> int:
    """The bill's figure that the measurement is."""
    bill = plan.bill
    if case.figure in ("allocated", "active"):
        return bill.allocated_bytes
    if case.figure == "reserved":
        return bill.reserved_bytes
    return plan.per_gpu_total_bytes


@dataclass(frozen=True)
class Result:
    case: Case
    predicted: int
    peak_phase: str

    @property
    def error(self) -> float:
        return (self.predicted - self.case.measured) / self.case.measured


def evaluate() -> list[Result]:
    out = []
    for case in load_cases():
        plan = plan_for(case)
        out.append(Result(case, predicted(case, plan), plan.bill.peak_phase))
    return out


def median_abs_error(results: list[Result]) -> float:
    return statistics.median(abs(r.error) for r in results)
