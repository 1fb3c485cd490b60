"""Encoder-decoder models (T5, BART, mBART, NLLB/M2M100, Whisper) from a table of records.

catalog/data/encoder_decoders.toml holds one record per family: its parameters as named integer
expressions per stack and kind (engine/towers.py evaluates them), and the decoder attention's
shape for the caches. `encoder_decoder_architecture` turns a config into an `Architecture`
whose layers are the decoder's (self-attention, cross-attention and FFN each) and whose
`encoder` field carries the rest, so the serving bill prices it like any model:

* weights: every part of the record (engine/params.py uses them as they are);
* per request, as vLLM's encoder-decoder runner allocates it (vllm/v1 `CrossAttentionSpec`,
  the encoder cache): self-attention K and V per generated or prompt token per decoder layer
  (the ordinary KV cache); cross-attention K and V of every encoder token per decoder layer,
  written once when the encoder runs; the encoder's output (encoder tokens × d_model) kept once
  per request until the cross-attention K and V are computed from it.

The encoder length is the record's fixed one (Whisper: 1500 audio frames) or the request's
prompt, which gpuplan bills at the whole context (an upper bound, said in a note).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuplan.datafiles import load_data
from gpuplan.engine.frozen import record
from gpuplan.engine.towers import evaluate, field_values
from gpuplan.errors import GpuplanError

STACKS = ("embed", "encoder", "decoder", "head")


@record
class EncoderSpec:
    """What an encoder-decoder adds to its decoder stack: every parameter by stack and kind, and
    the shapes of its per-request caches."""

    parts: tuple[tuple[str, int], ...]  # ("<stack>.<kind>", parameters): hashable
    width: int  # d_model: the encoder output's width
    encoder_tokens: int  # fixed encoder length (Whisper), 0: the prompt's
    cross_heads: int
    cross_head_dim: int
    family: str = ""
    training: tuple[tuple[str, int], ...] = ()  # the record's [training] shapes, by name
    activation: str = "gelu"  # the FFN's activation (T5: dense_act_fn)
    dropout: float = 0.0  # the largest dropout probability its config trains with
    dropouts: tuple[float, float, float] = (0.0, 0.0, 0.0)  # hidden, attention, activation
    layerdrop: float = 0.0  # the largest LayerDrop probability (a layer skipped in training)

    def stack(self, name: str) -> int:
        return sum(n for part, n in self.parts if part.startswith(name + "."))

    def shape(self, name: str) -> int:
        """One of the record's training shapes (engine/encdec_activations.py reads them)."""
        return dict(self.training)[name]


@cache
def _table() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, rec in load_data("encoder_decoders.toml").items():
        for model_type in rec.get("model_types", (name,)):
            out[model_type] = {**rec, "name": name}
    return out


def is_encoder_decoder(model_type: str) -> bool:
    return model_type in _table()


def encoder_decoder_types() -> tuple[str, ...]:
    return tuple(sorted(_table()))


def encoder_spec(config: Mapping[str, Any], name: str) -> tuple[EncoderSpec, dict[str, int]]:
    """The record's parts and cache shapes for this config, and its field values."""
    rec = _table()[str(config.get("model_type"))]
    where = f"encoder_decoders.toml [{rec['name']}]"
    values = field_values(rec["fields"], rec.get("defaults", {}), config, name, f"{rec['name']}")
    for field, value in values.items():  # an encoder-decoder's fields are single numbers
        if isinstance(value, list):
            path = rec["fields"][field]
            key = path if isinstance(path, str) else str(path)
            raise GpuplanError(f"{name}: config field {key!r} must be a whole number, got a list")
    parts = {part: evaluate(expr, values, name, where) for part, expr in rec["params"].items()}
    bad = [p for p in parts if p.split(".")[0] not in STACKS or parts[p] < 0]
    if bad:
        raise GpuplanError(f"{name}: {where} part {bad[0]!r} is not a stack's or is negative")
    shape = {key: evaluate(expr, values, name, where) for key, expr in rec["cache"].items()}
    for key in ("decoder_layers", "heads", "head_dim", "width"):
        if shape[key] < 1:
            raise GpuplanError(f"{name}: the decoder's {key} must be at least 1")
    if parts.get("decoder.attention", 0) % shape["decoder_layers"]:
        raise GpuplanError(f"{name}: {where} decoder parts are not alike per layer")
    training = {key: evaluate(expr, values, name, where) for key, expr in rec["training"].items()}
    by_type = rec.get("dropout_defaults_by_type", {}).get(str(config.get("model_type")), {})
    defaults = {**rec.get("dropout_defaults", {}), **by_type}
    spec = EncoderSpec(
        parts=tuple(parts.items()),
        width=shape["width"],
        encoder_tokens=shape["encoder_tokens"],
        cross_heads=shape["heads"],
        cross_head_dim=shape["head_dim"],
        family=rec["name"],
        training=tuple(training.items()),
        activation=_activation(config, rec),
        dropout=_dropout(config, DROPOUT_KEYS, defaults),
        dropouts=_dropouts(config, rec["name"], defaults),
        layerdrop=_dropout(config, ("encoder_layerdrop", "decoder_layerdrop"), defaults),
    )
    return spec, shape


