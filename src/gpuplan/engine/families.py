"""The family traits table: how each model family's config.json reads, as data.

catalog/data/families.toml holds one record per family (see the comments at its top). This module
loads it once, checks every record against the trait vocabulary below and the field rules of
engine/config_schema.py, and resolves a record for one config: its key spellings, its defaults and
its traits, with the record's `when` blocks applied for the values that config holds.

    family = family_for("falcon")          # the record reading model_type "falcon"
    view, traits = family.resolve(config, name)

An unknown model_type gets the `base` record (a Llama-style decoder); engine/model_reader/ says
so in the output and refuses configs that declare mechanisms the base record does not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuplan.datafiles import load_data  # parsed once, cached compiled (marshal)
from gpuplan.engine.added_params import RULES as ADDED_RULES
from gpuplan.engine.config_schema import FIELDS, ConfigView
from gpuplan.engine.frozen import record
from gpuplan.engine.schedules import MOE_LAYERS, SCHEDULES
from gpuplan.errors import GpuplanError
from gpuplan.lookup import dotted

# trait -> allowed values (a tuple of strings), or the Python type of its value
TRAITS: dict[str, tuple[str, ...] | type] = {
    "attention": ("standard", "mla", "none"),
    "qkv_bias": bool,
    "o_bias": bool,
    "qk_norm": ("none", "head", "proj"),
    "qk_norm_bias": bool,
    "sinks": bool,
    "swa_sinks": bool,
    "output_gate": bool,
    "head_gate": bool,
    "output_gate_bias": bool,
    "mlp": ("gated", "plain"),
    "mlp_bias": bool,
    "norm": ("rms", "layernorm"),
    "norm_bias": bool,
    "norm_weight": bool,
    "norms_per_layer": int,
    "block": ("sequential", "parallel"),
    "final_norm": bool,
    "embedding_norm": bool,
    "positions": ("rope", "learned", "alibi", "none"),
    "position_offset": int,
    "lm_head_bias": bool,
    "sliding": bool,
    "schedule": tuple(SCHEDULES),  # the registered rules (engine/schedules.py)
    "layer_kinds": dict,
    "moe_layers": tuple(MOE_LAYERS),
    "expert_mlp": ("gated", "plain"),
    "shared_mlp": ("gated", "plain"),
    "shared_expert_gate": bool,
    "router_bias": bool,
    "expert_bias": bool,
    "router_score_bias": bool,
    "moe_output_bias": bool,
    "moe_output_norm": bool,
    "drafter": bool,
    "k_rope_norm": bool,
    "q_gate_fused": bool,
    "gated_norms": bool,
    "hyper_connections": bool,
    "hyper_comb": bool,  # mHC: the n x n residual mixing computed per token too (DeepSeek-V4)
    "compressed_attention": bool,  # DeepSeek-V4: one K=V head, sliding window + compressors
    "attention_experts": bool,
    "shared_blocks": bool,
    "token_types": int,
    "head_transform": bool,
    "pooler": bool,
    "extra_vocab_rows": int,
    "indexer": bool,
    "mamba": ("", "mamba1", "mamba2"),
    "mamba_norm": bool,
    "mamba_bcdt_norms": bool,
    "linear_attention": ("", "gated_delta", "lightning", "kda", "kda_full"),
    "short_conv": bool,
    "ffn_width": ("", "lfm2", "half"),
    "per_layer_embeddings": bool,
    "norm_placement": ("pre", "post", "sandwich"),
    "norm_fp32": bool,
    "added": ("", *ADDED_RULES),  # engine/added_params.py: modules beyond the shared shapes
    "head_dim_floor": bool,  # no head_dim and heads not dividing hidden: hidden // heads
}

# what a name in `layer_types` (or a schedule) can make a layer
LAYER_KINDS = (
    "full",
    "sliding",
    "chunked",
    "mamba",
    "gated_delta",
    "lightning",
    "short_conv",
    "moe_only",
    "mlp_only",
    "hybrid",
    "cross",
)

_RECORD_KEYS = {
    *("model_types", "source", "extends", "keys", "defaults", "traits", "when"),
    "unmodelled",
}


class FamilyTableError(Exception):
    """A malformed record in families.toml (a packaging bug, caught by the tests)."""


@record
class Family:
    """One resolved record: spellings, defaults, traits and conditional overrides."""

    name: str
    model_types: tuple[str, ...]
    source: str
    keys: Mapping[str, tuple[str, ...]]
    defaults: Mapping[str, Any]
    traits: Mapping[str, Any]
    when: tuple[Mapping[str, Any], ...]
    # config keys (dotted: nested) naming variants of the family gpuplan does not model: a config
    # that sets one (to anything but false, null, 0 or empty) is refused, naming it
    unmodelled: tuple[str, ...] = ()

    def refuse_unmodelled(self, raw: Mapping[str, Any], name: str) -> None:
        for key in self.unmodelled:
            value = dotted(raw, key)
            if value not in (None, False, 0, "", [], {}):
                raise GpuplanError(
                    f"{name}: config field {key!r} ({str(value)[:40]}) is a variant of the"
                    f" {self.name} family gpuplan does not model; cannot size this model"
                )

    def resolve(self, raw: Mapping[str, Any], name: str) -> tuple[ConfigView, dict[str, Any]]:
        """This family's view of `raw` and its traits, `when` blocks applied in order."""
        keys = dict(self.keys)
        defaults = dict(self.defaults)
        traits = dict(self.traits)
        for block in self.when:
            view = ConfigView(raw, name, keys, defaults)
            if view.get(block["field"]) == block["equals"]:
                keys.update({k: tuple(v) for k, v in block.get("keys", {}).items()})
                defaults.update(block.get("defaults", {}))
                traits.update(block.get("traits", {}))
        view = ConfigView(raw, name, keys, defaults)
        return view, {k: _trait_value(view, k, v) for k, v in traits.items()}


