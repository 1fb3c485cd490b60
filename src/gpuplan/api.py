"""The Python API: the same answers as the CLI, in three lines from a notebook.

>>> import gpuplan
>>> plan = gpuplan.serve("llama-3.1-8b", gpu="h100", context=4096)
>>> plan.fits, plan.per_gpu_total_bytes
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplan.catalog import get_gpu, get_precision, load_architecture
from gpuplan.catalog.models import resolve_model
from gpuplan.catalog.precisions import torch_dtype_precision
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.cost import DEFAULT_MFU, DEFAULT_NETWORK_BYTES_PER_S
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.lora import LoraSpec, default_targets
from gpuplan.engine.precision import Precision
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.serving import (
    DEFAULT_CUDA_CONTEXT_BYTES,
    DEFAULT_HEADROOM,
    DEFAULT_WORKSPACE_BYTES,
    ServingBill,
    ServingSetup,
    serving_bill,
)
from gpuplan.engine.sharding import Layout, fsdp_layout
from gpuplan.engine.training import TrainingBill, TrainingSetup, training_bill
from gpuplan.engine.weights import WeightFormat
from gpuplan.errors import GpuplanError
from gpuplan.planner.serving import Attempt, fewest_gpus, layout_for_count
from gpuplan.planner.training import TrainAttempt
from gpuplan.planner.training import fewest_gpus as fewest_train_gpus
from gpuplan.planner.training import lower_bound as train_lower_bound
from gpuplan.units import format_bytes, format_count, parse_bytes

SCHEMA_VERSION = "gpuplan.serve/1"


def resolve_gpu(gpu: str | GpuSpec, gpu_memory: str | int | None = None) -> GpuSpec:
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    if gpu_memory is not None:
        spec = spec.with_memory(
            parse_bytes(gpu_memory) if isinstance(gpu_memory, str) else int(gpu_memory)
        )
    return spec


def resolve_weight_format(arch: Architecture, dtype: str | None) -> WeightFormat:
    """The weight format: the one asked for, else the checkpoint's quantisation, else its dtype.

    Plain dtypes (fp32, bf16, fp8, int4) apply to every parameter, as in the lesson; real
    formats (gptq, awq, nf4, mxfp4, ...) pack the linear weights and keep the rest at 16-bit.
    A checkpoint's own `quantization_config` keeps the modules it lists as unconverted.
    """
    base = torch_dtype_precision(arch.torch_dtype)
    if base.id == "fp32":
        base = get_precision("bf16")  # engines serve fp32 checkpoints in 16-bit
    if dtype is None or dtype == "auto":
        if arch.quantization is not None:
            q = arch.quantization
            return WeightFormat(get_precision(q.precision), base, q.unquantized)
        return WeightFormat(base, base)
    return WeightFormat(get_precision(dtype), base)


def resolve_kv(weights: WeightFormat, kv_dtype: str | None) -> Precision:
    if kv_dtype is None or kv_dtype == "auto":
        p = weights.precision
        return p if (p.kv and p.scope == "all" and p.bits >= 8) else weights.base
    return get_precision(kv_dtype, for_kv=True)


@dataclass(frozen=True)
class ServingPlan:
    """A serving answer: the per-GPU bill, the model and GPU it is for, and how N was chosen."""

    bill: ServingBill
    model_id: str
    hf_id: str | None
    search: tuple[Attempt, ...] = field(default=())

    # --- the headline figures, as attributes -------------------------------------------
    @property
    def fits(self) -> bool:
        return self.bill.fits

    @property
    def gpus(self) -> int:
        return self.bill.gpus

    @property
    def tp(self) -> int:
        return self.bill.setup.tp

    @property
    def pp(self) -> int:
        return self.bill.setup.pp

    @property
    def per_gpu_total_bytes(self) -> int:
        return self.bill.per_gpu_total_bytes

    @property
    def budget_bytes(self) -> int:
        return self.bill.budget_bytes

    @property
    def items(self) -> tuple[Any, ...]:
        return self.bill.items

    @property
    def params_total(self) -> int:
        return self.bill.params.total

    @property
    def params_active(self) -> int:
        return self.bill.params.active

    @property
    def weights_bytes(self) -> int:
        return self.bill.weights_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.bill.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        return self.bill.kv_capacity_tokens

    @property
    def max_concurrent_sequences(self) -> int:
        return self.bill.max_concurrent_sequences

    def why_this_many(self) -> list[str]:
        """One line per GPU count below the answer, saying why it was not enough."""
        return [
            f"{a.gpus} GPU{'s' if a.gpus > 1 else ''}: {a.reason}"
            for a in self.search
            if not a.fits
        ]

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        """The stable JSON schema documented in docs/json.md."""
        b, s = self.bill, self.bill.setup
        a = s.arch
        return {
            "schema": SCHEMA_VERSION,
            "mode": "serve",
            "model": {
                "id": self.model_id,
                "hf_id": self.hf_id,
                "model_type": a.model_type,
                "layers": a.num_layers,
                "hidden_size": a.hidden_size,
                "attention": a.attention.kind,
                "heads": a.attention.num_heads,
                "kv_heads": a.attention.num_kv_heads,
                "head_dim": a.attention.head_dim,
                "experts": a.moe.num_experts if a.moe else 0,
                "experts_per_token": a.moe.experts_per_token if a.moe else 0,
                "sliding_window_layers": a.num_sliding_layers,
            },
            "params_total": b.params.total,
            "params_active": b.params.active,
            "params_by_kind": dict(b.params.by_kind),
            "dtype": s.weights.precision.id,
            "weights_format": s.weights.describe(),
            "kv_dtype": s.kv.id,
            "weights_bytes": b.weights_bytes,
            "kv_bytes_per_token": b.kv_bytes_per_token,
            "kv_bytes_per_sequence": b.kv_bytes_per_sequence,
            "gpu": {
                "id": s.gpu.id,
                "name": s.gpu.name,
                "memory_bytes": s.gpu.memory_bytes,
                "memory_basis": s.gpu.memory_basis,
                "marketed_bytes": s.gpu.marketed_bytes,
                "driver_total_bytes": s.gpu.driver_total_bytes,
            },
            "gpus": s.gpus,
            "tp": s.tp,
            "pp": s.pp,
            "context": s.context,
            "users": s.users,
            "headroom": s.headroom,
            "per_gpu": {
                "items": [item.to_dict(units) for item in b.items],
                "total_bytes": b.per_gpu_total_bytes,
            },
            "per_gpu_total_bytes": b.per_gpu_total_bytes,
            "budget_bytes": b.budget_bytes,
            "fits": b.fits,
            "kv_capacity_tokens": b.kv_capacity_tokens,
            "max_concurrent_sequences": b.max_concurrent_sequences,
            "search": [attempt.to_dict() for attempt in self.search],
            "notes": list(b.notes),
            "units": units,
        }

    def __repr__(self) -> str:
        s = self.bill.setup
        verdict = "fits" if self.fits else "does NOT fit"
        lines = [
            f"ServingPlan({self.model_id} on {self.gpus} × {s.gpu.name}, tp={s.tp} pp={s.pp}: {verdict})",
        ]
        for item in self.items:
            lines.append(f"  {item.label:<14}{format_bytes(item.bytes):>12}   {item.explain()}")
        lines.append(
            f"  {'total':<14}{format_bytes(self.per_gpu_total_bytes):>12}   of {format_bytes(self.budget_bytes)} budget"
        )
        lines.append(
            f"  KV capacity {self.kv_capacity_tokens:,} tokens = {self.max_concurrent_sequences:,}"
            f" sequences of {s.context:,}"
        )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        s = self.bill.setup
        rows = "".join(
            f"<tr><td>{html.escape(i.label)}</td><td style='text-align:right'>{format_bytes(i.bytes)}</td>"
            f"<td><code>{html.escape(i.explain())}</code></td></tr>"
            for i in self.items
        )
        verdict = "fits" if self.fits else "does <b>not</b> fit"
        return (
            f"<div><b>{html.escape(self.model_id)}</b> ({format_count(self.params_total)} params) on "
            f"{self.gpus} × {html.escape(s.gpu.name)}, tp={s.tp} pp={s.pp}: {verdict}"
            f"<table>{rows}<tr><td><b>total</b></td><td style='text-align:right'><b>"
            f"{format_bytes(self.per_gpu_total_bytes)}</b></td><td>of {format_bytes(self.budget_bytes)} budget"
            f" ({s.headroom:.0%} of {format_bytes(s.gpu.memory_bytes)})</td></tr></table>"
            f"KV capacity: {self.kv_capacity_tokens:,} tokens, {self.max_concurrent_sequences:,} sequences"
            f" of {s.context:,} tokens</div>"
        )


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
                "quantization": arch.quantization.precision if arch.quantization else None,
            }
        )
    return rows


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise GpuplanError(f"{name} must be a positive whole number, got {value!r}")


def serve(
    model: str | dict[str, Any] | Architecture,
    gpu: str | GpuSpec = "h100",
    *,
    gpus: int | str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    context: int = 4096,
    users: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
    workspace: str | int | None = None,
    cuda_context: str | int | None = None,
) -> ServingPlan:
    """Size serving `model` on `gpu`: the per-GPU bill, whether it fits, and on how many GPUs.

    gpus: a count, "auto" (fewest that fit), or None: one GPU if it fits, else "auto".
    tp/pp: an explicit layout (then gpus = tp × pp). dtype: weight format (default: the
    checkpoint's). kv_dtype: KV-cache format (default: the weights' 16-bit or fp8 dtype).
    """
    for name, value in (("tp", tp), ("pp", pp), ("context", context), ("users", users)):
        _positive(name, value)
    if isinstance(gpus, int):
        _positive("gpus", gpus)
    hf_id: str | None = None
    if isinstance(model, Architecture):
        arch, model_id = model, model.name
    elif isinstance(model, dict):
        arch = load_architecture(model)
        model_id = arch.name
    else:
        _, model_id, entry = resolve_model(model)
        arch = load_architecture(model)
        hf_id = entry.hf_id if entry else None
    spec = resolve_gpu(gpu, gpu_memory)
    fmt = resolve_weight_format(arch, dtype)
    setup = ServingSetup(
        arch=arch,
        weights=fmt,
        kv=resolve_kv(fmt, kv_dtype),
        gpu=spec,
        tp=tp or 1,
        pp=pp or 1,
        context=int(context),
        users=int(users),
        headroom=float(headroom),
        workspace_bytes=DEFAULT_WORKSPACE_BYTES if workspace is None else _bytes(workspace),
        cuda_context_bytes=DEFAULT_CUDA_CONTEXT_BYTES
        if cuda_context is None
        else _bytes(cuda_context),
    )
    if tp is not None or pp is not None:
        if isinstance(gpus, int) and gpus != setup.tp * setup.pp:
            raise GpuplanError(f"--gpus {gpus} disagrees with tp={setup.tp} × pp={setup.pp}")
        return ServingPlan(serving_bill(setup), model_id, hf_id)
    if isinstance(gpus, int):
        return ServingPlan(serving_bill(layout_for_count(setup, gpus)), model_id, hf_id)
    if gpus not in (None, "auto"):
        raise GpuplanError(f"gpus must be a number or 'auto', got {gpus!r}")
    bill, attempts = fewest_gpus(setup)
    return ServingPlan(bill, model_id, hf_id, tuple(attempts))


def _bytes(value: str | int) -> int:
    if isinstance(value, str):
        return parse_bytes(value, allow_zero=True)
    if value < 0:
        raise GpuplanError(f"size must not be negative, got {value}")
    return int(value)


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------

TRAIN_SCHEMA_VERSION = "gpuplan.train/1"


@dataclass(frozen=True)
class TrainingPlan:
    """A training answer: the per-GPU bill, the host bill, the step's cost, and how N was chosen."""

    bill: TrainingBill
    model_id: str
    hf_id: str | None
    search: tuple[TrainAttempt, ...] = field(default=())
    lower_bound_gpus: int | None = None

    @property
    def fits(self) -> bool:
        return self.bill.fits

    @property
    def gpus(self) -> int:
        return self.bill.gpus

    @property
    def layout(self) -> Layout:
        return self.bill.setup.layout

    @property
    def per_gpu_total_bytes(self) -> int:
        return self.bill.per_gpu_total_bytes

    @property
    def budget_bytes(self) -> int:
        return self.bill.budget_bytes

    @property
    def items(self) -> tuple[Any, ...]:
        return self.bill.items

    @property
    def model_states_bytes(self) -> int:
        return self.bill.model_states_bytes

    @property
    def activations_bytes(self) -> int:
        return self.bill.activations_bytes

    @property
    def step_flops(self) -> float:
        return self.bill.flops.executed

    @property
    def comm_bytes_per_step(self) -> float:
        return self.bill.comm.total

    @property
    def tokens_per_second(self) -> float | None:
        return self.bill.time.tokens_per_second if self.bill.time else None

    @property
    def params_total(self) -> int:
        return self.bill.params.total

    def item(self, key: str) -> Any:
        return self.bill.item(key)

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        """The stable JSON schema documented in docs/json.md (train section)."""
        b, s = self.bill, self.bill.setup
        a, lo, r = s.arch, s.layout, s.recipe
        t = b.time
        return {
            "schema": TRAIN_SCHEMA_VERSION,
            "mode": "train",
            "model": {
                "id": self.model_id,
                "hf_id": self.hf_id,
                "model_type": a.model_type,
                "layers": a.num_layers,
                "hidden_size": a.hidden_size,
                "attention": a.attention.kind,
                "heads": a.attention.num_heads,
                "kv_heads": a.attention.num_kv_heads,
                "head_dim": a.attention.head_dim,
                "experts": a.moe.num_experts if a.moe else 0,
                "experts_per_token": a.moe.experts_per_token if a.moe else 0,
                "vocab_size": a.vocab_size,
            },
            "params_total": b.params.total,
            "params_active": b.params.active,
            "params_trainable": b.trainable_params,
            "recipe": {
                "id": r.id,
                "name": r.name,
                "bytes_per_param": float(r.bytes_per_param),
                "describe": r.describe(),
                "source": r.source,
            },
            "gpu": {
                "id": s.gpu.id,
                "name": s.gpu.name,
                "memory_bytes": s.gpu.memory_bytes,
                "memory_basis": s.gpu.memory_basis,
                "marketed_bytes": s.gpu.marketed_bytes,
                "driver_total_bytes": s.gpu.driver_total_bytes,
            },
            "gpus": lo.gpus,
            "layout": {
                "dp": lo.dp,
                "tp": lo.tp,
                "pp": lo.pp,
                "cp": lo.cp,
                "ep": lo.ep,
                "sp": lo.sp,
                "zero": lo.zero,
                "fsdp": lo.fsdp,
                "shard_degree": lo.shard_degree,
                "describe": lo.describe(),
            },
            "seq": s.seq,
            "micro_batch": s.micro_batch,
            "grad_accum": s.micro_batches,
            "tokens_per_step": s.tokens_per_step,
            "checkpointing": s.recompute,
            "attention_kernel": s.kernel,
            "lora": None
            if s.lora is None
            else {
                "rank": s.lora.rank,
                "targets": list(s.lora.targets),
                "qlora": s.lora.quantized,
                "base_format": s.base.describe() if s.base else None,
            },
            "offload": s.offload,
            "offload_activations": s.offload_activations,
            "headroom": s.headroom,
            "stage": b.stage.stage,
            "micro_batches_in_flight": b.in_flight,
            "per_gpu": {
                "items": [item.to_dict(units) for item in b.items],
                "total_bytes": b.per_gpu_total_bytes,
            },
            "per_gpu_total_bytes": b.per_gpu_total_bytes,
            "budget_bytes": b.budget_bytes,
            "fits": b.fits,
            "model_states_bytes": b.model_states_bytes,
            "activations_bytes": b.activations_bytes,
            "activation_bytes_per_layer": b.activation_bytes_per_layer,
            "host": {
                "items": [item.to_dict(units) for item in b.host_items],
                "per_gpu_bytes": b.host_bytes_per_gpu,
                "per_node_bytes": b.host_bytes_per_gpu * min(lo.gpus, s.gpu.gpus_per_node),
            },
            "step_flops": b.flops.executed,
            "model_flops": b.flops.model,
            "comm_bytes_per_step": b.comm.total,
            "comm_bytes_by_kind": b.comm.to_dict(),
            "mfu": s.mfu,
            "step_time_s": t.step_s if t else None,
            "compute_time_s": t.compute_s if t else None,
            "exposed_comm_time_s": t.exposed_comm_s if t else None,
            "pipeline_bubble": t.bubble if t else None,
            "tokens_per_second": t.tokens_per_second if t else None,
            "lower_bound_gpus": self.lower_bound_gpus,
            "search": [attempt.to_dict() for attempt in self.search],
            "notes": list(b.notes),
            "units": units,
        }

    def why_this_many(self) -> list[str]:
        return [
            f"{a.gpus} GPU{'s' if a.gpus > 1 else ''}: {a.reason}"
            for a in self.search
            if not a.fits
        ]

    def __repr__(self) -> str:
        s = self.bill.setup
        verdict = "fits" if self.fits else "does NOT fit"
        lines = [
            f"TrainingPlan({self.model_id} on {self.gpus} × {s.gpu.name}, {s.layout.describe()},"
            f" {s.recipe.id}: {verdict})"
        ]
        for item in self.items:
            lines.append(f"  {item.label:<34}{format_bytes(item.bytes):>12}   {item.explain()}")
        lines.append(
            f"  {'total':<34}{format_bytes(self.per_gpu_total_bytes):>12}   of"
            f" {format_bytes(self.budget_bytes)} budget"
        )
        return "\n".join(lines)


