"""Exact parameter counts, itemised by kind of module.

Each count is the number of elements of the `nn.Parameter`s that `transformers` builds for the
same config (checked against models built on the `meta` device in tests/test_reference_params.py).
Kinds matter because they are stored differently: a quantised checkpoint packs the linear
weights of attention, MLP and experts, but keeps embeddings, norms, biases and routers in
16-bit; tensor parallelism splits the linear layers and replicates the norms.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.engine.architecture import Architecture, LayerSpec

# Linear weights that quantisation methods pack and tensor parallelism splits.
LINEAR_KINDS = ("attention", "mlp", "experts", "shared_experts")
# Everything else: kept at the checkpoint dtype, and (but for embeddings) replicated under TP.
OTHER_KINDS = (
    "embedding",
    "positions",
    "lm_head",
    "norm",
    "bias",
    "router",
    "sinks",
    "vision",
)


def attention_params(arch: Architecture) -> Counter[str]:
    """Parameters of one attention block.

    Ordinary attention (MHA/GQA/MQA): q = h × (n_heads·d), k and v = h × (n_kv·d),
    o = (n_heads·d) × h, plus biases and per-head q/k norms where the family has them
    (LlamaAttention, Qwen2Attention, Qwen3Attention, GptOssAttention in transformers).

    MLA (DeepSeek-V2 paper, §2.1.2, eqs. 9-14): q through an optional low-rank q_a (h × r_q,
    RMSNorm r_q) then q_b (r_q × n_heads·(d_nope + d_rope)); kv_a compresses to
    kv_lora_rank + d_rope, RMSNorm(kv_lora_rank), kv_b expands to n_heads·(d_nope + d_v);
    o = n_heads·d_v × h. Mirrors DeepseekV3Attention in transformers.
    """
    a = arch.attention
    h = arch.hidden_size
    c: Counter[str] = Counter()
    if a.is_mla:
        assert a.kv_lora_rank is not None
        q_dim = a.num_heads * a.head_dim
        if a.q_lora_rank:
            c["attention"] += h * a.q_lora_rank + a.q_lora_rank * q_dim
            c["norm"] += a.q_lora_rank
            if a.qkv_bias:
                c["bias"] += a.q_lora_rank
        else:
            c["attention"] += h * q_dim
        c["attention"] += h * (a.kv_lora_rank + a.qk_rope_head_dim)
        if a.qkv_bias:
            c["bias"] += a.kv_lora_rank + a.qk_rope_head_dim
        c["norm"] += a.kv_lora_rank
        c["attention"] += a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        c["attention"] += a.num_heads * a.v_head_dim * h
        if a.o_bias:
            c["bias"] += h
        return c
    q_out = a.num_heads * a.head_dim
    kv_out = a.num_kv_heads * (a.head_dim + a.v_head_dim)
    c["attention"] += h * (q_out + kv_out) + a.num_heads * a.v_head_dim * h
    if a.qkv_bias:
        c["bias"] += q_out + kv_out
    if a.o_bias:
        c["bias"] += h
    if a.qk_norm:
        c["norm"] += 2 * a.head_dim
    if a.sinks:
        c["sinks"] += a.num_heads
    return c


def dense_mlp_params(arch: Architecture) -> Counter[str]:
    """One dense FFN: gated = 3 × h × i (gate, up, down), plain = 2 × h × i; biases if any."""
    c: Counter[str] = Counter()
    if arch.mlp is None:
        return c
    h, i = arch.hidden_size, arch.mlp.intermediate_size
    matrices = 3 if arch.mlp.gated else 2
    c["mlp"] += matrices * h * i
    if arch.mlp.bias:
        c["bias"] += (matrices - 1) * i + h
    return c


def expert_params(arch: Architecture) -> int:
    """Parameters of one routed expert: a gated MLP of the expert width (plus gpt-oss biases)."""
    assert arch.moe is not None
    h, i = arch.hidden_size, arch.moe.expert_intermediate_size
    n = 3 * h * i
    if arch.moe.expert_bias:
        n += 2 * i + h
    return n


def moe_params(arch: Architecture) -> Counter[str]:
    """One MoE block: router (h × E, + bias), E routed experts, shared experts (and gate).

    Mixtral (Jiang et al. 2024, §2.1), DeepSeekMoE (Dai et al. 2024, shared + routed experts),
    Qwen-MoE, gpt-oss; mirrors the expert and router modules of those models in transformers.
    """
    c: Counter[str] = Counter()
    if arch.moe is None:
        return c
    m, h = arch.moe, arch.hidden_size
    c["router"] += h * m.num_experts + (m.num_experts if m.router_bias else 0)
    per_expert = 3 * h * m.expert_intermediate_size
    c["experts"] += m.num_experts * per_expert
    if m.expert_bias:
        c["bias"] += m.num_experts * (2 * m.expert_intermediate_size + h)
    if m.shared_intermediate_size:
        c["shared_experts"] += 3 * h * m.shared_intermediate_size
    if m.shared_expert_gate:
        c["router"] += h
    return c


def layer_params(arch: Architecture, layer: LayerSpec) -> Counter[str]:
    """All parameters of one decoder layer: attention, FFN (dense or MoE) and its norms."""
    c = attention_params(arch)
    c.update(moe_params(arch) if layer.moe else dense_mlp_params(arch))
    norm_size = arch.hidden_size * (2 if arch.norm == "layernorm" else 1)
    c["norm"] += arch.norms_per_layer * norm_size
    return c


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a whole model: by kind, per layer, total and active."""

    by_kind: dict[str, int]
    per_layer: tuple[int, ...]
    total: int
    active: int
    embedding: int  # token (and learned position) embeddings, on the first pipeline stage
    lm_head: int  # output projection plus final norm, on the last stage (0 params if tied)

    @property
    def linear(self) -> int:
        return sum(self.by_kind.get(k, 0) for k in LINEAR_KINDS)


