"""The whole training layout space of a 405B model and of DeepSeek-V3 (with expert parallelism)
on 8 to 2,048 H100s, ranked: plans (bills) per second and wall time per GPU count.

    python bench/plan_bench.py

Prints figures; asserts nothing (target: under 1 s per GPU count).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpuplan.api import train  # noqa: E402
from gpuplan.planner.training_search import (  # noqa: E402
    default_global_batch_tokens,
    rank_training_layouts,
)

COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def main() -> None:
    for model in ("llama-3.1-405b", "deepseek-v3"):
        setup = train(model, "h100", gpus=8, zero=3).bill.setup
        for n in COUNTS:
            start = time.perf_counter()
            try:
                found = rank_training_layouts(setup, n, default_global_batch_tokens(n, setup.seq))
            except Exception as err:  # no layout fits at this count
                wall = time.perf_counter() - start
                print(f"{model:<16} {n:>5} GPUs: none fits ({wall:.2f} s): {str(err)[:70]}")
                continue
            wall = time.perf_counter() - start
            best = found.options[0]
            print(
                f"{model:<16} {n:>5} GPUs: {found.bills:>5} plans in {wall:.2f} s"
                f" ({found.bills / wall:,.0f}/s), {len(found.options)} fit; best"
                f" {best.setup.layout.describe()} at {best.time.tokens_per_second:,.0f} tokens/s"
            )


if __name__ == "__main__":
    main()
