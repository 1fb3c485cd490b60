"""Which layers are what: the layer-schedule and MoE-layer rules, one registered function each.

A family record in catalog/data/families.toml names its rules by the names registered here
(`schedule = "qwen2"`, `moe_layers = "deepseek"`); engine/families.py accepts exactly these
names, so the table, its checker and the reader cannot drift apart. A config's own `layer_types`
list always wins over a schedule rule (engine/model_reader/reader.py).

    kinds = SCHEDULES["qwen2"](view, traits, n, window)    # "full" | "sliding" | ... per layer
    flags = MOE_LAYERS["deepseek"](view, n, kinds)          # True where a layer routes to experts

Each rule mirrors the transformers configuration or decoder-layer code named in its docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuplan.engine.config_schema import ConfigView
from gpuplan.errors import GpuplanError

# (config view, family traits, layers, sliding window or None) -> layer kind per layer
ScheduleRule = Callable[[ConfigView, Mapping[str, Any], int, "int | None"], list[str]]
# (config view, layers, (kind, window) per layer) -> whether each layer routes to experts
MoeRule = Callable[[ConfigView, int, list[tuple[str, "int | None"]]], list[bool]]

SCHEDULES: dict[str, ScheduleRule] = {}
MOE_LAYERS: dict[str, MoeRule] = {}


def schedule(name: str) -> Callable[[ScheduleRule], ScheduleRule]:
    """Register a layer-schedule rule under the name families.toml uses."""

    def register(rule: ScheduleRule) -> ScheduleRule:
        SCHEDULES[name] = rule
        return rule

    return register


def moe_layers(name: str) -> Callable[[MoeRule], MoeRule]:
    """Register a which-layers-route-to-experts rule under the name families.toml uses."""

    def register(rule: MoeRule) -> MoeRule:
        MOE_LAYERS[name] = rule
        return rule

    return register


# -- layer schedules --------------------------------------------------------------------------


@schedule("uniform")
def _uniform(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Every layer the same; `sliding_window` applies to all when the family slides (Mistral)."""
    return ["sliding" if t["sliding"] and window else "full"] * n


@schedule("alternate")
def _alternate(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Gemma 2, gpt-oss: sliding, full, sliding, ..."""
    return ["sliding" if i % 2 == 0 else "full" for i in range(n)]


@schedule("pattern")
def _pattern(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Gemma 3 / Cohere 2 / EXAONE 4: every `sliding_window_pattern`-th layer is global;
    a string pattern ("LLLG") spells local and global layers and repeats."""
    pattern = v.get("sliding_window_pattern")
    if v.get("sliding_window") is None:
        return ["full"] * n
    if isinstance(pattern, str):
        if not pattern or set(pattern.upper()) - {"L", "G"}:
            raise v.fail("sliding_window_pattern", "must be a number or a string of L and G")
        p = pattern.upper()
        return ["sliding" if p[i % len(p)] == "L" else "full" for i in range(n)]
    if not pattern:
        return ["full"] * n
    return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]


