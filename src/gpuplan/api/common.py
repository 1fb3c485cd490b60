"""Turning what a user typed (names, sizes) into engine inputs, shared by every API call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.catalog import get_gpu, get_precision, load_architecture
from gpuplan.catalog.models import resolve_source, source_architecture
from gpuplan.catalog.precisions import torch_dtype_precision
from gpuplan.catalog.sources import ModelSource
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.precision import Precision
from gpuplan.engine.quantization import QuantizationSpec
from gpuplan.engine.weights import WeightFormat, as_stored
from gpuplan.errors import GpuplanError
from gpuplan.units import parse_bytes

if TYPE_CHECKING:
    from gpuplan.engine.checkpoint import Checkpoint

MEMORY_BASES = ("driver", "marketed")


def resolve_gpu(gpu: str | GpuSpec, gpu_memory: str | int | None = None) -> GpuSpec:
    """The GPU, measured against `gpu_memory`: a size ("80GB"), or a basis naming one of the
    catalog's two figures for this GPU: "driver" (what nvidia-smi / rocm-smi reports, the
    default) or "marketed" (the vendor's round figure, e.g. 80 GB for an H100, as the lesson
    counts). A basis follows the GPU: "marketed" on an H200 is 141 GB."""
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    if isinstance(gpu_memory, str) and gpu_memory.strip().lower() in MEMORY_BASES:
        if gpu_memory.strip().lower() == "marketed":
            return spec.with_memory(spec.marketed_bytes)
        return spec
    if gpu_memory is not None:
        spec = spec.with_memory(
            parse_bytes(gpu_memory) if isinstance(gpu_memory, str) else int(gpu_memory)
        )
    return spec


def resolve_weight_format(
    arch: Architecture, dtype: str | None, stored: Checkpoint | None = None
) -> WeightFormat:
    """The weight format: the one asked for, else the checkpoint's quantisation, else its dtype.

    Plain dtypes (fp32, bf16, fp8, int4) apply to every parameter, as in the lesson; real
    formats (gptq, awq, nf4, mxfp4, ...) pack the linear weights and keep the rest at 16-bit.
    A checkpoint's own `quantization_config` keeps the modules it lists as unconverted.
    `stored` (the checkpoint's headers) gives the exact bytes when the weights are served as
    stored: the checkpoint's own format, not a --dtype that converts them.
    """
    base = torch_dtype_precision(arch.torch_dtype)
    if base.id == "fp32":
        base = get_precision("bf16")  # engines serve fp32 checkpoints in 16-bit
    if dtype is None or dtype == "auto":
        if arch.quantization is not None:
            return quantized_format(arch.quantization, base, stored)
        return WeightFormat(base, base, stored=as_stored(stored, base))
    return WeightFormat(get_precision(dtype), base)


def quantized_format(
    q: QuantizationSpec, base: Precision, stored: Checkpoint | None
) -> WeightFormat:
    """A quantised checkpoint's format: its layout (derived, or from the precision catalog)."""
    layout = q.layout or get_precision(q.precision)
    return WeightFormat(layout, base, q.unquantized, q.kind_precisions, q.notes, stored)


def resolve_kv(weights: WeightFormat, kv_dtype: str | None) -> Precision:
    if kv_dtype is None or kv_dtype == "auto":
        p = weights.precision
        return p if (p.kv and p.scope == "all" and p.bits >= 8) else weights.base
    return get_precision(kv_dtype, for_kv=True)


def model_summaries() -> list[dict[str, Any]]:
    """One row per catalog model: ids, exact total and active parameters, attention shape."""
    from gpuplan.catalog import list_models
    from gpuplan.engine.params import count_params

    rows: list[dict[str, Any]] = []
    for entry in list_models():
        arch = load_architecture(entry.id)
        counts = count_params(arch)
        rows.append(
            {
                "id": entry.id,
                "hf_id": entry.hf_id,
                "model_type": arch.model_type,
                "params_total": counts.total,
                "params_active": counts.active,
                "layers": arch.num_layers,
                "attention": arch.attention.kind,
                "heads": arch.attention.num_heads,
                "kv_heads": arch.attention.num_kv_heads,
                "max_context": arch.max_position_embeddings or None,
                "quantization": arch.quantization.precision if arch.quantization else None,
            }
        )
    return rows


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise GpuplanError(f"{name} must be a positive whole number, got {value!r}")


def _bytes(value: str | int) -> int:
    if isinstance(value, str):
        return parse_bytes(value, allow_zero=True)
    if value < 0:
        raise GpuplanError(f"size must not be negative, got {value}")
    return int(value)


@dataclass(frozen=True)
class ModelRef:
    """A model as the API resolved it: its architecture, name, HF id and source."""

    arch: Architecture
    model_id: str
    hf_id: str | None
    source: ModelSource | None = None

    @property
    def stored(self) -> Checkpoint | None:
        return self.source.checkpoint if self.source is not None else None


def resolve(
    model: str | dict[str, Any] | Architecture, revision: str | None = None, name: str | None = None
) -> ModelRef:
    """Resolve what the user passed: an Architecture, a config dict, or any model name
    (catalog, local path, HF cache, Hub: catalog/models.py)."""
    if isinstance(model, Architecture):
        return ModelRef(model, model.name, None)
    if isinstance(model, dict):
        arch = load_architecture(model, name)
        return ModelRef(arch, arch.name, None)
    src = resolve_source(model, revision)
    return ModelRef(source_architecture(src, name), name or src.name, src.hf_id, src)


def _model(model: str | dict[str, Any] | Architecture) -> tuple[Architecture, str, str | None]:
    ref = resolve(model)
    return ref.arch, ref.model_id, ref.hf_id


def model_dict(arch: Architecture, model_id: str, hf_id: str | None) -> dict[str, Any]:
    """The `model` block every plan's JSON opens with (docs/json.md)."""
    a = arch.attention
    return {
        "id": model_id,
        "hf_id": hf_id,
        "model_type": arch.model_type,
        "layers": arch.num_layers,
        "hidden_size": arch.hidden_size,
        "attention": a.kind,
        "heads": a.num_heads,
        "kv_heads": a.num_kv_heads,
        "head_dim": a.head_dim,
        "experts": arch.moe.num_experts if arch.moe else 0,
        "experts_per_token": arch.moe.experts_per_token if arch.moe else 0,
        "max_context": arch.max_position_embeddings or None,
    }


def gpu_dict(gpu: GpuSpec) -> dict[str, Any]:
    """The `gpu` block of a plan's JSON: the GPU and which memory figure the bill used."""
    return {
        "id": gpu.id,
        "name": gpu.name,
        "memory_bytes": gpu.memory_bytes,
        "memory_basis": gpu.memory_basis,
        "marketed_bytes": gpu.marketed_bytes,
        "driver_total_bytes": gpu.driver_total_bytes,
    }


class PlanHeadline:
    """The figures every plan shows first, read off its per-GPU bill (`self.bill`)."""

    bill: Any
    search: tuple[Any, ...]

    def why_this_many(self) -> list[str]:
        """One line per GPU count below the answer, saying why it was not enough."""
        return [
            f"{a.gpus} GPU{'s' if a.gpus > 1 else ''}: {a.reason}"
            for a in self.search
            if not a.fits
        ]

    @property
    def fits(self) -> bool:
        return bool(self.bill.fits)

    @property
    def gpus(self) -> int:
        return int(self.bill.gpus)

    @property
    def per_gpu_total_bytes(self) -> int:
        return int(self.bill.per_gpu_total_bytes)

    @property
    def budget_bytes(self) -> int:
        return int(self.bill.budget_bytes)

    @property
    def items(self) -> tuple[Any, ...]:
        return tuple(self.bill.items)

    @property
    def params_total(self) -> int:
        return int(self.bill.params.total)

    def _repr_html_(self) -> str:
        """Jupyter: the first line of the repr, then the bill as a table."""
        import html

        from gpuplan.units import format_bytes

        title = html.escape(repr(self).splitlines()[0])
        rows = "".join(
            f"<tr><td>{html.escape(i.label)}</td><td style='text-align:right'>{format_bytes(i.bytes)}</td>"
            f"<td><code>{html.escape(i.explain())}</code></td></tr>"
            for i in self.items
        )
        total = (
            f"<tr><td><b>total</b></td><td style='text-align:right'><b>{format_bytes(self.per_gpu_total_bytes)}"
            f"</b></td><td>of {format_bytes(self.budget_bytes)} budget</td></tr>"
        )
        return f"<div><b>{title}</b><table>{rows}{total}</table></div>"