def _model(model: str | dict[str, Any] | Architecture) -> tuple[Architecture, str, str | None]:
    if isinstance(model, Architecture):
        return model, model.name, None
    if isinstance(model, dict):
        arch = load_architecture(model)
        return arch, arch.name, None
    _, model_id, entry = resolve_model(model)
    return load_architecture(model), model_id, entry.hf_id if entry else None


def train(
    model: str | dict[str, Any] | Architecture,
    gpu: str | GpuSpec = "h100",
    *,
    gpus: int | str | None = None,
    zero: int | None = None,
    fsdp: str | bool | None = None,
    dp: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    recipe: str | TrainingRecipe = "adamw-bf16",
    seq: int = 4096,
    micro_batch: int = 1,
    grad_accum: int | None = None,
    checkpointing: str | bool = "none",
    attention: str = "flash",
    method: str | None = None,
    optimizer: str | None = None,
    lora_rank: int | None = None,
    lora_targets: tuple[str, ...] | list[str] | str | None = None,
    qlora: bool = False,
    offload: str | None = None,
    offload_activations: bool = False,
    capacity_factor: float = 1.0,
    headroom: float = DEFAULT_HEADROOM,
    gpu_memory: str | int | None = None,
    cuda_context: str | int | None = None,
    mfu: float = DEFAULT_MFU,
    network_bandwidth: str | float | None = None,
) -> TrainingPlan:
    """Size training (or LoRA/QLoRA fine-tuning) `model` on `gpu`: the per-GPU bill, on how many.

    gpus: a count (dp = gpus ÷ (tp × pp × cp)), "auto" (fewest that fit, from the lesson's lower
    bound), or None: "auto". zero: ZeRO stage 0-3; fsdp: an FSDP sharding strategy instead.
    recipe: a training recipe id (see `gpuplan.catalog.recipes`). grad_accum: micro-batches per
    step (default: pp, enough to fill the pipeline). checkpointing: none, selective or full
    (True = full). method: "full", "lora" (rank 16 unless given) or "qlora"; optimizer: a recipe
    alias (adamw, adam8bit, adafactor, sgd) used when `recipe` is left at its default; dp: the
    data-parallel degree (then gpus = dp × tp × pp × cp); fsdp=True means FULL_SHARD.
    """
    from gpuplan.catalog.recipes import get_recipe

    if isinstance(checkpointing, bool):
        checkpointing = "full" if checkpointing else "none"
    if isinstance(fsdp, bool):
        fsdp = "full_shard" if fsdp else None
    if method is not None:
        if method not in ("full", "lora", "qlora"):
            raise GpuplanError(f"method must be full, lora or qlora, got {method!r}")
        if method == "qlora":
            qlora = True
        elif method == "lora" and not lora_rank:
            lora_rank = 16
    if optimizer is not None and recipe == "adamw-bf16":
        recipe = optimizer
    if dp is not None:
        _positive("dp", dp)
        replica = (tp or 1) * (pp or 1) * int(cp)
        if isinstance(gpus, int) and gpus != dp * replica:
            raise GpuplanError(
                f"gpus={gpus} disagrees with dp={dp} × tp × pp × cp = {dp * replica}"
            )
        gpus = dp * replica
    for name, value in (
        ("tp", tp),
        ("pp", pp),
        ("cp", cp),
        ("ep", ep),
        ("seq", seq),
        ("micro_batch", micro_batch),
        ("grad_accum", grad_accum),
        ("lora_rank", lora_rank),
    ):
        _positive(name.replace("_", "-"), value)
    if isinstance(gpus, int):
        _positive("gpus", gpus)
    if zero is not None and fsdp is not None:
        raise GpuplanError("give either a ZeRO stage or an FSDP mode, not both")
    if zero is not None and (isinstance(zero, bool) or zero not in (0, 1, 2, 3)):
        raise GpuplanError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero!r}")
    arch, model_id, hf_id = _model(model)
    spec = resolve_gpu(gpu, gpu_memory)
    rec = recipe if isinstance(recipe, TrainingRecipe) else get_recipe(recipe)
    hybrid = False
    stage = zero or 0
    if fsdp is not None:
        stage, hybrid = fsdp_layout(fsdp)
    lora = None
    base = None
    if qlora and not lora_rank:
        lora_rank = 64  # the QLoRA paper's r = 64 (Dettmers et al. 2023, §4)
    if lora_rank:
        if isinstance(lora_targets, str):
            lora_targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip())
        if lora_targets:
            targets = tuple(lora_targets)
        else:  # QLoRA adapts every linear layer (Dettmers et al. 2023 §4); LoRA the attention
            targets = ("all-linear",) if qlora else default_targets(arch)
        lora = LoraSpec(int(lora_rank), _dedupe(targets), bool(qlora))
        bf16 = get_precision("bf16")
        base = WeightFormat(get_precision("nf4-dq"), bf16) if qlora else WeightFormat(bf16, bf16)
    layout = Layout(
        dp=1,
        tp=tp or 1,
        pp=pp or 1,
        cp=int(cp),
        ep=int(ep),
        sp=bool(sp),
        zero=stage,
        fsdp=fsdp.lower().replace("-", "_") if fsdp else None,
        hybrid=hybrid,
        gpus_per_node=spec.gpus_per_node,
    )
    setup = TrainingSetup(
        arch=arch,
        recipe=rec,
        gpu=spec,
        layout=layout,
        seq=int(seq),
        micro_batch=int(micro_batch),
        grad_accum=int(grad_accum) if grad_accum else 0,
        recompute=checkpointing,
        kernel="flash" if attention == "sdpa" else attention,
        lora=lora,
        base=base,
        offload=offload or "none",
        offload_activations=bool(offload_activations),
        capacity_factor=float(capacity_factor),
        headroom=float(headroom),
        cuda_context_bytes=DEFAULT_CUDA_CONTEXT_BYTES
        if cuda_context is None
        else _bytes(cuda_context),
        mfu=float(mfu),
        network_bytes_per_s=DEFAULT_NETWORK_BYTES_PER_S
        if network_bandwidth is None
        else float(
            parse_bytes(network_bandwidth)
            if isinstance(network_bandwidth, str)
            else network_bandwidth
        ),
    )
    if isinstance(gpus, int):
        per_replica = layout.tp * layout.pp * layout.cp
        if gpus % per_replica:
            raise GpuplanError(f"--gpus {gpus} is not a multiple of tp × pp × cp = {per_replica}")
        setup = replace(setup, layout=replace(layout, dp=gpus // per_replica))
        return TrainingPlan(training_bill(setup), model_id, hf_id)
    if gpus not in (None, "auto"):
        raise GpuplanError(f"gpus must be a number or 'auto', got {gpus!r}")
    fixed = {name for name, value in (("tp", tp), ("pp", pp)) if value is not None}
    if zero is not None or fsdp is not None:
        fixed.add("zero")
    if offload == "params":
        fixed.add("zero")
        setup = replace(setup, layout=replace(setup.layout, zero=3))
    bill, attempts = fewest_train_gpus(setup, frozenset(fixed))
    return TrainingPlan(bill, model_id, hf_id, tuple(attempts), train_lower_bound(setup))


def _dedupe(targets: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(targets))


# Engine profiles: what vLLM / SGLang / TensorRT-LLM will do with a launch
# --------------------------------------------------------------------------------------

ENGINE_ARG_NAMES = {
    # the engine's own argument name -> EngineLaunch field
    "vllm": {
        "tensor_parallel_size": "tp",
        "pipeline_parallel_size": "pp",
        "data_parallel_size": "dp",
        "max_model_len": "max_model_len",
        "gpu_memory_utilization": "gpu_memory_utilization",
        "max_num_seqs": "max_num_seqs",
        "max_num_batched_tokens": "max_num_batched_tokens",
        "block_size": "block_size",
        "enforce_eager": "enforce_eager",
        "kv_cache_memory_bytes": "kv_cache_memory_bytes",
        "num_gpu_blocks_override": "num_gpu_blocks_override",
        "disable_hybrid_kv_cache_manager": "disable_hybrid_kv_cache_manager",
    },
    "sglang": {
        "tp_size": "tp",
        "pp_size": "pp",
        "dp_size": "dp",
        "context_length": "max_model_len",
        "mem_fraction_static": "mem_fraction_static",
        "max_total_tokens": "max_total_tokens",
        "page_size": "page_size",
        "chunked_prefill_size": "chunked_prefill_size",
        "cuda_graph_max_bs": "cuda_graph_max_bs",
    },
    "trtllm": {
        "tp_size": "tp",
        "pp_size": "pp",
        "max_seq_len": "max_model_len",
        "free_gpu_memory_fraction": "free_gpu_memory_fraction",
        "tokens_per_block": "tokens_per_block",
        "max_num_tokens": "max_num_tokens",
        "max_batch_size": "max_batch_size",
    },
}

_DTYPES = {
    "auto": None,
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
}
# --quantization values that name a method the checkpoint must already carry
_CHECKPOINT_METHODS = (
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "compressed-tensors",
    "compressed_tensors",
    "modelopt",
    "modelopt_fp4",
    "mxfp4",
    "marlin",
    "fbgemm_fp8",
)
# --quantization values that quantise a 16-bit checkpoint while loading
_ONLINE_METHODS = {"fp8": "fp8-tensor", "bitsandbytes": "nf4", "w8a8_fp8": "fp8-tensor"}


def engine_weight_format(
    arch: Architecture, dtype: str | None, quantization: str | None
) -> WeightFormat:
    """The weights as an engine loads them, from its --dtype and --quantization.

    --dtype sets the 16-bit (or fp32) base; a quantised checkpoint keeps its own format
    (--quantization naming its method is a no-op); --quantization fp8 / bitsandbytes on a
    16-bit checkpoint quantises the linear weights while loading (vLLM's online fp8:
    per-tensor scales, embeddings and LM head kept at the base)."""
    key = (dtype or "auto").lower()
    if key not in _DTYPES:
        raise GpuplanError(f"--dtype {dtype!r} is not one of auto, bfloat16, float16, float32")
    base_id = _DTYPES[key]
    checkpoint = resolve_weight_format(arch, None)
    base = get_precision(base_id) if base_id else checkpoint.base
    q = (quantization or "").lower().replace("-", "_") or None
    if arch.quantization is not None:
        return WeightFormat(checkpoint.precision, base, checkpoint.unquantized)
    if q is None:
        return WeightFormat(base, base)
    if q in _ONLINE_METHODS:
        return WeightFormat(get_precision(_ONLINE_METHODS[q]), base)
    if q.replace("_", "-") in _CHECKPOINT_METHODS or q in _CHECKPOINT_METHODS:
        raise GpuplanError(
            f"--quantization {quantization} needs a checkpoint quantised with it, but"
            f" {arch.name}'s config.json has no quantization_config"
        )
    raise GpuplanError(f"--quantization {quantization!r} is not a method gpuplan knows")


def engine_kv_precision(weights: WeightFormat, kv_cache_dtype: str | None) -> Precision:
    """KV dtype: 'auto' is the model's activation dtype (fp32 for --dtype float32)."""
    key = (kv_cache_dtype or "auto").lower()
    if key == "auto":
        return weights.base
    if key.startswith("fp8") or key == "fp8_ds_mla":
        return get_precision("fp8", for_kv=True)
    return get_precision(_DTYPES.get(key) or key, for_kv=True)


@dataclass(frozen=True)
class EnginePlan:
    """An engine-faithful serving answer: the engine's own bill for one launch."""

    bill: Any  # gpuplan.engine.profiles.EngineBill
    generic: ServingPlan  # the lesson's bill for the same layout (model facts, params)
    model_id: str
    hf_id: str | None
    ignored: tuple[str, ...] = ()

    @property
    def kv_capacity_tokens(self) -> int:
        return int(self.bill.kv_capacity_tokens)

    @property
    def max_concurrency(self) -> float:
        return float(self.bill.max_concurrency)

    @property
    def fits(self) -> bool:
        return bool(self.bill.fits)

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        """gpuplan.serve/1 with the engine's figures in place of the lesson's, plus `engine`."""
        b = self.bill
        data = self.generic.to_dict(units)
        items = [i.to_dict(units) for i in b.items]
        data.update(
            {
                "context": b.max_model_len,
                "users": 1,
                "headroom": round(b.budget_bytes / b.total_bytes, 4) if b.total_bytes else 0,
                "per_gpu": {"items": items, "total_bytes": sum(i.bytes for i in b.items)},
                "per_gpu_total_bytes": sum(i.bytes for i in b.items),
                "budget_bytes": b.budget_bytes,
                "fits": b.fits,
                "kv_capacity_tokens": b.kv_capacity_tokens,
                "max_concurrent_sequences": int(b.max_concurrency),
                "max_concurrency": round(b.max_concurrency, 2),
                "search": [],
                "notes": list(b.notes) + list(self.generic.bill.notes),
                "engine": {**b.to_dict(units), "ignored_flags": list(self.ignored)},
            }
        )
        return data


def engine_serve(
    model: str | dict[str, Any],
    gpu: str | GpuSpec = "h100",
    *,
    engine: str = "vllm",
    args: dict[str, Any] | None = None,
    gpu_memory: str | int | None = None,
    ignored: tuple[str, ...] = (),
    name: str | None = None,
) -> EnginePlan:
    """What `engine` will do when launched with `args` (its own argument names, as in
    `vllm serve --help` with underscores, or a "non-default args" log line)."""
    from gpuplan.engine.profiles import EngineLaunch, engine_bill

    if engine not in ENGINE_ARG_NAMES:
        raise GpuplanError(f"unknown engine {engine!r}; choose vllm, sglang or trtllm")
    args = dict(args or {})
    hf_id: str | None = None
    if isinstance(model, dict):
        config = model
        model_id = name or str(model.get("_name_or_path") or "config.json")
    else:
        config, model_id, entry = resolve_model(model)
        hf_id = entry.hf_id if entry else None
    arch = load_architecture(config, model_id)
    fmt = engine_weight_format(arch, args.get("dtype"), args.get("quantization"))
    kv = engine_kv_precision(fmt, args.get("kv_cache_dtype"))
    spec = resolve_gpu(gpu, gpu_memory)
    fields: dict[str, Any] = {}
    for arg, field_name in ENGINE_ARG_NAMES[engine].items():
        value = args.get(arg)
        if value is None:
            continue
        if field_name == "kv_cache_memory_bytes" and isinstance(value, str):
            value = parse_bytes(value, default_unit="B")
        if field_name in (
            "gpu_memory_utilization",
            "mem_fraction_static",
            "free_gpu_memory_fraction",
        ):
            value = float(value)
        elif field_name not in ("enforce_eager", "disable_hybrid_kv_cache_manager"):
            if isinstance(value, bool) or int(value) != value:
                raise GpuplanError(f"{arg} must be a whole number, got {value!r}")
            value = int(value)
        fields[field_name] = value
    extra = arch.vision_params
    launch = EngineLaunch(
        engine=engine,
        arch=arch,
        weights=fmt,
        kv=kv,
        gpu=spec,
        extra_params=extra,
        is_multimodal=extra > 0,
        **fields,
    )
    bill = engine_bill(launch)
    setup = ServingSetup(
        arch=arch,
        weights=fmt,
        kv=kv,
        gpu=spec,
        tp=launch.tp,
        pp=launch.pp,
        context=bill.max_model_len,
    )
    generic = ServingPlan(serving_bill(setup), model_id, hf_id)
    return EnginePlan(bill, generic, model_id, hf_id, tuple(ignored))


def serve_launch(
    line: str, gpu: str | GpuSpec = "h100", gpu_memory: str | int | None = None
) -> EnginePlan:
    """`engine_serve` from a launch line: `vllm serve MODEL --tensor-parallel-size 4 …`."""
    from gpuplan.catalog.launch import parse_launch

    parsed = parse_launch(line)
    return engine_serve(
        parsed.model,
        gpu,
        engine=parsed.engine,
        args=parsed.args,
        gpu_memory=gpu_memory,
        ignored=parsed.ignored,
    )


# --------------------------------------------------------------------------------------
# gpuplan check: an engine's startup log beside gpuplan's prediction for the same launch
# --------------------------------------------------------------------------------------

# (figure key in the log, label, EngineBill line key or attribute, unit)
CHECK_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("requested_gib", "Requested memory (budget)", "budget", "GiB"),
    ("weights_gib", "Weights", "weights", "GiB"),
    ("activation_peak_gib", "Activation peak", "activation_peak", "GiB"),
    ("non_torch_gib", "Non-torch memory", "non_torch", "GiB"),
    ("kv_cache_gib", "KV cache memory", "kv_cache", "GiB"),
    ("cudagraph_gib", "CUDA graphs (after KV sizing)", "cuda_graphs", "GiB"),
    ("kv_cache_tokens", "KV cache tokens", "tokens", "tokens"),
    ("max_concurrency", "Max concurrency", "concurrency", "x"),
)


@dataclass(frozen=True)
class CheckRow:
    key: str
    label: str
    logged: float | None
    predicted: float
    unit: str

    @property
    def error(self) -> float | None:
        """Relative error of the prediction against the logged figure (None if not logged)."""
        if self.logged is None or self.logged == 0:
            return None
        return (self.predicted - self.logged) / abs(self.logged)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.label,
            "logged": self.logged,
            "predicted": self.predicted,
            "unit": self.unit,
            "error": None if self.error is None else round(self.error, 4),
        }


