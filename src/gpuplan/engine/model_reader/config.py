"""Reading a config.json into an `Architecture`: the entry point and what surrounds the reader.

`architecture_from_config` takes a Hugging Face `config.json` (already parsed into a dict: the
engine does no file I/O), finds the language model inside a multimodal wrapper, sends an
encoder-decoder to engine/encoder_decoder.py, and reads any other decoder through its family
record (catalog/data/families.toml, loaded by engine/families.py) with reader.py. Every value is
read through engine/config_schema.py, which types and bounds it and names the key in any error.

A `model_type` the table does not know is read with the standard keys as a Llama-style decoder and
says so in `notes`; if such a config declares a mechanism that reading would miss (a state-space
or linear-attention layer, an unknown nested sub-config, an unknown layer type) it is refused with
one line naming the key, instead of being sized as Llama.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.encoder_decoder import encoder_decoder_types, encoder_spec, is_encoder_decoder
from gpuplan.engine.families import base_family, family_for
from gpuplan.engine.frozen import replace
from gpuplan.engine.model_reader.reader import Reader
from gpuplan.engine.model_records import Architecture, AttentionSpec, LayerSpec
from gpuplan.engine.vision import multimodal_params
from gpuplan.errors import GpuplanError

_MULTIMODAL_WRAPPERS = ("text_config", "llm_config", "language_config")
_OUTER_KEYS = (
    *("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"),
    *("backbone_hidden_size", "use_ordered_embeddings"),  # an assistant wrapper's (drafter)
)
# nested objects any family may carry without changing the decoder's shape
_NEUTRAL_OBJECTS = frozenset(
    {
        "quantization_config",
        "rope_scaling",
        "rope_parameters",
        "vision_config",
        "text_config",
        "auto_map",
        "id2label",
        "label2id",
        "task_specific_params",
        "generation_config",
        "compression_config",
        "sliding_window_config",
        "attention_config",
        "rope_config",
    }
)
# keys that declare a mechanism the Llama-style reading of an unknown family would miss
_MECHANISM_KEYS = (
    # named before their layer lists: what the newest transformers families run that gpuplan
    # does not model (the one key a refusal names)
    "cca_time0",  # Zyphra's ZAYA1: compressed convolutional attention (CCA) with conv states
    "n_recurrent_loops",  # Dory: a middle stack run in loops, each loop caching its own KV
    "loop_num_passes",  # Inkling 2 loop: layers re-run in passes through a low-rank loop gate
    "d_rel",  # Inkling: relative-position states mixed into the attention bias, short convs
    "layer_types",
    "layers_block_type",
    "hybrid_override_pattern",
    "attn_type_list",
    "full_attn_idxs",
    "block_configs",
    "ssm_state_size",
    "state_size",
    "mamba_d_state",
    "mamba_d_ssm",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "conv_L_cache",
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",
    "altup_num_inputs",
    "laurel_rank",
    "attn_layer_period",
    "expert_layer_period",
    "kv_lora_rank_per_layer",
    "use_parallel_residual",
    "parallel_attn",
    "alibi",
    "multi_query",
    "new_decoder_architecture",
    # seen on unknown families in transformers' own configs, each a mechanism Llama lacks:
    "first_k_dense_replace",  # dense layers before the expert ones (dots.llm1 was read all-MoE)
    "num_dense_layers",
    "mlp_layer_types",
    "kv_lora_rank",  # multi-head latent attention
    "q_lora_rank",
    "zero_expert_num",  # zero-computation experts (LongCat-Flash)
    "moe_num_experts",  # Aria's expert keys
    "is_moe",  # Doge's cross-domain MoE
    "keep_window_size",  # Doge's dynamic mask attention
    "kv_channels",  # mixture-of-attention heads (JetMoE)
    "block_types",  # RG-LRU recurrent blocks (RecurrentGemma)
    "lru_width",
    "H_cycles",  # recurrent stacks (HRM)
    "qk_layernorm",  # Persimmon's per-head LayerNorms
    "use_post_norm",  # extra post-norms (HyperCLOVA X)
    "type_vocab_size",  # BERT-style encoders (token types, learned positions, biases)
    "attention_hidden_size",  # RWKV's time mixing (a recurrent state per layer, no KV cache)
    "mem_len",  # XLNet's two-stream relative attention over a memory of past hidden states
    "qk_dim_factor",  # xLSTM's mLSTM blocks (a matrix memory per head)
)
# activations that come with an MLP of no gate as often as with one: an unknown family's choice
# cannot be told from its config
_UNGATED_ACTIVATIONS = frozenset({"relu2", "relu", "gelu_new", "gelu"})


def architecture_from_config(config: Mapping[str, Any], name: str = "model") -> Architecture:
    """Build an `Architecture` from a Hugging Face `config.json` dict.

    Known families (engine/families.py) get their exact module layout. Any other `model_type`
    with the standard keys is read as a Llama-style decoder, with a note naming the assumptions;
    one declaring a mechanism that reading would miss is refused naming the key.
    """
    if not isinstance(config, Mapping):
        raise GpuplanError(f"{name}: config.json must be a JSON object")
    raw = _language_model(config)
    model_type = raw.get("model_type", config.get("model_type", "unknown"))
    if not isinstance(model_type, str) or len(model_type) > 128:
        raise GpuplanError(f"{name}: config field 'model_type' must be a short string")
    if is_encoder_decoder(model_type):  # a wrapper's towers too (Florence-2's DaViT)
        return _with_towers(_encoder_decoder(raw, name, model_type), config, name)
    if raw.get("is_encoder_decoder") is True:
        raise GpuplanError(
            f"{name}: model_type {model_type!r} is an encoder-decoder (is_encoder_decoder) gpuplan"
            f" does not model (it reads {', '.join(encoder_decoder_types())}); cannot size it"
        )
    family = family_for(model_type)
    notes: list[str] = []
    if family is None:
        _refuse_unread_mechanisms(raw, name, model_type)
        family = base_family()
        notes.append(
            f"unknown model family {model_type!r}: read as a Llama-style decoder (gated MLP,"
            " RMSNorm, RoPE, no biases unless attention_bias/mlp_bias, every layer the same)"
        )
    family.refuse_unmodelled(raw, name)
    view, traits = family.resolve(raw, name)
    arch = Reader(view, traits, family, model_type, notes).build()
    arch = _said(arch, view, traits)
    return _with_towers(arch, config, name)


def _with_towers(arch: Architecture, config: Mapping[str, Any], name: str) -> Architecture:
    """The wrapper's encoder towers and projectors (engine/vision.py, towers.toml) beside its
    language model, with a note for each one not counted."""
    vision, tower_notes = multimodal_params(config, name)
    if vision or tower_notes:
        arch = replace(arch, vision_params=vision, notes=arch.notes + tower_notes)
    return arch


def _said(arch: Architecture, view: ConfigView, traits: Mapping[str, Any]) -> Architecture:
    """Notes for what a family's reading assumes or leaves out of the bill: a head_dim floored
    as transformers floors it (Glm4MoeAttention: getattr(config, "head_dim", hidden // heads)),
    and an added rule's note (engine/added_params.py)."""
    said: list[str] = []
    heads, hidden = arch.attention.num_heads, arch.hidden_size
    if traits["head_dim_floor"] and not view.present("head_dim") and hidden % heads:
        said.append(
            f"no head_dim and {heads} heads do not divide hidden_size {hidden}: head_dim read"
            f" as {hidden // heads} (hidden_size // heads, as transformers builds it)"
        )
    if arch.added is not None and arch.added.note:
        said.append(arch.added.note)
    return replace(arch, notes=(*arch.notes, *said)) if said else arch


def _encoder_decoder(raw: Mapping[str, Any], name: str, model_type: str) -> Architecture:
    """An encoder-decoder's decoder stack as layers, its encoder and embeddings in `encoder`
    (engine/encoder_decoder.py reads the record; nothing else of the family table applies)."""
    if raw.get("quantization_config"):
        raise GpuplanError(
            f"{name}: a quantization_config on an encoder-decoder ({model_type}) is not modelled;"
            " cannot size this checkpoint"
        )
    spec, shape = encoder_spec(raw, name)
    heads, head_dim, d = spec.cross_heads, spec.cross_head_dim, spec.width
    layer = LayerSpec()
    length = (
        f"its {spec.encoder_tokens} encoder positions"
        if spec.encoder_tokens
        else "the whole context (the prompt it encodes is at most that)"
    )
    view = ConfigView(
        raw, name, {"torch_dtype": ("torch_dtype", "dtype")}, {"torch_dtype": "float32"}
    )
    return Architecture(
        name=name,
        model_type=model_type,
        family=f"encoder-decoder:{spec.family}",
        hidden_size=d,
        num_layers=shape["decoder_layers"],
        vocab_size=_whole_field(raw, "vocab_size", name),
        attention=AttentionSpec(heads, heads, head_dim, head_dim),
        layers=(layer,) * shape["decoder_layers"],
        norm="layernorm",
        positions="learned",
        torch_dtype=str(view.get("torch_dtype")).replace("torch.", ""),
        hidden_act=str(raw.get("activation_function") or raw.get("dense_act_fn") or "gelu")[:32],
        encoder=spec,
        notes=(
            "encoder-decoder: each request also holds its encoder output and the cross-attention"
            f" K and V of every decoder layer, billed for {length}",
        ),
    )


def _whole_field(raw: Mapping[str, Any], key: str, name: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 1 << 32:
        raise GpuplanError(f"{name}: config field {key!r} must be a whole number of at least 1")
    return value


def _language_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a VLM's `text_config` (with the outer dtype, quantization
    and tying when the inner one lacks them), else the config itself."""
    raw = dict(config)
    for wrapper in _MULTIMODAL_WRAPPERS:
        inner = raw.get(wrapper)
        if isinstance(inner, Mapping) and any(
            k in inner for k in ("hidden_size", "n_embd", "d_model", "num_hidden_layers")
        ):
            merged = dict(inner)
            for key in _OUTER_KEYS:
                if key in raw and key not in merged:
                    merged[key] = raw[key]
            # transformers 5 ties a wrapper's head by the wrapper's own tie_word_embeddings
            # (PreTrainedModel.get_expanded_tied_weights_keys reads the top-level config)
            if isinstance(raw.get("tie_word_embeddings"), bool):
                merged["tie_word_embeddings"] = raw["tie_word_embeddings"]
            if "model_type" not in merged and "model_type" in raw:
                merged["model_type"] = raw["model_type"]
            return merged
    return raw


def _refuse_unread_mechanisms(raw: Mapping[str, Any], name: str, model_type: str) -> None:
    """An unknown family is read Llama-style only when nothing in it says that would be wrong."""
    for key in _MECHANISM_KEYS:
        if raw.get(key) not in (None, False, [], ""):
            raise GpuplanError(
                f"{name}: model_type {model_type!r} is not a known family and its config declares"
                f" {key!r}, a mechanism gpuplan cannot read for an unknown family; cannot size it"
            )
    act = raw.get("hidden_act")
    if isinstance(act, str) and act in _UNGATED_ACTIVATIONS:
        raise GpuplanError(
            f"{name}: model_type {model_type!r} is not a known family and its hidden_act {act!r}"
            " comes with plain (up, down) and gated MLPs alike; cannot size it"
        )
    for key, value in raw.items():
        if isinstance(value, Mapping) and key not in _NEUTRAL_OBJECTS:
            raise GpuplanError(
                f"{name}: model_type {model_type!r} is not a known family and its config has a"
                f" nested {key!r} gpuplan cannot read; cannot size it"
            )
