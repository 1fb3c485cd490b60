"""The precision of every linear module of a quantised checkpoint: its quantisation plan.

A `quantization_config` names modules: transformers' `modules_to_not_convert` (fbgemm_fp8, fp8,
AWQ, mxfp4, torchao), bitsandbytes' `llm_int8_skip_modules`, ModelOpt's `exclude_modules` and
`quantized_layers`, compressed-tensors' `ignore` and per-group `targets`, GPTQ's `dynamic`
overrides and `modules_in_block_to_quantize` (engine/quantization.py turns each into
`ModuleRule`s). Here every linear module of the architecture gets the name its checkpoint uses
(catalog/data/module_names.toml: model.layers.{i}.self_attn.q_proj,
model.layers.{i}.mlp.experts.{e}.down_proj, ...), the first rule naming it decides its precision,
and parameters are summed per layer by (kind, TP split, precision):

    precision(module) = layout of the first rule naming it (kept: the checkpoint dtype)
                        else the config's layout (compressed-tensors: untargeted → the dtype)

A rule names a module as the engines and quantizers match it: a plain name names whole dotted
components (exact name, prefix "model.layers.0", suffix "lm_head", infix "self_attn"; transformers
quantizers_utils.should_convert_module, vLLM quantization/utils/quant_utils.is_layer_skipped),
`*` globs any run of characters (ModelOpt's fnmatch, gpt-oss's "model.layers.*.self_attn"),
`re:` is a regular expression matched at the start of the name (compressed-tensors
utils/match.py, vLLM compressed_tensors/utils.py), a GPTQ `dynamic` key is such a regex with an
optional `+:` / `-:` prefix (vLLM quantization/utils/gptq_utils.get_dynamic_override). A VLM
wrapper's prefixes (language_model.model., model.language_model.) are read as the decoder's.

A rule that names no module of this model (another family's naming) is applied to the module
kinds its words name (engine/quantization.py `kinds_of`), restricted to the layer it numbers,
and said so in the notes. Layers whose rules come out alike share one plan entry; rules that
mention no layer number are resolved once per kind of layer.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuplan.datafiles import load_data  # parsed once, cached compiled (marshal)
from gpuplan.engine.architecture import Architecture, AttentionSpec, LayerSpec
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.params import LINEAR_KINDS, layer_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.quantization import ModuleRule, QuantizationSpec, kinds_of
from gpuplan.engine.weights import WeightFormat

if TYPE_CHECKING:
    from gpuplan.engine.checkpoint import Checkpoint
# --------------------------------------------------------------------------------------
# Module names
# --------------------------------------------------------------------------------------

NAME_FIELDS = (
    *("layers", "embed", "lm_head"),
    *("attention", "q", "k", "v", "o", "q_a", "q_b", "kv_a", "kv_b"),
    *("indexer", "indexer_q", "indexer_k", "head_gate"),
    *("mlp", "gate", "up", "down"),
    *("moe", "router", "experts", "expert_gate", "expert_up", "expert_down"),
    *("fused_experts", "expert_gate_up", "shared", "shared_gate", "shared_up", "shared_down"),
    *("mamba", "linear_attn", "short_conv"),
)


@cache
def _names_table() -> dict[str, dict[str, Any]]:
    raw = load_data("module_names.toml")
    base = {k: v for k, v in raw["base"].items() if k in NAME_FIELDS}
    table = {"": base}
    for entry in raw.values():
        for model_type in entry.get("model_types", ()):
            table[model_type] = base | {k: v for k, v in entry.items() if k in NAME_FIELDS}
    return table


def module_names(model_type: str) -> Mapping[str, Any]:
    """The module names of `model_type`'s checkpoints (Llama's when the family has no record)."""
    table = _names_table()
    names: Mapping[str, Any] = table.get(model_type, table[""])
    return names


class Linear(NamedTuple):
    """One linear module of a decoder layer (per expert: `{e}` in the name, `copies` experts)."""

    name: str  # inside the layer: "self_attn.q_proj", "mlp.experts.{e}.up_proj"
    kind: str  # attention, mixer, mlp, experts, shared_experts
    split: str  # how TP divides it: "tp", "kv" (KV heads, replicated past them), "replicated"
    params: int  # parameters of one instance
    copies: int = 1  # routed experts: one instance per expert


def _attention_linears(
    arch: Architecture, a: AttentionSpec, layer: LayerSpec, n: Mapping[str, Any]
) -> list[Linear]:
    """Projections of engine/params.py `attention_params`, with the TP split vLLM gives each:
    MLA's low-rank down-projections replicated (ReplicatedLinear), k/v by KV head."""
    h, at = arch.hidden_size, n["attention"]
    if a.shared_kv_head:
        return _compressed_attention_linears(a, h, at)
    out: list[Linear] = []
    if a.is_mla:
        assert a.kv_lora_rank is not None
        q_dim = a.num_heads * a.head_dim
        if a.q_lora_rank:
            out.append(Linear(f"{at}.{n['q_a']}", "attention", "replicated", h * a.q_lora_rank))
            out.append(Linear(f"{at}.{n['q_b']}", "attention", "tp", a.q_lora_rank * q_dim))
        else:
            out.append(Linear(f"{at}.{n['q']}", "attention", "tp", h * q_dim))
        kv_a = h * (a.kv_lora_rank + a.qk_rope_head_dim)
        out.append(Linear(f"{at}.{n['kv_a']}", "attention", "replicated", kv_a))
        kv_b = a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        out.append(Linear(f"{at}.{n['kv_b']}", "attention", "tp", kv_b))
        out.append(Linear(f"{at}.{n['o']}", "attention", "tp", a.num_heads * a.v_head_dim * h))
        if a.indexer_heads:
            idx = f"{at}.{n['indexer']}"
            wq = (a.q_lora_rank or h) * a.indexer_heads * a.indexer_head_dim
            out.append(Linear(f"{idx}.{n['indexer_q']}", "attention", "tp", wq))
            out.append(Linear(f"{idx}.{n['indexer_k']}", "attention", "tp", h * a.indexer_head_dim))
        return out
    q_out = a.num_heads * a.head_dim * (2 if a.output_gate else 1)
    out.append(Linear(f"{at}.{n['q']}", "attention", "tp", h * q_out))
    if not layer.kv_shared:
        out.append(Linear(f"{at}.{n['k']}", "attention", "kv", h * a.num_kv_heads * a.head_dim))
        if not layer.v_from_k:
            v = h * a.num_kv_heads * a.v_head_dim
            out.append(Linear(f"{at}.{n['v']}", "attention", "kv", v))
    out.append(Linear(f"{at}.{n['o']}", "attention", "tp", a.num_heads * a.v_head_dim * h))
    if a.head_gate:
        out.append(Linear(f"{at}.{n['head_gate']}", "attention", "tp", h * a.num_heads))
    return out


