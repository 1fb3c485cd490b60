"""Turning what a user typed (names, sizes) into engine inputs, shared by every API call."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpuplan.catalog import get_gpu, get_precision, list_models, load_architecture
from gpuplan.catalog.gpus import gpu_record, list_gpus
from gpuplan.catalog.models import resolve_source, source_architecture
from gpuplan.catalog.precisions import list_precisions, precision_aliases, torch_dtype_precision
from gpuplan.catalog.sources import ModelSource
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.params import count_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.weights import WeightFormat, as_stored
from gpuplan.errors import GpuplanError
from gpuplan.units import MAX_BYTES, format_bytes, parse_bytes, shown

if TYPE_CHECKING:
    from gpuplan.engine.checkpoint import Checkpoint
    from gpuplan.engine.quantization import QuantizationSpec

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
        spec = spec.with_memory(size_bytes(gpu_memory))
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
            return quantized_format(arch, arch.quantization, base, stored)
        return WeightFormat(base, base, stored=as_stored(stored, base))
    return WeightFormat(get_precision(dtype), base)


def quantized_format(
    arch: Architecture, q: QuantizationSpec, base: Precision, stored: Checkpoint | None
) -> WeightFormat:
    """A quantised checkpoint's format: its layout (derived, or from the precision catalog),
    with each linear module's precision resolved from the config's rules
    (engine/module_plan.py)."""
    # the one gpuplan import inside a function in api/: engine/module_plan.py loads dataclasses
    # and inspect (with tokenize, dis), a third of a serving answer's cold start, and only a
    # quantised model needs it (tests/test_cli_fast.py, README "no module plan unless quantised")
    from gpuplan.engine.module_plan import planned_format

    layout = q.layout or get_precision(q.precision)
    return planned_format(arch, q, layout, base, stored)


def resolve_kv(weights: WeightFormat, kv_dtype: str | None) -> Precision:
    """The KV cache's format: `kv_dtype` when given, else the model's compute dtype (bf16/fp16,
    fp32 for --dtype fp32). A quantised weight format (fp8, int8, 4-bit) never changes the KV
    cache: an 8-bit KV cache is asked for with --kv-dtype fp8, as in vLLM, whose
    --kv-cache-dtype "auto" keeps the model dtype whatever --quantization says
    (vllm/config/cache.py: CacheDType, "auto" = model dtype)."""
    if kv_dtype is None or kv_dtype == "auto":
        p = weights.precision
        return p if (p.kv and p.scope == "all" and p.bits >= 16) else weights.base
    return get_precision(kv_dtype, for_kv=True)


def model_summaries() -> list[dict[str, Any]]:
    """One row per catalog model: ids, exact total and active parameters, attention shape."""
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


def gpu_summaries() -> list[dict[str, Any]]:
    """One row per catalog GPU as written (notes and source keys included), with the memory a
    bill measures against and its basis (driver-reported or marketed)."""
    return [
        dict(gpu_record(g.id), memory_bytes=g.memory_bytes, memory_basis=g.memory_basis)
        for g in list_gpus()
    ]


def precision_summaries() -> list[dict[str, Any]]:
    """One row per catalog precision (`gpuplan precisions`): its names, the bytes per parameter
    derived from its fields, what it covers (every parameter, or linear weights only), whether
    it can hold a KV cache, and its source."""
    return [
        {
            "id": p.id,
            "aliases": precision_aliases(p.id),
            "bits": p.bits,
            "bytes_per_param": float(p.bytes_per_param),
            "scope": p.scope,
            "kv": p.kv,
            "source": p.source,
        }
        for p in list_precisions()
    ]


# Generous bounds on the numbers a user gives: far above any real deployment, low enough that
# the arithmetic stays exact in floats and every search stays short.
MAX_TOKENS = 10**9  # context, seq, max-model-len: 1,000× the longest context served today
MAX_SEQUENCES = 10**7  # users, micro-batch, grad-accum, max-num-seqs
MAX_GPUS = 2**20  # gpus and each parallel degree
MAX_COUNT = 10**9  # anything else counted
MAX_CAPACITY_FACTOR = 1024.0  # MoE capacity factor: > experts ÷ top-k already means no drops
LIMITS = {
    "context": MAX_TOKENS,
    "seq": MAX_TOKENS,
    "max_model_len": MAX_TOKENS,
    "max_num_batched_tokens": MAX_TOKENS,
    "global-batch-tokens": MAX_TOKENS * MAX_SEQUENCES,
    "users": MAX_SEQUENCES,
    "micro-batch": MAX_SEQUENCES,
    "grad-accum": MAX_SEQUENCES,
    "max_num_seqs": MAX_SEQUENCES,
    **dict.fromkeys(
        ("max_total_tokens", "chunked_prefill_size", "max_num_tokens", "block_size"), MAX_TOKENS
    ),
    **dict.fromkeys(("page_size", "tokens_per_block"), MAX_TOKENS),
    **dict.fromkeys(("max_batch_size", "cuda_graph_max_bs"), MAX_SEQUENCES),
    "kv_cache_memory_bytes": MAX_BYTES,
    "lora-rank": 2**16,
    **dict.fromkeys(("gpus", "tp", "pp", "dp", "cp", "ep", "top"), MAX_GPUS),
}


def whole_number(name: str, value: object, lowest: int = 1, highest: int | None = None) -> int:
    """`value` as a whole number in [lowest, highest (default LIMITS[name])], or a one-line
    GpuplanError naming it."""
    highest = LIMITS.get(name, MAX_COUNT) if highest is None else highest
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if number is None or not lowest <= number <= highest:
        raise GpuplanError(
            f"{name} must be a whole number from {lowest} to {highest:,}, got {shown(value)}"
        )
    return number


def _positive(name: str, value: object) -> None:
    if value is not None:
        whole_number(name, value)


def real_number(name: str, value: object, highest: float = 1.0, lowest: float = 1e-9) -> float:
    """`value` as a finite number in [lowest, highest], or a one-line GpuplanError. The default
    `lowest` keeps fractions positive and their reciprocals (step time ∝ 1 / MFU) finite."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if abs(value) < 1e308 else math.inf
    elif isinstance(value, str) and len(value) <= 64:
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not (math.isfinite(number) and 0 < number <= highest):
        raise GpuplanError(f"{name} must be in (0, {highest:g}], got {shown(value)}")
    if number < lowest:
        raise GpuplanError(f"{name} {shown(value)} is too small: the least is {lowest:g}")
    return number


def usable_memory(gpu: GpuSpec, fraction: object, name: str = "headroom") -> float:
    """A fraction of the GPU's memory, refused when it rounds to 0 bytes."""
    number = real_number(name, fraction)
    if int(gpu.memory_bytes * number) < 1:
        raise GpuplanError(f"{name} {shown(fraction)} of {gpu.name} rounds to 0 bytes")
    return number


def size_bytes(value: str | int | float, allow_zero: bool = False) -> int:
    """A size as the API takes it: a string with units (bare numbers in GB) or a number of bytes."""
    return parse_bytes(value, "GB" if isinstance(value, str) else "B", allow_zero)


def _bytes(value: str | int) -> int:
    return size_bytes(value, allow_zero=True)


@record
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
        "family": arch.family,
        "layers": arch.num_layers,
        "attention_layers": arch.num_attention_layers,
        "state_layers": arch.num_state_layers,
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
