"""A checkpoint as its headers describe it: every stored tensor, its bytes, and what it is.

The header readers (catalog/sources/) turn a safetensors or GGUF header into `StoredTensor`
records (name, dtype, shape, exact stored bytes). This module does no I/O: it names what each
tensor is (the module kind gpuplan's architecture math uses, its layer, whether it holds
parameters or quantisation metadata) and adds the bytes up per layer, per tensor-parallel shard
and per pipeline stage, with the same placement rules as engine/weights.py:

    rank bytes = Σ split tensors ÷ tp + Σ replicated tensors      (Megatron-LM §3; vLLM's
                                                                   Column/RowParallelLinear)

Parameters hidden in packed storage are unpacked from the layout each method writes:
GPTQ/AWQ `qweight` and compressed-tensors `weight_packed` hold 32/bits values per int32
(AutoGPTQ / AutoAWQ packers, compressed-tensors pack_quantized), HQQ's `W_q` 8/bits per uint8
(hqq/core/bitpack.py), MXFP4 `*_blocks` and 4-bit
uint8 weights (bitsandbytes NF4/FP4, ModelOpt NVFP4) hold two values per byte; scales, zero
points, group indices and bitsandbytes quant states are metadata: bytes, no parameters.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuplan.engine.frozen import field, record
from gpuplan.engine.weights import stage_layers

if TYPE_CHECKING:
    from gpuplan.engine.architecture import Architecture


class StoredTensor(NamedTuple):
    """One tensor of a checkpoint file: as stored, not as the model computes with it (a tuple:
    a large checkpoint has 100,000 of them)."""

    name: str
    dtype: str  # safetensors dtype (BF16, F8_E4M3, I32, U8, ...) or a GGML type (Q4_K, F16, ...)
    shape: tuple[int, ...]
    nbytes: int  # exact bytes in the file (data_offsets / GGML block arithmetic)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@record
class TensorRole:
    """What one stored tensor is, for sizing."""

    kind: str  # embedding, positions, lm_head, norm, attention, mlp, experts, shared_experts,
    # router, bias, sinks, vision, other
    layer: int | None  # decoder layer index, None outside the layers
    part: str  # "weight" (holds parameters), "scale" (quantisation metadata), "buffer"
    split: str  # "vocab", "split", "replicated", "kv", "qkv" (how TP divides it)
    params: int  # logical parameters it stores (0 for scales and buffers)


# Components that mark quantisation metadata (the parameters live in the packed weight)
_SCALE_NAMES = {
    "scales",
    "qzeros",
    "g_idx",
    "zeros",
    "weight_scale",
    "weight_scale_inv",
    "weight_scale_2",
    "weight_zero_point",
    "weight_g_idx",
    "weight_global_scale",
    "weight_shape",
    "input_scale",
    "input_global_scale",
    "input_zero_point",
    "output_scale",
    "k_scale",
    "v_scale",
    "q_scale",
    "prob_scale",
    "pre_quant_scale",
    "smooth_factor",
    "absmax",
    "quant_map",
    "nested_absmax",
    "nested_quant_map",
    "SCB",
    "weight_format",
}
_BUFFER_NAMES = {"inv_freq", "e_score_correction_bias", "rope_freqs", "masked_bias", "attn_bias"}
_PACKED_INT = {"qweight", "weight_packed", "W_q"}  # HQQ: W_q, packed uint8

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|blk|block|layer)\.(\d+)(?:\.|$)")
_VISION = re.compile(
    r"(?:^|\.)(?:vision_tower|vision_model|visual|vision_encoder|multi_modal_projector|"
    r"mm_projector|vision_embed_tokens|image_newline)(?:\.|$)"
)
_EMBED = {"embed_tokens", "wte", "tok_embeddings", "token_embd", "word_embeddings", "embed_in"}
_POSITIONS = {"wpe", "embed_positions", "position_embeddings"}
_LM_HEAD = {"lm_head", "output", "embed_out"}
_KV_PROJ = {"k_proj", "v_proj", "wk", "wv", "attn_k", "attn_v", "key", "value"}
_QKV_PROJ = {"qkv_proj", "c_attn", "query_key_value", "attn_qkv", "Wqkv", "W_pack"}
_MLA_DOWN = {"q_a_proj", "kv_a_proj_with_mqa", "attn_q_a", "attn_kv_a_mqa", "wq_a", "wkv_a"}
_ROUTER = {"gate", "router", "ffn_gate_inp", "shared_expert_gate", "exp_probs_b", "gate_inp"}


def _is_norm(part: str) -> bool:
    return (
        "norm" in part
        or part.startswith("ln")
        or part in ("ln_f", "final_layernorm")
        or part.endswith("_ln")
    )


def _split_components(name: str) -> tuple[list[str], str]:
    """(module path components, parameter leaf) with quantisation suffixes taken off."""
    parts = name.split(".")
    # bitsandbytes: "<module>.weight.absmax", "<module>.weight.quant_state.bitsandbytes__nf4"
    if "weight" in parts[:-1] and (
        parts[-1] in _SCALE_NAMES or any(p.startswith("quant_state") for p in parts)
    ):
        cut = parts.index("weight")
        return parts[:cut], "scale"
    leaf = parts[-1]
    return parts[:-1], leaf


def classify_tensor(t: StoredTensor, weight_bits: int | None = None) -> TensorRole:
    """Name what `t` is from its name, dtype and shape (HF and GGUF naming both)."""
    layer_match = _LAYER.search(t.name)
    layer = int(layer_match.group(1)) if layer_match else None
    kind, part, split, leaf = _kind_of(_DIGITS.sub(".#", t.name), len(t.shape))
    params = 0 if part != "weight" else _params(t, leaf, weight_bits)
    return TensorRole(kind, layer, part, split, params)


_DIGITS = re.compile(r"\.\d+(?=\.|$)")


@lru_cache(maxsize=4096)
def _kind_of(pattern: str, ndim: int) -> tuple[str, str, str, str]:
    """(kind, part, split, leaf) of a tensor name with its indices replaced by '#': one
    classification per distinct name pattern (a checkpoint has 10⁵ tensors, 10² patterns)."""
    name = pattern
    modules, leaf = _split_components(name)
    part = "weight"
    if leaf == "scale" or leaf in _SCALE_NAMES or leaf.endswith("_scales") or leaf == "scale_inv":
        part = "scale"
    elif leaf in _BUFFER_NAMES or (modules and modules[-1] in _BUFFER_NAMES):
        part = "buffer"
    if modules and modules[-1] == "rope_freqs":
        part = "buffer"
    has_layer = bool(_LAYER.search(name.replace(".#", ".0")))
    last = modules[-1] if modules else leaf
    path = set(modules)
    if _VISION.search(name) and not _is_llm_path(name):
        kind = "vision"
    elif path & _EMBED:
        kind = "embedding"
    elif path & _POSITIONS:
        kind = "positions"
    elif not has_layer and (path & _LM_HEAD):
        kind = "lm_head"
    elif leaf == "sinks" or last == "attn_sinks" or leaf == "attn_sinks":
        kind = "sinks"
    elif _is_norm(last):
        kind = "norm"
    elif last in _ROUTER:
        kind = "router"
    elif _is_shared_expert(path, last):
        kind = "shared_experts"
    elif "experts" in path or last.endswith("_exps"):
        kind = "experts"
    elif _is_attention(path, last):
        kind = "attention"
    elif has_layer and _is_mlp(path, last):
        kind = "mlp"
    else:
        kind = "other"
    if part == "weight" and leaf == "bias" and ndim == 4:
        part = "buffer"  # GPT-2's causal-mask buffer `attn.bias`, stored by old conversions
    elif part == "weight" and leaf.endswith("bias") and kind not in ("norm", "router", "vision"):
        kind = "bias"
    return kind, part, _split(kind, last), leaf


def _is_llm_path(name: str) -> bool:
    """'language_model.model.layers.0…' of a VLM wrapper is the decoder, not its vision tower."""
    return name.startswith(("language_model.", "model.language_model.")) and not any(
        v in name for v in ("vision_tower", "vision_model", "multi_modal_projector", "visual.")
    )


def _is_shared_expert(path: set[str], last: str) -> bool:
    return bool(path & {"shared_expert", "shared_experts", "shared_mlp"}) or last.endswith("_shexp")


def _is_attention(path: set[str], last: str) -> bool:
    attention_modules = {"self_attn", "attn", "attention", "self_attention", "mixer"}
    return (
        bool(path & attention_modules)
        or last.startswith("attn_")
        or last
        in _KV_PROJ
        | {
            "q_proj",
            "o_proj",
            "wq",
            "wo",
        }
        | _QKV_PROJ
        | _MLA_DOWN
    )


def _is_mlp(path: set[str], last: str) -> bool:
    mlp_modules = {"mlp", "feed_forward", "ffn", "block_sparse_moe", "moe"}
    return (
        bool(path & mlp_modules)
        or last.startswith("ffn_")
        or last
        in ("gate_proj", "up_proj", "down_proj", "fc1", "fc2", "c_fc", "w1", "w2", "w3", "c_proj")
    )


def _split(kind: str, last: str) -> str:
    if kind in ("embedding", "lm_head"):
        return "vocab"
    if kind in ("norm", "router"):
        return "replicated"
    if kind == "attention":
        if last in _KV_PROJ:
            return "kv"
        if last in _QKV_PROJ:
            return "qkv"
        if last in _MLA_DOWN:
            return "replicated"
    return "split"


def _params(t: StoredTensor, leaf: str, weight_bits: int | None) -> int:
    """Logical parameters of a weight tensor, unpacking packed quantised storage."""
    n = t.numel
    if leaf in _PACKED_INT and t.dtype in ("I32", "U32"):
        return n * 32 // (weight_bits or 4)
    if leaf in _PACKED_INT and t.dtype in ("I8", "U8"):
        return n * 8 // (weight_bits or 4)
    if leaf.endswith("_blocks") and t.dtype == "U8":  # MXFP4: two e2m1 values per byte
        return n * 2
    if t.dtype == "U8" and weight_bits == 4 and leaf == "weight":
        return n * 2  # bitsandbytes 4-bit / ModelOpt NVFP4 pack two values per byte
    return n


@record
class StagePlacement:
    """The stored bytes one GPU holds: its pipeline stage, its layers, its TP shard."""

    bytes: int
    stage: int
    layers: range
    embedding_bytes: int
    lm_head_bytes: int


@record(eq=False)
class Checkpoint:
    """Every tensor a checkpoint stores, read from its headers (never its data).

    Compared and hashed by identity: one read, one object (bills are cached by it)."""

    format: str  # "safetensors" or "gguf"
    tensors: tuple[StoredTensor, ...]
    files: int = 1
    weight_bits: int | None = None  # bits of packed integer weights (from the quantisation config)
    source: str = ""  # where the headers were read (path, cache snapshot, Hub URL)
    metadata: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def roles(self) -> tuple[TensorRole, ...]:
        return tuple(classify_tensor(t, self.weight_bits) for t in self.tensors)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @cached_property
    def bytes_by_dtype(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for t in self.tensors:
            c[t.dtype] += t.nbytes
        return dict(c.most_common())

    def describe_stored(self, most: int = 3) -> str:
        """The stored formats by their share of the bytes, and the bytes per element they
        average: 'GGUF as stored: Q8_0 (1.06 bytes/param)', 'GGUF as stored: Q4_K 71%, Q6_K
        25%, F32 4% (0.59 bytes/param)'."""
        total = self.total_bytes
        elements = sum(t.numel for t in self.tensors)
        everything = list(self.bytes_by_dtype.items())
        shares = [(d, b) for d, b in everything if b * 200 >= total][:most]  # ≥ 0.5 % each
        named = ", ".join(d if len(everything) == 1 else f"{d} {b / total:.0%}" for d, b in shares)
        rest = len(everything) - len(shares)
        more = f", {rest} more" if rest else ""
        per = f" ({total / elements:.3g} bytes/param)" if elements else ""
        return f"{self.format.upper()} as stored: {named}{more}{per}"

    @cached_property
    def params_by_kind(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for r in self.roles:
            if r.params:
                c[r.kind] += r.params
        return dict(c)

    @cached_property
    def bytes_by_kind(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for t, r in zip(self.tensors, self.roles, strict=True):
            c[r.kind] += t.nbytes
        return dict(c)

    @property
    def params_total(self) -> int:
        return sum(self.params_by_kind.values())

    @cached_property
    def num_layers(self) -> int:
        layers = [r.layer for r in self.roles if r.layer is not None and r.kind != "vision"]
        return max(layers) + 1 if layers else 0

    def loaded(self, num_layers: int) -> list[tuple[StoredTensor, TensorRole]]:
        """Tensors a serving engine loads: all but layers past the decoder's `num_layers`
        (multi-token-prediction layers, loaded only for speculative decoding)."""
        return [
            (t, r)
            for t, r in zip(self.tensors, self.roles, strict=True)
            if r.kind == "vision" or r.layer is None or r.layer < num_layers
        ]

    def loaded_bytes(self, num_layers: int) -> int:
        return sum(t.nbytes for t, _ in self.loaded(num_layers))

    def extra_layers(self, num_layers: int) -> list[tuple[StoredTensor, TensorRole]]:
        return [
            (t, r)
            for t, r in zip(self.tensors, self.roles, strict=True)
            if r.kind != "vision" and r.layer is not None and r.layer >= num_layers
        ]

    # --- per GPU ----------------------------------------------------------------------

    def _rank_share(self, split: str, arch: Architecture, tp: int) -> tuple[int, int]:
        """The fraction of a tensor one TP rank holds, as an exact (numerator, denominator) of
        integers (KV heads replicated when tp > KV heads, as vLLM's QKVParallelLinear does; MLA
        down-projections replicated)."""
        if tp == 1 or split == "replicated":
            return 1, 1
        a = arch.attention
        if split in ("kv", "qkv") and not a.is_mla:
            kn, kd = (
                (max(1, a.num_kv_heads // tp), a.num_kv_heads) if tp > a.num_kv_heads else (1, tp)
            )
            if split == "kv":
                return kn, kd
            q_out = a.num_heads * a.head_dim
            kv_out = a.num_kv_heads * (a.head_dim + a.v_head_dim)
            # (q_out / tp + kv_out · kn / kd) / (q_out + kv_out)
            return q_out * kd + kv_out * kn * tp, tp * kd * (q_out + kv_out)
        return 1, tp

    def _shares(self, arch: Architecture, tp: int) -> tuple[dict[str, int], int]:
        """Every split's rank share over one common denominator: (numerators, denominator), so
        byte sums stay exact integers until the one ceiling at the end."""
        shares = {split: self._rank_share(split, arch, tp) for split in _SPLITS}
        common = math.lcm(*(d for _, d in shares.values()))
        return {split: n * (common // d) for split, (n, d) in shares.items()}, common

    def layer_bytes(self, arch: Architecture, layer: int, tp: int = 1) -> int:
        """Stored bytes of decoder layer `layer` on one TP rank."""
        return self._layer_table(arch, tp).get(layer, 0)

    def _layer_table(self, arch: Architecture, tp: int) -> dict[int, int]:
        key = (id(arch), arch.num_layers, tp)
        cache = self.__dict__.setdefault("_layer_tables", {})
        if key not in cache:
            # integer sums per (layer, split) first: one exact fraction per group, not per tensor
            groups: dict[tuple[int, str], int] = {}
            for t, r in zip(self.tensors, self.roles, strict=True):
                if r.layer is None or r.kind == "vision":
                    continue
                k = (r.layer, r.split)
                groups[k] = groups.get(k, 0) + t.nbytes
            shares, common = self._shares(arch, tp)
            sums: dict[int, int] = {}  # numerators over `common`
            for (layer, split), nbytes in groups.items():
                sums[layer] = sums.get(layer, 0) + nbytes * shares[split]
            cache[key] = {i: _ceil(b, common) for i, b in sums.items()}
        table: dict[int, int] = cache[key]
        return table

    def placement(self, arch: Architecture, tp: int, pp: int) -> StagePlacement:
        """Stored bytes on the most loaded GPU: its stage's layers ÷ tp, the embedding (and a
        vision encoder) on the first stage, the final norm and LM head on the last; a tied
        embedding is copied to the last stage when pp > 1 (engine/weights.py rules)."""
        table = self._layer_table(arch, tp)
        shares, common = self._shares(arch, tp)
        first = last = embedding = 0  # numerators over `common`
        for t, r in zip(self.tensors, self.roles, strict=True):
            if r.layer is not None and r.kind != "vision":
                continue
            share = t.nbytes * shares[r.split]
            if r.kind in ("embedding", "positions", "vision"):
                first += share
                if r.kind == "embedding":
                    embedding += share
            else:  # lm_head, final norm, anything else outside the layers
                last += share
        if pp > 1 and "lm_head" not in self.params_by_kind:
            last += embedding  # tied: the last stage keeps its own copy to compute logits
        best: StagePlacement | None = None
        for s, layers in enumerate(stage_layers(arch.num_layers, pp)):
            body = sum(table.get(i, 0) for i in layers)
            e = _ceil(first, common) if s == 0 else 0
            h = _ceil(last, common) if s == pp - 1 else 0
            candidate = StagePlacement(body + e + h, s, layers, e, h)
            if best is None or candidate.bytes > best.bytes:
                best = candidate
        assert best is not None
        return best


_SPLITS = ("vocab", "split", "replicated", "kv", "qkv")


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


# --------------------------------------------------------------------------------------
# Agreement: the architecture's count against the headers'
# --------------------------------------------------------------------------------------

AGREEMENT_THRESHOLD = 0.005  # a difference above 0.5 % is flagged with what explains it


@record
class Agreement:
    """Architecture parameter count vs the count read from the headers."""

    architecture_params: int
    header_params: int
    by_kind: dict[str, tuple[int, int]]  # kind -> (architecture, headers)
    explanations: tuple[str, ...]

    @property
    def difference(self) -> float:
        if not self.architecture_params:
            return 1.0 if self.header_params else 0.0
        return (self.header_params - self.architecture_params) / self.architecture_params

    @property
    def flagged(self) -> bool:
        return abs(self.difference) > AGREEMENT_THRESHOLD

    def to_dict(self) -> dict[str, Any]:
        return {
            "architecture_params": self.architecture_params,
            "header_params": self.header_params,
            "difference": round(self.difference, 6),
            "flagged": self.flagged,
            "by_kind": {
                k: {"architecture": a, "headers": h} for k, (a, h) in sorted(self.by_kind.items())
            },
            "explanations": list(self.explanations),
        }


def _pattern(name: str) -> str:
    """'model.layers.61.mlp.experts.3.up_proj.weight' → 'model.layers.*.mlp.experts.*.up_proj.weight'."""
    return re.sub(r"\.\d+(?=\.|$)", ".*", name)


def agreement(ckpt: Checkpoint, arch_by_kind: dict[str, int], arch: Architecture) -> Agreement:
    """Compare the architecture's parameters (engine/params.py) with the headers', kind by kind,
    and name the tensors that explain a difference: layers past the decoder (multi-token
    prediction), a vision tower the architecture does not count, tensors of no known kind, an
    LM head stored although the config ties it."""
    header = dict(ckpt.params_by_kind)
    arch_total = sum(arch_by_kind.values())
    kinds = sorted(set(header) | set(arch_by_kind))
    by_kind = {k: (arch_by_kind.get(k, 0), header.get(k, 0)) for k in kinds}
    notes: list[str] = []
    extra = ckpt.extra_layers(arch.num_layers)
    if extra:
        layers = sorted({r.layer for _, r in extra if r.layer is not None})
        params = sum(r.params for _, r in extra)
        notes.append(
            f"layers {layers[0]}–{layers[-1]} are past the {arch.num_layers} decoder layers"
            f" (multi-token-prediction / extra layers): {params:,} params,"
            f" {sum(t.nbytes for t, _ in extra):,} bytes; engines load them only for"
            " speculative decoding"
        )
    groups: dict[str, list[int]] = {}
    for t, r in zip(ckpt.tensors, ckpt.roles, strict=True):
        if r.kind == "other" or (r.kind == "vision" and not arch.vision_params):
            key = f"{r.kind}: {_pattern(t.name)}"
            g = groups.setdefault(key, [0, 0])
            g[0] += r.params
            g[1] += 1
    for key, (params, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:8]:
        what = (
            "a vision tower the architecture does not count"
            if key.startswith("vision")
            else "no known kind"
        )
        notes.append(f"{key.split(': ', 1)[1]} ({count} tensors, {params:,} params): {what}")
    if arch.tie_word_embeddings and header.get("lm_head"):
        notes.append("lm_head.weight is stored although the config ties it to the embedding")
    if not arch.tie_word_embeddings and arch_by_kind.get("lm_head") and not header.get("lm_head"):
        notes.append("no LM head tensor: the checkpoint ties it to the embedding")
    for k, (a, h) in by_kind.items():
        if a and h and abs(h - a) / a > AGREEMENT_THRESHOLD and k not in ("vision",):
            notes.append(f"{k}: architecture {a:,} vs headers {h:,} params")
    return Agreement(arch_total, sum(header.values()), by_kind, tuple(notes))
