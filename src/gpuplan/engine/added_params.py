"""Modules a few families hold beyond the shapes `Architecture` describes, counted from their code.

Most families are their layers plus a token embedding, a final norm and an LM head; some carry a
projected embedding (ELECTRA, RemBERT, RoFormer), extra embedding tables (RoCBert), a sub-norm in
every layer (BitNet), per-language adapters (X-MOD) or cross-attention blocks a decoder-only
checkpoint keeps unused (TrOCR). A family record names its rule with the trait `added`; the rule
reads the config through the family's view and returns `AddedParams`:

    embedding / head   the whole embedding part / LM-head part as the family builds it, replacing
                       the standard reading of that part (None: the standard reading applies)
    layer              parameters every decoder layer holds beyond its mixer, FFN and norms
    once               parameters held once beyond those (on the last pipeline stage)

Every rule's docstring names the transformers modules it mirrors; tests/test_families.py checks
each family's total against transformers' model built on the meta device.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.frozen import record

Kinds = tuple[tuple[str, int], ...]  # (kind of parameter as engine/params.py names them, count)


@record
class AddedParams:
    """What one family adds to (or replaces in) the standard count; see the module docstring."""

    rule: str
    embedding: Kinds | None = None
    head: Kinds | None = None
    layer: Kinds = ()
    once: Kinds = ()
    note: str = ""  # what the family does that the bill does not model (said in the output)


def _kinds(**counts: int) -> Kinds:
    return tuple((k, v) for k, v in counts.items() if v)


def _electra(v: ConfigView, h: int) -> AddedParams:
    """ElectraEmbeddings (word, position and token-type tables of embedding_size e, a LayerNorm of
    e), ElectraModel.embeddings_project (e -> h with bias, only when e != h),
    ElectraGeneratorPredictions (dense h -> e with bias, LayerNorm of e) and generator_lm_head
    (e -> vocab with bias, its weight tied to the word embeddings): modeling_electra.py."""
    e, vocab = v.require("embedding_size"), v.require("vocab_size")
    project = e * h if e != h else 0
    return AddedParams(
        rule="electra",
        embedding=_kinds(
            embedding=(vocab + (v.get("type_vocab_size") or 0)) * e + project,
            positions=v.require("max_position_embeddings") * e,
            norm=2 * e,
            bias=h if project else 0,
        ),
        head=_kinds(
            mlp=h * e,
            bias=e + vocab,
            norm=2 * e,
            lm_head=0 if v.get("tie_word_embeddings") else vocab * e,
        ),
    )


def _rembert(v: ConfigView, h: int) -> AddedParams:
    """RemBertEmbeddings (word, position, token-type tables of input_embedding_size e_in, a
    LayerNorm of e_in), RemBertEncoder.embedding_hidden_mapping_in (e_in -> h with bias, always),
    RemBertLMPredictionHead (dense h -> output_embedding_size e_out with bias, LayerNorm of e_out,
    decoder e_out -> vocab with bias, untied): modeling_rembert.py."""
    e_in, e_out = v.require("input_embedding_size"), v.require("output_embedding_size")
    vocab = v.require("vocab_size")
    tied = bool(v.get("tie_word_embeddings")) and e_in == e_out
    return AddedParams(
        rule="rembert",
        embedding=_kinds(
            embedding=(vocab + (v.get("type_vocab_size") or 0)) * e_in + e_in * h,
            positions=v.require("max_position_embeddings") * e_in,
            norm=2 * e_in,
            bias=h,
        ),
        head=_kinds(
            mlp=h * e_out, bias=e_out + vocab, norm=2 * e_out, lm_head=0 if tied else vocab * e_out
        ),
    )


def _bert_embedding(v: ConfigView, h: int, width: int) -> dict[str, int]:
    """BertEmbeddings of `width`: word, position and token-type tables and a LayerNorm."""
    vocab, types = v.require("vocab_size"), v.get("type_vocab_size") or 0
    return {
        "embedding": (vocab + types) * width,
        "positions": v.require("max_position_embeddings") * width,
        "norm": 2 * width,
    }


def _bert_head(v: ConfigView, h: int, width: int) -> Kinds:
    """BertLMPredictionHead: the transform's dense (h -> width, bias) and LayerNorm(width), the
    decoder width -> vocab with its bias, its weight tied to the word embeddings unless untied."""
    vocab = v.require("vocab_size")
    untied = not v.get("tie_word_embeddings")
    return _kinds(mlp=h * width, bias=width + vocab, norm=2 * width, lm_head=untied * vocab * width)


def _roc_bert(v: ConfigView, h: int) -> AddedParams:
    """RoCBertEmbeddings: BERT's word, position and token-type tables and LayerNorm, plus a
    pronunciation table (pronunciation_vocab_size x pronunciation_embed_dim) and a shape table
    (shape_vocab_size x shape_embed_dim), always built, and, with concat_input, map_inputs_layer
    (h + the enabled tables' widths -> h, with bias); BERT's prediction head: modeling_roc_bert.py."""
    pron_dim, shape_dim = v.require("pronunciation_embed_dim"), v.require("shape_embed_dim")
    parts = _bert_embedding(v, h, h)
    parts["embedding"] += v.require("pronunciation_vocab_size") * pron_dim
    parts["embedding"] += v.require("shape_vocab_size") * shape_dim
    if v.get("concat_input"):
        width = h + pron_dim * bool(v.get("enable_pronunciation"))
        width += shape_dim * bool(v.get("enable_shape"))
        parts["embedding"] += width * h
        parts["bias"] = h
    return AddedParams(rule="roc_bert", embedding=_kinds(**parts), head=_bert_head(v, h, h))


def _roformer(v: ConfigView, h: int) -> AddedParams:
    """RoFormerEmbeddings (word and token-type tables of embedding_size e, a LayerNorm of e; no
    position table), RoFormerModel.embeddings_project (e -> h with bias when e != h),
    RoFormerEncoder.embed_positions (a sinusoidal table of max_position_embeddings x head_dim,
    an nn.Embedding, so a parameter), RoFormerLMPredictionHead (dense h -> e, LayerNorm of e,
    decoder e -> vocab with bias tied to the word embeddings): modeling_roformer.py."""
    e = v.require("embedding_size")
    parts = _bert_embedding(v, h, e)
    head_dim = h // v.require("num_attention_heads")
    parts["positions"] = v.require("max_position_embeddings") * head_dim
    if e != h:
        parts["embedding"] += e * h
        parts["bias"] = h
    return AddedParams(rule="roformer", embedding=_kinds(**parts), head=_bert_head(v, h, e))


def _xmod(v: ConfigView, h: int) -> AddedParams:
    """XmodOutput: one XmodAdapter per language of `languages` in every layer (dense1
    h -> h // adapter_reduction_factor and dense2 back, both with bias), and an adapter LayerNorm
    when adapter_layer_norm: modeling_xmod.py."""
    bottleneck = h // v.require("adapter_reduction_factor")
    languages = len(v.get("languages") or ())
    per = 2 * h * bottleneck
    return AddedParams(
        rule="xmod",
        layer=_kinds(
            mlp=languages * per,
            bias=languages * (bottleneck + h),
            norm=2 * h * bool(v.get("adapter_layer_norm")),
        ),
    )


def _bitnet(v: ConfigView, h: int) -> AddedParams:
    """BitNetAttention.attn_sub_norm (RMSNorm of h before o_proj) and BitNetMLP.ffn_sub_norm
    (RMSNorm of intermediate_size before down_proj): modeling_bitnet.py."""
    return AddedParams(rule="bitnet", layer=_kinds(norm=h + v.require("intermediate_size")))


def _gpt_neox_japanese(v: ConfigView, h: int) -> AddedParams:
    """GPTNeoXJapaneseAttention.dense_bias: only the last layer's attention has one (use_bias =
    layer_number == num_hidden_layers - 1), added after the residual: modeling_gpt_neox_japanese.py."""
    return AddedParams(rule="gpt_neox_japanese", once=_kinds(bias=h))


def _modernbert_decoder(v: ConfigView, h: int) -> AddedParams:
    """ModernBertDecoderLayer: layer 0's attn_norm is nn.Identity (every other layer has a
    LayerNorm before attention); ModernBertDecoderForCausalLM's head: ModernBertDecoderHead (dense
    h x h, bias classifier_bias, a LayerNorm) and the decoder (tied, bias decoder_bias):
    modeling_modernbert_decoder.py."""
    norm = h * (1 + bool(v.get("norm_bias")))
    vocab = v.require("vocab_size")
    untied = not v.get("tie_word_embeddings")
    head = _kinds(
        mlp=h * h,
        bias=h * bool(v.get("classifier_bias")) + vocab * bool(v.get("decoder_bias")),
        norm=2 * norm,  # the head's LayerNorm and the model's final_norm
        lm_head=untied * vocab * h,
    )
    return AddedParams(rule="modernbert_decoder", head=head, once=(("norm", -norm),))


def _cross_attention(v: ConfigView, h: int) -> AddedParams:
    """A decoder layer's encoder_attn (q, k, v, out_proj; k and v read cross_attention_hidden_size
    when set) and its LayerNorm, as TrOCRDecoderLayer and BigBirdPegasusDecoderLayer build them
    even in the decoder-only *ForCausalLM (no encoder states: never run there)."""
    kdim = v.get("cross_attention_hidden_size") or h
    bias = bool(v.get("attention_bias"))
    return AddedParams(
        rule="cross_attention",
        layer=_kinds(attention=2 * h * h + 2 * kdim * h, bias=4 * h * bias, norm=2 * h),
    )


def _xlm(v: ConfigView, h: int) -> AddedParams:
    """XLMModel's embeddings: position_embeddings (max_position_embeddings x h, a parameter even
    when sinusoidal_embeddings fills it), lang_embeddings (n_langs x h, only when use_lang_emb
    and n_langs > 1), the word table and layer_norm_emb: modeling_xlm.py."""
    langs = v.get("n_langs") or 0
    return AddedParams(
        rule="xlm",
        embedding=_kinds(
            embedding=v.require("vocab_size") * h
            + (langs * h if v.get("use_lang_emb") and langs > 1 else 0),
            positions=v.require("max_position_embeddings") * h,
            norm=2 * h,
        ),
    )


def _cpmant(v: ConfigView, h: int) -> AddedParams:
    """CpmAntModel's embeddings: input_embedding of vocab_size + prompt_types x prompt_length
    rows, segment_embedding (segment_types rows), and CpmAntSegmentPositionEmbedding's
    relative_attention_bias (segment_types^2 + position_bias_num_buckets rows, one column per
    head): modeling_cpmant.py."""
    segments = v.require("segment_types")
    rows = v.require("vocab_size") + v.require("prompt_types") * v.require("prompt_length")
    buckets = segments * segments + v.require("position_bias_num_buckets")
    prompt = v.require("prompt_length")
    return AddedParams(
        rule="cpmant",
        embedding=_kinds(
            embedding=(rows + segments) * h,
            positions=buckets * v.require("num_attention_heads"),
        ),
        note=(
            f"CPM-Ant prepends {prompt} prompt tokens (prompt_length) to every sequence: the KV"
            " cache holds them too, beyond the tokens billed here"
            if prompt
            else ""
        ),
    )


def _doge(v: ConfigView, h: int) -> AddedParams:
    """DogeAttention's dynamic mask: A (one per KV head) and dt_proj (KV heads x head_dim -> KV
    heads, bias attention_bias); DogeDecoderLayer's input_residual and post_attention_residual
    scales (h each): modeling_doge.py (the dense DogeMLP; is_moe's CDMoE is not read)."""
    kv = v.require("num_key_value_heads")
    width = kv * v.require("head_dim")
    return AddedParams(
        rule="doge",
        layer=_kinds(
            attention=width * kv, ssm=kv, bias=kv * bool(v.get("attention_bias")), norm=2 * h
        ),
    )


def _diffllama(v: ConfigView, h: int) -> AddedParams:
    """DiffLlamaAttention's differential-attention lambdas: lambda_q1, lambda_k1, lambda_q2,
    lambda_k2 of head_dim each (its groupnorm has no affine weights): modeling_diffllama.py."""
    return AddedParams(rule="diffllama", layer=_kinds(attention=4 * v.require("head_dim")))


def _rwkv(v: ConfigView, h: int) -> AddedParams:
    """RWKV-4 (Peng et al. 2023, RWKV §4.1-4.2; modeling_rwkv.py). RwkvSelfAttention (time
    mixing): key, value and receptance h -> a and output a -> h, no biases; time_decay and
    time_first of a; time_mix_key / value / receptance of h. RwkvFeedForward (channel mixing):
    key h -> i, value i -> h, receptance h -> h; time_mix_key / receptance of h. Block 0's
    pre_ln LayerNorm (weight and bias) is held once. The per-channel vectors are kind "ssm"
    (kept unquantised, split with the channels)."""
    a, i = v.require("num_attention_heads"), v.require("intermediate_size")
    return AddedParams(
        rule="rwkv",
        layer=_kinds(mixer=4 * h * a, mlp=2 * h * i + h * h, ssm=2 * a + 5 * h),
        once=_kinds(norm=2 * h),
    )


def _xlstm(v: ConfigView, h: int) -> AddedParams:
    """xLSTM-7B's block (Beck et al. 2025, xLSTM 7B; modeling_xlstm.py): xLSTMLayer's q, k
    (h -> int(h x qk_dim_factor)), v and the output gate (h -> int(h x v_dim_factor)), the input
    and forget gates (h -> heads, with biases), a multi-head LayerNorm of v and out_proj (v -> h);
    xLSTMFeedForward's two up projections (h -> u) and down (u -> h), u = h x ffn_proj_factor
    rounded up to ffn_round_up_to_multiple_of. The same counts in weight_mode "fused". With
    use_bias every projection and the block's norms carry a bias (xLSTMModel.out_norm does not)."""
    heads = v.require("num_attention_heads")
    qk, dv = (int(h * v.require(f)) for f in ("qk_dim_factor", "v_dim_factor"))
    multiple = v.get("ffn_round_up_to_multiple_of") or 64
    u = int(((h * v.require("ffn_proj_factor") + multiple - 1) // multiple) * multiple)
    biased = bool(v.get("use_bias"))
    return AddedParams(
        rule="xlstm",
        layer=_kinds(
            mixer=h * (2 * qk + 2 * dv) + 2 * h * heads + dv * h,
            mlp=3 * h * u,
            norm=dv,
            bias=2 * heads + biased * (2 * qk + 2 * dv + h + dv + 2 * h + 2 * u + h),
        ),
    )


RULES: dict[str, Callable[[ConfigView, int], AddedParams]] = {
    "electra": _electra,
    "rembert": _rembert,
    "roc_bert": _roc_bert,
    "roformer": _roformer,
    "xmod": _xmod,
    "bitnet": _bitnet,
    "gpt_neox_japanese": _gpt_neox_japanese,
    "modernbert_decoder": _modernbert_decoder,
    "cross_attention": _cross_attention,
    "xlm": _xlm,
    "cpmant": _cpmant,
    "doge": _doge,
    "diffllama": _diffllama,
    "rwkv": _rwkv,
    "xlstm": _xlstm,
}


def added_params(rule: str, view: ConfigView, hidden: int) -> AddedParams | None:
    """The parameters the family's `added` rule adds (None when it names none)."""
    return RULES[rule](view, hidden) if rule else None