@dataclass(frozen=True)
class CheckReport:
    """The figures a log printed, gpuplan's prediction for the same launch, line by line."""

    log: Any  # gpuplan.catalog.engine_logs.LogFigures
    plan: EnginePlan | None
    rows: tuple[CheckRow, ...]
    problems: tuple[str, ...]

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        return {
            "schema": "gpuplan.check/1",
            "engine": self.log.engine,
            "engine_version": self.log.version,
            "model": self.log.model,
            "launch_args": {k: v for k, v in self.log.args.items() if _jsonable(v)},
            "log_errors": list(self.log.errors),
            "logged_failed": self.log.failed,
            "predicted_fits": None if self.plan is None else self.plan.fits,
            "predicted_failure": None if self.plan is None else self.plan.bill.failure,
            "rows": [r.to_dict() for r in self.rows],
            "problems": list(self.problems),
            "prediction": None if self.plan is None else self.plan.to_dict(units),
        }


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None))


def _predicted(bill: Any, key: str) -> float:
    g = 2**30
    if key == "budget":
        return bill.budget_bytes / g
    if key == "tokens":
        return float(bill.kv_capacity_tokens)
    if key == "concurrency":
        return round(float(bill.max_concurrency), 2)
    if key == "kv_cache":
        return bill.kv_cache_bytes / g
    return bill.item(key).bytes / g