def _trait_value(view: ConfigView, trait: str, value: Any) -> Any:
    """A literal trait, or one read from the config: {field = ..., map = {value = trait}}."""
    if isinstance(value, Mapping) and "field" in value:
        read = view.get(value["field"])
        if "map" in value:
            known = value["map"]
            if str(read).lower() not in known:
                raise view.fail(
                    value["field"],
                    f"is {str(read)[:32]!r}, which gpuplan does not model"
                    f" (known: {', '.join(sorted(known))})",
                )
            return known[str(read).lower()]
        return read
    return value


@cache
def _table() -> dict[str, Family]:
    return _build(load_data("families.toml"))


def _build(raw: Mapping[str, Any]) -> dict[str, Family]:
    if "base" not in raw:
        raise FamilyTableError("families.toml has no [base] record")
    built: dict[str, Family] = {}

    def build(name: str, seen: tuple[str, ...] = ()) -> Family:
        if name in built:
            return built[name]
        if name in seen:
            raise FamilyTableError(f"families.toml: {name} extends itself")
        record = raw[name]
        unknown = set(record) - _RECORD_KEYS
        if unknown:
            raise FamilyTableError(f"families.toml [{name}]: unknown entries {sorted(unknown)}")
        if not record.get("source"):
            raise FamilyTableError(f"families.toml [{name}]: no source")
        parent_name = record.get("extends", "base" if name != "base" else None)
        if parent_name is not None and parent_name not in raw:
            raise FamilyTableError(f"families.toml [{name}]: extends unknown {parent_name!r}")
        parent = build(parent_name, (*seen, name)) if parent_name else None
        keys = dict(parent.keys) if parent else {}
        keys.update({k: tuple(v) for k, v in record.get("keys", {}).items()})
        defaults = {**(parent.defaults if parent else {}), **record.get("defaults", {})}
        traits = dict(parent.traits) if parent else {}
        for k, v in record.get("traits", {}).items():
            if k == "layer_kinds" and parent is not None:
                # a record's layer_kinds replace the inherited map only where they name a kind
                v = {**parent.traits.get("layer_kinds", {}), **v}
            traits[k] = v
        when = tuple(record.get("when", ()))
        family = Family(
            name=name,
            model_types=tuple(record.get("model_types", ())),
            source=record["source"],
            keys=keys,
            defaults=defaults,
            traits=traits,
            when=(*(parent.when if parent else ()), *when),
            unmodelled=(
                *(parent.unmodelled if parent else ()),
                *record.get("unmodelled", ()),
            ),
        )
        built[name] = family
        return family

    for name in raw:
        build(name)
    return built


def _check(family: Family) -> None:
    """Every field named exists in the schema; every trait is known and takes a known value."""
    where = f"families.toml [{family.name}]"
    fields = set(family.keys) | set(family.defaults)
    for block in family.when:
        fields |= {block["field"], *block.get("keys", {}), *block.get("defaults", {})}
        for trait, value in block.get("traits", {}).items():
            _check_trait(where, trait, value)
    for trait, value in family.traits.items():
        _check_trait(where, trait, value)
        if isinstance(value, Mapping) and "field" in value:
            fields.add(value["field"])
    unknown = sorted(f for f in fields if f not in FIELDS)
    if unknown:
        raise FamilyTableError(f"{where}: fields without a validation rule: {unknown}")
    if family.name == "base":
        missing = sorted(set(TRAITS) - set(family.traits))
        if missing:
            raise FamilyTableError(f"{where}: traits without a default: {missing}")


def _check_trait(where: str, trait: str, value: Any) -> None:
    allowed = TRAITS.get(trait)
    if allowed is None:
        raise FamilyTableError(f"{where}: unknown trait {trait!r}")
    if isinstance(value, Mapping) and "field" in value:
        if "map" in value and isinstance(allowed, tuple):
            bad = [v for v in value["map"].values() if v not in allowed]
            if bad:
                raise FamilyTableError(f"{where}: trait {trait} maps to unknown {bad}")
        return
    if trait == "layer_kinds":
        bad = [v for v in value.values() if v not in LAYER_KINDS]
        if bad:
            raise FamilyTableError(f"{where}: layer_kinds name unknown kinds {bad}")
        return
    if isinstance(allowed, tuple):
        if value not in allowed:
            raise FamilyTableError(f"{where}: trait {trait} = {value!r} not in {allowed}")
    elif not isinstance(value, allowed) or (allowed is int and isinstance(value, bool)):
        raise FamilyTableError(f"{where}: trait {trait} must be {allowed.__name__}")


@cache
def _by_model_type() -> dict[str, Family]:
    table = _table()
    out: dict[str, Family] = {}
    for family in table.values():
        for model_type in family.model_types:
            if model_type in out:
                raise FamilyTableError(
                    f"families.toml: model_type {model_type!r} is read by both"
                    f" [{out[model_type].name}] and [{family.name}]"
                )
            out[model_type] = family
    return out


def family_for(model_type: str) -> Family | None:
    """The record reading `model_type`, or None for a family the table does not know."""
    family = _by_model_type().get(model_type)
    return None if family is None else _checked(family.name)


def base_family() -> Family:
    """The Llama-style record every other extends; used for unknown families."""
    return _checked("base")


def all_families() -> dict[str, Family]:
    """Every record by name (for tests and documentation), each checked."""
    return {name: _checked(name) for name in _table()}


@cache
def _checked(name: str) -> Family:
    """A record, checked against the schema and the traits (`_check`) the first time it is read:
    a command reads one family, so it checks one, not all 60 (cold start)."""
    family = _table()[name]
    _check(family)
    return family
