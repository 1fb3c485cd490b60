"""Per-layer variation: what makes one layer of a family differ from its neighbours beyond its
kind (engine/schedules.py) — its own attention shape, FFN width, shared KV or shared blocks.

Each function takes the layers read so far and returns them with the variation applied, as the
transformers module named in its docstring builds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.frozen import replace
from gpuplan.engine.model_records import AttentionSpec, LayerSpec, MoESpec, SharedBlocksSpec
from gpuplan.errors import GpuplanError

Traits = Mapping[str, Any]


def shared_blocks(
    v: ConfigView, layers: tuple[LayerSpec, ...]
) -> tuple[tuple[LayerSpec, ...], SharedBlocksSpec]:
    """Zamba 2 (Zamba2Model.get_layers): the hybrid layers run shared transformer blocks in
    turn; the first `num_mem_blocks` of them hold the blocks' weights, the rest reuse them."""
    count = v.require("num_mem_blocks")
    hybrid = [i for i, s in enumerate(layers) if s.mixer == "hybrid"]
    out = list(layers)
    for k, i in enumerate(hybrid[:count]):
        out[i] = replace(layers[i], shared_block=k)
    spec = SharedBlocksSpec(
        count=min(count, len(hybrid)),
        uses=len(hybrid),
        adapter_rank=v.require("adapter_rank"),
        attention_adapters=bool(v.get("use_shared_attention_adapter")),
        mlp_adapters=v.get("use_shared_block_lora") is not False,
    )
    return tuple(out), spec


def gemma_layers(
    v: ConfigView,
    model_type: str,
    layers: tuple[LayerSpec, ...],
    attention: AttentionSpec,
    moe: MoESpec | None,
) -> tuple[tuple[LayerSpec, ...], dict[str, Any]]:
    """Gemma 3n / Gemma 4 per-layer variation: the last num_kv_shared_layers reuse an earlier
    layer's K and V (no k/v projections, no cache: Gemma3nTextAttention, Gemma4TextAttention),
    Gemma 3n's per-layer FFN widths, Gemma 4's global layers with global_head_dim (and with
    attention_k_eq_v, num_global_key_value_heads and no v_proj), double-wide MLPs on the
    KV-sharing layers, and an MoE block beside the dense MLP (enable_moe_block)."""
    n = len(layers)
    shared = v.get("num_kv_shared_layers") or 0
    if shared > n:
        raise v.fail("num_kv_shared_layers", f"({shared}) exceeds the {n} layers")
    widths = v.raw.get("intermediate_size")
    per_layer_width = _per_layer_widths(v, widths, n)
    double = bool(v.get("use_double_wide_mlp"))
    k_eq_v = bool(v.get("attention_k_eq_v"))
    global_spec = attention
    if model_type.startswith("gemma4") and v.raw.get("per_layer_config") is None:
        global_spec = replace(
            attention,
            head_dim=v.get("global_head_dim") or 512,
            v_head_dim=v.get("global_head_dim") or 512,
            num_kv_heads=(v.get("num_global_key_value_heads") or attention.num_kv_heads)
            if k_eq_v
            else attention.num_kv_heads,
        )
    if model_type.startswith("gemma4") and layers and layers[-1].sliding_window is not None:
        layers = (*layers[:-1], replace(layers[-1], sliding_window=None))  # Gemma4TextConfig
    out = []
    base_width = None if isinstance(widths, list) else (v.get("intermediate_size") or None)
    for i, spec in enumerate(layers):
        is_shared = i >= n - shared
        attn = global_spec if spec.sliding_window is None and global_spec is not attention else None
        width = per_layer_width[i]
        if double and is_shared and base_width:
            width = 2 * base_width
        out.append(
            replace(
                spec,
                attention=attn,
                kv_shared=is_shared,
                mlp_width=width,
                v_from_k=k_eq_v and spec.sliding_window is None,
            )
        )
    extras = {
        "per_layer_input": v.get("hidden_size_per_layer_input") or 0,
        "per_layer_vocab": v.get("vocab_size_per_layer_input") or v.require("vocab_size"),
        "altup_inputs": v.get("altup_num_inputs") or 0,
        "laurel_rank": v.get("laurel_rank") or 0,
        "moe_beside_mlp": moe is not None,
    }
    return tuple(out), extras