DROPOUT_KEYS = ("dropout_rate", "dropout", "attention_dropout", "activation_dropout")


def _dropouts(
    config: Mapping[str, Any], family: str, defaults: Mapping[str, float]
) -> tuple[float, float, float]:
    """The dropout probabilities training applies (hidden states, attention probabilities, the
    FFN's activation): T5's one dropout_rate for all three (T5Config), the others' dropout,
    attention_dropout and activation_dropout."""
    if family == "t5":
        p = _dropout(config, ("dropout_rate",), defaults)
        return p, p, p
    keys = ("dropout", "attention_dropout", "activation_dropout")
    hidden, attention, activation = (_dropout(config, (k,), defaults) for k in keys)
    return hidden, attention, activation


def _dropout(
    config: Mapping[str, Any], keys: tuple[str, ...], defaults: Mapping[str, float]
) -> float:
    """The largest probability the config gives under `keys` (T5's dropout_rate; BART's,
    M2M100's and Whisper's dropout, attention_dropout, activation_dropout; their LayerDrop),
    the config class's default for a key config.json omits."""
    rates = [config.get(k, defaults.get(k)) for k in keys]
    return max([float(r) for r in rates if isinstance(r, int | float) and 0 < r < 1], default=0.0)


def _activation(config: Mapping[str, Any], rec: Mapping[str, Any]) -> str:
    """The FFN's activation: T5's from feed_forward_proj as T5Config derives it (its last part;
    "gated-gelu" is gelu_new), the others' activation_function, else the record's default."""
    if rec["name"] == "t5":
        proj = str(config.get("feed_forward_proj") or "relu")
        return "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1][:32]
    return str(config.get("activation_function") or rec.get("activation", "gelu"))[:32]


def factored_elements(spec: EncoderSpec, vocab: int, decoder_layers: int) -> int:
    """Elements of Adafactor's second moment over every trained parameter (transformers'
    Adafactor, optimization.py: a tensor of two or more dimensions keeps a row accumulator of
    shape[:-1] and a column one of shape[:-2] + shape[-1:], a vector its full square; Shazeer &
    Stern 2018 §3). The matrices: q, k, v, o of each attention (d × heads·head_dim), the FFN's
    wi (two when gated) and wo, the token tables, the trained position tables, Whisper's
    convolutions (d × mels × 3, d × d × 3) and an untied head; norms and biases whole."""
    h, t = spec.width, dict(spec.training)
    inner_e = t["encoder_heads"] * t["head_dim"]
    inner_d = spec.cross_heads * t["head_dim"]
    ffn = 2 + t["gated"]
    total = t["encoder_layers"] * (4 * (h + inner_e) + ffn * (h + t["ffn_encoder"]))
    total += decoder_layers * (8 * (h + inner_d) + ffn * (h + t["ffn_decoder"]))
    total += sum(n for part, n in spec.parts if part.split(".")[1] in ("norm", "bias"))
    total += vocab + h + (t["decoder_vocab"] + h if t["decoder_vocab"] else 0)
    for rows in (t["encoder_position_rows"], t["decoder_position_rows"]):
        total += rows + t["position_cols"] if rows else 0
    if t["mel_bins"]:  # conv1 (d, mels, 3), conv2 (d, d, 3)
        total += h * t["mel_bins"] + 3 * h + h * h + 3 * h
    if dict(spec.parts).get("head.lm_head"):
        total += vocab + h
    return total
