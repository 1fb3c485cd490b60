"""`gpuplan.inspect`: where a model came from and what it holds, before any bill.

The source that answered (catalog, local path, Hugging Face cache, Hub) and what was tried
first; the family and the assumptions made; parameters by kind (architecture math); the
checkpoint's headers (bytes by dtype, parameters by kind) and their agreement with the
architecture; the quantisation; the context limit.
"""

from __future__ import annotations

from typing import Any

from gpuplan.api.common import ModelRef, resolve, resolve_kv, resolve_weight_format
from gpuplan.engine.checkpoint import Agreement, agreement
from gpuplan.engine.frozen import record
from gpuplan.engine.kv_cache import kv_cache_bytes_per_token
from gpuplan.engine.params import ParamCounts, count_params
from gpuplan.engine.weights import WeightFormat, weights_bytes

INSPECT_SCHEMA_VERSION = "gpuplan.inspect/1"


@record
class ModelReport:
    """What `gpuplan inspect MODEL` shows."""

    ref: ModelRef
    counts: ParamCounts
    weights: WeightFormat
    architecture_weight_bytes: int
    kv_bytes_per_token: int
    agreement: Agreement | None

    def to_dict(self) -> dict[str, Any]:
        arch, src = self.ref.arch, self.ref.source
        ckpt = self.ref.stored
        q = arch.quantization
        data: dict[str, Any] = {
            "schema": INSPECT_SCHEMA_VERSION,
            "model": self.ref.model_id,
            "hf_id": self.ref.hf_id,
            "source": None
            if src is None
            else {
                "kind": src.kind,
                "location": src.location,
                "repo_id": src.repo_id,
                "revision": src.revision,
                "tried": list(src.tried),
                "describe": src.describe(),
            },
            "family": {
                "model_type": arch.model_type,
                "attention": arch.attention.kind,
                "layers": arch.num_layers,
                "hidden_size": arch.hidden_size,
                "heads": arch.attention.num_heads,
                "kv_heads": arch.attention.num_kv_heads,
                "head_dim": arch.attention.head_dim,
                "experts": arch.moe.num_experts if arch.moe else 0,
                "experts_per_token": arch.moe.experts_per_token if arch.moe else 0,
                "sliding_window_layers": arch.num_sliding_layers,
                "tie_word_embeddings": arch.tie_word_embeddings,
                "torch_dtype": arch.torch_dtype,
                "assumptions": list(arch.notes) + list(self.weights.notes),
            },
            "params_total": self.counts.total,
            "params_active": self.counts.active,
            "params_by_kind": dict(self.counts.by_kind),
            "quantization": None
            if q is None
            else {
                "method": q.method,
                "layout": q.precision,
                "unquantized": list(self.weights.unquantized),
                "modules": [n for n in self.weights.notes if n not in q.notes],
                "source": q.source,
                "notes": list(q.notes),
            },
            "weights_format": self.weights.describe(),
            "architecture_weight_bytes": self.architecture_weight_bytes,
            "context_limit": arch.max_position_embeddings,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "headers": None,
        }
        if ckpt is not None:
            data["headers"] = {
                "format": ckpt.format,
                "files": ckpt.files,
                "tensors": len(ckpt.tensors),
                "total_bytes": ckpt.total_bytes,
                "loaded_bytes": ckpt.loaded_bytes(arch.num_layers),
                "bytes_by_dtype": dict(ckpt.bytes_by_dtype),
                "bytes_by_kind": dict(ckpt.bytes_by_kind),
                "params_by_kind": dict(ckpt.params_by_kind),
                "params_total": ckpt.params_total,
                "agreement": None if self.agreement is None else self.agreement.to_dict(),
            }
        if src is not None and src.gguf is not None:
            data["gguf"] = {
                k: v
                for k, v in src.gguf.items()
                if isinstance(v, str | int | float | bool) and not k.startswith("tokenizer.")
            }
        return data


def inspect(model: str | dict[str, Any], revision: str | None = None) -> ModelReport:
    """Resolve `model` and report its source, family, parameters, headers and quantisation."""
    ref = resolve(model, revision)
    arch = ref.arch
    counts = count_params(arch)
    fmt = resolve_weight_format(arch, None, ref.stored)
    math = weights_bytes(counts, fmt.architecture_only())
    kv = kv_cache_bytes_per_token(arch, resolve_kv(fmt, None))
    agree = None
    if ref.stored is not None:
        agree = agreement(ref.stored, dict(counts.by_kind), arch)
    return ModelReport(ref, counts, fmt, math, kv, agree)
