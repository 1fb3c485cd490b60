"""DeepSeek-V4 (model_type deepseek_v4) against transformers' DeepseekV4ForCausalLM.

* parameters and active parameters: transformers' default config (DeepSeek-V4-Flash's sizes) and
  DeepSeek-V4-Flash's own config.json (tests/data/configs, legacy `compress_ratios`), built on the
  meta device;
* caches: a tiny copy of the Flash config (every layer type: sliding only, compressed sparse,
  heavily compressed) runs forward passes on the CPU, and every tensor its cache holds (the K=V
  window, the compressed entries, the indexer keys, the compressors' pending windows and
  overlap states) is summed, each storage once: it equals gpuplan's bytes for that context
  (layout "expanded": what transformers keeps) at every length tried, prefill and decode.

No number here comes from gpuplan: transformers and torch compute every expected value.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuplan.api.engines import engine_serve  # noqa: E402
from gpuplan.api.serving import serve  # noqa: E402
from gpuplan.catalog import get_precision  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402
from gpuplan.engine.kv_cache import (  # noqa: E402
    kv_cache_bytes_per_sequence,
    layer_kv_bytes_per_token,
)
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from test_families import _build, _default_meta, _reference_active, _tiny  # noqa: E402

pytestmark = pytest.mark.reference

CONFIGS = Path(__file__).parent / "data/configs"


def _real(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"deepseek-ai--{name}.json").read_text("utf-8"))


FLASH = _real("DeepSeek-V4-Flash-0731")


def test_default_config_is_exact() -> None:
    config, model = _default_meta("deepseek_v4")
    counts = count_params(architecture_from_config(config.to_dict(), "deepseek_v4"))
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active == _reference_active(model, model.config)


@pytest.mark.parametrize("name", ["DeepSeek-V4-Flash-0731", "DeepSeek-V4-Pro-0813"])
def test_real_configs_are_exact(name: str) -> None:
    """DeepSeek-V4-Flash's and -Pro's config.json: legacy compress_ratios (one entry per layer,
    then the MTP stages'), num_hash_layers, qk_rope_head_dim; transformers' DeepseekV4Config
    folds them in. Each layer's compressor is the one transformers builds."""
    cfg = _real(name)
    model = _build(cfg, meta=True)
    arch = architecture_from_config(cfg, name)
    counts = count_params(arch)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active == _reference_active(model, model.config)
    kinds = [layer.self_attn.layer_type for layer in model.model.layers]
    rates = {"sliding_attention": 0, **model.config.compress_rates}
    assert [arch.attention_of(s).compress_rate for s in arch.layers] == [rates[k] for k in kinds]


# -- caches of a tiny copy --------------------------------------------------------------------

WINDOW = 32
RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}


def _tiny_flash() -> dict[str, Any]:
    """test_families' tiny copy of the Flash config (4 layers: 2 sliding, CSA, HCA), with a
    window longer than the shorter runs and small compression rates, so entries, pending windows
    and the CSA overlap state all appear within a few tokens."""
    cfg = _tiny(copy.deepcopy(FLASH))
    cfg.update(sliding_window=WINDOW, compress_rates=RATES, o_lora_rank=16)
    return cfg


def _cache_bytes(cache: Any) -> int:
    """Bytes of every tensor a DynamicCache's layers hold (attributes and dicts of them), each
    storage once: V4's compressed layers keep K and V as one tensor."""
    seen: set[int] = set()
    total = 0
    for layer in cache.layers:
        for name, value in vars(layer).items():
            if name.startswith("_"):
                continue
            tensors = value.values() if isinstance(value, dict) else [value]
            for t in tensors:
                if torch.is_tensor(t) and t.data_ptr() not in seen:
                    seen.add(t.data_ptr())
                    total += t.numel() * t.element_size()
    return total


def _forward(model: Any, tokens: int, cache: Any = None) -> Any:
    ids = torch.randint(0, 128, (1, tokens))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model(input_ids=ids, cache=cache, use_cache=True).cache


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    cfg = _tiny_flash()
    model = _build(cfg, meta=False).float().eval()
    return model, architecture_from_config(cfg, "tiny-v4")


@pytest.mark.parametrize("tokens", [3, 4, 5, 9, 17, 30])
def test_prefill_caches_match_a_forward_pass(tiny: tuple[Any, Any], tokens: int) -> None:
    model, arch = tiny
    fp32 = get_precision("fp32", for_kv=True)
    assert _cache_bytes(_forward(model, tokens)) == kv_cache_bytes_per_sequence(
        arch, fp32, tokens, "expanded"
    )