def _compressed_attention_linears(a: AttentionSpec, h: int, at: str) -> list[Linear]:
    """DeepSeek-V4's projections (params.py `compressed_attention_params`), named as
    transformers' DeepseekV4Attention, DeepseekV4CSACompressor / HCACompressor and
    DeepseekV4Indexer name their modules: the query heads' q_b and the grouped output o_a / o_b
    split by TP, q_a, the single K=V head's kv_proj and the compressors replicated."""
    r, q = a.q_lora_rank or 0, a.num_heads * a.head_dim
    out = [
        Linear(f"{at}.q_a_proj", "attention", "replicated", h * r),
        Linear(f"{at}.q_b_proj", "attention", "tp", r * q),
        Linear(f"{at}.kv_proj", "attention", "replicated", h * a.head_dim),
        Linear(f"{at}.o_a_proj", "attention", "tp", q * a.o_lora_rank),
        Linear(f"{at}.o_b_proj", "attention", "tp", a.o_groups * a.o_lora_rank * h),
    ]
    if not a.compress_rate:
        return out
    c, w = f"{at}.compressor", a.head_dim * (2 if a.compress_overlap else 1)
    out += [Linear(f"{c}.{p}", "attention", "replicated", h * w) for p in ("kv_proj", "gate_proj")]
    if a.indexer_heads:
        i, wi = f"{c}.indexer", 2 * a.indexer_head_dim
        out += [
            Linear(f"{i}.{p}", "attention", "replicated", h * wi) for p in ("kv_proj", "gate_proj")
        ]
        out.append(
            Linear(f"{i}.q_b_proj", "attention", "tp", r * a.indexer_heads * a.indexer_head_dim)
        )
    return out


