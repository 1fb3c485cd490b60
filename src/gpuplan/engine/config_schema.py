"""One validation layer for config.json: every field gpuplan reads, typed and bounded.

A Hugging Face `config.json` spells one quantity many ways (`num_hidden_layers`, `n_layer`,
`n_layers`, `num_layers`, `attn_config.kv_n_heads`, ...). The family table
(catalog/data/families.toml) maps each spelling onto one *canonical* field; this module holds the
rule of every canonical field — its type and its bounds — and `ConfigView`, the only object that
reads a config. A value is checked when it is read, against that rule, and a bad one fails with one
line naming the key as the config spells it:

    Llama-3-8B: config field 'num_key_value_heads' must be a whole number in [1, 65536], got -2

The bounds are generous (well above any published model) but finite, so a pasted config cannot ask
for a billion layers or a NaN head size. Cross-field consistency (heads divisible by KV heads,
active experts not above experts, ...) is checked by the reader in engine/model_reader/, also with
a one-line error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError


@record
class Rule:
    """The type and bounds of one canonical config field."""

    kind: str  # int | int_auto | int_per_layer | int_or_str | bool_or_str | float | bool | str |
    #            int_list | str_list | map   (int_per_layer: an int, or one per layer, all equal)
    lo: float = 0
    hi: float = 0
    max_len: int = 0  # lists: most elements
    nullable: bool = (
        False  # an explicit null is a value (no window, no q compression), not "default"
    )


MAX_LAYERS = 4096  # the deepest published decoders have ~200 layers
MAX_HEADS = 65_536
MAX_WIDTH = 1 << 22  # 4,194,304: hidden and FFN widths (published maxima ~ 10^5)
MAX_VOCAB = 1 << 25  # 33,554,432 rows (published maxima ~ 10^6)
MAX_EXPERTS = 65_536
MAX_POSITIONS = 1 << 34  # context lengths and windows
MAX_SMALL = 4096  # kernels, ranks of small structures, multipliers of widths

_LAYERS = Rule("int", 1, MAX_LAYERS)
_HEADS = Rule("int", 1, MAX_HEADS)
_HEADS0 = Rule("int", 0, MAX_HEADS)
_WIDTH = Rule("int", 1, MAX_WIDTH)
_WIDTH0 = Rule("int", 0, MAX_WIDTH)
_EXPERTS0 = Rule("int", 0, MAX_EXPERTS)
_POS0 = Rule("int", 0, MAX_POSITIONS)
_SMALL = Rule("int", 1, MAX_SMALL)
_SMALL0 = Rule("int", 0, MAX_SMALL)
_LAYER0 = Rule("int", 0, MAX_LAYERS)
_BOOL = Rule("bool")
_STR = Rule("str", max_len=256)
_FLOAT = Rule("float", -1e12, 1e12)

FIELDS: dict[str, Rule] = {
    # sizes every decoder has
    "hidden_size": _WIDTH,
    "num_hidden_layers": _LAYERS,
    "num_attention_heads": _HEADS,
    "num_key_value_heads": _HEADS,
    "head_dim": _WIDTH,
    "v_head_dim": _WIDTH,
    "vocab_size": Rule("int", 1, MAX_VOCAB),
    "intermediate_size": _WIDTH,
    "max_position_embeddings": _POS0,
    "model_type": _STR,
    "torch_dtype": _STR,
    "hidden_act": _STR,
    "tie_word_embeddings": _BOOL,
    "word_embed_proj_dim": _WIDTH,
    # attention
    "attention_bias": _BOOL,
    "attention_out_bias": _BOOL,
    "qkv_bias": _BOOL,
    "mlp_bias": _BOOL,
    "use_bias": _BOOL,
    "qk_norm": _BOOL,
    "multi_query": _BOOL,
    "new_decoder_architecture": _BOOL,
    "parallel_block": _BOOL,
    "parallel_norms": Rule("int", 1, 2),
    "alibi": _BOOL,
    "learned_positions": _BOOL,
    "output_gate": _BOOL,
    "sliding_window": Rule("int", 0, MAX_POSITIONS, nullable=True),
    "use_sliding_window": _BOOL,
    "max_window_layers": _LAYER0,
    "sliding_window_pattern": Rule("int_or_str", 0, MAX_LAYERS, MAX_LAYERS),
    "attention_chunk_size": Rule("int", 0, MAX_POSITIONS, nullable=True),
    "no_rope_layers": Rule("int_list", 0, 1, MAX_LAYERS),
    "no_rope_layer_interval": _SMALL0,
    "layer_types": Rule("str_list", max_len=MAX_LAYERS),
    "hybrid_override_pattern": Rule("str", max_len=MAX_LAYERS),
    "attn_layer_period": _LAYER0,
    "attn_layer_offset": _LAYER0,
    "full_attention_interval": _LAYER0,
    "attn_type_list": Rule("int_list", 0, 1, MAX_LAYERS),
    "full_attn_idxs": Rule("int_list", 0, MAX_LAYERS - 1, MAX_LAYERS),
    "full_attn_layers": Rule("int_list", 1, MAX_LAYERS, MAX_LAYERS),  # Kimi Linear, 1-indexed
    "global_head_dim": _WIDTH,
    "num_global_key_value_heads": _HEADS,
    "attention_k_eq_v": _BOOL,
    "num_kv_shared_layers": _LAYER0,
    "global_partial_rotary_factor": Rule("float", 0, 1),
    # multi-head latent attention (DeepSeek-V2/V3) and its indexer (V3.2)
    "q_lora_rank": Rule("int", 0, MAX_WIDTH, nullable=True),
    "kv_lora_rank": _WIDTH,
    "qk_nope_head_dim": _WIDTH0,
    "qk_rope_head_dim": _WIDTH0,
    "index_n_heads": _HEADS0,
    "index_head_dim": _WIDTH0,
    "indexer_types": Rule("str_list", max_len=MAX_LAYERS),  # "full" | "shared" per layer (GLM-5)
    "index_topk_pattern": Rule("str", max_len=MAX_LAYERS),  # "F"/"S" per layer
    "index_topk_freq": _SMALL,
    "index_skip_topk_offset": _LAYER0,
    # mixture of experts
    # HunYuanMoEV1Config: num_experts / moe_topk may list one value per layer (HunYuan-A13B)
    "num_experts": Rule("int_per_layer", 0, MAX_EXPERTS),
    "experts_per_token": Rule("int_per_layer", 1, MAX_EXPERTS),
    "moe_intermediate_size": _WIDTH,
    "num_shared_experts": _EXPERTS0,
    "zero_experts": _EXPERTS0,  # LongCat-Flash's zero-computation (identity) experts
    "decoder_blocks": Rule("int", 1, MAX_LAYERS),  # LongCat-Flash: blocks of two sublayers
    "shared_expert_intermediate_size": _WIDTH0,
    "first_k_dense_replace": _LAYER0,
    "moe_layer_freq": _SMALL,
    "decoder_sparse_step": _SMALL,
    "mlp_only_layers": Rule("int_list", 0, MAX_LAYERS - 1, MAX_LAYERS),
    "mlp_layer_types": Rule("str_list", max_len=MAX_LAYERS),
    "interleave_moe_layer_step": _SMALL,
    "intermediate_size_mlp": _WIDTH,
    "expert_layer_period": _SMALL,
    "expert_layer_offset": _LAYER0,
    "moe_layer_start_index": _LAYER0,
    "moe_layer_end_index": Rule("int", -1, MAX_LAYERS),
    "moe_layer_interval": _SMALL,
    "router_bias": _BOOL,
    "moe_latent_size": Rule("int", 0, MAX_WIDTH, nullable=True),
    "num_nextn_predict_layers": _LAYER0,
    # state-space and linear-attention mixers
    "mamba_d_state": _WIDTH,
    "num_mem_blocks": Rule("int", 1, MAX_LAYERS),
    "type_vocab_size": Rule("int", 0, 1 << 20),
    "use_full_rank_gate": _BOOL,
    "cross_attention_layers": Rule("int_list", 0, MAX_LAYERS, MAX_LAYERS),
    "adapter_rank": Rule("int", 0, MAX_WIDTH),
    "backbone_hidden_size": _WIDTH0,
    "gated_norm_rank": _WIDTH,  # AXK2GatedRMSNorm's fc1 / fc2 rank  # a drafter's target model width (Gemma 4 assistant)
    "hc_mult": Rule("int", 1, 64),  # hyper-connections: residual streams (HY V4)
    # DeepSeek-V4 (DeepseekV4Config): grouped low-rank output projection, compressed attention
    "o_groups": _HEADS,
    "o_lora_rank": _WIDTH,
    "compress_rates": Rule("map"),  # layer type -> tokens per compressed entry
    "compress_ratios": Rule("int_list", 0, MAX_POSITIONS, 2 * MAX_LAYERS),  # legacy, per layer
    "compress_rate_csa": Rule("int", 1, MAX_POSITIONS),  # legacy scalar overrides
    "compress_rate_hca": Rule("int", 1, MAX_POSITIONS),
    "use_shared_attention_adapter": _BOOL,
    "use_shared_block_lora": _BOOL,
    "mamba_d_conv": _SMALL,
    "mamba_expand": _SMALL,
    "mamba_d_inner": _WIDTH,
    "mamba_n_heads": _HEADS,
    "mamba_head_dim": Rule("int_auto", 1, MAX_WIDTH),
    "mamba_n_groups": _HEADS,
    "mamba_dt_rank": Rule("int_auto", 1, MAX_WIDTH),
    "mamba_conv_bias": _BOOL,
    "mamba_proj_bias": _BOOL,
    "mamba_norm": _BOOL,
    "mamba_chunk_size": Rule("int", 1, MAX_POSITIONS, nullable=True),
    "linear_num_key_heads": _HEADS,
    "linear_num_value_heads": _HEADS,
    "linear_key_head_dim": _WIDTH,
    "linear_value_head_dim": _WIDTH,
    "linear_conv_kernel_dim": _SMALL,
    "conv_L_cache": _SMALL,
    "conv_bias": _BOOL,
    # RecurrentGemma's recurrent blocks (families.toml [recurrent_gemma])
    "rglru_width": _WIDTH,
    "rglru_conv_width": _SMALL,
    "block_types": Rule("str_list", max_len=MAX_LAYERS),
    # xLSTM's mLSTM blocks (families.toml [xlstm])
    "qk_dim_factor": Rule("float", 0, 64),
    "v_dim_factor": Rule("float", 0, 64),
    "ffn_proj_factor": Rule("float", 0, 64),
    "ffn_round_up_to_multiple_of": _SMALL,
    # per-layer embeddings (Gemma 3n / Gemma 4)
    "hidden_size_per_layer_input": _WIDTH0,
    "vocab_size_per_layer_input": Rule("int", 1, MAX_VOCAB),
    # positions
    "rope_scaling": Rule("map"),
    "partial_rotary_factor": Rule("float", 0, 1),
    "rotary_dim": _WIDTH0,
    "moe_layers": Rule("int_list", 0, MAX_LAYERS - 1, MAX_LAYERS),
    "num_dense_layers": _LAYER0,
    "mamba_ssm_cache_dtype": _STR,
    "mamba_ssm_dtype": _STR,
    # family switches that only some families read
    "qk_layernorm": _BOOL,
    "use_post_norm": _BOOL,
    "swa_num_key_value_heads": _HEADS,  # MiMo-V2-Flash's sliding layers
    "swa_head_dim": _WIDTH,
    "swa_num_attention_heads": _HEADS,
    "hybrid_layer_pattern": Rule("int_list", 0, 1, MAX_LAYERS),  # MiMo-V2: 0 full, 1 sliding
    "moe_layer_pattern": Rule("int_list", 0, 1, MAX_LAYERS),  # MiMo-V2: 0 dense, 1 experts
    "add_swa_attention_sink_bias": _BOOL,
    "add_full_attention_sink_bias": _BOOL,
    "swa_v_head_dim": _WIDTH,
    "use_sandwich_norm": _BOOL,
    "use_attention_gate": _BOOL,
    "gating": Rule("bool_or_str", max_len=32),  # Laguna: true / "per-head", false / "per-channel"
    "num_attention_heads_per_layer": Rule("int_list", 1, MAX_HEADS, MAX_LAYERS),
    "lm_head_bias": _BOOL,
    "norm_affine": _BOOL,
    "do_layer_norm_before": _BOOL,
    "remove_final_layer_norm": _BOOL,
    "expansion_ratio": _SMALL,
    "no_bias": _BOOL,
    "add_bias_linear": _BOOL,
    "multi_query_attention": _BOOL,
    "block_auto_adjust_ff_dim": _BOOL,
    "block_ffn_dim_multiplier": Rule("float", 0, 1e6),
    "block_multiple_of": _SMALL,
    "indexer": _BOOL,
    "enable_moe_block": _BOOL,
    "attn_logit_softcapping": Rule("float", 0, 1e6, nullable=True),
    "final_logit_softcapping": Rule("float", 0, 1e6, nullable=True),
    "use_double_wide_mlp": _BOOL,
    "altup_num_inputs": _SMALL0,
    "laurel_rank": _WIDTH0,
    # vision towers (engine/vision.py reads vision_config through these)
    "vision_hidden_size": _WIDTH,
    "vision_embed_dim": _WIDTH,
    "vision_layers": _LAYER0,
    "vision_intermediate_size": _WIDTH,
    "vision_patch_size": _SMALL,
    "vision_channels": _SMALL,
    "vision_image_size": Rule("int", 1, 1 << 20),
    "vision_temporal_patch_size": _SMALL,
    "vision_merge_size": _SMALL,
    "vision_out_hidden_size": _WIDTH,
    "vision_mlp_ratio": _SMALL,
    "vision_positions": Rule("int", 0, 1 << 24),
    "vision_deepstack": Rule("int_list", 0, MAX_LAYERS, 64),
    "projector_input_dim": _WIDTH,
    "projector_output_dim": _WIDTH,
    "vision_output_dim": _WIDTH,
    "vision_pos_rows": _SMALL,
    "vision_pos_cols": _SMALL,
    "vision_projection_dim": _WIDTH,
    "vision_heads": _HEADS,
    "vision_kv_heads": _HEADS,
    "vision_scale_factor": _SMALL,
    # modules engine/added_params.py counts (projected embeddings, extra tables, adapters)
    "embedding_size": _WIDTH,
    "input_embedding_size": _WIDTH,
    "output_embedding_size": _WIDTH,
    "pronunciation_embed_dim": _WIDTH,
    "pronunciation_vocab_size": Rule("int", 0, MAX_VOCAB),
    "shape_embed_dim": _WIDTH,
    "shape_vocab_size": Rule("int", 0, MAX_VOCAB),
    "concat_input": _BOOL,
    "enable_pronunciation": _BOOL,
    "enable_shape": _BOOL,
    "adapter_reduction_factor": _SMALL,
    "adapter_layer_norm": _BOOL,
    "languages": Rule("str_list", max_len=MAX_SMALL),
    "intermediate_multiple_size": _SMALL,
    "norm_bias": _BOOL,
    "classifier_bias": _BOOL,
    "decoder_bias": _BOOL,
    "cross_attention_hidden_size": Rule("int", 1, MAX_WIDTH, nullable=True),
    "n_langs": Rule("int", 0, 1 << 16),
    "use_lang_emb": _BOOL,
    "gelu_activation": _BOOL,
    "use_learned_position_embeddings": _BOOL,
    "layernorm_embedding": _BOOL,
    "segment_types": Rule("int", 0, 1 << 16),
    "prompt_types": Rule("int", 0, 1 << 16),
    "prompt_length": Rule("int", 0, 1 << 20),
    "position_bias_num_buckets": Rule("int", 0, 1 << 20),
    "is_moe": _BOOL,
}

_MISSING = object()
_FORMULA = re.compile(
    r"^\s*(ceil\()?\s*([A-Za-z_][\w.]*|\d+)\s*(?:([*/])\s*([A-Za-z_][\w.]*|\d+))?\s*\)?\s*$"
)


class ConfigView:
    """A config dict read through one family's key spellings and defaults, every value checked.

    `keys` maps a canonical field to the config paths that spell it (dotted paths reach into
    nested sub-configs such as DBRX's `attn_config.kv_n_heads`); `defaults` gives transformers'
    default when none is present: a literal, or a formula over other fields such as
    `4*hidden_size`, `hidden_size/num_attention_heads` or `ceil(hidden_size/16)`.
    """

    def __init__(
        self,
        raw: Mapping[str, Any],
        name: str,
        keys: Mapping[str, tuple[str, ...]],
        defaults: Mapping[str, Any],
    ):
        self.raw = raw
        self.name = name
        self.keys = keys
        self.defaults = defaults
        self._cache: dict[str, Any] = {}
        self._resolving: set[str] = set()

    # -- lookups ------------------------------------------------------------------------------

    def spelling(self, field: str) -> str:
        """The config key that supplies `field` (the first present spelling), for messages."""
        for path in self._paths(field):
            if self._lookup(path) not in (None, _MISSING):
                return path
        paths = self._paths(field)
        return paths[0] if paths else field

    def present(self, field: str) -> bool:
        """Whether the config itself sets `field` (not a default)."""
        return any(self._lookup(p) not in (None, _MISSING) for p in self._paths(field))

    def get(self, field: str) -> Any:
        """The checked value of `field`: from the config, else the family default, else None."""
        if field in self._cache:
            return self._cache[field]
        rule = FIELDS.get(field)
        if rule is None:  # a programming error: every field read must have a rule
            raise KeyError(f"config field {field!r} has no validation rule")
        value: Any = None
        for path in self._paths(field):
            found = self._lookup(path)
            if found is None and rule.nullable:  # an explicit null: no window, no compression
                self._cache[field] = None
                return None
            if found is not None and found is not _MISSING:
                value = self._check(path, found, rule)  # None for "auto": the default applies
                break
        if value is None and field in self.defaults:
            value = self._default(field, rule)
        self._cache[field] = value
        return value

    def require(self, field: str) -> Any:
        value = self.get(field)
        if value is None:
            raise GpuplanError(
                f"{self.name}: config.json has no {self.spelling(field)!r}"
                f" (model_type {self.raw.get('model_type', 'unknown')!r}); cannot size this model"
            )
        return value

    def fail(self, field: str, problem: str) -> GpuplanError:
        """A one-line error about `field` as the config spells it."""
        return GpuplanError(f"{self.name}: config field {self.spelling(field)!r} {problem}")

    # -- internals ----------------------------------------------------------------------------

    def _paths(self, field: str) -> tuple[str, ...]:
        paths = self.keys.get(field)
        return (field,) if paths is None else paths

    def _lookup(self, path: str) -> Any:
        """The value at `path`: None for an explicit null, _MISSING when absent."""
        node: Any = self.raw
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def _default(self, field: str, rule: Rule) -> Any:
        default = self.defaults[field]
        if isinstance(default, str) and rule.kind in ("int", "int_auto", "int_per_layer", "float"):
            if field in self._resolving:
                raise GpuplanError(f"{self.name}: the default of {field!r} refers to itself")
            self._resolving.add(field)
            try:
                value = self._formula(field, default)
            finally:
                self._resolving.discard(field)
            return None if value is None else self._check(field, value, rule)
        return default

    def _formula(self, field: str, text: str) -> Any:
        m = _FORMULA.match(text)
        if m is None:
            raise GpuplanError(f"family table: default {text!r} of {field!r} is not a formula")
        ceil, a, op, b = m.groups()
        x = self._operand(a)
        if op is None:
            return x
        y = self._operand(b)
        if x is None or y is None:
            return None
        if op == "*":
            return x * y
        if y == 0:
            raise self.fail(field.split("/")[0], "divides by zero")
        return math.ceil(x / y) if ceil else x // y

    def _operand(self, token: str) -> Any:
        return int(token) if token.isdigit() else self.get(token)

    def _check(self, key: str, value: Any, rule: Rule) -> Any:
        kind = rule.kind
        if kind == "int_auto" and value == "auto":
            return None
        if kind in ("int", "int_auto"):
            return _whole(self, key, value, rule)
        if kind == "int_per_layer":
            return self._per_layer(key, value, rule)
        if kind == "bool_or_str":
            if isinstance(value, bool) or (isinstance(value, str) and len(value) <= rule.max_len):
                return value
            raise self._bad(
                key, f"must be true, false or a string of at most {rule.max_len}", value
            )
        if kind == "int_or_str":
            if isinstance(value, str):
                if len(value) > rule.max_len:
                    raise self._bad(key, f"must be at most {rule.max_len} characters", value)
                return value
            return _whole(self, key, value, rule)
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self._bad(key, "must be a number", value)
            if not (rule.lo <= value <= rule.hi) or not math.isfinite(value):
                raise self._bad(
                    key, f"must be a finite number in [{rule.lo:g}, {rule.hi:g}]", value
                )
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise self._bad(key, "must be true or false", value)
        if kind == "str":
            if not isinstance(value, str) or len(value) > rule.max_len:
                raise self._bad(
                    key, f"must be a string of at most {rule.max_len} characters", value
                )
            return value
        if kind in ("int_list", "str_list"):
            if not isinstance(value, list | tuple) or len(value) > rule.max_len:
                raise self._bad(key, f"must be a list of at most {rule.max_len} items", value)
            if kind == "str_list":
                if not all(isinstance(v, str) and len(v) <= 64 for v in value):
                    raise self._bad(key, "must be a list of strings", value)
                return tuple(value)
            return tuple(_whole(self, key, v, rule) for v in value)
        if kind == "map":
            if not isinstance(value, Mapping):
                raise self._bad(key, "must be a JSON object", value)
            return value
        return value

    def _per_layer(self, key: str, value: Any, rule: Rule) -> int:
        """An int, or a per-layer list of one repeated int (what transformers indexes by layer
        in HunYuanMoEV1Moe); a list that varies between layers is not modelled: refused."""
        if not isinstance(value, list | tuple):
            return _whole(self, key, value, rule)
        if not value or len(value) > MAX_LAYERS:
            raise self._bad(key, f"must be a whole number or a list of 1 to {MAX_LAYERS}", value)
        values = {_whole(self, key, v, rule) for v in value}
        if len(values) > 1:
            raise self._bad(key, "varies between layers, which gpuplan does not model", value)
        return values.pop()

    def _bad(self, key: str, problem: str, value: Any) -> GpuplanError:
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return GpuplanError(f"{self.name}: config field {key!r} {problem}, got {shown}")


def _whole(view: ConfigView, key: str, value: Any, rule: Rule) -> int:
    """An integer within the rule's bounds (a float that is a whole number is accepted)."""
    bounds = f"in [{rule.lo:g}, {rule.hi:g}]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise view._bad(key, f"must be a whole number {bounds}", value)
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise view._bad(key, f"must be a whole number {bounds}", value)
    if not rule.lo <= value <= rule.hi:
        raise view._bad(key, f"must be a whole number {bounds}", value)
    return int(value)
