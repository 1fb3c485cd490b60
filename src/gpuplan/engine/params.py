"""Exact parameter counts, itemised by kind of module.

Each count is the number of elements of the `nn.Parameter`s that `transformers` builds for the
same config (checked against models built on the `meta` device in tests/test_reference_params.py
and tests/test_families.py). Kinds matter because they are stored differently: a quantised
checkpoint packs the linear weights of attention, mixers, MLP and experts, but keeps embeddings,
norms, biases, routers and the small state-space tensors in 16-bit; tensor parallelism splits the
linear layers and replicates the norms.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from gpuplan.engine.architecture import Architecture, AttentionSpec, LayerSpec
from gpuplan.engine.frozen import record, replace

# Linear weights that quantisation methods pack and tensor parallelism splits.
LINEAR_KINDS = ("attention", "mixer", "mlp", "experts", "shared_experts")
# Everything else: kept at the checkpoint dtype. "ssm" (convolution taps, A_log, D, dt biases of
# state-space and linear-attention mixers) is split by tensor parallelism with its heads.
OTHER_KINDS = (
    "embedding",
    "positions",
    "lm_head",
    "norm",
    "bias",
    "router",
    "sinks",
    "ssm",
    "vision",
)


def attention_params(
    arch: Architecture, spec: AttentionSpec | None = None, kv: bool = True, v: bool = True
) -> Counter[str]:
    """Parameters of one attention block (the model's, or `spec`).

    Ordinary attention (MHA/GQA/MQA): q = h × (n_heads·d) (doubled when q_proj also emits an output
    gate, Qwen3-Next), k and v = h × (n_kv·d), o = (n_heads·d_v) × h, plus biases, q/k norms (one
    head_dim weight, or one weight per channel of the whole projection: OLMo 2, Cohere, StableLM)
    and attention sinks (LlamaAttention, Qwen2Attention, Olmo2Attention, GptOssAttention ...).

    MLA (DeepSeek-V2 paper, §2.1.2, eqs. 9-14): q through an optional low-rank q_a (h × r_q,
    RMSNorm r_q) then q_b (r_q × n_heads·(d_nope + d_rope)); kv_a compresses to
    kv_lora_rank + d_rope, RMSNorm(kv_lora_rank), kv_b expands to n_heads·(d_nope + d_v);
    o = n_heads·d_v × h. Mirrors DeepseekV3Attention. DeepSeek-V3.2's lightning indexer adds
    wq_b (r_q × heads_I·d_I), wk (h × d_I), a LayerNorm(d_I) and weights_proj (h × heads_I).
    """
    a = spec or arch.attention
    h = arch.hidden_size
    if a.shared_kv_head:
        return compressed_attention_params(h, a)
    c: Counter[str] = Counter()
    if a.is_mla:
        assert a.kv_lora_rank is not None
        q_dim = a.num_heads * a.head_dim
        if a.q_lora_rank and a.q_gate_fused:  # AXK2Attention: q_a, then q_gate_proj reads
            r = a.q_lora_rank  # [residual, normed] q_a (2r) into q and a v_head_dim gate per head
            c["attention"] += h * r + 2 * r * (q_dim + a.num_heads * a.v_head_dim)
            c["norm"] += r
        elif a.q_lora_rank:
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
        if a.indexer_heads:
            idx = a.indexer_heads * a.indexer_head_dim
            c["attention"] += (a.q_lora_rank or h) * idx + h * a.indexer_head_dim
            c["router"] += h * a.indexer_heads  # weights_proj: per-head weights of the index score
            c["norm"] += 2 * a.indexer_head_dim
        if a.head_gate:  # BailingHybridAttention.g_proj: one sigmoid gate per head
            c["attention"] += h * a.num_heads
        if a.k_rope_norm:  # Dots3NoteTextAttention.k_rope_only_layernorm
            c["norm"] += a.qk_rope_head_dim
        if a.output_gate:  # HYV4Attention.gate_proj: a sigmoid gate per output channel
            c["attention"] += h * a.num_heads * a.v_head_dim
        if a.sinks:
            c["sinks"] += a.num_heads
        return c
    if a.attention_experts:
        return _attention_experts_params(h, a)
    q_out = a.num_heads * a.head_dim * (2 if a.output_gate else 1)
    kv_out = a.num_kv_heads * (a.head_dim * kv + a.v_head_dim * (kv and v))
    c["attention"] += h * (q_out + kv_out) + a.num_heads * a.v_head_dim * h
    if a.qkv_bias:
        c["bias"] += q_out + kv_out
    if a.o_bias:
        c["bias"] += h
    if a.qk_norm:
        per_norm = 2 if a.qk_norm_bias else 1
        if a.qk_norm_scope == "proj":
            c["norm"] += per_norm * (a.num_heads + a.num_kv_heads * kv) * a.head_dim
        else:
            c["norm"] += per_norm * (1 + kv) * a.head_dim
    if a.head_gate:  # g_proj: one sigmoid gate per head (Lfm3Attention, LagunaAttention)
        c["attention"] += h * a.num_heads
    if a.gate_bias:  # BeamAttention.gate_bias: one per head, broadcast over head_dim
        c["bias"] += a.num_heads
    if a.sinks:
        c["sinks"] += a.num_heads
    return c


def compressed_attention_params(h: int, a: AttentionSpec) -> Counter[str]:
    """DeepSeek-V4's attention (DeepSeek-V4 report §2.3; DeepseekV4Attention): q_a h x r and
    its RMSNorm r, q_b r x heads·d, one K=V head kv_proj h x d with its RMSNorm d, the grouped
    output o_a (o_groups x o_lora_rank rows over heads·d / o_groups, i.e. heads·d x o_lora_rank
    in all) and o_b o_groups·o_lora_rank x h, a sink per head. A compressor
    (DeepseekV4CSACompressor / DeepseekV4HCACompressor) adds kv_proj and gate_proj h x w,
    position_bias rate x w (w = 2d for the two overlapping series of compressed sparse
    attention, d otherwise) and a kv_norm d; compressed sparse attention's indexer
    (DeepseekV4Indexer) the same at index_head_dim d_I (w = 2 d_I) plus q_b_proj r x heads_I·d_I
    and weights_proj h x heads_I."""
    r, q_dim = a.q_lora_rank or 0, a.num_heads * a.head_dim
    c: Counter[str] = Counter()
    c["attention"] += h * r + r * q_dim + h * a.head_dim
    c["attention"] += q_dim * a.o_lora_rank + a.o_groups * a.o_lora_rank * h
    c["norm"] += r + a.head_dim
    c["sinks"] += a.num_heads
    if a.compress_rate:
        w = a.head_dim * (2 if a.compress_overlap else 1)
        c["attention"] += 2 * h * w
        c["bias"] += a.compress_rate * w
        c["norm"] += a.head_dim
    if a.compress_rate and a.indexer_heads:
        wi = 2 * a.indexer_head_dim
        c["attention"] += 2 * h * wi + r * a.indexer_heads * a.indexer_head_dim
        c["bias"] += a.compress_rate * wi
        c["norm"] += a.indexer_head_dim
        c["router"] += h * a.indexer_heads  # weights_proj: per-head weights of the index score
    return c


def _attention_experts_params(h: int, a: AttentionSpec) -> Counter[str]:
    """JetMoE's mixture of attention heads (Shen et al. 2024, JetMoE §2.2; JetMoeAttention,
    JetMoeMoA): one kv_proj h × 2·n_kv·d; E experts each of a q projection h × n_kv·d and an
    o projection n_kv·d × h; a router h × E (no bias); one output bias h."""
    width = a.num_kv_heads * a.head_dim
    c: Counter[str] = Counter()
    c["attention"] += h * 2 * width + a.attention_experts * 2 * h * width
    c["router"] += h * a.attention_experts
    c["bias"] += h
    return c


def mixer_params(arch: Architecture, layer: LayerSpec) -> Counter[str]:
    """Parameters of a layer's token mixer: attention, a state-space or linear-attention mixer,
    a short convolution, or (Falcon-H1) attention and Mamba-2 side by side."""
    c: Counter[str] = Counter()
    if layer.has_attention and arch.shared_blocks is not None:  # Zamba 2's hybrid layer
        c["mixer"] += arch.hidden_size * arch.hidden_size  # its own linear after the block
        if layer.shared_block >= 0:
            c.update(shared_block_params(arch, layer.shared_block))
    elif layer.has_attention:
        spec = arch.attention_of(layer)
        c.update(attention_params(arch, spec, kv=not layer.kv_shared, v=not layer.v_from_k))
    elif layer.mixer == "cross_attention":  # MllamaTextCrossAttention: q, k, v, o, q/k norms
        spec = arch.attention_of(layer)  # per head; the decoder layer's two tanh gates
        c.update(attention_params(arch, replace(spec, qk_norm=True, qk_norm_scope="head")))
        c["norm"] += 2
    if layer.mixer in ("mamba", "hybrid"):
        c.update(mamba_params(arch))
    elif layer.mixer in ("gated_delta", "lightning"):
        c.update(linear_attention_params(arch))
    elif layer.mixer == "short_conv":
        c.update(short_conv_params(arch))
    elif layer.mixer == "rglru":
        c.update(rglru_params(arch))
    return c


def rglru_params(arch: Architecture) -> Counter[str]:
    """Griffin's recurrent block (De et al. 2024, §2.4; RecurrentGemmaRecurrentBlock and
    RecurrentGemmaRglru): linear_y and linear_x (h x w, with biases), linear_out (w x h, with
    bias); a depthwise conv_1d (w x taps, with bias); the RG-LRU's input and recurrence gates
    (block-diagonal: heads blocks of (w/heads)^2, with biases) and its recurrent_param (w)."""
    r = arch.rglru
    assert r is not None
    h, w = arch.hidden_size, r.width
    c: Counter[str] = Counter()
    c["mixer"] += 3 * h * w + 2 * w * (w // r.heads)
    c["bias"] += 2 * w + h + 2 * w + w
    c["ssm"] += w * r.conv_width + w
    return c


def shared_block_params(arch: Architecture, block: int) -> Counter[str]:
    """One of Zamba 2's shared transformer blocks (Glorioso et al. 2024, Zamba2 §2;
    Zamba2AttentionDecoderLayer): q, k, v over the concatenated 2h input, o back to h, an RMSNorm
    of 2h and one of h, a gated MLP (gate_up h × 2i, down i × h); and the adapters of every
    hybrid layer i that runs it (i % blocks == block): h × r + r × 2i on the MLP, and
    3 × (2h × r + r × 2h) on q, k, v when attention adapters are on (Zamba2MLP, Zamba2Attention)."""
    sb, a, mlp = arch.shared_blocks, arch.attention, arch.mlp
    assert sb is not None and mlp is not None
    h, wide, i, r = arch.hidden_size, 2 * arch.hidden_size, mlp.intermediate_size, sb.adapter_rank
    c: Counter[str] = Counter()
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    c["attention"] += wide * (q + 2 * kv) + q * h
    c["norm"] += wide + h
    c["mlp"] += 3 * h * i
    if mlp.bias:
        c["bias"] += 2 * i + h
    uses = len(range(block, sb.uses, sb.count))
    if sb.mlp_adapters:
        c["mlp"] += uses * (h * r + r * 2 * i)
    if sb.attention_adapters:
        c["attention"] += uses * 3 * (wide * r + r * wide)
    return c


def mamba_params(arch: Architecture) -> Counter[str]:
    """One Mamba mixer.

    Mamba-1 (Gu & Dao 2023, Alg. 2; MambaMixer, JambaMambaMixer): in_proj h × 2·d_inner, a
    depthwise conv1d of d_conv taps over d_inner, x_proj d_inner × (dt_rank + 2·d_state), dt_proj
    dt_rank × d_inner (+ bias), A_log d_inner × d_state, D d_inner, out_proj d_inner × h; Jamba adds
    RMSNorms on dt, B and C.
    Mamba-2 (Dao & Gu 2024, §7; Mamba2Mixer, NemotronHMamba2Mixer): in_proj h × (2·d_inner +
    2·groups·d_state + heads) for z, x, B, C and dt; conv1d over x, B and C; dt_bias, A_log and D
    per head; a gated RMSNorm over d_inner; out_proj d_inner × h.
    """
    m = arch.mamba
    assert m is not None
    h, di = arch.hidden_size, m.d_inner
    c: Counter[str] = Counter()
    if m.version == 1:
        in_proj = 2 * di
        c["mixer"] += h * in_proj + di * (m.dt_rank + 2 * m.d_state) + m.dt_rank * di + di * h
        c["ssm"] += di * m.d_conv + di * m.d_state + di + di  # conv, A_log, D, dt_proj bias
        if m.bcdt_norms:
            c["norm"] += m.dt_rank + 2 * m.d_state
    else:
        in_proj = 2 * di + 2 * m.n_groups * m.d_state + m.n_heads
        c["mixer"] += h * in_proj + di * h
        c["ssm"] += m.conv_dim * m.d_conv + 3 * m.n_heads  # conv, dt_bias, A_log, D
        if m.gated_norm:
            c["norm"] += di
    if m.conv_bias:
        c["ssm"] += m.conv_dim
    if m.proj_bias:
        c["bias"] += in_proj + h
    return c


def linear_attention_params(arch: Architecture) -> Counter[str]:
    """One linear-attention mixer.

    Gated DeltaNet (Yang et al. 2024; Qwen3NextGatedDeltaNet): in_proj for q, k (n_k·d_k each),
    v and the output gate z (n_v·d_v each), in_proj for β and a (n_v each), a causal conv1d over
    q, k, v, dt_bias and A_log per value head, a gated RMSNorm of d_v, out_proj n_v·d_v × h.
    Kimi Delta Attention (Kimi Linear tech report; KimiLinearDeltaAttention): q, k, v, b and o
    projections, the forget gate f_b·f_a and output gate g_b·g_a through head_dim d, dt_bias per
    channel and A_log per head, a causal conv1d over q, k, v, a gated RMSNorm of d; Kimi-K3's
    full-rank output gate (use_full_rank_gate: a g_proj of h × heads·d, as vLLM's Kimi-K3 KDA
    builds it; transformers 5.24 has no Kimi-K3) replaces g_a / g_b; Bailing hybrid's KDA
    (BailingHybridDeltaAttention, BailingHybridForgetGate) has full-rank f_proj and g_proj.
    Lightning attention (Qin et al. 2024; MiniMaxLightningAttention): qkv_proj h × 3·H·d,
    out_proj, output_gate h × H·d, an RMSNorm over H·d.
    """
    la = arch.linear_attention
    assert la is not None
    h = arch.hidden_size
    c: Counter[str] = Counter()
    if la.kind == "lightning":
        width = la.num_v_heads * la.v_head_dim
        c["mixer"] += h * 3 * width + width * h + h * width
        c["norm"] += width
        return c
    key = la.num_k_heads * la.k_head_dim
    value = la.num_v_heads * la.v_head_dim
    if la.per_channel_decay:  # KimiLinearDeltaAttention: q, k, v, b, o; f_a/f_b and g_a/g_b
        d = la.k_head_dim  # through head_dim; dt_bias per channel, A_log per head
        c["mixer"] += h * (2 * key + value) + h * la.num_v_heads + value * h
        # forget gate: f_a h x d and f_b d x value, or Bailing's full-rank f_proj h x value
        c["mixer"] += h * value if la.full_rank_forget else (h + value) * d
        # output gate: g_a h x d and g_b d x value, or Kimi-K3's full-rank g_proj h x value
        c["mixer"] += h * value if la.full_rank_gate else (h + value) * d
        c["ssm"] += la.conv_dim * la.conv_kernel + value + la.num_v_heads
        c["norm"] += la.v_head_dim
        return c
    c["mixer"] += h * (2 * key + 2 * value) + h * 2 * la.num_v_heads + value * h
    c["ssm"] += la.conv_dim * la.conv_kernel + 2 * la.num_v_heads  # conv, dt_bias, A_log
    c["norm"] += la.v_head_dim
    return c


def short_conv_params(arch: Architecture) -> Counter[str]:
    """LFM2's gated short convolution (Lfm2ShortConv): in_proj h × 3h (B, C, x), a depthwise conv
    of L_cache taps over h channels, out_proj h × h, biases on all three when conv_bias."""
    sc = arch.short_conv
    assert sc is not None
    h = arch.hidden_size
    c: Counter[str] = Counter()
    c["mixer"] += h * 3 * h + h * h
    c["ssm"] += h * sc.kernel
    if sc.bias:
        c["bias"] += 3 * h + h
        c["ssm"] += h
    return c


def dense_mlp_params(arch: Architecture, width: int | None = None) -> Counter[str]:
    """One dense FFN: gated = 3 × h × i (gate, up, down), plain = 2 × h × i; biases if any; a
    learned activation's own scalars (xIELU: alpha_p and alpha_n, transformers
    activations.py XIELUActivation, Apertus)."""
    c: Counter[str] = Counter()
    if arch.mlp is None:
        return c
    h, i = arch.hidden_size, width or arch.mlp.intermediate_size
    matrices = 3 if arch.mlp.gated else 2
    c["mlp"] += matrices * h * i + _ACTIVATION_PARAMS.get(arch.hidden_act, 0)
    if arch.mlp.bias:
        c["bias"] += (matrices - 1) * i + h
    return c


_ACTIVATION_PARAMS = {"xielu": 2}  # learned scalars per MLP activation module


def expert_params(arch: Architecture) -> int:
    """Parameters of one routed expert: a gated (3 matrices) or plain (2) MLP of the expert width
    over the hidden (or latent) width, plus its biases (gpt-oss)."""
    assert arch.moe is not None
    m = arch.moe
    d, i = m.latent_size or arch.hidden_size, m.expert_intermediate_size
    matrices = 3 if m.expert_gated else 2
    n = matrices * d * i
    if m.expert_bias:
        n += (matrices - 1) * i + d
    return n


def moe_params(arch: Architecture) -> Counter[str]:
    """One MoE block: router (h × E, + bias), E routed experts, shared experts (and gate).

    Mixtral (Jiang et al. 2024, §2.1), DeepSeekMoE (Dai et al. 2024, shared + routed experts),
    Qwen-MoE, gpt-oss, Nemotron-H; mirrors the expert and router modules of those models in
    transformers. ERNIE 4.5 keeps a learned per-expert score bias; Nemotron 3 runs its experts in
    a latent width with projections in and out; LongCat-Flash's router also scores its
    weightless zero-computation experts (LongcatFlashTopkRouter.classifier).
    """
    c: Counter[str] = Counter()
    if arch.moe is None:
        return c
    m, h = arch.moe, arch.hidden_size
    scored = m.num_experts + m.zero_experts  # LongcatFlashTopkRouter scores the zero experts too
    c["router"] += h * scored + (scored if m.router_bias else 0)
    if m.router_score_bias:
        c["router"] += m.num_experts
    d, i = m.latent_size or h, m.expert_intermediate_size
    matrices = 3 if m.expert_gated else 2
    c["experts"] += m.num_experts * matrices * d * i
    if m.expert_bias:
        c["bias"] += m.num_experts * ((matrices - 1) * i + d)
    if m.latent_size:
        c["experts"] += 2 * h * m.latent_size
    if m.shared_intermediate_size:
        c["shared_experts"] += (3 if m.shared_gated else 2) * h * m.shared_intermediate_size
    if m.shared_expert_gate:
        c["router"] += h
    if m.output_bias:
        c["bias"] += h
    if m.output_norm:  # AXK1MoE.post_mlp_layernorm
        c["norm"] += arch.norm_elements
    return c


def ffn_params(arch: Architecture, layer: LayerSpec) -> Counter[str]:
    """The layer's FFN: dense or MoE; Gemma 4's MoE block sits beside its dense MLP, with three
    more norms and the router's scale (h) and per-expert scale (E) (Gemma4TextDecoderLayer)."""
    if not layer.ffn:
        return Counter()
    if not layer.moe:
        return dense_mlp_params(arch, layer.mlp_width)
    c = moe_params(arch)
    if arch.moe_beside_mlp:
        assert arch.moe is not None
        c.update(dense_mlp_params(arch, layer.mlp_width))
        c["norm"] += 3 * arch.norm_elements
        c["router"] += arch.hidden_size + arch.moe.num_experts
    return c