def _per_layer_widths(v: ConfigView, widths: Any, n: int) -> list[int | None]:
    """Gemma 3n's intermediate_size as a list: one FFN width per layer (None: the model's)."""
    per_layer_width: list[int | None] = [None] * n
    if isinstance(widths, list):
        if len(widths) != n:
            raise v.fail("intermediate_size", f"lists {len(widths)} widths for {n} layers")
        for i, w in enumerate(widths):
            if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 1 << 22:
                raise v.fail(
                    "intermediate_size", f"entry {i} must be a whole number in [1, 4194304]"
                )
            per_layer_width[i] = w
    return per_layer_width


_PER_LAYER_KEYS = (
    "head_dim",
    "num_key_value_heads",
    "num_attention_heads",
    "intermediate_size",
    # MLA layers (Dots3NoteTextAttention reads its layer's own config)
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "v_head_dim",
)


def per_layer_config(
    v: ConfigView, layers: tuple[LayerSpec, ...], attention: AttentionSpec
) -> tuple[LayerSpec, ...]:
    """transformers' heterogeneous configs (`per_layer_config`: layer index -> overrides of
    head_dim, num_key_value_heads, num_attention_heads, intermediate_size); any other key is
    refused, naming it."""
    raw = v.raw.get("per_layer_config")
    if not isinstance(raw, Mapping):
        raise v.fail("per_layer_config", "must be a JSON object of layer index -> overrides")
    out = list(layers)
    for key, overrides in raw.items():
        try:
            i = int(key)
        except (TypeError, ValueError):
            raise v.fail(
                "per_layer_config", f"has a key {str(key)[:20]!r} that is not a layer index"
            ) from None
        if not 0 <= i < len(out) or not isinstance(overrides, Mapping):
            raise v.fail(
                "per_layer_config", f"entry {str(key)[:20]!r} is not a layer of this model"
            )
        unknown = sorted(set(overrides) - set(_PER_LAYER_KEYS))
        if unknown:
            raise GpuplanError(
                f"{v.name}: config field 'per_layer_config.{i}.{unknown[0]}' is a per-layer"
                " override gpuplan does not model; cannot size this model"
            )
        sub = ConfigView(overrides, f"{v.name}: per_layer_config.{i}", {}, {})
        spec = _layer_attention(sub, out[i].attention or attention)
        out[i] = replace(
            out[i],
            attention=None if spec == attention else spec,
            mlp_width=sub.get("intermediate_size") or out[i].mlp_width,
        )
    return tuple(out)


def _layer_attention(sub: ConfigView, base: AttentionSpec) -> AttentionSpec:
    """One layer's attention with its per_layer_config overrides: heads, KV heads and head_dim;
    for MLA, heads, kv_lora_rank and qk_nope_head_dim (the query/key width follows)."""
    heads = sub.get("num_attention_heads") or base.num_heads
    if base.is_mla:  # head_dim follows the query/key parts (qk_nope + qk_rope)
        nope = sub.get("qk_nope_head_dim") or base.qk_nope_head_dim
        rope = sub.get("qk_rope_head_dim") or base.qk_rope_head_dim
        return replace(
            base,
            num_heads=heads,
            num_kv_heads=heads,
            q_lora_rank=sub.get("q_lora_rank") or base.q_lora_rank,
            kv_lora_rank=sub.get("kv_lora_rank") or base.kv_lora_rank,
            qk_nope_head_dim=nope,
            qk_rope_head_dim=rope,
            head_dim=nope + rope,
            v_head_dim=sub.get("v_head_dim") or base.v_head_dim,
        )
    for key in (
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "q_lora_rank",
        "v_head_dim",
    ):
        if sub.present(key):
            raise sub.fail(key, "overrides a latent-attention width of a model without MLA")
    kv = sub.get("num_key_value_heads") or base.num_kv_heads
    hd = sub.get("head_dim") or base.head_dim
    if heads % kv:
        raise sub.fail("num_key_value_heads", f"({kv}) must divide {heads} heads")
    return replace(base, num_heads=heads, num_kv_heads=kv, head_dim=hd, v_head_dim=hd)


