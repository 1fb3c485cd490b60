"""Cold start of every CLI answer: the table and `--json` paths of serve, train and plan, each as a
ratio to `python -c pass` (issue 23: each at most 5×).

    python bench/cold_start_bench.py [--runs 10]

Prints figures; asserts nothing. Each command is a fresh interpreter started the way the
`gpuplan` console script starts it (`from gpuplan.cli.main import run`), with the package's
bytecode compiled first (as `pip install` does). The commands run interleaved — `python -c pass`
before each gpuplan command, so every ratio is taken pair by pair against a baseline run under
the same load — and the figures are medians over the runs of wall time and of CPU time
(user + system of the child: on a shared machine the steadier of the two), each with the median
of its pairwise ratios to `python -c pass`. The answer each command prints is checked once
(exit 0, some output) so a failing command cannot pass for a fast one.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import _child_env, _timed  # noqa: E402  (one timing helper for both benches)

ROOT = Path(__file__).resolve().parents[1]
GPUPLAN = [sys.executable, "-c", "from gpuplan.cli.main import run; run()"]
BASELINE = [sys.executable, "-c", "pass"]
MODEL = "llama-3.1-8b"
COMMANDS = {
    "serve (table)": ["serve", MODEL],
    "serve --json": ["serve", MODEL, "--json"],
    "train (table)": ["train", MODEL],
    "train --json": ["train", MODEL, "--json"],
    "plan (table)": ["plan", MODEL],
    "plan --json": ["plan", MODEL, "--json"],
}
TARGET = 5.0  # × python -c pass (issue 23)


def measure(runs: int) -> dict[str, dict[str, list[float]]]:
    """Per command: wall, CPU and their pairwise ratios to the baseline run just before it."""
    import gpuplan

    compileall.compile_dir(str(Path(gpuplan.__file__).parent), quiet=1)
    env = _child_env()
    for args in COMMANDS.values():  # warm the caches; check each command answers
        done = subprocess.run([*GPUPLAN, *args], capture_output=True, env=env)
        if done.returncode != 0 or not done.stdout:
            raise SystemExit(f"gpuplan {' '.join(args)} failed: {done.stderr.decode()[-300:]}")
    out: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": [], "wall_ratio": [], "cpu_ratio": []} for name in COMMANDS
    }
    for _ in range(runs):
        for name, args in COMMANDS.items():
            base_wall, base_cpu = _timed(BASELINE, env)
            wall, cpu = _timed([*GPUPLAN, *args], env)
            row = out[name]
            row["wall"].append(wall)
            row["cpu"].append(cpu)
            row["wall_ratio"].append(wall / base_wall)
            row["cpu_ratio"].append(cpu / base_cpu if base_cpu else float("nan"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    base = [_timed(BASELINE, _child_env()) for _ in range(args.runs)]
    results = measure(args.runs)
    med = statistics.median
    print(
        f"python -c pass: wall {med(w for w, _ in base) * 1e3:.0f} ms,"
        f" CPU {med(c for _, c in base) * 1e3:.0f} ms (median of {args.runs})"
    )
    print(f"{'gpuplan … ' + MODEL:<28} {'wall ms':>8} {'× pass':>7} {'CPU ms':>8} {'× pass':>7}")
    for name, row in results.items():
        flag = "" if med(row["wall_ratio"]) <= TARGET else f"  (over {TARGET:g}×)"
        print(
            f"{name:<28} {med(row['wall']) * 1e3:8.0f} {med(row['wall_ratio']):6.2f}×"
            f" {med(row['cpu']) * 1e3:8.0f} {med(row['cpu_ratio']):6.2f}×{flag}"
        )
    print(f"load average {os.getloadavg()[0]:.1f}; ratios are medians of pairwise ratios")


if __name__ == "__main__":
    main()
