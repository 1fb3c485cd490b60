"""`gpuplan.train`: the training bill, and the plan object it returns."""

from __future__ import annotations

from typing import Any

from gpuplan.api.common import (
    MAX_CAPACITY_FACTOR,
    PlanHeadline,
    _bytes,
    _positive,
    gpu_dict,
    model_dict,
    real_number,
    resolve,
    resolve_gpu,
    size_bytes,
    usable_memory,
)
from gpuplan.api.requests import TrainRequest
from gpuplan.catalog import get_precision
from gpuplan.catalog.frameworks import get_framework
from gpuplan.catalog.recipes import get_recipe
from gpuplan.engine.activations import parse_recompute
from gpuplan.engine.allocator import predicts
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.cost import DEFAULT_NETWORK_BYTES_PER_S
from gpuplan.engine.frameworks.profile import FrameworkProfile, validate_profile
from gpuplan.engine.frozen import field, fields, record, replace
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.lora import SAVED, LoraSpec, default_targets
from gpuplan.engine.loss import parse_loss
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.serving import (
    DEFAULT_CUDA_CONTEXT_BYTES,
)
from gpuplan.engine.sharding import Layout, fsdp_layout
from gpuplan.engine.training import TrainingBill, TrainingSetup, training_bill
from gpuplan.engine.weights import WeightFormat, as_stored
from gpuplan.errors import GpuplanError
from gpuplan.planner.training import TrainAttempt
from gpuplan.planner.training import fewest_gpus as fewest_train_gpus
from gpuplan.planner.training import lower_bound as train_lower_bound
from gpuplan.units import format_bytes

TRAIN_SCHEMA_VERSION = "gpuplan.train/1"


@record
class TrainingPlan(PlanHeadline):
    """A training answer: the per-GPU bill, the host bill, the step's cost, and how N was chosen."""

    bill: TrainingBill
    model_id: str
    hf_id: str | None
    search: tuple[TrainAttempt, ...] = field(default=())
    lower_bound_gpus: int | None = None
    config_notes: tuple[str, ...] = field(default=())  # what `train_from` read but does not model

    @property
    def layout(self) -> Layout:
        return self.bill.setup.layout

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

    def item(self, key: str) -> Any:
        return self.bill.item(key)

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        """The stable JSON schema documented in docs/json.md (train section)."""
        b = self.bill
        return {
            "schema": TRAIN_SCHEMA_VERSION,
            "mode": "train",
            **_what_json(b, self.model_id, self.hf_id),
            **_how_json(b),
            **_memory_json(b, units),
            **_speed_json(b),
            "lower_bound_gpus": self.lower_bound_gpus,
            "search": [attempt.to_dict() for attempt in self.search],
            "notes": list(b.notes) + list(self.config_notes),
            "units": units,
        }

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


def _what_json(b: TrainingBill, model_id: str, hf_id: str | None) -> dict[str, Any]:
    """The JSON's first group: the model, its parameter counts, the recipe, the GPUs, the layout."""
    s = b.setup
    a, lo, r = s.arch, s.layout, s.recipe
    return {
        "model": {**model_dict(a, model_id, hf_id), "vocab_size": a.vocab_size},
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
        "gpu": gpu_dict(s.gpu),
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
            "vpp": lo.vpp,
            "describe": lo.describe(),
        },
    }


def _how_json(b: TrainingBill) -> dict[str, Any]:
    """The JSON's second group: how the step runs (batch, recompute, LoRA, offload, the billed
    stage and what it holds in flight, framework, loss)."""
    s = b.setup
    lo, fw = s.layout, s.framework
    return {
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
            "modules_to_save": list(s.lora.saved),
            "base_format": s.base.describe() if s.base else None,
        },
        "offload": s.offload,
        "offload_activations": s.offload_activations,
        "headroom": s.headroom,
        "stage": b.stage.stage,
        "micro_batches_in_flight": b.in_flight if lo.vpp == 1 else b.in_flight / lo.vpp,
        "chunk_forwards_in_flight": b.in_flight,
        "framework": {"id": fw.id, "name": fw.name, "source": fw.source},
        "loss": {"mode": s.loss_spec.mode_text(), "describe": s.loss_spec.describe()},
    }


