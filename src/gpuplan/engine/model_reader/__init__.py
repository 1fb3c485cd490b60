"""The model reader: a Hugging Face config.json into an `Architecture` (engine/model_records.py).

    config.py     architecture_from_config: wrappers, encoder-decoders, unknown families
    reader.py     Reader: one family's view of a config, step by step, into the record
    parts.py      the model-wide parts: attention, rotary embedding, FFN, experts, mixers
    variation.py  per-layer variation: Gemma 3n/4, per_layer_config, indexers, shared blocks

The layer-schedule and MoE-layer rules a family names live in engine/schedules.py, registered
by name; the family table is catalog/data/families.toml (engine/families.py).
"""

from __future__ import annotations

from gpuplan.engine.model_reader.config import architecture_from_config

__all__ = ["architecture_from_config"]
