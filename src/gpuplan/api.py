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
    fsdp: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    recipe: str | TrainingRecipe = "adamw-bf16",
    seq: int = 4096,
    micro_batch: int = 1,
    grad_accum: int | None = None,
    checkpointing: str = "none",
    attention: str = "flash",
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
    step (default: pp, enough to fill the pipeline). checkpointing: none, selective or full.
    """
    from gpuplan.catalog.recipes import get_recipe

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