def check_log(
    log: Any,
    model: str | dict[str, Any] | None = None,
    gpu: str | GpuSpec | None = None,
    gpu_memory: str | int | None = None,
    name: str | None = None,
) -> CheckReport:
    """Predict the launch a parsed startup log records and compare, figure by figure.

    model: what to size (catalog name, HF id in the catalog, config path, or a config dict);
    default: the model the log names. gpu_memory: default, the total the log printed."""
    problems = list(log.problems)
    supported = {"vllm": "0.19", "sglang": "0.5", "trtllm": "1."}
    if log.version and not str(log.version).startswith(supported[log.engine]):
        problems.append(
            f"log from {log.engine} {log.version}; gpuplan's {log.engine} rules were read at"
            f" {supported[log.engine]}.x, so budget lines may differ"
        )
    target = model if model is not None else log.model
    if target is None:
        raise GpuplanError("the log names no model (no launch-arguments line); pass --model")
    f = log.figures
    if gpu_memory is None:
        if "total_gib" in f:
            gpu_memory = round(f["total_gib"] * 2**30)
        elif "requested_gib" in f and f.get("utilization"):
            gpu_memory = round(f["requested_gib"] / f["utilization"] * 2**30)
    args = dict(log.args)
    if "utilization" in f and "gpu_memory_utilization" not in args and log.engine == "vllm":
        args["gpu_memory_utilization"] = f["utilization"]
    if log.engine == "vllm" and "max_model_len" not in args and "concurrency_len" in f:
        args["max_model_len"] = int(f["concurrency_len"])
    plan = engine_serve(
        target, gpu or "h100", engine=log.engine, args=args, gpu_memory=gpu_memory, name=name
    )
    rows = []
    for key, label, pred_key, unit in CHECK_ROWS:
        logged = f.get(key)
        try:
            predicted = _predicted(plan.bill, pred_key)
        except KeyError:
            continue
        if logged is None and pred_key not in ("weights", "kv_cache", "tokens", "concurrency"):
            continue
        rows.append(CheckRow(key, label, logged, predicted, unit))
    if log.v0:
        rows = [r for r in rows if r.key in ("weights_gib",)]
    return CheckReport(log, plan, tuple(rows), tuple(problems))


