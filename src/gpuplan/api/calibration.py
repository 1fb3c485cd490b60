"""Calibration on the user's own benchmark: read `vllm bench serve --save-result` JSON files and
SGLang `bench_serving --output-file` JSON-lines files, refit the speed model's fitted figures for
that GPU and engine (engine/speed/calibrate.py), and write / read a small calibration file.

    runs = read_results(["result.json"])
    report = calibrate(runs, model="llama-3.1-70b", gpu="h200", tp=4, engine="sglang")
    save_calibration(report, "h200-sglang.json");  knobs = load_calibration("h200-sglang.json")

Result fields read (both benchmarks print them; absent ones are skipped):
    request_rate, max_concurrency, completed / num_prompts, total_input_tokens,
    total_output_tokens (mean lengths), random_range_ratio (SGLang: lengths uniform on
    [r·L, L]), output_throughput, total_token_throughput, {mean,median,p99}_{ttft,tpot,itl}_ms,
    {mean,median,p99}_e2el_ms (vLLM) or _e2e_latency_ms (SGLang)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuplan.api.common import resolve_gpu, resolve_kv, resolve_weight_format
from gpuplan.catalog import load_architecture
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.serving import ServingSetup
from gpuplan.engine.speed.calibrate import (
    MeasuredRun,
    fit_knobs,
    median_error,
    request_knob,
    run_errors,
)
from gpuplan.engine.speed.kernels import SpeedKnobs, default_knobs
from gpuplan.engine.speed.schedule import Load
from gpuplan.engine.speed.serving import SpeedSetup
from gpuplan.errors import GpuplanError

CALIBRATION_SCHEMA = "gpuplan.calibration/1"
STATS = ("mean", "median", "p99")


@record
class ResultRun:
    """One run of a result file: its load and measured figures (figure@stat → value)."""

    load: Load
    measured: dict[str, float]
    label: str


def _rate(value: Any) -> float:
    if value in (None, "inf", "Infinity") or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    return float(value)


def _figures(rec: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    if rec.get("output_throughput"):
        out["tokens_per_s@mean"] = float(rec["output_throughput"])
    if rec.get("total_token_throughput"):
        out["total_tokens_per_s@mean"] = float(rec["total_token_throughput"])
    for fig, names in (
        ("ttft_ms", ("ttft_ms",)),
        ("tpot_ms", ("tpot_ms",)),
        ("itl_ms", ("itl_ms",)),
        ("e2e_ms", ("e2el_ms", "e2e_latency_ms")),
    ):
        for st in STATS:
            for name in names:
                value = rec.get(f"{st}_{name}")
                if isinstance(value, int | float) and value > 0:
                    out[f"{fig}@{st}"] = float(value)
    return out


def _client(rec: dict[str, Any], random: bool) -> dict[str, Any]:
    """An SGLang bench_serving record (its own keys `random_input_len`, `sharegpt_output_len`)
    replays that client's seeded draw (engine/speed/dynamic.py `_sglang_draw`; --seed is not
    written to the file: its default, 1); a vLLM record keeps gpuplan's own draw."""
    if "random_input_len" not in rec and "sharegpt_output_len" not in rec:
        return {}
    out: dict[str, Any] = {"client": "sglang", "seed": 1}
    if random and rec.get("random_input_len"):
        ratio = float(rec.get("random_range_ratio") or 0.0)
        out["random_lens"] = (int(rec["random_input_len"]), int(rec["random_output_len"]), ratio)
    return out


def _run(rec: dict[str, Any], where: str) -> ResultRun:
    done = int(rec.get("completed") or rec.get("num_prompts") or 0)
    if done < 1 or not rec.get("total_output_tokens"):
        raise GpuplanError(f"{where}: no completed requests or token totals in the result")
    prompt = max(1, round(rec["total_input_tokens"] / done))
    output = max(1, round(rec["total_output_tokens"] / done))
    rate, cap = _rate(rec.get("request_rate")), rec.get("max_concurrency")
    spread = 0.0
    random = rec.get("dataset_name", "random") == "random"
    if rec.get("random_range_ratio") is not None and random:
        r = float(rec["random_range_ratio"])
        spread = (1 - r) / (1 + r) if "random_input_len" in rec else r
    client = _client(rec, random)
    if math.isfinite(rate):
        load = Load("rate", prompt, output, int(cap or 1), rate, done, spread=spread, **client)
        label = f"rate {rate:g}/s"
    else:
        c = int(cap) if cap else done
        load = Load("concurrency", prompt, output, c, 0.0, done, spread=spread, **client)
        label = f"concurrency {c}"
    label += f", {prompt}/{output} tokens, {done} prompts"
    return ResultRun(load, _figures(rec), label)