def gemma_layer_extras(arch: Architecture) -> Counter[str]:
    """Gemma 3n / Gemma 4 modules in every layer (Gemma3nTextDecoderLayer):
    per-layer input gate (h × p) and projection (p × h) with a norm; AltUp with n streams
    (output scale h, correction n², prediction n³, router n × h and its norm h); LAuReL of rank r
    (left r × h, right h × r, a norm)."""
    c: Counter[str] = Counter()
    h, p, n, r = arch.hidden_size, arch.per_layer_input, arch.altup_inputs, arch.laurel_rank
    if p:
        c["mlp"] += 2 * h * p
        c["norm"] += h
    if n:
        c["router"] += h + n * n + n**3 + n * h
        c["norm"] += h
    if r:
        c["mlp"] += 2 * r * h
        c["norm"] += h
    return c


def layer_params(arch: Architecture, layer: LayerSpec) -> Counter[str]:
    """All parameters of one decoder layer: its mixer, its FFN (dense or MoE) and its norms. An
    encoder-decoder's decoder layers share its record's decoder parts evenly (self- and
    cross-attention, FFN, norms, biases: engine/encoder_decoder.py)."""
    if arch.encoder is not None:
        parts = [(p.split(".", 1)[1], n) for p, n in arch.encoder.parts if p.startswith("decoder.")]
        return Counter({kind: n // arch.num_layers for kind, n in parts})
    c = mixer_params(arch, layer)
    c.update(ffn_params(arch, layer))
    c["norm"] += arch.norms_per_layer * arch.norm_elements
    if arch.gated_norm_rank:  # AXK2GatedRMSNorm: fc1 h x r, fc2 r x h; input norm always,
        gated = 1 + int(layer.moe)  # post-attention norm on MoE layers
        c["norm"] += gated * 2 * arch.hidden_size * arch.gated_norm_rank
    if arch.per_layer_input or arch.altup_inputs or arch.laurel_rank:
        c.update(gemma_layer_extras(arch))
    if arch.hyper_streams:  # one mixing module around attention, one around the FFN
        block = mhc_block_params if arch.hyper_comb else hyper_block_params
        c["router"] += 2 * block(arch.hyper_streams, arch.hidden_size)
    if arch.added is not None:  # engine/added_params.py: sub-norms, adapters, cross-attention
        c.update(dict(arch.added.layer))
    return c


def hyper_block_params(n: int, h: int) -> int:
    """One block's hyper-connection mixing (Zhu et al. 2025, "Hyper-Connections", dynamic
    pre/post weights from the n x h streams; HYV4HyperConnection): fn (2n x n·h), base (2n),
    scale (2)."""
    return 2 * n * n * h + 2 * n + 2


def mhc_block_params(n: int, h: int) -> int:
    """One block's manifold-constrained hyper-connection (DeepSeek-V4 report §2.2, mHC;
    DeepseekV4HyperConnection): fn ((2+n)·n x n·h: pre, post and the n x n residual mixing),
    base ((2+n)·n), scale (3)."""
    return (2 + n) * n * n * h + (2 + n) * n + 3


def hyper_head_params(n: int, h: int) -> int:
    """The head's collapse of n streams into one (HYV4HyperHead): hc_fn (n x n·h), hc_base
    (n), hc_scale (1)."""
    return n * n * h + n + 1


def _embedding_params(arch: Architecture) -> Counter[str]:
    """The first stage's modules outside the layers: token (and learned position, token-type,
    per-layer) embeddings, an embedding norm, Gemma 3n's AltUp and OPT's input projections."""
    c: Counter[str] = Counter()
    h = arch.hidden_size
    e = arch.embedding_dim or h
    c["embedding"] += (arch.vocab_size + arch.extra_vocab_rows) * e
    c["positions"] += arch.learned_positions * h
    if arch.embedding_norm:
        c["norm"] += arch.norm_elements
    if arch.token_types:  # BertEmbeddings.token_type_embeddings
        c["embedding"] += arch.token_types * h
    if arch.per_layer_input:  # Gemma 3n/4: embed_tokens_per_layer, per_layer_model_projection
        width = arch.num_layers * arch.per_layer_input
        c["embedding"] += arch.per_layer_vocab * width + width * h
        c["norm"] += arch.per_layer_input
    if arch.altup_inputs > 1:  # Gemma 3n: altup projections in
        c["embedding"] += (arch.altup_inputs - 1) * h * h
    if arch.embedding_dim:  # OPT-350m: project_in (e -> h)
        c["embedding"] += e * h
    if arch.drafter_width:  # Gemma4UnifiedAssistantForCausalLM: pre_projection (2B -> h)
        c["embedding"] += 2 * arch.drafter_width * h
    return c


def _head_params(arch: Architecture) -> Counter[str]:
    """The last stage's modules outside the layers: BERT's prediction-head transform and
    pooler, Gemma 3n's unembed projections, OPT's project_out, the final norm, an untied LM
    head and its bias."""
    c: Counter[str] = Counter()
    h = arch.hidden_size
    e = arch.embedding_dim or h
    for dense in (arch.head_transform, arch.pooler):  # BertPredictionHeadTransform (dense +
        if dense:  # LayerNorm), BertPooler (dense): h x h with a bias, on the last stage
            c["mlp"] += h * h
            c["bias"] += h
    if arch.head_transform:
        c["norm"] += arch.norm_elements
    if arch.altup_inputs > 1:  # Gemma 3n: altup unembed projections out
        c["lm_head"] += (arch.altup_inputs - 1) * h * h
    if arch.embedding_dim:  # OPT-350m: project_out (h -> e)
        c["lm_head"] += h * e
    if arch.drafter_width:  # Gemma4UnifiedAssistantForCausalLM: post_projection (h -> B)
        c["lm_head"] += h * arch.drafter_width
    if arch.final_norm:
        c["norm"] += arch.norm_elements
    if arch.hyper_streams:  # HYV4HyperHead
        c["router"] += hyper_head_params(arch.hyper_streams, h)
    if not arch.tie_word_embeddings:
        c["lm_head"] += arch.vocab_size * e
    if arch.lm_head_bias:
        c["bias"] += arch.vocab_size
    return c


def _encoder_decoder_counts(arch: Architecture) -> ParamCounts:
    """An encoder-decoder (engine/encoder_decoder.py): its record's parts as they are; the
    decoder layers share the decoder stack evenly, the encoder and embeddings sit with the
    first stage, the final norm and an untied head with the last."""
    enc = arch.encoder
    assert enc is not None
    by_kind: Counter[str] = Counter()
    for part, n in enc.parts:
        by_kind[part.split(".", 1)[1]] += n
    by_kind["vision"] += arch.vision_params  # a wrapper's image tower (Florence-2's DaViT)
    per_layer = (enc.stack("decoder") // arch.num_layers,) * arch.num_layers
    total = sum(by_kind.values())
    return ParamCounts(
        by_kind={k: v for k, v in by_kind.items() if v},
        per_layer=per_layer,
        total=total,
        active=total,
        embedding=enc.stack("embed") + enc.stack("encoder"),
        lm_head=enc.stack("head"),
    )


def _idle_attention_experts(arch: Architecture) -> int:
    """JetMoE: the attention experts a token's top-k does not route to (q and o, 2·h·n_kv·d
    each), over every attention layer."""
    a = arch.attention
    if not a.attention_experts:
        return 0
    top_k = a.num_heads // a.num_kv_heads
    one = 2 * arch.hidden_size * a.num_kv_heads * a.head_dim
    return arch.num_attention_layers * (a.attention_experts - top_k) * one


@record
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

    total = embeddings (+ learned positions, embedding norm, input projection) + Σ layers
            + final norm + LM head (if not tied, + its bias) + the image encoder of a
            vision-language checkpoint (engine/vision.py).
    active = total − Σ over MoE layers of (experts − experts_per_token) × one expert's params:
    what one token touches, counting embeddings and LM head (the convention of the Mixtral
    and DeepSeek-V3 reports, which give 12.9 B / 37 B active).
    """
    if arch.encoder is not None:
        return _encoder_decoder_counts(arch)
    by_kind: Counter[str] = Counter()
    per_kind: dict[LayerSpec, tuple[Counter[str], int]] = {}
    for spec, n in arch.layer_groups():
        c = layer_params(arch, spec)
        per_kind[spec] = (c, sum(c.values()))
        for kind, count in c.items():
            by_kind[kind] += count * n
    per_layer = tuple(per_kind[spec][1] for spec in arch.layers)
    added = arch.added
    first = (
        _embedding_params(arch)
        if added is None or added.embedding is None
        else Counter(dict(added.embedding))
    )
    last = _head_params(arch) if added is None or added.head is None else Counter(dict(added.head))
    if added is not None:
        last.update(dict(added.once))
    by_kind.update(first)
    by_kind.update(last)
    embedding, head = sum(first.values()), sum(last.values())
    by_kind["vision"] += arch.vision_params
    total = sum(by_kind.values())
    inactive = 0
    if arch.moe is not None:
        idle = arch.moe.num_experts - arch.moe.experts_per_token
        moe_layers = sum(n for spec, n in arch.layer_groups() if spec.moe and spec.ffn)
        inactive = moe_layers * idle * expert_params(arch)
    inactive += _idle_attention_experts(arch)
    return ParamCounts(
        by_kind={k: v for k, v in by_kind.items() if v},
        per_layer=per_layer,
        total=total,
        active=total - inactive,
        embedding=embedding,
        lm_head=head,
    )
