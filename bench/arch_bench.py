"""Architecture reading speed: parse + count every test config, per config.

For each config of the catalog, tests/data/configs/ and tests/family_configs.py it times gpuplan's
whole read — `architecture_from_config` (family table, validation, layer schedule) plus
`count_params`, KV bytes per token and state bytes per sequence — and, side by side as the
baseline, transformers building its own config object from the same dict (`AutoConfig.for_model`,
when transformers is installed). Prints µs per config and the ratio; the family table's one-time
load is reported separately.

    PYTHONPATH=src:tests python bench/arch_bench.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))


def _configs() -> dict[str, dict[str, Any]]:
    from family_configs import BUILT, real_configs

    data = resources.files("gpuplan.catalog").joinpath("data/models")
    out = {
        f"catalog:{p.name[:-5]}": json.loads(p.read_text("utf-8"))
        for p in sorted(data.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".json")
    }
    out.update({f"real:{k}": v for k, v in real_configs().items()})
    out.update({f"built:{k}": v for k, v in BUILT.items()})
    return out


def _time(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    start = time.perf_counter()
    from gpuplan.engine.families import all_families

    all_families()
    load_ms = (time.perf_counter() - start) * 1e3
    from gpuplan.engine.architecture import architecture_from_config
    from gpuplan.engine.kv_cache import kv_cache_bytes_per_token
    from gpuplan.engine.params import count_params
    from gpuplan.engine.precision import Precision
    from gpuplan.engine.state_cache import state_bytes_per_sequence

    bf16 = Precision("bf16", 16)
    try:
        from transformers import AutoConfig
    except ImportError:  # the baseline is optional
        AutoConfig = None  # noqa: N806

    def gpuplan_read(cfg: dict[str, Any], name: str) -> None:
        arch = architecture_from_config(cfg, name)
        count_params(arch)
        kv_cache_bytes_per_token(arch, bf16)
        state_bytes_per_sequence(arch, bf16)

    def hf_read(cfg: dict[str, Any]) -> None:
        assert AutoConfig is not None
        kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
        model_type = {"kimi_k2": "deepseek_v3"}.get(cfg["model_type"], cfg["model_type"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            AutoConfig.for_model(model_type, **kwargs)

    print(f"family table load (once per process): {load_ms:.1f} ms")
    print(
        f"{'config':48s} {'layers':>6s} {'gpuplan µs':>11s} {'transformers µs':>16s} {'ratio':>6s}"
    )
    ours, theirs = [], []
    for name, cfg in _configs().items():
        arch = architecture_from_config(cfg, name)
        us = _time(lambda cfg=cfg, name=name: gpuplan_read(cfg, name), args.repeat)
        ours.append(us)
        hf = ""
        ratio = ""
        if AutoConfig is not None and cfg.get("model_type") not in (
            "chatglm",
            "internlm2",
            "baichuan",
        ):
            try:
                hf_us = _time(lambda cfg=cfg: hf_read(cfg), max(3, args.repeat // 4))
                theirs.append(hf_us)
                hf, ratio = f"{hf_us:16.0f}", f"{us / hf_us:6.2f}"
            except Exception:  # a config transformers cannot build standalone
                hf = f"{'-':>16s}"
        print(f"{name[:48]:48s} {arch.num_layers:6d} {us:11.0f} {hf} {ratio}")
    print(
        f"{len(ours)} configs: gpuplan median {statistics.median(ours):.0f} µs,"
        f" max {max(ours):.0f} µs"
        + (f"; transformers config median {statistics.median(theirs):.0f} µs" if theirs else "")
    )


if __name__ == "__main__":
    main()