@schedule("qwen2")
def _qwen2(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Qwen2Config: with use_sliding_window, layers from max_window_layers (28) on slide."""
    if not v.get("use_sliding_window"):
        return ["full"] * n
    first = v.get("max_window_layers")
    first = 28 if first is None else first
    return ["sliding" if i >= first else "full" for i in range(n)]


@schedule("qwen2_moe")
def _qwen2_moe(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Qwen2MoeConfig: with use_sliding_window, even layers below max_window_layers slide."""
    if not v.get("use_sliding_window"):
        return ["full"] * n
    last = v.get("max_window_layers")
    last = 28 if last is None else last
    return ["sliding" if (i + 1) % 2 and i < last else "full" for i in range(n)]


def _rope_flags(v: ConfigView, n: int) -> tuple[int, ...]:
    """`no_rope_layers` (1 = RoPE, 0 = NoPE per layer), else every no_rope_layer_interval-th
    layer (4) is NoPE (Llama4TextConfig, SmolLM3Config)."""
    rope = v.get("no_rope_layers")
    if rope is None or len(rope) == 0:
        interval = v.get("no_rope_layer_interval") or 4
        rope = tuple(int((i + 1) % interval != 0) for i in range(n))
    if len(rope) != n:
        raise v.fail("no_rope_layers", f"has {len(rope)} entries for {n} layers")
    return tuple(rope)


@schedule("llama4")
def _llama4(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Llama 4: RoPE layers attend within chunks of attention_chunk_size; NoPE layers (every
    no_rope_layer_interval-th, or 0 in no_rope_layers) are global."""
    return ["chunked" if r else "full" for r in _rope_flags(v, n)]


@schedule("smollm3")
def _smollm3(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """SmolLM3Config: NoPE layers slide when use_sliding_window (an empty no_rope_layers list
    is taken as given, unlike Llama 4's)."""
    rope = v.get("no_rope_layers")
    if rope is None:
        rope = _rope_flags(v, n)
    if len(rope) != n:
        raise v.fail("no_rope_layers", f"has {len(rope)} entries for {n} layers")
    slide = bool(v.get("use_sliding_window")) and window is not None
    return ["sliding" if slide and not r else "full" for r in rope]


@schedule("interval")
def _interval(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Qwen3-Next / Qwen3.5: every full_attention_interval-th layer (4) is full attention, the
    rest the family's linear attention."""
    k = v.get("full_attention_interval") or 4
    linear = t["layer_kinds"].get("linear_attention", "gated_delta")
    return ["full" if (i + 1) % k == 0 else linear for i in range(n)]


_HYBRID_CHARS = {"M": "mamba", "*": "full", "-": "mlp_only", "E": "moe_only"}


@schedule("hybrid_pattern")
def _hybrid_pattern(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Nemotron-H's hybrid_override_pattern: M Mamba-2, * attention, - MLP, E experts."""
    pattern = v.get("hybrid_override_pattern")
    if pattern is None:
        raise GpuplanError(
            f"{v.name}: config.json has neither 'hybrid_override_pattern' nor 'layer_types'"
            " (model_type nemotron_h); cannot tell its layers apart"
        )
    bad = sorted(set(pattern) - set(_HYBRID_CHARS))
    if bad:
        raise v.fail(
            "hybrid_override_pattern",
            f"has block type(s) {''.join(bad)!r} gpuplan does not model (known: M * - E)",
        )
    return [_HYBRID_CHARS[c] for c in pattern]


@schedule("jamba")
def _jamba(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """JambaConfig: attention where i % attn_layer_period == attn_layer_offset, else Mamba."""
    period, offset = v.get("attn_layer_period"), v.get("attn_layer_offset")
    if not period:
        raise v.fail("attn_layer_period", "must be at least 1")
    return ["full" if i % period == offset else "mamba" for i in range(n)]


@schedule("zamba")
def _zamba(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """ZambaConfig.layers_block_type: two Mamba layers and a hybrid, then a hybrid (Mamba plus
    the shared attention block) where (i - 3) % attn_layer_period == attn_layer_offset."""
    period, offset = v.get("attn_layer_period"), v.get("attn_layer_offset")
    if not period:
        raise v.fail("attn_layer_period", "must be at least 1")
    rest = ["hybrid" if i % period == offset else "mamba" for i in range(max(n - 3, 0))]
    return (["mamba", "mamba", "hybrid"] + rest)[:n]


@schedule("attn_type_list")
def _attn_type_list(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """MiniMaxConfig: attn_type_list (1 full, 0 lightning), by default full, linear, full, ..."""
    flags = v.get("attn_type_list")
    if flags is None:
        return ["full" if (i + 1) % 2 else "lightning" for i in range(n)]
    if len(flags) != n:
        raise v.fail("attn_type_list", f"has {len(flags)} entries for {n} layers")
    return ["full" if f else "lightning" for f in flags]


@schedule("full_attn_idxs")
def _full_attn_idxs(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """LFM2's full_attn_idxs (the rest short convolutions); Bamba's attn_layer_indices (the rest
    Mamba-2, all Mamba-2 when absent)."""
    idxs = v.get("full_attn_idxs")
    rest = "mamba" if t["mamba"] else "short_conv"
    full = set(idxs) if idxs is not None else set(range(n)) if rest != "mamba" else set()
    return ["full" if i in full else rest for i in range(n)]


@schedule("listed")
def _listed(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """A family whose layers only its config's layer_types can tell apart."""
    raise GpuplanError(
        f"{v.name}: config.json has no {v.spelling('layer_types')!r} (model_type"
        f" {str(v.raw.get('model_type', 'unknown'))!r}); cannot tell its layers apart"
    )


@schedule("cross_listed")
def _cross_listed(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """MllamaTextConfig.cross_attention_layers: cross-attention there, full attention elsewhere."""
    cross = set(v.get("cross_attention_layers") or ())
    if any(i >= n for i in cross):
        raise v.fail("cross_attention_layers", f"names a layer beyond the {n} layers")
    return ["cross" if i in cross else "full" for i in range(n)]


@schedule("kimi_linear")
def _kimi_linear(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """KimiLinearConfig: linear_attn_config.full_attn_layers (1-indexed) are full attention,
    the rest Kimi Delta Attention; by default every fourth from layer 4."""
    full = v.get("full_attn_layers")
    if full is None:
        return ["full" if i and i % 4 == 0 else "gated_delta" for i in range(n)]
    chosen = {i - 1 for i in full}
    return ["full" if i in chosen else "gated_delta" for i in range(n)]


@schedule("mimo_v2")
def _mimo_v2(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """The checkpoint's hybrid_layer_pattern (0 full, 1 sliding), else MiMoV2FlashConfig's
    default: layer 0 and every full_attention_interval-th (6) full."""
    pattern = v.get("hybrid_layer_pattern")
    if pattern is not None:
        if len(pattern) != n:
            raise v.fail("hybrid_layer_pattern", f"has {len(pattern)} entries for {n} layers")
        return ["sliding" if p else "full" for p in pattern]
    k = v.get("full_attention_interval") or 6
    return ["full" if i == 0 or (i + 1) % k == 0 else "sliding" for i in range(n)]


@schedule("all_mamba")
def _all_mamba(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Mamba / Mamba-2 / FalconMamba: every layer a state-space mixer."""
    return ["mamba"] * n


@schedule("all_hybrid")
def _all_hybrid(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """Falcon-H1: attention and a Mamba-2 mixer side by side in every layer."""
    return ["hybrid"] * n


@schedule("all_rwkv")
def _all_rwkv(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """RWKV-4: every block a time-mixing and a channel-mixing step (RwkvModel.blocks)."""
    return ["rwkv"] * n


@schedule("all_mlstm")
def _all_mlstm(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """xLSTM (xLSTM-7B): every block an mLSTM layer and a gated FFN (xLSTMBlock)."""
    return ["mlstm"] * n


_GRIFFIN_BLOCKS = {"recurrent": "rglru", "attention": "sliding"}


@schedule("griffin")
def _griffin(v: ConfigView, t: Mapping[str, Any], n: int, window: int | None) -> list[str]:
    """RecurrentGemma (Griffin): `block_types` repeated over the layers, a "recurrent" block an
    RG-LRU layer and an "attention" block local attention over attention_window_size
    (RecurrentGemmaConfig.layers_block_type)."""
    blocks = v.require("block_types")
    if not blocks or any(b not in _GRIFFIN_BLOCKS for b in blocks):
        raise v.fail("block_types", f"must list {' or '.join(_GRIFFIN_BLOCKS)} blocks")
    return [_GRIFFIN_BLOCKS[blocks[i % len(blocks)]] for i in range(n)]


# -- MoE layers -------------------------------------------------------------------------------


@moe_layers("pattern")
def _moe_pattern(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """Nemotron-H: the E blocks of hybrid_override_pattern are the expert layers."""
    return [kind == "moe_only" for kind, _ in kinds]


@moe_layers("all")
def _moe_all(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """Mixtral and most MoE families: every layer routes to experts."""
    return [True] * n


@moe_layers("deepseek")
def _moe_deepseek(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """DeepseekV3DecoderLayer: experts from first_k_dense_replace on, every moe_layer_freq-th."""
    first, freq = v.get("first_k_dense_replace") or 0, v.get("moe_layer_freq") or 1
    return [i >= first and i % freq == 0 for i in range(n)]


@moe_layers("first_k")
def _moe_first_k(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """Glm4MoeDecoderLayer: experts from first_k_dense_replace on; mlp_layer_types ("dense" /
    "sparse" per layer), where the config lists it, first (ExaoneMoeConfig, LagunaConfig,
    HYV3Config build their layers from it and derive it from first_k_dense_replace otherwise)."""
    listed = v.get("mlp_layer_types")
    if listed:
        if len(listed) != n or any(t not in ("dense", "sparse") for t in listed):
            raise v.fail("mlp_layer_types", f"must list 'dense' or 'sparse' for each of {n} layers")
        return [t == "sparse" for t in listed]
    first = v.get("first_k_dense_replace") or 0
    return [i >= first for i in range(n)]


@moe_layers("qwen")
def _moe_qwen(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """Qwen2MoeDecoderLayer: every decoder_sparse_step-th layer not in mlp_only_layers."""
    step = v.get("decoder_sparse_step") or 1
    dense = set(v.get("mlp_only_layers") or ())
    return [i not in dense and (i + 1) % step == 0 for i in range(n)]


@moe_layers("llama4")
def _moe_llama4(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """Llama4TextConfig.moe_layers, else every interleave_moe_layer_step-th layer."""
    listed = v.get("moe_layers")
    if listed is None:
        step = v.get("interleave_moe_layer_step") or 1
        listed = tuple(range(step - 1, n, step))
    chosen = set(listed)
    return [i in chosen for i in range(n)]


@moe_layers("jamba")
def _moe_jamba(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """JambaConfig: experts where i % expert_layer_period == expert_layer_offset."""
    period, offset = v.get("expert_layer_period") or 1, v.get("expert_layer_offset") or 0
    return [i % period == offset for i in range(n)]


@moe_layers("ernie")
def _moe_ernie(v: ConfigView, n: int, kinds: list[tuple[str, int | None]]) -> list[bool]:
    """Ernie4_5_MoeDecoderLayer: every moe_layer_interval-th layer in [start, end]."""
    start = v.get("moe_layer_start_index") or 0
    end = v.get("moe_layer_end_index")
    end = n - 1 if end is None or end == -1 else end
    step = v.get("moe_layer_interval") or 1
    return [(i + 1) % step == 0 and start <= i <= end for i in range(n)]