def test_decode_steps_match_a_forward_pass(tiny: tuple[Any, Any]) -> None:
    """13 prompt tokens then 6 decoded one at a time: the compressors' pending windows carry
    over between calls."""
    model, arch = tiny
    cache = _forward(model, 13)
    for _ in range(6):
        cache = _forward(model, 1, cache)
    fp32 = get_precision("fp32", for_kv=True)
    assert _cache_bytes(cache) == kv_cache_bytes_per_sequence(arch, fp32, 19, "expanded")


def test_past_the_window_transformers_keeps_one_token_fewer(tiny: tuple[Any, Any]) -> None:
    """Beyond the window the sliding part holds window - 1 tokens in transformers' dynamic
    layers (gpuplan bills the window, as the static layers allocate it): one token of every
    layer's window part less."""
    model, arch = tiny
    fp32 = get_precision("fp32", for_kv=True)
    one_token = sum(layer_kv_bytes_per_token(arch, s, fp32, "expanded") for s in arch.layers)
    measured = _cache_bytes(_forward(model, WINDOW + 9))
    assert measured == kv_cache_bytes_per_sequence(arch, fp32, WINDOW + 9, "expanded") - one_token


def test_engine_layout_keeps_the_window_once_and_indexer_keys_in_fp8() -> None:
    """Engines keep the K=V head once on every layer (transformers' sliding-only layers store it
    as keys and values) and the indexer keys as DeepSeek-V3.2's fp8 with a scale per 128 values:
    the difference at one context, derived from the Flash config's shapes."""
    arch = architecture_from_config(FLASH, "flash")
    bf16 = get_precision("bf16", for_kv=True)
    context = 4096
    sliding_only = sum(1 for s in arch.layers if not arch.attention_of(s).compress_rate)
    csa = sum(1 for s in arch.layers if arch.attention_of(s).indexer_head_dim)
    d, di = FLASH["head_dim"], FLASH["index_head_dim"]
    window = min(context, FLASH["sliding_window"])
    extra_v = sliding_only * window * d * 2
    indexer = csa * (context // 4) * (di * 2 - (di + 4))
    expanded = kv_cache_bytes_per_sequence(arch, bf16, context, "expanded")
    assert expanded - kv_cache_bytes_per_sequence(arch, bf16, context) == extra_v + indexer


# -- variants transformers would not build ------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"compress_ratios": [0, 0, 8] + [4] * 43}, "compress_ratios"),
        ({"num_key_value_heads": 2}, "num_key_value_heads"),
        ({"compress_rates": {"dense_attention": 2}}, "compress_rates"),
        ({"o_groups": 7}, "o_groups"),
        ({"layer_types": ["full_attention"] * 43}, "layer_types"),
    ],
)
def test_unbuildable_variants_are_refused_naming_the_key(
    change: dict[str, Any], named: str
) -> None:
    with pytest.raises(GpuplanError, match=named):
        architecture_from_config({**FLASH, **change}, "flash")


# -- weights as the checkpoint stores them ------------------------------------------------------

# the checkpoints' tensor payload bytes, as the pinned release records that tests/data/configs/
# SOURCES.md names give them (read off every shard by their checkpoint-lock tool); both releases
# hold three DSpark draft stages beside their layers ("the official inference config and
# checkpoint contain three DSpark stages"), window-only blocks transformers does not build
STORED_BYTES = {"DeepSeek-V4-Flash-0731": 166_878_536_440, "DeepSeek-V4-Pro-0813": 892_727_580_904}
DRAFT_STAGES = 3


@pytest.mark.parametrize("name", sorted(STORED_BYTES))
def test_weights_are_the_checkpoint_less_its_draft_stages(name: str) -> None:
    """fp8 block-128 linear weights, fp4 routed experts (expert_dtype), bf16 compressor and
    indexer kv/gate projections, bf16 embeddings: what the checkpoint stores beyond gpuplan's
    bill is its three draft stages, each a decoder layer with a few projections of its own."""
    ours = serve(str(CONFIGS / f"deepseek-ai--{name}.json"), "h200").to_dict()["weights_bytes"]
    one_layer = ours / _real(name)["num_hidden_layers"]
    assert DRAFT_STAGES * one_layer < STORED_BYTES[name] - ours < DRAFT_STAGES * 1.05 * one_layer


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engine_pools_are_refused_in_one_line(engine: str) -> None:
    """Engines page the compressed caches their own way (vLLM: MLA pages of block_size /
    compress_ratio entries, the compressor state as a short sliding window): not modelled, so
    an engine bill is refused rather than sized as sliding-window attention."""
    path = CONFIGS / "deepseek-ai--DeepSeek-V4-Flash-0731.json"
    with pytest.raises(GpuplanError, match="compressed attention"):
        engine_serve(str(path), "h200", engine=engine)
