"""Every causal-LM model type transformers ships, sized by gpuplan from its default config.

    python bench/transformers_sweep.py [--types llama,qwen3 ...]

Each configuration class's defaults mirror its flagship checkpoint. For every model type in
transformers' causal-LM auto mapping, the default config is built on the `meta` device and its
parameters counted; gpuplan reads the same config dict. Each type lands in one row:

  exact      gpuplan's total equals transformers'
  refused    gpuplan answered with one line naming what it cannot read
  noted      the count differs, and the architecture's notes say what was not modelled
  SILENT     the count differs and nothing says so (a bug: never silently wrong)
  skipped    transformers itself could not build the default (missing extras, bad defaults)

A multimodal wrapper whose causal-LM class is text-only differs by its vision tower; such a row
is "exact" when gpuplan's total less its vision parameters matches. Asserts nothing; prints the
rows that are not exact and the tally.
"""

from __future__ import annotations

import argparse
import logging
import signal
import warnings
from collections import Counter
from typing import Any


def _timeout(*_: Any) -> None:
    raise TimeoutError


def sweep_one(model_type: str) -> tuple[str, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from gpuplan.engine.architecture import architecture_from_config
    from gpuplan.engine.params import count_params
    from gpuplan.errors import GpuplanError

    try:
        config = AutoConfig.for_model(model_type)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        expected = sum(p.numel() for p in model.parameters())
    except Exception as err:  # transformers' own failure: not gpuplan's to judge
        return "skipped", type(err).__name__
    try:
        arch = architecture_from_config(config.to_dict(), model_type)
    except GpuplanError as err:
        return "refused", str(err)[:140]
    total = count_params(arch).total
    if expected in (total, total - arch.vision_params):
        return "exact", ""
    error = f"{(total - expected) / expected:+.3%}"
    if arch.notes:
        return "noted", f"{error}: {arch.notes[0][:110]}"
    return "SILENT", error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", help="comma-separated model types (default: all)")
    parser.add_argument("--seconds", type=int, default=60, help="per type")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    types = args.types.split(",") if args.types else sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    signal.signal(signal.SIGALRM, _timeout)
    tally: Counter[str] = Counter()
    for model_type in types:
        signal.alarm(args.seconds)
        try:
            kind, detail = sweep_one(model_type)
        except TimeoutError:
            kind, detail = "skipped", "timeout"
        signal.alarm(0)
        tally[kind] += 1
        if kind != "exact":
            print(f"{kind:8} {model_type:28} {detail}")
    import transformers

    print(
        f"\ntransformers {transformers.__version__}: {len(types)} causal-LM model types — "
        + ", ".join(f"{k} {tally[k]}" for k in ("exact", "refused", "noted", "SILENT", "skipped"))
    )


if __name__ == "__main__":
    main()
