"""Accuracy of gpuplan's training bill against published, measured memory peaks.

    PYTHONPATH=src python3 bench/training_accuracy.py            # one line per case + summary
    PYTHONPATH=src python3 bench/training_accuracy.py --markdown # the README table

Cases: tests/data/training_measurements/*.toml (tests/training_cases.py reads them): torchtitan's
benchmark tables, torchtune's README table, Megatron-LM's functional-test goldens, each with its
source, exact setup and the figure it measured (allocated, active, reserved, nvidia-smi); HF
Trainer / PEFT / TRL runs from IBM's fms-acceleration benchmark CSVs (hf_trainer.toml). Each is
predicted through the public API (gpuplan.train / gpuplan.train_from) from what its source
states; nothing is fitted per case. The summary gives, per framework and for all cases, the
median |error| and how many are within 10 %. Goal (issue 21): median ≤ 5 %, ≥ 90 % within 10 %.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from training_cases import evaluate, median_abs_error  # noqa: E402

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    results = evaluate()
    if args.markdown:
        print("| case | figure | measured GiB | gpuplan GiB | error |")
        print("|---|---|---:|---:|---:|")
    for r in results:
        c = r.case
        if args.markdown:
            print(
                f"| {c.id} | {c.figure} | {c.measured / GIB:.2f} | {r.predicted / GIB:.2f} |"
                f" {r.error * 100:+.1f}% |"
            )
        else:
            print(
                f"{c.id:<62} {c.figure:<9} measured {c.measured / GIB:7.2f} GiB"
                f"  gpuplan {r.predicted / GIB:7.2f} GiB  {r.error * 100:+6.1f}%  ({r.peak_phase})"
            )
    by_framework: dict[str, list] = defaultdict(list)
    for r in results:
        by_framework[r.case.framework].append(r)
    print()
    for name, rs in [*sorted(by_framework.items()), ("all", results)]:
        within = sum(abs(r.error) <= 0.10 for r in rs)
        print(
            f"{name:<12} {len(rs):3d} cases  median |error| {median_abs_error(rs) * 100:5.1f}%"
            f"  {within:3d} within 10 % ({within / len(rs) * 100:3.0f} %)"
        )


if __name__ == "__main__":
    main()