@lru_cache(maxsize=256)  # every bill asks; an architecture hashes once
def count_params(arch: Architecture) -> ParamCounts:
    """Count every parameter of `arch`, exactly as transformers would allocate them.

    total = embeddings (+ learned positions) + Σ layers + final norm + LM head (if not tied)
            + the image encoder of a vision-language checkpoint (engine/vision.py).
    active = total − Σ over MoE layers of (experts − experts_per_token) × one expert's params:
    what one token touches, counting embeddings and LM head (the convention of the Mixtral
    and DeepSeek-V3 reports, which give 12.9 B / 37 B active).
    """
    by_kind: Counter[str] = Counter()
    per_layer = []
    kinds: dict[LayerSpec, tuple[Counter[str], int]] = {}  # layers of one spec weigh the same
    for layer in arch.layers:
        if layer not in kinds:
            c = layer_params(arch, layer)
            kinds[layer] = (c, sum(c.values()))
        c, n = kinds[layer]
        by_kind.update(c)
        per_layer.append(n)
    h = arch.hidden_size
    by_kind["embedding"] += arch.vocab_size * h
    by_kind["positions"] += arch.learned_positions * h
    final_norm = h * (2 if arch.norm == "layernorm" else 1)
    by_kind["norm"] += final_norm
    lm_head = 0 if arch.tie_word_embeddings else arch.vocab_size * h
    by_kind["lm_head"] += lm_head
    by_kind["vision"] += arch.vision_params
    total = sum(by_kind.values())
    inactive = 0
    if arch.moe is not None:
        idle = arch.moe.num_experts - arch.moe.experts_per_token
        inactive = arch.num_moe_layers * idle * expert_params(arch)
    return ParamCounts(
        by_kind={k: v for k, v in by_kind.items() if v},
        per_layer=tuple(per_layer),
        total=total,
        active=total - inactive,
        embedding=(arch.vocab_size + arch.learned_positions) * h,
        lm_head=lm_head + final_norm,
    )
