"""Serving benchmarks: the CLI's cold start-to-answer time and the engine's bills per second.

    python bench/serve_bench.py [--runs 10] [--seconds 2]

Prints figures; asserts nothing. Targets: a cold catalog query at most 5× `python -c pass`,
>= 50,000 serving bills per second in-process.

Cold start: each command is a fresh interpreter started the way the `gpuplan` console script
starts (`from gpuplan.cli.main import run`), with the package's bytecode compiled first (as
`pip install` does; a checkout run with PYTHONDONTWRITEBYTECODE would otherwise recompile every
module on every run). `python -c pass`, `python -c "import click"` (the command-line library on
its own, which a `--json` answer no longer loads: cli/fast.py), `serve --json`, `serve` (the rich table) and `models --json` run interleaved, so all see
the same load; the figures are medians of wall time and of CPU time (user + system of the child:
on a shared machine the steadier of the two), each with its ratio to `python -c pass`.

Bills per second: 24 serving setups (Llama-3.1-70B at tp=4 on H100, six contexts × four
concurrencies) are built once, then billed in a loop; every call builds a new bill (nothing
caches whole bills: only what a model, its formats and its layout fix is memoised). Printed per
wall second and per CPU second, with the load average.

If the peer `llm-analysis` is installed, its time for one query is measured side by side.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

GPUPLAN = [sys.executable, "-c", "import sys; from gpuplan.cli.main import run; run()"]
COLD = {
    "python -c pass": [sys.executable, "-c", "pass"],
    'python -c "import click"': [sys.executable, "-c", "import click"],
    "gpuplan serve llama-3.1-8b --json": [*GPUPLAN, "serve", "llama-3.1-8b", "--json"],
    "gpuplan serve llama-3.1-8b": [*GPUPLAN, "serve", "llama-3.1-8b"],
    "gpuplan models --json": [*GPUPLAN, "models", "--json"],
}


def _child_env() -> dict[str, str]:
    """The children import this checkout's gpuplan."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def cold_start(runs: int) -> dict[str, tuple[list[float], list[float]]]:
    """Wall and CPU times of each command in COLD, interleaved so all see the same load."""
    import gpuplan

    compileall.compile_dir(str(Path(gpuplan.__file__).parent), quiet=1)
    env = _child_env()
    for cmd in COLD.values():  # warm the OS caches and the compiled catalog cache
        subprocess.run(cmd, check=True, capture_output=True, env=env)
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in COLD}
    for _ in range(runs):
        for name, cmd in COLD.items():
            wall, cpu = _timed(cmd, env)
            times[name][0].append(wall)
            times[name][1].append(cpu)
    return times


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


def bills_per_second(seconds: float) -> tuple[int, float, float]:
    """(bills, wall seconds, CPU seconds) of billing the grid for about `seconds`."""
    from gpuplan.api import serve
    from gpuplan.engine.serving import serving_bill

    base = serve("llama-3.1-70b", "h100", tp=4).bill.setup
    setups = [
        replace(base, context=c, users=u)
        for c in (1024, 2048, 4096, 8192, 32768, 131072)
        for u in (1, 4, 16, 64)
    ]
    n = 0
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for setup in setups:
            serving_bill(setup)
        n += len(setups)
    return n, time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument(
        "--peer-python", default=sys.executable, help="a Python with llm-analysis installed"
    )
    args = parser.parse_args()

    print(f"load average {os.getloadavg()[0]:.2f} (2-core machines: above 2 means contention)")
    times = cold_start(args.runs)
    bare_wall, bare_cpu = (statistics.median(t) for t in times["python -c pass"])
    print(f"cold start, median of {args.runs} interleaved runs (target: a catalog query ≤ 5×):")
    for name, (walls, cpus) in times.items():
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"  {name:<36} wall {wall * 1000:6.1f} ms ({wall / bare_wall:4.1f}×)"
            f"   CPU {cpu * 1000:6.1f} ms ({cpu / bare_cpu:4.1f}×)"
        )
    peer = peer_cold_start(min(args.runs, 5), args.peer_python)
    if peer is None:
        print("peer llm-analysis: not installed (pip install llm-analysis, or pass --peer-python)")
    else:
        ours = statistics.median(times["gpuplan serve llama-3.1-8b --json"][0])
        print(
            f"peer `python -m llm_analysis.analysis infer` (Llama-2-7B), cold: median"
            f" {statistics.median(peer):.3f} s; gpuplan is {statistics.median(peer) / ours:.1f}× faster"
        )
    n, wall, cpu = bills_per_second(args.seconds)
    print(
        f"engine: {n / wall:,.0f} serving bills per second, {n / cpu:,.0f} per CPU second"
        f" ({n:,} in {wall:.2f} s; target >= 50,000); load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