DEFAULT_PLAN_GPUS = ("h100", "h200", "b200", "a100-80gb", "l40s", "mi300x")


@dataclass(frozen=True)
class PlanOption:
    """One ranked way to serve a model: a GPU type, a weight format, and the fewest GPUs for them."""

    rank: int
    plan: ServingPlan

    def to_dict(self, units: str = "GB", engine: str | None = None) -> dict[str, Any]:
        from gpuplan.planner.export import launch_command

        s = self.plan.bill.setup
        out: dict[str, Any] = {
            "rank": self.rank,
            "gpu": s.gpu.id,
            "gpus": s.gpus,
            "tp": s.tp,
            "pp": s.pp,
            "dtype": s.weights.precision.id,
            "kv_dtype": s.kv.id,
            "per_gpu_total_bytes": self.plan.per_gpu_total_bytes,
            "budget_bytes": self.plan.budget_bytes,
            "kv_capacity_tokens": self.plan.kv_capacity_tokens,
            "max_concurrent_sequences": self.plan.max_concurrent_sequences,
            "total_memory_bytes": s.gpus * s.gpu.memory_bytes,
        }
        if engine:
            out["launch"] = launch_command(
                self.plan.bill, self.plan.hf_id or self.plan.model_id, engine
            )
        return out


def plan(
    model: str | dict[str, Any],
    *,
    gpus: tuple[str, ...] | list[str] = DEFAULT_PLAN_GPUS,
    dtypes: tuple[str, ...] | list[str] | None = None,
    kv_dtype: str | None = None,
    context: int = 4096,
    users: int = 1,
    headroom: float = DEFAULT_HEADROOM,
) -> list[PlanOption]:
    """Rank the ways to serve `model`: for each GPU type and weight format, the fewest GPUs that
    fit. Ranked by GPU count, then by total GPU memory bought, then by KV capacity (more is better).

    dtypes default: the checkpoint's own format, plus fp8 weights (as vLLM's `--quantization fp8`
    stores them: linear layers in fp8, the rest in 16-bit) unless the checkpoint is already quantised.
    """
    if not dtypes:
        quantised = load_architecture(model).quantization is not None
        dtypes = ("auto",) if quantised else ("auto", "fp8-tensor")
    found: list[ServingPlan] = []
    seen: set[tuple[str, str]] = set()
    for gpu in gpus:
        for dtype in dtypes:
            try:
                option = serve(
                    model,
                    gpu,
                    dtype=dtype,
                    kv_dtype=kv_dtype,
                    context=context,
                    users=users,
                    headroom=headroom,
                )
            except GpuplanError as err:
                if "does not fit on up to" in str(err):
                    continue
                raise
            key = (option.bill.setup.gpu.id, option.bill.setup.weights.precision.id)
            if key not in seen:
                seen.add(key)
                found.append(option)
    found.sort(
        key=lambda p: (p.gpus, p.gpus * p.bill.setup.gpu.memory_bytes, -p.kv_capacity_tokens)
    )
    return [PlanOption(i + 1, p) for i, p in enumerate(found)]