def _mixer_linears(arch: Architecture, layer: LayerSpec, n: Mapping[str, Any]) -> list[Linear]:
    """Projections of a state-space, linear-attention or short-conv mixer (params.py)."""
    h = arch.hidden_size
    if layer.mixer in ("mamba", "hybrid") and arch.mamba is not None:
        m, p = arch.mamba, n["mamba"]
        if m.version == 1:
            return [
                Linear(f"{p}.in_proj", "mixer", "tp", h * 2 * m.d_inner),
                Linear(f"{p}.x_proj", "mixer", "tp", m.d_inner * (m.dt_rank + 2 * m.d_state)),
                Linear(f"{p}.dt_proj", "mixer", "tp", m.dt_rank * m.d_inner),
                Linear(f"{p}.out_proj", "mixer", "tp", m.d_inner * h),
            ]
        width = 2 * m.d_inner + 2 * m.n_groups * m.d_state + m.n_heads
        return [
            Linear(f"{p}.in_proj", "mixer", "tp", h * width),
            Linear(f"{p}.out_proj", "mixer", "tp", m.d_inner * h),
        ]
    la, p = arch.linear_attention, n["linear_attn"]
    if layer.mixer in ("gated_delta", "lightning") and la is not None:
        value = la.num_v_heads * la.v_head_dim
        if la.kind == "lightning":
            return [
                Linear(f"{p}.qkv_proj", "mixer", "tp", h * 3 * value),
                Linear(f"{p}.output_gate", "mixer", "tp", h * value),
                Linear(f"{p}.out_proj", "mixer", "tp", value * h),
            ]
        key = la.num_k_heads * la.k_head_dim
        return [
            Linear(f"{p}.in_proj_qkvz", "mixer", "tp", h * (2 * key + 2 * value)),
            Linear(f"{p}.in_proj_ba", "mixer", "tp", h * 2 * la.num_v_heads),
            Linear(f"{p}.out_proj", "mixer", "tp", value * h),
        ]
    if layer.mixer == "short_conv":
        p = n["short_conv"]
        return [
            Linear(f"{p}.in_proj", "mixer", "tp", h * 3 * h),
            Linear(f"{p}.out_proj", "mixer", "tp", h * h),
        ]
    return []


def _ffn_linears(arch: Architecture, layer: LayerSpec, n: Mapping[str, Any]) -> list[Linear]:
    """The dense MLP's projections, or the MoE block's experts and shared experts."""
    h, out = arch.hidden_size, []
    roles: tuple[str, ...]
    if arch.mlp is not None and (not layer.moe or arch.moe_beside_mlp):
        i, mlp = layer.mlp_width or arch.mlp.intermediate_size, n["mlp"]
        roles = ("gate", "up", "down") if arch.mlp.gated else ("up", "down")
        out += [Linear(f"{mlp}.{n[r]}", "mlp", "tp", h * i) for r in roles]
    if layer.moe and arch.moe is not None:
        m = arch.moe
        d, i, e = m.latent_size or h, m.expert_intermediate_size, m.num_experts
        experts = f"{n['moe']}.{n['experts']}"
        if n["fused_experts"]:
            up = 2 if m.expert_gated else 1
            up_name = n["expert_gate_up"] if m.expert_gated else n["expert_up"]
            out.append(Linear(f"{experts}.{up_name}", "experts", "tp", e * up * d * i))
            out.append(Linear(f"{experts}.{n['expert_down']}", "experts", "tp", e * i * d))
        else:
            roles = ("expert_gate", "expert_up") if m.expert_gated else ("expert_up",)
            out += [
                Linear(f"{experts}.{{e}}.{n[r]}", "experts", "tp", d * i, e)
                for r in (*roles, "expert_down")
            ]
        if m.shared_intermediate_size:
            shared, si = f"{n['moe']}.{n['shared']}", m.shared_intermediate_size
            roles = ("shared_gate", "shared_up") if m.shared_gated else ("shared_up",)
            out += [
                Linear(f"{shared}.{n[r]}", "shared_experts", "tp", h * si)
                for r in (*roles, "shared_down")
            ]
    return out


