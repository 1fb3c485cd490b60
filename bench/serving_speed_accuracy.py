"""How close gpuplan's serving speed model comes to published measurements.

    python bench/serving_speed_accuracy.py [--fit]

Each case in tests/data/serving_speed/measurements.toml (vLLM, TensorRT-LLM and NIM benchmark
pages, with their sources) is predicted from its model, GPU, tensor parallelism, formats,
concurrency, prompt and output lengths with `gpuplan.engine.perf.serving_perf` at the default
efficiencies (no per-case constant), and the output tokens/s are compared. Prints every case, the
median |error| and how many are within 25 %. `--fit` searches one global HBM and FLOPS
efficiency for all cases and prints the leave-one-out error beside it (not used by gpuplan).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.api.common import resolve_gpu, resolve_kv, resolve_weight_format  # noqa: E402
from gpuplan.catalog import load_architecture, read_config  # noqa: E402
from gpuplan.engine.perf import PerfKnobs, PerfSetup, serving_perf  # noqa: E402
from gpuplan.engine.serving import ServingSetup  # noqa: E402

DATA = ROOT / "tests" / "data" / "serving_speed"


@dataclass(frozen=True)
class Case:
    label: str
    kind: str
    gpu: str
    setup: PerfSetup
    measured: float  # output tokens/s of the replica
    source: str


def load_cases() -> list[Case]:
    data = tomllib.loads((DATA / "measurements.toml").read_text("utf-8"))
    cases = []
    for row in data["case"]:
        model = row["model"]
        if model.endswith(".json"):
            arch = load_architecture(read_config(DATA / model), model.removesuffix(".json"))
        else:
            arch = load_architecture(model)
        fmt = resolve_weight_format(arch, row["dtype"])
        serving = ServingSetup(
            arch=arch,
            weights=fmt,
            kv=resolve_kv(fmt, row["kv"]),
            gpu=resolve_gpu(row["gpu"]),
            tp=row["tp"],
            context=row["prompt"] + row["output"],
            users=row["concurrency"],
        )
        setup = PerfSetup(
            serving,
            prompt_tokens=row["prompt"],
            output_tokens=row["output"],
            concurrency=row["concurrency"],
            expert_parallel=row.get("ep", False),
        )
        measured = row["tokens_per_s"] * (row["tp"] if row.get("per_gpu") else 1)
        label = (
            f"{arch.name} {row['gpu']} tp{row['tp']}{' ep' if row.get('ep') else ''} {row['dtype']}"
            f" B={row['concurrency']}"
            f" {row['prompt']}/{row['output']}"
        )
        cases.append(Case(label, row["kind"], row["gpu"], setup, measured, row["source"]))
    return cases


def errors(cases: list[Case], knobs: PerfKnobs | None = None) -> list[float]:
    out = []
    for case in cases:
        setup = case.setup if knobs is None else replace(case.setup, knobs=knobs)
        predicted = serving_perf(setup).tokens_per_s
        out.append(predicted / case.measured - 1)
    return out


def summary(errs: list[float]) -> tuple[float, int]:
    return statistics.median(abs(e) for e in errs), sum(abs(e) <= 0.25 for e in errs)


def fit(cases: list[Case]) -> None:
    grid = [
        PerfKnobs(hbm_efficiency=h / 100, flops_efficiency=f / 100, layer_latency_s=t * 1e-6)
        for h in range(50, 101, 10)
        for f in range(30, 91, 10)
        for t in range(0, 101, 20)
    ]

    def best(subset: list[Case]) -> PerfKnobs:
        return min(grid, key=lambda k: summary(errors(subset, k))[0])

    k = best(cases)
    med, within = summary(errors(cases, k))
    loo = []
    for i, case in enumerate(cases):
        k_i = best(cases[:i] + cases[i + 1 :])
        loo.append(errors([case], k_i)[0])
    loo_med, loo_within = summary(loo)
    print(
        f"fitted on all: hbm {k.hbm_efficiency:.2f}, flops {k.flops_efficiency:.2f}, layer"
        f" latency {k.layer_latency_s * 1e6:.0f} µs → median"
        f" |error| {med:.1%}, {within}/{len(cases)} within 25 %; leave-one-out median |error|"
        f" {loo_med:.1%}, {loo_within}/{len(cases)} within 25 %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fit", action="store_true", help="fit global efficiencies (LOO)")
    args = parser.parse_args()
    cases = load_cases()
    errs = errors(cases)
    print(f"{'case':<58} {'kind':<5} {'measured':>10} {'predicted':>10} {'error':>7}  source")
    for case, err in zip(cases, errs, strict=True):
        predicted = case.measured * (1 + err)
        print(
            f"{case.label:<58} {case.kind:<5} {case.measured:>10,.0f} {predicted:>10,.0f}"
            f" {err:>+7.1%}  {case.source}"
        )
    med, within = summary(errs)
    gpus = sorted({c.gpu for c in cases})
    kinds = sorted({c.kind for c in cases})
    print(
        f"\ncases: {len(cases)} ({', '.join(kinds)}; GPUs {', '.join(gpus)})"
        f"\nmedian |error| on output tokens/s: {med:.1%}; within 25 %: {within}/{len(cases)}"
    )
    if args.fit:
        fit(cases)


if __name__ == "__main__":
    main()
