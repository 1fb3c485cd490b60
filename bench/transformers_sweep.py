"""Every causal-LM model type transformers ships, sized by gpuplan from its default config.

    python bench/transformers_sweep.py [--types llama,qwen3 ...] [--seq2seq] [--towers]

Each configuration class's defaults mirror its flagship checkpoint. For every model type in
transformers' causal-LM auto mapping, the default config is built on the `meta` device and its
parameters counted; gpuplan reads the same config dict. Each type lands in one row:

  exact      gpuplan's total equals transformers'
  refused    gpuplan answered with one line naming what it cannot read
  noted      the count differs, and the architecture's notes say what was not modelled
  SILENT     the count differs and nothing says so (a bug: never silently wrong)
  skipped    transformers itself could not build the default (missing extras, bad defaults)

A multimodal wrapper whose causal-LM class is text-only differs by its vision tower; such a row
is "exact" when gpuplan's total less its vision parameters matches. A type gpuplan reads as an
encoder-decoder (engine/encoder_decoder.py) is compared with the whole seq2seq model, not the
decoder-only *ForCausalLM class. `--seq2seq` sweeps the sequence-to-sequence (and speech) model
types instead; `--towers` the image-text-to-text wrappers (tower and language model together).
Asserts nothing; prints the rows that are not exact and the tally.
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


def _reference(config: Any, kind: str) -> int:
    """Parameters transformers builds for `config` on the meta device: its causal LM, its
    seq2seq (or speech seq2seq) model, or its image-text-to-text wrapper."""
    import torch
    import transformers as tf

    builders = {
        "causal": (tf.AutoModelForCausalLM,),
        "seq2seq": (tf.AutoModelForSeq2SeqLM, tf.AutoModelForSpeechSeq2Seq),
        "towers": (tf.AutoModelForImageTextToText,),
    }[kind]
    for i, builder in enumerate(builders):
        try:
            with torch.device("meta"):
                model = builder.from_config(config)
            return sum(p.numel() for p in model.parameters())
        except ValueError:
            if i == len(builders) - 1:
                raise
    raise AssertionError(kind)


def sweep_one(model_type: str, kind: str = "causal") -> tuple[str, str]:
    from transformers import AutoConfig

    from gpuplan.engine.architecture import architecture_from_config
    from gpuplan.engine.params import count_params
    from gpuplan.errors import GpuplanError

    try:
        config = AutoConfig.for_model(model_type)
        expected = _reference(config, kind)
    except Exception as err:  # transformers' own failure: not gpuplan's to judge
        return "skipped", type(err).__name__
    try:
        arch = architecture_from_config(config.to_dict(), model_type)
    except GpuplanError as err:
        return "refused", str(err)[:140]
    if arch.encoder is not None and kind == "causal":  # compare the whole seq2seq model
        try:
            expected = _reference(config, "seq2seq")
        except Exception as err:
            return "skipped", type(err).__name__
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
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--seq2seq", action="store_true", help="sequence-to-sequence types")
    group.add_argument("--towers", action="store_true", help="image-text-to-text wrappers")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from transformers.models.auto import modeling_auto as auto

    sweep = "seq2seq" if args.seq2seq else "towers" if args.towers else "causal"
    mapping = {
        "causal": auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "seq2seq": {
            **auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
            **auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
        },
        "towers": auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    }[sweep]
    label = {
        "causal": "causal-LM",
        "seq2seq": "sequence-to-sequence",
        "towers": "image-text-to-text",
    }[sweep]
    types = args.types.split(",") if args.types else sorted(mapping)
    signal.signal(signal.SIGALRM, _timeout)
    tally: Counter[str] = Counter()
    for model_type in types:
        signal.alarm(args.seconds)
        try:
            kind, detail = sweep_one(model_type, sweep)
        except TimeoutError:
            kind, detail = "skipped", "timeout"
        signal.alarm(0)
        tally[kind] += 1
        if kind != "exact":
            print(f"{kind:8} {model_type:28} {detail}")
    import transformers

    print(
        f"\ntransformers {transformers.__version__}: {len(types)} {label} model types — "
        + ", ".join(f"{k} {tally[k]}" for k in ("exact", "refused", "noted", "SILENT", "skipped"))
    )


if __name__ == "__main__":
    main()