def sliding_without_indexer(
    layers: tuple[LayerSpec, ...], attention: AttentionSpec
) -> tuple[LayerSpec, ...]:
    """A sliding-window layer selects no top-k tokens: no indexer, no indexer keys
    (Dots3NoteTextAttention builds its indexer on indexed_attention layers only)."""
    out = []
    for spec in layers:
        a = spec.attention or attention
        if spec.sliding_window is not None and a.indexer_heads:
            spec = replace(spec, attention=replace(a, indexer_heads=0, indexer_head_dim=0))
        out.append(spec)
    return tuple(out)


def shared_indexer_layers(
    v: ConfigView, layers: tuple[LayerSpec, ...], attention: AttentionSpec
) -> tuple[LayerSpec, ...]:
    """GLM-5's cross-layer top-k sharing (GlmMoeDsaConfig.indexer_types): a "shared" layer
    reuses the previous "full" layer's selection, so it has no indexer and caches no indexer
    keys. The list, else `index_topk_pattern` ("F"/"S" per layer), else every
    `index_topk_freq`-th layer from `index_skip_topk_offset` on is full (GlmMoeDsaConfig)."""
    n = len(layers)
    types = v.get("indexer_types")
    pattern = v.get("index_topk_pattern")
    if types is None and pattern is not None:
        if set(pattern) - {"F", "S"}:
            raise v.fail("index_topk_pattern", "must be a string of F and S")
        types = ["full" if c == "F" else "shared" for c in pattern]
    if types is None:
        freq = v.get("index_topk_freq") or 1
        offset = v.get("index_skip_topk_offset")
        offset = 2 if offset is None else offset
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    if len(types) != n:
        raise v.fail("indexer_types", f"has {len(types)} entries for {n} layers")
    bad = sorted(set(types) - {"full", "shared"})
    if bad:
        raise v.fail("indexer_types", f"names {bad[0]!r} (known: full, shared)")
    if "shared" not in types:
        return layers
    bare = replace(attention, indexer_heads=0, indexer_head_dim=0)
    return tuple(
        replace(spec, attention=bare) if kind == "shared" and spec.has_attention else spec
        for spec, kind in zip(layers, types, strict=True)
    )


def sliding_attention(
    v: ConfigView, t: Traits, layers: tuple[LayerSpec, ...], attention: AttentionSpec
) -> tuple[LayerSpec, ...]:
    """Sliding-window layers with their own attention shape (MiMoV2FlashAttention: its SWA
    layers have swa_num_key_value_heads KV heads, twice the full layers' in transformers, and
    the attention sinks when the family has `swa_sinks`; the checkpoint's config.json also
    spells swa_num_attention_heads, swa_head_dim and swa_v_head_dim)."""
    kv = v.get("swa_num_key_value_heads") or attention.num_kv_heads
    heads = v.get("swa_num_attention_heads") or attention.num_heads
    if heads % kv:
        raise v.fail(
            "swa_num_key_value_heads", f"({kv}) must divide the sliding layers' {heads} heads"
        )
    sliding = replace(
        attention,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=v.get("swa_head_dim") or attention.head_dim,
        v_head_dim=v.get("swa_v_head_dim") or attention.v_head_dim,
        sinks=attention.sinks or bool(t["swa_sinks"]),
    )
    return tuple(
        replace(spec, attention=sliding)
        if spec.sliding_window is not None and spec.has_attention
        else spec
        for spec in layers
    )


def heads_per_layer(
    v: ConfigView, layers: tuple[LayerSpec, ...], attention: AttentionSpec
) -> tuple[LayerSpec, ...]:
    """`num_attention_heads_per_layer` (LagunaConfig): each attention layer's query heads,
    sharing the model's KV heads and head_dim (LagunaAttention)."""
    heads = v.get("num_attention_heads_per_layer")
    if len(heads) != len(layers):
        raise v.fail(
            "num_attention_heads_per_layer",
            f"has {len(heads)} entries for {len(layers)} layers",
        )
    out = list(layers)
    for i, (spec, n) in enumerate(zip(layers, heads, strict=True)):
        if not spec.has_attention:
            continue
        base = spec.attention or attention
        if n < 1 or n % base.num_kv_heads:
            raise v.fail(
                "num_attention_heads_per_layer",
                f"entry {i} ({n}) must be a multiple of the {base.num_kv_heads} KV heads",
            )
        if n != base.num_heads:
            out[i] = replace(spec, attention=replace(base, num_heads=n))
    return tuple(out)