def read_results(paths: Sequence[str | Path]) -> list[ResultRun]:
    """Every run of the files: a JSON object (vLLM) or one object per line (SGLang)."""
    runs: list[ResultRun] = []
    for p in paths:
        text = Path(p).read_text("utf-8")
        try:
            doc = json.loads(text)
            records = doc if isinstance(doc, list) else [doc]
        except json.JSONDecodeError:
            try:
                records = [json.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as err:
                raise GpuplanError(f"{p}: not a benchmark result (JSON): {err.msg}") from None
        for i, rec in enumerate(records):
            if isinstance(rec, dict):
                runs.append(_run(rec, f"{p} run {i + 1}"))
    if not runs:
        raise GpuplanError("no benchmark runs in the result files")
    return runs


@record
class CalibrationReport:
    """Fitted figures, and each run's median |error| before and after."""

    gpu: str
    engine: str
    model: str
    knobs: SpeedKnobs
    fitted_on: tuple[int, ...]
    labels: tuple[str, ...]
    before: tuple[float, ...]
    after: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": CALIBRATION_SCHEMA,
            "gpu": self.gpu,
            "engine": self.engine,
            "model": self.model,
            "knobs": {k: getattr(self.knobs, k) for k in SpeedKnobs.__dataclass_fields__},
            "fitted_on": list(self.fitted_on),
            "runs": [
                {"run": lbl, "median_abs_error_before": b, "median_abs_error_after": a}
                for lbl, b, a in zip(self.labels, self.before, self.after, strict=True)
            ],
        }


def measured_runs(
    runs: Sequence[ResultRun],
    model: str,
    gpu: str,
    tp: int = 1,
    pp: int = 1,
    dtype: str | None = None,
    kv: str | None = None,
    engine: str | None = None,
    engine_version: str | None = None,
    cuda_graphs: bool = True,
    radix_cache: bool = True,
    engine_args: dict[str, Any] | None = None,
) -> list[MeasuredRun]:
    """The runs on one layout (what the result files do not record: the model, GPU, layout,
    and the engine's launch: SGLang's --disable-radix-cache is `radix_cache=False`, its
    --mem-fraction-static `engine_args={"mem_fraction_static": 0.87}`)."""
    arch = load_architecture(model)
    fmt = resolve_weight_format(arch, dtype)
    base = ServingSetup(arch, fmt, resolve_kv(fmt, kv or "auto"), resolve_gpu(gpu), tp, pp)
    out = []
    for r in runs:
        s = replace(base, context=r.load.prompt + r.load.output, users=r.load.concurrency)
        setup = SpeedSetup(
            s,
            r.load,
            engine,
            engine_version,
            cuda_graphs,
            radix_cache=radix_cache,
            engine_args=tuple(sorted((engine_args or {}).items())),
        )
        out.append(MeasuredRun(setup, r.measured, r.label))
    return out


def calibrate(
    runs: Sequence[MeasuredRun], fit_on: Sequence[int] = (0,), start: SpeedKnobs | None = None
) -> CalibrationReport:
    """Fit on the runs numbered `fit_on` (0-based), report every run before and after."""
    if not runs:
        raise GpuplanError("nothing to calibrate on")
    bad = [i for i in fit_on if not 0 <= i < len(runs)]
    if bad:
        raise GpuplanError(f"--fit-on {bad[0] + 1}: the files hold runs 1 to {len(runs)}")
    start = start or default_knobs()
    knobs, _ = fit_knobs([runs[i] for i in fit_on], start)
    s = runs[0].setup
    return CalibrationReport(
        gpu=s.serving.gpu.id,
        engine=s.engine or "vllm",
        model=s.serving.arch.name,
        knobs=knobs,
        fitted_on=tuple(fit_on),
        labels=tuple(r.label for r in runs),
        before=tuple(median_error([r], start) for r in runs),
        after=tuple(median_error([r], knobs) for r in runs),
    )


def save_calibration(report: CalibrationReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_dict(), indent=2) + "\n", "utf-8")


def load_calibration(path: str | Path) -> SpeedKnobs:
    """The fitted figures of a calibration file (refused in one line if it is not one)."""
    try:
        doc = json.loads(Path(path).read_text("utf-8"))
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{path}: not a calibration file (JSON): {err.msg}") from None
    if not isinstance(doc, dict) or doc.get("schema") != CALIBRATION_SCHEMA:
        raise GpuplanError(f"{path}: not a gpuplan calibration file ({CALIBRATION_SCHEMA})")
    knobs = doc.get("knobs", {})
    fields = SpeedKnobs.__dataclass_fields__
    unknown = [k for k in knobs if k not in fields]
    if unknown:
        raise GpuplanError(f"{path}: unknown figure {unknown[0]!r} in the calibration file")
    return replace(default_knobs(), **{k: float(v) for k, v in knobs.items()})


__all__ = [
    "CalibrationReport",
    "MeasuredRun",
    "ResultRun",
    "calibrate",
    "load_calibration",
    "measured_runs",
    "read_results",
    "request_knob",
    "run_errors",
    "save_calibration",
]
