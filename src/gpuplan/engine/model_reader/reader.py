"""One family's view of a config, turned into an `Architecture` one named step at a time.

    arch = Reader(view, traits, family, model_type, notes).build()

The steps: the required sizes; the layer count; the model-wide parts (parts.py); the layer
schedule (a config's `layer_types`, else the family's registered rule in engine/schedules.py);
the per-layer variation (variation.py); then the record.
"""

from __future__ import annotations

from typing import Any

from gpuplan.engine.added_params import added_params
from gpuplan.engine.config_schema import ConfigView
from gpuplan.engine.families import Family
from gpuplan.engine.model_reader import parts, variation
from gpuplan.engine.model_records import (
    Architecture,
    AttentionSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    MoESpec,
    ShortConvSpec,
)
from gpuplan.engine.schedules import SCHEDULES
from gpuplan.errors import GpuplanError

# families whose blocks are a mixer only: no FFN beside it (Nemotron-H's M and * blocks, Mamba)
_MIXER_ONLY_FAMILIES = frozenset(
    {"nemotron_h", "mamba", "mamba2", "zamba2", "zamba", "rwkv", "xlstm"}
)


class Reader:
    """Turns one family's view of a config into an `Architecture`."""

    def __init__(
        self,
        view: ConfigView,
        traits: dict[str, Any],
        family: Family,
        model_type: str,
        notes: list[str],
    ):
        self.v = view
        self.t = traits
        self.family = family
        self.model_type = model_type
        self.notes = notes
        self._specs: dict[tuple[str, int | None, bool], LayerSpec] = {}

    def build(self) -> Architecture:
        v, t = self.v, self.t
        self._check_required()
        hidden = v.require("hidden_size")
        num_layers = self._num_layers()
        attention = parts.attention(v, t, hidden)
        kinds = self._schedule(num_layers)
        moe, moe_flags = parts.moe(v, t, num_layers, kinds)
        mamba = parts.mamba(v, t, hidden) if t["mamba"] else None
        linear = parts.linear_attention(v, t, attention) if t["linear_attention"] else None
        short = parts.short_conv(v) if t["short_conv"] else None
        layers = tuple(
            self._layer(kind, window, m) for (kind, window), m in zip(kinds, moe_flags, strict=True)
        )
        layers, extras = self._vary(layers, attention, moe)
        if any(s.mixer == "rglru" for s in layers):
            extras["rglru"] = parts.rglru(v)
        if any(s.mixer == "mlstm" for s in layers):
            linear = parts.mlstm(v)
        self._check_mixers(layers, mamba, linear, short)
        dense = any(s.ffn and (not s.moe or extras.get("moe_beside_mlp")) for s in layers)
        dense = dense or bool(t["shared_blocks"])
        extras["mlp"] = parts.mlp(v, t, self.model_type, layers) if dense else None
        extras.update(moe=moe, mamba=mamba, linear_attention=linear, short_conv=short)
        if attention is None:
            attention = parts.stand_in_attention(mamba, v.get("num_attention_heads"))
        self._note(layers)
        return self._record(hidden, num_layers, attention, layers, extras)

    def _vary(
        self,
        layers: tuple[LayerSpec, ...],
        attention: AttentionSpec | None,
        moe: MoESpec | None,
    ) -> tuple[tuple[LayerSpec, ...], dict[str, Any]]:
        """Each per-layer variation the family or the config declares (variation.py)."""
        v, t = self.v, self.t
        extras: dict[str, Any] = {}
        if t["per_layer_embeddings"]:
            assert attention is not None
            layers, extras = variation.gemma_layers(v, self.model_type, layers, attention, moe)
        if v.raw.get("per_layer_config") is not None:
            assert attention is not None
            layers = variation.per_layer_config(v, layers, attention)
        if attention is not None and attention.indexer_heads:
            layers = variation.shared_indexer_layers(v, layers, attention)
            layers = variation.sliding_without_indexer(layers, attention)
        if attention is not None and (t["swa_sinks"] or v.get("swa_num_key_value_heads")):
            layers = variation.sliding_attention(v, t, layers, attention)
        if attention is not None and v.get("num_attention_heads_per_layer") is not None:
            layers = variation.heads_per_layer(v, layers, attention)
        if t["shared_blocks"]:
            layers, extras["shared_blocks"] = variation.shared_blocks(v, layers)
        if t["compressed_attention"]:
            assert attention is not None
            layers = variation.compressed_layers(v, layers, attention)
        return layers, extras

    def _note(self, layers: tuple[LayerSpec, ...]) -> None:
        """What the record leaves out, said in its notes."""
        v = self.v
        if v.get("num_nextn_predict_layers"):
            self.notes.append(
                f"{v.get('num_nextn_predict_layers')} multi-token-prediction layer(s) in the"
                " checkpoint are not counted (transformers does not build them; engines load them"
                " only for speculative decoding)"
            )
        if v.get("zero_experts"):
            self.notes.append(
                f"{v.get('zero_experts')} zero-computation (identity) experts hold no weights;"
                " transformers' LongcatFlashExperts allocates gate_up_proj rows for them too,"
                " which checkpoints do not store and are not counted"
            )
        if self.t["hyper_connections"]:
            self.notes.append(
                f"hyper-connections: {v.require('hc_mult')} residual streams; their mixing"
                " parameters are counted, the wider stream is not in the serving workspace"
                " allowance and training refuses"
            )
        if self.t["compressed_attention"]:
            self.notes.append(
                "DeepSeek-V4 caches: every layer keeps one K=V head of head_dim for its last"
                f" {v.get('sliding_window')} tokens; compressed sparse attention layers add one"
                " entry (head_dim, and an index_head_dim indexer key) per 4 tokens, heavily"
                " compressed ones one per 128 (compress_rates), each compressor its unfinished"
                " window: billed as transformers' DeepseekV4CSACache / HCACache hold them, entries"
                " in the KV dtype, indexer keys as DeepSeek-V3.2's fp8; vLLM pages the compressed"
                " caches as MLA pages of block_size / compress_ratio entries and the compressor"
                " state as a sliding window of 2 x ratio (CSA) or ratio (HCA) tokens, in its own"
                " fp8_ds_mla records, which are not modelled"
            )
        if any(spec.mixer == "cross_attention" for spec in layers):
            self.notes.append(
                "cross-attention layers hold each request's image K and V (not per text token);"
                " that cache is not billed here"
            )

    def _record(
        self,
        hidden: int,
        num_layers: int,
        attention: AttentionSpec,
        layers: tuple[LayerSpec, ...],
        extras: dict[str, Any],
    ) -> Architecture:
        v, t = self.v, self.t
        embedding_dim = v.get("word_embed_proj_dim") or 0
        learned = 0
        if t["positions"] == "learned":
            learned = v.require("max_position_embeddings") + t["position_offset"]
        return Architecture(
            name=v.name,
            model_type=self.model_type,
            family=self.family.name,
            hidden_size=hidden,
            num_layers=num_layers,
            vocab_size=v.require("vocab_size"),
            attention=attention,
            layers=layers,
            tie_word_embeddings=bool(v.get("tie_word_embeddings")),
            norm=t["norm"],
            norm_bias=t["norm_bias"] and t["norm"] == "layernorm",
            norm_weight=t["norm_weight"],
            norms_per_layer=t["norms_per_layer"],
            parallel_block=t["block"] == "parallel",
            final_norm=t["final_norm"],
            embedding_norm=t["embedding_norm"],
            lm_head_bias=t["lm_head_bias"],
            embedding_dim=embedding_dim if embedding_dim != hidden else 0,
            positions=t["positions"],
            learned_positions=learned,
            max_position_embeddings=v.get("max_position_embeddings") or 0,
            torch_dtype=str(v.get("torch_dtype")).replace("torch.", ""),
            quantization=self._quantization(),
            hidden_act=str(v.get("hidden_act")),
            notes=tuple(self.notes),
            rope=parts.rope(v) if t["positions"] == "rope" else None,
            ssm_state_dtype=v.get("mamba_ssm_cache_dtype") or v.get("mamba_ssm_dtype"),
            norm_placement=t["norm_placement"],
            norm_fp32=t["norm_fp32"],
            token_types=int(t["token_types"] or 0),
            head_transform=bool(t["head_transform"]),
            pooler=bool(t["pooler"]),
            extra_vocab_rows=int(t["extra_vocab_rows"] or 0),
            gated_norm_rank=v.require("gated_norm_rank") if t["gated_norms"] else 0,
            drafter_width=(v.get("backbone_hidden_size") or 0) if t["drafter"] else 0,
            hyper_streams=v.require("hc_mult") if t["hyper_connections"] else 0,
            hyper_comb=bool(t["hyper_comb"]),
            attn_softcap=v.get("attn_logit_softcapping") or 0.0,
            final_softcap=v.get("final_logit_softcapping") or 0.0,
            added=added_params(t["added"], v, hidden),
            **extras,
        )

    def _quantization(self) -> Any:
        """The checkpoint's quantisation (parts.py); DeepSeek-V4's expert dtype and bf16
        compressor projections on top of its quantization_config."""
        spec = parts.quantization(self.v, self.notes)
        if self.t["compressed_attention"]:
            return parts.deepseek_v4_quantization(self.v, spec, self.notes)
        return spec

    def _check_required(self) -> None:
        """Name every missing size at once: hidden, layers, heads (if attention), vocabulary."""
        v = self.v
        fields = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
        if self.t["attention"] == "none":
            fields.remove("num_attention_heads")
        if (self.t["schedule"] == "hybrid_pattern" and v.get("hybrid_override_pattern")) or v.get(
            "layer_types"
        ):
            fields.remove("num_hidden_layers")  # the schedule's length says it
        missing = [v.spelling(f) for f in fields if v.get(f) is None]
        if missing:
            raise GpuplanError(
                f"{v.name}: config.json is missing {', '.join(missing)}"
                f" (model_type {self.model_type!r}); cannot size this model"
            )

    # -- layers -------------------------------------------------------------------------------

    def _num_layers(self) -> int:
        v = self.v
        pattern = (
            v.get("hybrid_override_pattern") if self.t["schedule"] == "hybrid_pattern" else None
        )
        if pattern is not None:
            if v.present("num_hidden_layers") and v.get("num_hidden_layers") != len(pattern):
                raise v.fail(
                    "hybrid_override_pattern",
                    f"has {len(pattern)} layers but num_hidden_layers is {v.get('num_hidden_layers')}",
                )
            if not pattern:
                raise v.fail("hybrid_override_pattern", "is empty")
            return len(pattern)
        layer_types = v.get("layer_types")
        if layer_types is not None and not v.present("num_hidden_layers") and layer_types:
            return len(layer_types)
        layers: int = v.require("num_hidden_layers")
        return layers

    def _schedule(self, n: int) -> list[tuple[str, int | None]]:
        """(kind, window) per layer: from the config's `layer_types`, else the family's rule."""
        v, t = self.v, self.t
        window = v.get("sliding_window") or None
        chunk = v.get("attention_chunk_size") or None
        names = v.get("layer_types")
        if names is not None and len(names) != n:
            raise v.fail("layer_types", f"has {len(names)} entries for {n} layers")
        if names is None:
            kinds = SCHEDULES[t["schedule"]](v, t, n, window)
        else:
            kinds = [self._layer_kind(name) for name in names]
        if t["schedule"] in ("qwen2", "qwen2_moe") and not v.get("use_sliding_window"):
            window = None  # Qwen2Config: sliding_window only counts with use_sliding_window
        out: list[tuple[str, int | None]] = []
        for kind in kinds:
            if kind == "sliding":
                out.append(("sliding", window) if window else ("full", None))
            elif kind == "chunked":
                out.append(("chunked", chunk) if chunk else ("full", None))
            else:
                out.append((kind, None))
        return out

    def _layer_kind(self, name: str) -> str:
        kinds = self.t["layer_kinds"]
        if name not in kinds:
            raise self.v.fail(
                "layer_types",
                f"names layer type {name!r}, which gpuplan does not model for"
                f" {self.family.name if self.family.name != 'base' else 'an unknown family'}"
                f" (known: {', '.join(sorted(kinds))})",
            )
        return str(kinds[name])

    def _layer(self, kind: str, window: int | None, moe: bool) -> LayerSpec:
        """One layer's spec; layers of one kind share one object (grouping them by kind then
        compares by identity)."""
        key = (kind, window, moe)
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = self._new_layer(kind, window, moe)
        return spec

    def _new_layer(self, kind: str, window: int | None, moe: bool) -> LayerSpec:
        block_ffn = self.family.name not in _MIXER_ONLY_FAMILIES
        if kind in ("full", "sliding", "chunked"):
            return LayerSpec(window, moe, "attention", ffn=block_ffn)
        if kind == "cross":
            return LayerSpec(None, moe, "cross_attention", ffn=block_ffn)
        if kind == "moe_only":
            return LayerSpec(None, True, "none")
        if kind == "mlp_only":
            return LayerSpec(None, False, "none")
        return LayerSpec(None, moe, kind, ffn=block_ffn)

    def _check_mixers(
        self,
        layers: tuple[LayerSpec, ...],
        mamba: MambaSpec | None,
        linear: LinearAttentionSpec | None,
        short: ShortConvSpec | None,
    ) -> None:
        """Every layer's mixer has its shape (a family must declare the mixers it uses)."""
        for spec in layers:
            missing = (
                (spec.mixer in ("mamba", "hybrid") and mamba is None)
                or (spec.mixer in ("gated_delta", "lightning") and linear is None)
                or (spec.mixer == "short_conv" and short is None)
                or (
                    spec.mixer in ("gated_delta", "lightning")
                    and linear
                    and linear.kind != spec.mixer
                )
            )
            if missing:
                raise self.v.fail(
                    "layer_types",
                    f"has {spec.mixer} layers, which the {self.family.name} family does not model",
                )
