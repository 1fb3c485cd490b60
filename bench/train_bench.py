"""Training benchmark: the engine's training bills per second.

    python bench/train_bench.py [--seconds 2]

Builds one TrainingSetup per model and then, in a loop, bills it under changing sequence
lengths, micro-batches, ZeRO stages, data-parallel degrees and checkpointing modes (so the
per-layer caches see new keys). Prints bills per second; asserts nothing (target: >= 10,000/s).
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace

from gpuplan.catalog import get_gpu, load_architecture
from gpuplan.catalog.recipes import get_recipe
from gpuplan.engine.sharding import Layout
from gpuplan.engine.training import TrainingSetup, training_bill

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "gpt2")


def bills_per_second(seconds: float) -> tuple[float, int]:
    gpu = get_gpu("h100")
    recipe = get_recipe("adamw-bf16")
    setups = [TrainingSetup(load_architecture(m), recipe, gpu) for m in MODELS]
    grid = list(
        itertools.product(
            setups,
            (1024, 2048, 4096, 8192, 32768),
            (1, 2, 4),
            (0, 1, 2, 3),
            (1, 8, 64),
            ("none", "selective", "full"),
        )
    )
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    for setup, seq, mb, zero, dp, rec in itertools.cycle(grid):
        training_bill(
            replace(setup, seq=seq, micro_batch=mb, recompute=rec, layout=Layout(dp=dp, zero=zero))
        )
        n += 1
        if n % 256 == 0 and time.perf_counter() > deadline:
            break
    elapsed = time.perf_counter() - start
    return n / elapsed, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    rate, n = bills_per_second(args.seconds)
    print(f"training bills: {rate:,.0f} per second ({n:,} bills; target >= 10,000/s)")


if __name__ == "__main__":
    main()