def _memory_json(b: TrainingBill, units: str) -> dict[str, Any]:
    """The JSON's memory group: the per-GPU lines, the phases, the allocator's figures, the
    budget, and the host memory."""
    s = b.setup
    return {
        "per_gpu": {
            "items": [{**item.to_dict(units), "predicts": predicts(item.key)} for item in b.items],
            "total_bytes": b.per_gpu_total_bytes,
        },
        "peak_phase": b.peak_phase,
        "phases": [p.to_dict(units) for p in b.phases],
        "memory_figures": {
            "allocated_bytes": b.allocated_bytes,
            "reserved_bytes": b.reserved_bytes,
            "nvidia_smi_bytes": b.per_gpu_total_bytes,
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
            "per_node_bytes": b.host_bytes_per_gpu * min(s.layout.gpus, s.gpu.gpus_per_node),
        },
    }


def _speed_json(b: TrainingBill) -> dict[str, Any]:
    """The JSON's step-cost group: FLOPs, communication, and the step time when known."""
    t = b.time
    return {
        "step_flops": b.flops.executed,
        "model_flops": b.flops.model,
        "comm_bytes_per_step": b.comm.total,
        "comm_bytes_by_kind": b.comm.to_dict(),
        "mfu": t.mfu if t else b.setup.mfu,
        "mfu_pinned": b.setup.mfu is not None or (t is not None and t.mfu_pinned),
        "step_time_s": t.step_s if t else None,
        "step_breakdown_s": t.breakdown.to_dict() if t and t.breakdown else None,
        "network": t.network_source if t else "",
        "step_time_assumes": t.assumed if t else "",
        "compute_time_s": t.compute_s if t else None,
        "exposed_comm_time_s": t.exposed_comm_s if t else None,
        "pipeline_bubble": t.bubble if t else None,
        "tokens_per_second": t.tokens_per_second if t else None,
    }


def train(
    model: str | dict[str, Any] | Architecture, gpu: str | GpuSpec = "h100", **knobs: Any
) -> TrainingPlan:
    """Size training (or LoRA/QLoRA fine-tuning) `model` on `gpu`: the per-GPU bill, on how many.

    The knobs are `TrainRequest`'s (api/requests.py TRAIN: the one declaration the CLI, the web
    and the MCP tools are generated from, each with its help), checked once when it is built:
    gpus: a count (dp = gpus ÷ (tp × pp × cp)), "auto" (fewest that fit, from the lesson's lower
    bound), or None: "auto". zero: ZeRO stage 0-3; fsdp: an FSDP sharding strategy instead.
    recipe: a training recipe id (see `gpuplan.catalog.recipes`; default: the framework's).
    grad_accum: micro-batches per step (default: pp, enough to fill the pipeline).
    checkpointing: none, selective (Megatron: core attention), op (torchtitan's op-level
    selective), full, every:K (each K-th layer), or True = full; default: the framework's.
    lora_base: the frozen base's format (bf16, fp16, fp32, int8, nf4, nf4-dq, fp4; default bf16,
    nf4-dq with qlora); lora_modules_to_save: PEFT modules_to_save (embed_tokens, lm_head),
    trained in full beside the frozen originals.
    method: "full", "lora" (rank 16 unless given) or "qlora"; optimizer: a recipe alias
    (adamw, adam8bit, adafactor, sgd) used when `recipe` is not given; dp: the data-parallel
    degree (then gpus = dp × tp × pp × cp); fsdp=True means FULL_SHARD.
    framework: how the job runs (generic, torchtitan, torchtune, megatron, deepspeed,
    hf-trainer, fsdp2, ddp; see `gpuplan frameworks`), and its knobs: loss (standard,
    chunked:N, linear_chunked:N, compiled, fused, vocab_parallel), compile, grads
    (set_to_none | persistent), reshard_after_forward, optimizer_in_backward, fp8 (none, te,
    torchao), fp8_all_gather, dropout, optimizer_kernel (fused, foreach, for-loop),
    compile_loss, and framework_overrides (any other profile field by name). global_batch:
    sequences per optimizer step over all data-parallel ranks (sets grad_accum). stage: bill
    this pipeline stage ("first", "last" or an index) instead of the heaviest. vpp: virtual
    pipeline stages (model chunks) per pipeline rank, interleaved 1F1B (needs pp). etp: the
    experts' tensor-parallel degree when it differs from tp (Megatron
    --expert-tensor-parallel-size; ep × etp then spans dp × cp × tp). network_bandwidth:
    inter-node bytes/s per GPU per direction; mfu: pin the utilisation; capacity_factor: MoE.
    """
    req = TrainRequest(gpu=gpu, **knobs)
    profile = _profile(req)
    fsdp = req.fsdp
    if isinstance(fsdp, bool):
        fsdp = "full_shard" if fsdp else None
    qlora, lora_rank = _method(req.method, req.qlora, req.lora_rank)
    gpus = _gpus_from_dp(req.gpus, req.dp, req.tp, req.pp, req.cp)
    _check_counts(gpus, req.zero, fsdp, lora_rank=lora_rank)
    ref = resolve(model)
    spec = resolve_gpu(gpu, req.gpu_memory)
    setup = _setup(req, profile, ref, spec, fsdp, qlora, lora_rank)
    zero = req.zero
    implied_zero = profile.zero if zero is None and fsdp is None and profile.zero >= 0 else None
    if isinstance(gpus, int):
        setup = _on_gpus(setup, gpus, implied_zero, req.global_batch)
        return TrainingPlan(_with_headers(training_bill(setup), ref), ref.model_id, ref.hf_id)
    if gpus not in (None, "auto"):
        raise GpuplanError(f"gpus must be a number or 'auto', got {gpus!r}")
    given = {"tp": req.tp, "pp": req.pp, "recompute": req.checkpointing, "offload": req.offload}
    fixed = {name for name, value in given.items() if value is not None}
    if req.offload_activations:
        fixed.add("offload")
    held = _held_zero(setup.layout, zero, fsdp, implied_zero, req.offload)
    return _fewest_gpus(setup, ref, fixed, held)