# DeepSeek-V4's layer types (DeepseekV4Config): the legacy per-layer compress_ratios value of each
_V4_RATIOS = {
    0: "sliding_attention",
    4: "compressed_sparse_attention",
    128: "heavily_compressed_attention",
}
_CSA, _HCA = "compressed_sparse_attention", "heavily_compressed_attention"


def deepseek_v4_layer_types(v: ConfigView, n: int) -> list[str]:
    """Each layer's type as DeepseekV4Config.__post_init__ derives it: `layer_types`, else the
    legacy `compress_ratios` (0 sliding, 4 CSA, 128 HCA; only the first n entries: checkpoints
    list their MTP layers' too), else two HCA layers then CSA and HCA alternating."""
    names = v.get("layer_types")
    if names is not None:
        unknown = sorted(set(names) - set(_V4_RATIOS.values()))
        if unknown:
            raise v.fail(
                "layer_types",
                f"names {unknown[0][:40]!r}, not a DeepSeek-V4 layer type"
                f" ({', '.join(_V4_RATIOS.values())})",
            )
        return list(names)
    ratios = v.get("compress_ratios")
    if ratios is not None:
        if len(ratios) < n:
            raise v.fail("compress_ratios", f"has {len(ratios)} entries for {n} layers")
        unknown = sorted({r for r in ratios[:n] if r not in _V4_RATIOS})
        if unknown:
            raise v.fail("compress_ratios", f"has ratio {unknown[0]} (known: 0, 4, 128)")
        return [_V4_RATIOS[r] for r in ratios[:n]]
    rest = [_CSA if i % 2 else _HCA for i in range(max(n - 2, 0))]
    return ([_HCA] * min(n, 2) + rest)[:n]


def _compress_rates(v: ConfigView) -> dict[str, int]:
    """DeepseekV4Config.compress_rates (CSA 4, HCA 128 by default; the legacy
    compress_rate_csa / compress_rate_hca override them)."""
    rates = {_CSA: 4, _HCA: 128}
    given = v.get("compress_rates")
    if given is not None:
        for key, value in given.items():
            if key not in rates or isinstance(value, bool) or not isinstance(value, int):
                raise v.fail(
                    "compress_rates", f"has an entry {str(key)[:40]!r} gpuplan does not read"
                )
            if not 1 <= value <= 1 << 34:
                raise v.fail(
                    "compress_rates", f"rate of {key} must be a whole number of at least 1"
                )
            rates[key] = value
    for key, legacy in ((_CSA, "compress_rate_csa"), (_HCA, "compress_rate_hca")):
        if v.get(legacy) is not None:
            rates[key] = v.get(legacy)
    return rates


def compressed_layers(
    v: ConfigView, layers: tuple[LayerSpec, ...], attention: AttentionSpec
) -> tuple[LayerSpec, ...]:
    """DeepSeek-V4's per-layer attention (DeepseekV4Attention.compressor): a compressed sparse
    attention layer compresses every compress_rates CSA tokens in two overlapping series
    (DeepseekV4CSACompressor, 2 x head_dim wide) and runs a lightning indexer (index_n_heads x
    index_head_dim, DeepseekV4Indexer); a heavily compressed one compresses every compress_rates
    HCA tokens (DeepseekV4HCACompressor); a sliding one has no compressor."""
    names = deepseek_v4_layer_types(v, len(layers))
    rates = _compress_rates(v)
    csa = replace(
        attention,
        compress_rate=rates[_CSA],
        compress_overlap=True,
        indexer_heads=v.require("index_n_heads"),
        indexer_head_dim=v.require("index_head_dim"),
    )
    hca = replace(attention, compress_rate=rates[_HCA])
    specs = {_CSA: csa, _HCA: hca}
    return tuple(
        replace(spec, attention=specs.get(name)) for spec, name in zip(layers, names, strict=True)
    )
