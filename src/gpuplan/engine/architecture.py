"""One architecture record for every decoder gpuplan sizes, read from any config.json.

The records (`Architecture`, `LayerSpec`, `AttentionSpec`, ...) live in engine/model_records.py;
`architecture_from_config` reads a Hugging Face `config.json` into one (engine/model_reader/).
This module is the one name the rest of gpuplan imports both from.
"""

from __future__ import annotations

from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.model_records import (
    MIXERS,
    STATE_MIXERS,
    Architecture,
    AttentionSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    MLPSpec,
    MoESpec,
    RopeSpec,
    SharedBlocksSpec,
    ShortConvSpec,
)

__all__ = [
    "MIXERS",
    "STATE_MIXERS",
    "Architecture",
    "AttentionSpec",
    "LayerSpec",
    "LinearAttentionSpec",
    "MLPSpec",
    "MambaSpec",
    "MoESpec",
    "RopeSpec",
    "SharedBlocksSpec",
    "ShortConvSpec",
    "architecture_from_config",
]