@lru_cache(maxsize=1024)
def layer_linears(arch: Architecture, layer: LayerSpec) -> tuple[Linear, ...]:
    """Every linear module of one decoder layer, named as its checkpoint names it. What
    engine/params.py counts in a linear kind but no named projection holds (Gemma 3n's per-layer
    and LAuReL projections, Nemotron 3's latent projections, Zamba 2's shared transformer blocks,
    whose attention one hybrid layer per block carries) is one module named by its kind, so the
    modules always add up to `layer_params`."""
    n = module_names(arch.model_type)
    out: list[Linear] = []
    if layer.has_attention and arch.shared_blocks is None:
        out += _attention_linears(arch, arch.attention_of(layer), layer, n)
    out += _mixer_linears(arch, layer, n)
    if layer.ffn:
        out += _ffn_linears(arch, layer, n)
    counts = layer_params(arch, layer)
    for kind in LINEAR_KINDS:
        rest = counts[kind] - sum(x.params * x.copies for x in out if x.kind == kind)
        if rest > 0:
            out.append(Linear(kind, kind, "tp", rest))
    return tuple(out)


# --------------------------------------------------------------------------------------
# Rules, compiled
# --------------------------------------------------------------------------------------

# the patterns as text: `re` compiles (and caches) them on first use, not at import (cold start)
_WRAPPERS = r"^(?:language_model\\?\.model\\?\.|model\\?\.language_model\\?\.)"
_LAYER_NUMBER = r"(?:layers|h|blocks|layer|block)(?:\\?\.)(\d+)(?:\\?\.|$)"
_SENSITIVE = r"\d|\\d|[\[?{]"


def _normalise(pattern: str) -> str:
    """A VLM wrapper's decoder prefix read as the decoder's ("language_model.model.layers.0" →
    "model.layers.0"); a parameter name read as its module ("lm_head.weight" → "lm_head")."""
    pattern = re.sub(_WRAPPERS, "model.", pattern)
    if pattern.startswith("language_model."):
        pattern = pattern.removeprefix("language_model.")
    return pattern.removesuffix(".weight")


class _Compiled(NamedTuple):
    """One rule ready to test names; `hits` records which of its patterns named something (a
    set filled in place: a plain tuple keeps the import free of `dataclasses`, for cold start)."""

    rule: ModuleRule
    literals: dict[str, str]  # dotted name → the pattern as written
    regexes: list[tuple[re.Pattern[str], str]]
    any_linear: bool  # the class name "Linear" (compressed-tensors targets)
    by_kind: list[tuple[frozenset[str], int | None, str]]  # fallback: kinds, layer, pattern
    sensitive: bool  # some pattern may tell layers (or experts) apart
    hits: set[str]

    def names(self, name: str, kind: str, layer: int) -> bool:
        if self.any_linear:
            return True
        found = self._names(name, kind, layer)
        return found != self.rule.negate

    def _names(self, name: str, kind: str, layer: int) -> bool:
        if self.literals:
            if len(self.literals) <= 8:  # a few names: look each up in the dotted name
                dotted = f".{name}."
                for literal, pattern in self.literals.items():
                    if f".{literal}." in dotted:
                        self.hits.add(pattern)
                        return True
            else:  # many names: look every run of components up in the table
                parts = name.split(".")
                for start in range(len(parts)):
                    for stop in range(start + 1, len(parts) + 1):
                        found = self.literals.get(".".join(parts[start:stop]))
                        if found is not None:
                            self.hits.add(found)
                            return True
        for regex, pattern in self.regexes:
            if regex.match(name):
                self.hits.add(pattern)
                return True
        for kinds, number, _pattern in self.by_kind:
            if kind in kinds and number in (None, layer):
                return True
        return False