def _profile(req: Any) -> FrameworkProfile:
    """The request's framework profile with its framework knobs set."""
    return resolve_framework(
        req.framework,
        req.framework_overrides,
        compile=req.compile,
        compile_loss=req.compile if req.compile_loss is None else req.compile_loss,
        grads=req.grads,
        reshard_after_forward=req.reshard_after_forward,
        optimizer_in_backward=req.optimizer_in_backward,
        fp8=req.fp8,
        fp8_all_gather=req.fp8_all_gather,
        dropout=req.dropout,
        optimizer_kernel=req.optimizer_kernel,
    )


def _setup(
    req: Any,
    profile: FrameworkProfile,
    ref: Any,
    spec: GpuSpec,
    fsdp: str | None,
    qlora: bool,
    lora_rank: int | None,
) -> TrainingSetup:
    """The training setup of a request before its GPU count is known (dp = 1)."""
    headroom = usable_memory(spec, req.headroom)
    mfu = None if req.mfu is None else real_number("MFU", req.mfu)
    capacity_factor = real_number("capacity-factor", req.capacity_factor, MAX_CAPACITY_FACTOR)
    rec = _recipe(req.recipe, req.optimizer, profile)
    lora, base = _lora(
        ref.arch, lora_rank, req.lora_targets, qlora, req.lora_base, req.lora_modules_to_save
    )
    tp, pp = req.tp, req.pp
    layout = _layout(
        profile, spec, req.zero, fsdp, tp, pp, req.cp, req.ep, req.sp, req.vpp, req.etp
    )
    cuda_context = req.cuda_context
    return TrainingSetup(
        arch=ref.arch,
        recipe=rec,
        gpu=spec,
        layout=layout,
        seq=int(req.seq),
        target_seq=int(req.target_seq or 0),
        micro_batch=int(req.micro_batch),
        grad_accum=int(req.grad_accum) if req.grad_accum else 0,
        recompute=parse_checkpointing(req.checkpointing, profile.recompute),
        kernel="flash" if req.attention == "sdpa" else req.attention,
        lora=lora,
        base=base,
        offload=req.offload or "none",
        offload_activations=bool(req.offload_activations),
        capacity_factor=float(capacity_factor),
        headroom=float(headroom),
        cuda_context_bytes=DEFAULT_CUDA_CONTEXT_BYTES
        if cuda_context is None
        else _bytes(cuda_context),
        mfu=None if mfu is None else float(mfu),
        network_bytes_per_s=_bandwidth(req.network_bandwidth),
        framework=profile,
        loss=parse_loss(req.loss).mode_text() if req.loss else "",
        stage=_stage(req.stage, pp or 1),
    )


