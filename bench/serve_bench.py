"""Serving benchmarks: the CLI's cold start-to-answer time and the engine's bills per second.

    python bench/serve_bench.py [--runs 10] [--seconds 2]

Prints figures; asserts nothing. Targets: the cold catalog query at most 5× `python -c pass`
(measured in the same run, interleaved), >= 50,000 serving bills per second in-process. If the
peer `llm-analysis` is installed, its time for one query is measured side by side.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace


def cli_cold_start(runs: int) -> tuple[list[float], list[float]]:
    """(gpuplan serve --json, python -c pass) wall times, interleaved so both see the same load."""
    exe = shutil.which("gpuplan")
    cmd = [exe] if exe else [sys.executable, "-m", "gpuplan.cli.main"]
    ours, bare = [], []
    subprocess.run([*cmd, "serve", "llama-3.1-8b", "--json"], check=True, capture_output=True)
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run([*cmd, "serve", "llama-3.1-8b", "--json"], check=True, capture_output=True)
        ours.append(time.perf_counter() - start)
    return ours, bare


def peer_cold_start(runs: int, python: str) -> list[float] | None:
    """The peer llm-analysis (cli-ai-lab/llm-analysis) answering one inference query from its CLI."""
    cmd = [
        python,
        "-m",
        "llm_analysis.analysis",
        "infer",
        "--model_name",
        "NousResearch_Llama-2-7b-hf",
        "--gpu_name",
        "a100-sxm-80gb",
        "--dtype_name",
        "w16a16e16",
        "--seq_len",
        "4096",
        "--num_tokens_to_generate",
        "1",
        "--log_level",
        "ERROR",
    ]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        try:
            result = subprocess.run(cmd, capture_output=True)
        except OSError:
            return None
        if result.returncode != 0:
            return None
        times.append(time.perf_counter() - start)
    return times


def bills_per_second(seconds: float) -> tuple[int, float]:
    from gpuplan.api import serve
    from gpuplan.engine.serving import serving_bill

    setup = serve("llama-3.1-70b", "h100", tp=4).bill.setup
    contexts = [1024, 2048, 4096, 8192, 32768, 131072]
    users = [1, 4, 16, 64]
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for c in contexts:
            for u in users:
                serving_bill(replace(setup, context=c, users=u))
                n += 1
    elapsed = time.perf_counter() - start
    return n, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument(
        "--peer-python", default=sys.executable, help="a Python with llm-analysis installed"
    )
    args = parser.parse_args()

    times, bare = cli_cold_start(args.runs)
    ratio = statistics.median(times) / statistics.median(bare)
    print(
        f"gpuplan serve llama-3.1-8b --json, cold: median {statistics.median(times):.3f} s"
        f" (min {min(times):.3f} s); python -c pass: median {statistics.median(bare):.3f} s;"
        f" ratio {ratio:.1f}× over {args.runs} runs (target ≤ 5×)"
    )
    peer = peer_cold_start(min(args.runs, 5), args.peer_python)
    if peer is None:
        print("peer llm-analysis: not installed (pip install llm-analysis, or pass --peer-python)")
    else:
        ratio = statistics.median(peer) / statistics.median(times)
        print(
            f"peer `python -m llm_analysis.analysis infer` (Llama-2-7B), cold: median {statistics.median(peer):.3f} s; gpuplan is {ratio:.1f}× faster"
        )
    n, elapsed = bills_per_second(args.seconds)
    print(
        f"engine: {n / elapsed:,.0f} serving bills per second ({n:,} in {elapsed:.2f} s; target >= 50,000)"
    )


if __name__ == "__main__":
    main()