def _glob(pattern: str) -> re.Pattern[str]:
    """A name pattern with `*` / `?` globs, matching whole dotted components of a name."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(rf"(?:.*\.)?{body}(?:\..*)?$")


def _compile(rule: ModuleRule, fallback: Iterable[str] = ()) -> _Compiled:
    literals: dict[str, str] = {}
    regexes: list[tuple[re.Pattern[str], str]] = []
    any_linear = False
    for written in rule.patterns:
        p = written
        if rule.syntax == "regex" or p.startswith("re:"):
            text = _normalise(p.removeprefix("re:"))
            try:
                regexes.append((re.compile(text), written))
            except re.error:
                continue  # a pattern no name can match
        elif p in ("Linear", "nn.Linear", "torch.nn.Linear"):
            any_linear = not rule.negate
        elif p[:1].isupper() and "." not in p:
            continue  # another module class (compressed-tensors targets): names no linear here
        elif any(c in p for c in "*?"):
            regexes.append((_glob(_normalise(p)), written))
        else:
            literals[_normalise(p)] = written
    by_kind = []
    for written in fallback:
        number = re.search(_LAYER_NUMBER, written)
        kinds = frozenset(kinds_of(written) & set(LINEAR_KINDS))
        by_kind.append((kinds, int(number.group(1)) if number else None, written))
    sensitive = any(re.search(_SENSITIVE, p) for p in rule.patterns)
    return _Compiled(rule, literals, regexes, any_linear, by_kind, sensitive, set())


# --------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------


class PlanEntry(NamedTuple):
    """Parameters of one layer stored alike: kind, TP split, precision (None: the base dtype)."""

    kind: str
    split: str
    params: int
    precision: Precision | None


LayerPlan = tuple[PlanEntry, ...]


@record(eq=False)
class QuantPlan:
    """The precision of every linear module, layer by layer (distinct layers stored once)."""

    layers: tuple[LayerPlan, ...]  # distinct layer plans
    index: tuple[int, ...]  # decoder layer i → its plan in `layers`
    base: Precision  # the dtype modules kept unquantised are stored in
    lm_head: Precision | None = None  # a quantised LM head (GPTQ lm_head: true)
    kinds: tuple[tuple[str, Precision], ...] = ()  # each linear kind's dominant precision
    notes: tuple[str, ...] = ()

    def _key(self) -> tuple[Any, ...]:
        return (self.layers, self.index, self.base, self.lm_head)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuantPlan) and self._key() == other._key()

    def __hash__(self) -> int:
        """Hash once: formats key the cached bills."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(self._key())
            self.__dict__["_hash"] = cached
        return cached

    @property
    def uniform(self) -> bool:
        """Every linear kind is stored in one precision everywhere (a per-kind format says it)."""
        seen: dict[str, Precision | None] = {}
        for plan in self.layers:
            for e in plan:
                if seen.setdefault(e.kind, e.precision) != e.precision:
                    return False
        return self.lm_head is None

    def linear_bytes(self) -> int:
        """Bytes of every layer's linear modules on one GPU: Σ layers Σ (kind, precision)."""
        cached = self.__dict__.get("_bytes")
        if cached is None:
            per_plan = [self.layer_bytes(i, 1, 0) for i in range(len(self.layers))]
            cached = sum(per_plan[i] for i in self.index)
            self.__dict__["_bytes"] = cached
        return cached

    def layer_bytes(self, plan: int, tp: int, kv_heads: int) -> int:
        """Linear bytes of one layer plan on one TP rank: split modules ÷ tp, KV projections
        one KV head per rank past the heads (vLLM QKVParallelLinear), replicated ones whole."""
        per_rank: dict[tuple[str, Precision | None], float] = defaultdict(float)
        for e in self.layers[plan]:
            if e.split == "replicated" or tp == 1:
                n = float(e.params)
            elif e.split == "kv" and tp > kv_heads > 0:
                n = e.params / kv_heads * max(1, kv_heads // tp)
            else:
                n = e.params / tp
            per_rank[(e.kind, e.precision)] += n
        return sum((p or self.base).bytes_for(round(n)) for (_, p), n in per_rank.items())


class _Decider:
    """The first rule naming a module decides its precision (None: the checkpoint dtype)."""

    def __init__(self, compiled: list[_Compiled], spec: QuantizationSpec, layout: Precision):
        self.compiled, self.layout = compiled, layout
        self.default: tuple[Precision | None, str] = (
            (None, "") if spec.others_kept else (layout, "")
        )
        # the patterns that may tell indices apart, each rule's on their own
        self.sensitive = [
            _compile(
                replace(
                    c.rule, patterns=tuple(p for p in c.rule.patterns if re.search(_SENSITIVE, p))
                )
            )
            for c in compiled
            if c.sensitive
        ]

    def __call__(self, name: str, kind: str, layer: int) -> tuple[Precision | None, str]:
        for c in self.compiled:
            if c.names(name, kind, layer):
                r = c.rule
                return (None if r.keep else (r.layout or self.layout)), r.key
        return self.default

    def tells_apart(self, names: list[str], kind: str, layer: int) -> bool:
        """Whether a rule that may name indices names some of these modules but not all."""
        for c in self.sensitive:
            first = c.names(names[0], kind, layer)
            if any(c.names(n, kind, layer) != first for n in names[1:]):
                return True
        return False


def _resolve_layer(
    arch: Architecture, i: int, layer: LayerSpec, decide: _Decider, prefix: str
) -> tuple[LayerPlan, list[tuple[str, str, Precision | None, str, bool]]]:
    """A layer's plan entries and each module's decision (name, kind, precision, key, partial).
    Routed experts are decided once for all, unless a rule tells them apart by index."""
    sums: dict[tuple[str, str, Precision | None], int] = defaultdict(int)
    decisions = []
    for lin in layer_linears(arch, layer):
        full = f"{prefix}.{i}.{lin.name}"
        if lin.copies == 1:
            outcome = decide(full, lin.kind, i)
            sums[(lin.kind, lin.split, outcome[0])] += lin.params
            decisions.append((lin.name, lin.kind, outcome[0], outcome[1], False))
            continue
        names = [full.replace("{e}", str(e)) for e in range(lin.copies)]
        if decide.tells_apart(names, lin.kind, i):
            each = [decide(n, lin.kind, i) for n in names]
            outcomes = set(each)
            for outcome in outcomes:
                sums[(lin.kind, lin.split, outcome[0])] += lin.params * each.count(outcome)
        else:
            outcomes = {decide(names[0], lin.kind, i)}
            sums[(lin.kind, lin.split, next(iter(outcomes))[0])] += lin.params * lin.copies
        for outcome in outcomes:
            decisions.append((lin.name, lin.kind, outcome[0], outcome[1], len(outcomes) > 1))
    entries = tuple(PlanEntry(k, s, n, p) for (k, s, p), n in sums.items())
    return entries, decisions


@lru_cache(maxsize=256)
def quant_plan(
    arch: Architecture, spec: QuantizationSpec, layout: Precision, base: Precision
) -> QuantPlan:
    """Resolve `spec`'s rules over every linear module of `arch` (see the module docstring)."""
    prefix = module_names(arch.model_type)["layers"]
    compiled = [_compile(r) for r in spec.rules]
    (layers, index), decisions, names = _resolve(arch, compiled, spec, layout, prefix)
    unmatched = _unmatched(compiled, names)
    notes: list[str] = []
    if unmatched:
        lost = set(unmatched)
        compiled = [_compile(r, [p for p in r.patterns if p in lost]) for r in spec.rules]
        (layers, index), decisions, _ = _resolve(arch, compiled, spec, layout, prefix)
        shown = ", ".join(repr(p) for p in unmatched[:3]) + (" ..." if len(unmatched) > 3 else "")
        notes.append(
            f"quantization rule(s) {shown} name no module of {arch.name} as gpuplan names them"
            " (catalog/data/module_names.toml): applied to the module kinds they name"
        )
    kinds = _dominant(layers, index, base)
    default = "not targeted by any config group" if spec.others_kept else "the config's layout"
    notes = _describe(decisions, base, layout, default) + notes
    lm_head = layout if spec.lm_head else None
    if lm_head is not None:
        notes.append(f"LM head quantised to {layout.id} (lm_head: true)")
    return QuantPlan(layers, index, base, lm_head, kinds, tuple(notes))


def _unmatched(compiled: list[_Compiled], names: set[str]) -> list[str]:
    """Patterns that name no module of the model (tested alone, whatever rule came first)
    but whose words name linear kinds: another family's module names."""
    out = []
    for c in compiled:
        for pattern in c.rule.patterns:
            if pattern in c.hits or not _fallback_ok(pattern):
                continue
            alone = _compile(ModuleRule((pattern,), c.rule.syntax, c.rule.key))
            if not alone.any_linear and not any(alone.names(n, "", -1) for n in names):
                out.append(pattern)
    return out


def _fallback_ok(pattern: str) -> bool:
    """A pattern that names no module may still name linear kinds (another family's names)."""
    return bool(kinds_of(pattern) & set(LINEAR_KINDS))


def _resolve(
    arch: Architecture,
    compiled: list[_Compiled],
    spec: QuantizationSpec,
    layout: Precision,
    prefix: str,
) -> tuple[tuple[tuple[LayerPlan, ...], tuple[int, ...]], dict[int, list[Any]], set[str]]:
    decide = _Decider(compiled, spec, layout)
    per_layer = any(c.sensitive or c.by_kind for c in compiled)
    plans: dict[LayerPlan, int] = {}
    by_spec: dict[LayerSpec, tuple[int, list[Any]]] = {}
    index: list[int] = []
    decisions: dict[int, list[Any]] = {}
    for i, layer in enumerate(arch.layers):
        if not per_layer and layer in by_spec:
            idx, decided = by_spec[layer]
        else:
            entries, decided = _resolve_layer(arch, i, layer, decide, prefix)
            idx = plans.setdefault(entries, len(plans))
            by_spec[layer] = (idx, decided)
        index.append(idx)
        decisions[i] = decided
    names = {f"{prefix}.{i}.{d[0]}".replace("{e}", "0") for i, ds in decisions.items() for d in ds}
    return (tuple(plans), tuple(index)), decisions, names


def _dominant(
    layers: tuple[LayerPlan, ...], index: tuple[int, ...], base: Precision
) -> tuple[tuple[str, Precision], ...]:
    """Each linear kind's dominant precision: the one most of its parameters have."""
    uses = [0] * len(layers)
    for i in index:
        uses[i] += 1
    by: dict[str, dict[Precision, int]] = defaultdict(lambda: defaultdict(int))
    for i, plan in enumerate(layers):
        for e in plan:
            by[e.kind][e.precision or base] += e.params * uses[i]
    return tuple((kind, max(t.items(), key=lambda item: item[1])[0]) for kind, t in by.items())


# --------------------------------------------------------------------------------------
# What the plan says in words
# --------------------------------------------------------------------------------------

_KIND_WORDS = {
    "attention": "attention",
    "mlp": "the MLP",
    "experts": "the routed experts",
    "shared_experts": "the shared experts",
    "mixer": "the mixer",
}


def layer_ranges(layers: list[int]) -> str:
    """[0, 1, 2, 3, 7, 125] → 'layers 0-3, 7 and 125'; [5] → 'layer 5'."""
    runs: list[str] = []
    start = prev = None
    for i in sorted(layers):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        runs.append(str(start) if start == prev else f"{start}-{prev}")
    if len(runs) == 1:
        return ("layers " if "-" in runs[0] else "layer ") + runs[0]
    return "layers " + ", ".join(runs[:-1]) + " and " + runs[-1]


def _describe(
    decisions: dict[int, list[Any]], base: Precision, layout: Precision, default: str
) -> list[str]:
    """One sentence per (precision, config key) other than the config's layout:
    'attention of all 126 layers and the MLP of layers 0 and 125 kept in bf16
    (modules_to_not_convert)'."""
    having: dict[str, set[int]] = defaultdict(set)  # kind → the layers that have it
    modules: dict[tuple[int, str], set[str]] = defaultdict(set)  # (layer, kind) → its modules
    groups: dict[Any, dict[str, dict[int, set[str]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(set))
    )
    experts: dict[Any, set[int]] = defaultdict(set)  # outcome → layers where experts differ
    for i, decided in decisions.items():
        for name, kind, precision, key, partial in decided:
            having[kind].add(i)
            modules[(i, kind)].add(name)
            if precision == layout:
                continue
            if partial:
                experts[(precision, key)].add(i)
            else:
                groups[(precision, key)][kind][i].add(name)
    out = []
    for outcome in dict.fromkeys([*groups, *experts]):
        parts = []
        for kind, layers in groups.get(outcome, {}).items():
            whole = sorted(i for i, names in layers.items() if names == modules[(i, kind)])
            if whole:
                parts.append(f"{_KIND_WORDS.get(kind, kind)} of {_where(whole, having[kind])}")
            by_name: dict[str, list[int]] = defaultdict(list)
            for i, names in sorted(layers.items()):
                if i not in whole:
                    for name in sorted(names):
                        by_name[name].append(i)
            by_layers: dict[tuple[int, ...], list[str]] = defaultdict(list)
            for name, found in by_name.items():
                by_layers[tuple(found)].append(name.replace("{e}", "*"))
            for found_in, listed in by_layers.items():
                parts.append(f"{', '.join(listed)} of {_where(list(found_in), having[kind])}")
        if outcome in experts:
            parts.append(f"some routed experts of {layer_ranges(sorted(experts[outcome]))}")
        precision, key = outcome
        what = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
        how = f"kept in {base.id}" if precision is None else f"stored as {precision.id}"
        out.append(f"{what} {how} ({key or default})")
    return out


def _where(layers: list[int], having: set[int]) -> str:
    if len(layers) == len(having) and len(layers) > 1:
        return f"all {len(layers)} layers"
    return layer_ranges(layers)


# --------------------------------------------------------------------------------------
# The weight format
# --------------------------------------------------------------------------------------


def planned_format(
    arch: Architecture,
    spec: QuantizationSpec,
    layout: Precision,
    base: Precision,
    stored: Checkpoint | None = None,
) -> WeightFormat:
    """A quantised checkpoint's weight format: each linear kind's dominant precision for the
    per-kind figures, and the plan itself when layers or projections differ within a kind."""

    plan = quant_plan(arch, spec, layout, base)
    unquantized = tuple(sorted(k for k, p in plan.kinds if p == base and p != layout))
    overrides = tuple(sorted((k, p) for k, p in plan.kinds if p not in (base, layout)))
    return WeightFormat(
        layout,
        base,
        unquantized,
        overrides,
        (*plan.notes, *spec.notes),
        stored,
        None if plan.uniform else plan,
    )