def _recipe(
    recipe: str | TrainingRecipe | None, optimizer: str | None, profile: FrameworkProfile
) -> TrainingRecipe:
    """The recipe given; else the optimizer alias (also over the default adamw-bf16); else
    the framework's own."""
    if optimizer is not None and recipe in (None, "adamw-bf16"):
        recipe = optimizer
    if recipe is None:
        recipe = profile.recipe
    return recipe if isinstance(recipe, TrainingRecipe) else get_recipe(recipe)


def _held_zero(
    lo: Layout, zero: int | None, fsdp: str | None, implied_zero: int | None, offload: str | None
) -> int | None:
    """The sharding stage a GPU-count search holds: ZeRO-3 for parameter offload, else the
    framework's own, else the ZeRO stage or FSDP mode given; None leaves it to the search."""
    if offload == "params":
        return 3
    if implied_zero is not None:
        return implied_zero
    if zero is not None or fsdp is not None:
        return lo.zero
    return None


def _fewest_gpus(setup: TrainingSetup, ref: Any, fixed: set[str], zero: int | None) -> TrainingPlan:
    """gpus = auto: the fewest GPUs that fit (planner/training.py), searching the knobs not in
    `fixed` and holding the sharding stage `zero` when one is set."""
    if zero is not None:
        fixed = fixed | {"zero"}
        setup = replace(setup, layout=replace(setup.layout, zero=zero))
    bill, attempts = fewest_train_gpus(setup, frozenset(fixed))
    return TrainingPlan(
        _with_headers(bill, ref),
        ref.model_id,
        ref.hf_id,
        tuple(attempts),
        train_lower_bound(setup),
    )


def _method(method: str | None, qlora: bool, lora_rank: int | None) -> tuple[bool, int | None]:
    """method full / lora (rank 16 unless given) / qlora as the (qlora, lora_rank) knobs."""
    if method is None:
        return qlora, lora_rank
    if method not in ("full", "lora", "qlora"):
        raise GpuplanError(f"method must be full, lora or qlora, got {method!r}")
    if method == "qlora":
        return True, lora_rank
    if method == "lora" and not lora_rank:
        return qlora, 16
    return qlora, lora_rank


def _gpus_from_dp(
    gpus: int | str | None, dp: int | None, tp: int | None, pp: int | None, cp: int
) -> int | str | None:
    """With dp given, gpus = dp × tp × pp × cp (and a gpus that disagrees is refused)."""
    if dp is None:
        return gpus
    _positive("dp", dp)
    replica = (tp or 1) * (pp or 1) * int(cp)
    if isinstance(gpus, int) and gpus != dp * replica:
        raise GpuplanError(f"gpus={gpus} disagrees with dp={dp} × tp × pp × cp = {dp * replica}")
    return dp * replica


def _check_counts(
    gpus: int | str | None, zero: int | None, fsdp: str | None, lora_rank: int | None
) -> None:
    """What the request's knobs cannot check one by one: the GPU count dp implies, the rank a
    method implies, and a ZeRO stage beside an FSDP mode."""
    _positive("lora-rank", lora_rank)
    if isinstance(gpus, int):
        _positive("gpus", gpus)
    if zero is not None and fsdp is not None:
        raise GpuplanError("give either a ZeRO stage or an FSDP mode, not both")


def _layout(
    profile: FrameworkProfile,
    spec: GpuSpec,
    zero: int | None,
    fsdp: str | None,
    tp: int | None,
    pp: int | None,
    cp: int,
    ep: int,
    sp: bool,
    vpp: int,
    etp: int | None = None,
) -> Layout:
    """The layout before the GPU count is known (dp = 1); vpp > 1 (interleaved 1F1B) needs pp;
    etp: the experts' tensor-parallel degree when it is not tp (Megatron ETP)."""
    if vpp > 1 and pp is None:
        raise GpuplanError(f"vpp={vpp} interleaves pipeline stages: give --pp")
    stage_zero, hybrid = (zero or 0), False
    if fsdp is not None:
        stage_zero, hybrid = fsdp_layout(fsdp)
    return Layout(
        dp=1,
        tp=tp or 1,
        pp=pp or 1,
        cp=int(cp),
        ep=int(ep),
        sp=bool(sp) or (profile.sequence_parallel and (tp or 1) > 1),
        zero=stage_zero,
        fsdp=fsdp.lower().replace("-", "_") if fsdp else None,
        hybrid=hybrid,
        gpus_per_node=spec.gpus_per_node,
        vpp=int(vpp),
        etp=0 if etp is None or int(etp) == (tp or 1) else int(etp),
    )


