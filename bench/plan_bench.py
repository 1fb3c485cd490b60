"""The whole training layout space of a 405B model and of DeepSeek-V3 (with expert parallelism)
on 8 to 2,048 H100s, ranked: bills built, bills per second and wall time per GPU count.

    python bench/plan_bench.py [--top 10]

Each count is searched twice: exhaustively (every layout that fits, ranked) and for the first
`--top` plans (what `gpuplan plan --train` shows and the goal planner asks for: a branch and
bound that returns exactly the exhaustive ranking's first plans, checked here and in
tests/test_plan_training.py). Each search runs in a fresh interpreter, so none profits from
another's caches. Prints figures; asserts nothing (target: under 1 s per GPU count). CPU time is
printed beside wall time: on a shared machine the steadier of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
MODELS = ("llama-3.1-405b", "deepseek-v3")

ONE_COUNT = """
import json, sys, time
from gpuplan.api import train
from gpuplan.errors import GpuplanError
from gpuplan.planner.training_search import default_global_batch_tokens, rank_training_layouts

model, n, top, shown = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) or None, int(sys.argv[4])
setup = train(model, "h100", gpus=8, zero=3).bill.setup
batch = default_global_batch_tokens(n, setup.seq)
wall, cpu = time.perf_counter(), time.process_time()
try:
    found = rank_training_layouts(setup, n, batch, top=top)
except GpuplanError as err:
    out = {"error": str(err)[:70], "wall": time.perf_counter() - wall}
else:
    best = found.options[0]
    out = {
        "bills": found.bills,
        "options": len(found.options),
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "best": best.setup.layout.describe() + " " + best.setup.recompute,
        "speed": best.time.tokens_per_second if best.time else 0.0,
        "top": [repr(b.setup) for b in found.options[:shown]],
    }
print(json.dumps(out))
"""


def one_search(model: str, n: int, top: int | None, shown: int) -> dict:
    """One search in a fresh interpreter: `top` None is the exhaustive one."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, "-c", ONE_COUNT, model, str(n), str(top or 0), str(shown)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (2-core machine: above 2 means contention)")
    worst = {"exhaustive": 0.0, "top": 0.0}
    for model in MODELS:
        for n in COUNTS:
            r = {
                "exhaustive": one_search(model, n, None, args.top),
                "top": one_search(model, n, args.top, args.top),
            }
            ex, top = r["exhaustive"], r["top"]
            if "error" in ex:
                print(f"{model:<15} {n:>5} GPUs: none fits ({ex['wall']:.2f} s): {ex['error']}")
                continue
            same = ex["top"] == top["top"]
            for name in worst:
                worst[name] = max(worst[name], r[name]["wall"])
            print(
                f"{model:<15} {n:>5} GPUs: all {ex['bills']:>5} bills {ex['wall']:.2f} s"
                f" (CPU {ex['cpu']:.2f} s, {ex['bills'] / ex['wall']:,.0f}/s), {ex['options']} fit;"
                f" top {args.top}: {top['bills']:>5} bills {top['wall']:.2f} s"
                f" (CPU {top['cpu']:.2f} s){'' if same else ' DIFFERENT TOP PLANS'};"
                f" best {ex['best']} at {ex['speed']:,.0f} tokens/s"
            )
    print(
        f"slowest count: exhaustive {worst['exhaustive']:.2f} s, top {args.top}"
        f" {worst['top']:.2f} s (target < 1 s); load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