def _bandwidth(value: str | float | None) -> float:
    if value is None:
        return DEFAULT_NETWORK_BYTES_PER_S
    return float(size_bytes(value))


def _on_gpus(
    setup: TrainingSetup, gpus: int, implied_zero: int | None, global_batch: int | None
) -> TrainingSetup:
    """The setup on a given GPU count: dp = gpus ÷ (tp × pp × cp); the framework's own sharding
    when it implies one and there are ranks to shard over; grad_accum from a global batch."""
    lo = setup.layout
    per_replica = lo.tp * lo.pp * lo.cp
    if gpus % per_replica:
        raise GpuplanError(f"--gpus {gpus} is not a multiple of tp × pp × cp = {per_replica}")
    dp = gpus // per_replica
    zero = implied_zero if implied_zero is not None and dp * lo.cp > 1 else lo.zero
    setup = replace(setup, layout=replace(lo, dp=dp, zero=zero))
    if global_batch is not None:
        setup = replace(setup, grad_accum=_accumulation(global_batch, setup.micro_batch, dp))
    return setup


def _with_headers(bill: TrainingBill, ref: Any) -> TrainingBill:
    """When the checkpoint's headers were read, the weights line's architecture math is set
    beside the stored bytes the same GPU would hold (its tp/pp placement, ÷ the ZeRO-3/FSDP
    shards), for a full fine-tune in the checkpoint's own 16-bit dtype."""
    stored = ref.stored
    setup = bill.setup
    weights = setup.recipe.weights
    if stored is None or setup.lora is not None or as_stored(stored, weights) is None:
        return bill
    lo = setup.layout
    placed = stored.placement(setup.arch, lo.tp, lo.pp).bytes
    if lo.zero >= 3:
        placed = -(-placed // lo.dp)
    line = bill.item("weights").bytes
    if placed == line:
        note = (
            f"weights line = the checkpoint's stored bytes on this GPU ({placed:,} bytes, headers)"
        )
    else:
        note = (
            f"checkpoint headers: {placed:,} stored bytes on this GPU vs {line:,} by the"
            f" architecture math ({(placed - line) / line:+.2%}; see `gpuplan inspect`)"
        )
    return replace(bill, notes=(*bill.notes, note))


def resolve_framework(
    framework: str | FrameworkProfile | None,
    overrides: dict[str, Any] | None = None,
    **knobs: Any,
) -> FrameworkProfile:
    """The framework's profile with the knobs the user set (None keeps the framework's own):
    compile, compile_loss, grads (set_to_none | persistent), reshard_after_forward (bool),
    optimizer_in_backward, fp8, fp8_all_gather, dropout, optimizer_kernel (fused | foreach |
    for-loop), and `overrides`, any profile field by name."""
    if isinstance(framework, FrameworkProfile):
        profile = framework
    else:
        profile = get_framework(framework or "generic")
    changes: dict[str, Any] = {}
    for name, value in knobs.items():
        if value is None:
            continue
        if name == "reshard_after_forward":
            value = "always" if value else "never"
        elif name == "optimizer_kernel":
            value = {"fused": "none"}.get(str(value).lower(), str(value).lower())
        elif name in ("grads", "fp8"):
            value = str(value).strip().lower().replace("-", "_")
        elif name == "dropout":
            value = float(value)
        else:
            value = bool(value)
        changes[name] = value
    known = {f.name for f in fields(FrameworkProfile)} - {"id", "name", "source", "sources"}
    for name, value in (overrides or {}).items():
        if name not in known:
            raise GpuplanError(f"{name!r} is not a framework setting ({', '.join(sorted(known))})")
        changes[name] = value
    profile = replace(profile, **changes)
    validate_profile(profile)
    return profile


RECOMPUTE_ALIASES = {
    "true": "full",
    "false": "none",
    "no": "none",
    "off": "none",
    "selective-op": "op",
    "selective_op": "op",
    "core-attention": "selective",
    "core_attn": "selective",
}


def parse_checkpointing(value: str | bool | None, default: str = "none") -> str:
    """none, selective, op, full, every:K (also layer:K, selective-layer:K), or a bool."""
    if value is None:
        return default
    if isinstance(value, bool):
        return "full" if value else "none"
    text = str(value).strip().lower()
    text = RECOMPUTE_ALIASES.get(text, text)
    for prefix in ("layer:", "selective-layer:", "selective_layer:"):
        if text.startswith(prefix):
            text = "every:" + text[len(prefix) :]
    parse_recompute(text)
    return text


def _accumulation(global_batch: int, micro_batch: int, dp: int) -> int:
    """Micro-batches per step: global batch ÷ (micro-batch × data-parallel ranks)."""
    _positive("global-batch", global_batch)
    per_step = micro_batch * dp
    if global_batch % per_step:
        raise GpuplanError(
            f"global batch {global_batch} is not a multiple of micro-batch {micro_batch} ×"
            f" {dp} data-parallel ranks"
        )
    return global_batch // per_step


def _stage(stage: int | str | None, pp: int) -> int | None:
    if stage is None:
        return None
    if stage in ("first", "last"):
        return 0 if stage == "first" else -1
    if isinstance(stage, bool) or not isinstance(stage, int):
        raise GpuplanError(f"stage must be first, last or a stage index, got {stage!r}")
    if not -pp <= stage < pp:
        raise GpuplanError(f"stage {stage} does not exist with pp={pp}")
    return stage


LORA_BASES = {  # --lora-base: (linear weights, everything else, packed/dequantised per matmul)
    "bf16": ("bf16", "bf16", False),
    "fp16": ("fp16", "fp16", False),
    "fp32": ("fp32", "fp32", False),
    "int8": ("bnb-int8", "bf16", True),  # load_in_8bit: LLM.int8 linears, 16-bit the rest
    "nf4": ("nf4", "bf16", True),
    "nf4-dq": ("nf4-dq", "bf16", True),  # QLoRA's default (double quantisation)
    "fp4": ("bnb-fp4", "bf16", True),
}


def _lora(
    arch: Architecture,
    lora_rank: int | None,
    lora_targets: tuple[str, ...] | list[str] | str | None,
    qlora: bool,
    lora_base: str | None = None,
    modules_to_save: tuple[str, ...] | list[str] | str | None = None,
) -> tuple[LoraSpec | None, WeightFormat | None]:
    """The adapters and the frozen base's format: bf16 for LoRA, NF4 with double quantisation
    for QLoRA, or `lora_base` (fp32, fp16, bf16, int8 = bitsandbytes LLM.int8, nf4, nf4-dq,
    fp4): the base's linear weights in that format, its embeddings and norms 16-bit when the
    linears are packed (bitsandbytes replaces only nn.Linear), fp32 for an fp32 base."""
    if lora_base is not None and lora_base.lower() not in LORA_BASES:
        raise GpuplanError(f"unknown LoRA base {lora_base!r}; use {', '.join(LORA_BASES)}")
    base_kind = (lora_base or ("nf4-dq" if qlora else "bf16")).lower()
    packed = LORA_BASES[base_kind][2]
    if packed and not lora_rank:
        lora_rank = 64  # the QLoRA paper's r = 64 (Dettmers et al. 2023, §4)
    if not lora_rank:
        if lora_base is not None or modules_to_save:
            raise GpuplanError("a LoRA base or modules to save needs LoRA (give a rank)")
        return None, None
    if isinstance(lora_targets, str):
        lora_targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip())
    if lora_targets:
        targets = tuple(lora_targets)
    else:  # QLoRA adapts every linear layer (Dettmers et al. 2023 §4); LoRA the attention
        four_bit = base_kind in ("nf4", "nf4-dq", "fp4")
        targets = ("all-linear",) if four_bit else default_targets(arch)
    saved = _saved_modules(modules_to_save)
    lora = LoraSpec(int(lora_rank), _dedupe(targets), packed, saved)
    linear, other, _ = LORA_BASES[base_kind]
    return lora, WeightFormat(get_precision(linear), get_precision(other))


def _saved_modules(names: tuple[str, ...] | list[str] | str | None) -> tuple[str, ...]:
    """PEFT modules_to_save, by the names gpuplan models (the embedding and the LM head)."""
    if isinstance(names, str):
        names = [t.strip() for t in names.split(",") if t.strip()]
    aliases = {"embed_tokens": "embed_tokens", "wte": "embed_tokens", "lm_head": "lm_head"}
    out = []
    for name in names or ():
        key = aliases.get(str(name).rsplit(".", 1)[-1])
        if key is None:
            raise GpuplanError(f"modules_to_save {name!r} is not modelled (use {', '.join(SAVED)})")
        out.append(key)
    return _dedupe(tuple(out))


def _dedupe(targets: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(targets))
