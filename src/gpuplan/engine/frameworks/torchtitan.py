"""torchtitan: read a job TOML (train_configs/*.toml, the format before the 2026 Python config
registry) into train() arguments.

Sections read (torchtitan/config/job_config.py, or config_manager.py in 2024 releases):
  [model]        name + flavor → a catalog model (llama3 8B / 70B / 405B, debugmodel refused)
  [training]     local_batch_size (batch_size before 2025), seq_len, compile (2024),
                 enable_cpu_offload, mixed_precision_param
  [parallelism]  data_parallel_shard_degree (-1: the ranks left over), _replicate_degree,
                 tensor_ / pipeline_ / context_ / expert_parallel_degree,
                 fsdp_reshard_after_forward, pipeline_parallel_microbatch_size,
                 pipeline_parallel_schedule (1F1B | Interleaved1F1B) and
                 pipeline_parallel_layers_per_stage (virtual stages per rank)
  [activation_checkpoint]  mode none | selective | full, selective_ac_option "op" or k
  [compile]      enable, components (model, loss: each compiled only when named)
  2024 layout    data_parallel_degree (+ data_parallel_type) and tensor_parallel_degree under
                 [training]; pipeline / context degrees, schedule, microbatches under
                 [experimental]
  [float8] / [quantize.linear.float8] / model.converters   float8 linears, fp8 all-gather
  [optimizer]    implementation fused | foreach | for-loop (fused = true before 2025)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.engine.frameworks.overrides import TrainOverrides, boolean, positive_int
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_toml

FLAVORS = {
    ("llama3", "8b"): "llama-3.1-8b",
    ("llama3", "70b"): "llama-3.1-70b",
    ("llama3", "405b"): "llama-3.1-405b",
    ("llama3", "1b"): "llama-3.2-1b",
    ("llama3", "3b"): "llama-3.2-3b",
}


def _section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise GpuplanError(f"torchtitan config: [{name}] must be a table")
    return value


def _model(doc: dict[str, Any]) -> str | None:
    model = _section(doc, "model")
    name, flavor = str(model.get("name", "")).lower(), str(model.get("flavor", "")).lower()
    if not name:
        return None
    key = (name.replace("llama3.1", "llama3").replace("llama3_1", "llama3"), flavor)
    if key not in FLAVORS:
        raise GpuplanError(
            f"torchtitan model {model.get('name')!r} flavor {model.get('flavor')!r} is not in"
            " gpuplan's catalog; give the model as MODEL"
        )
    return FLAVORS[key]


SCHEDULES = {"1f1b": "1F1B", "interleaved1f1b": "Interleaved1F1B"}


def _virtual_stages(
    par: dict[str, Any], pp: int, model: str | None, num_layers: Callable[[str], int] | None
) -> int:
    """Stages per pipeline rank: 1 for 1F1B; for Interleaved1F1B ⌈(layers + first_stage_less +
    last_stage_less) ÷ layers_per_stage⌉ ÷ pp, or 2 when layers_per_stage is not set
    (torchtitan distributed/pipeline_parallel.py; 2024: pipelining_utils.generate_split_points).
    `num_layers` gives a named model's layer count (the caller resolves models)."""
    name = str(par.get("pipeline_parallel_schedule", "1F1B"))
    schedule = SCHEDULES.get(name.lower())
    if pp == 1:
        return 1
    if schedule is None:
        raise GpuplanError(
            f"torchtitan pipeline_parallel_schedule {name!r} is not modelled"
            f" ({', '.join(SCHEDULES.values())})"
        )
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    if schedule == "1F1B":
        return 1
    if per_stage is None:
        return 2
    per_stage = positive_int("pipeline_parallel_layers_per_stage", per_stage)
    if model is None or num_layers is None:
        raise GpuplanError(
            "pipeline_parallel_layers_per_stage needs the model's layer count: name the model in"
            " [model], or give --virtual-stages"
        )
    extra = sum(
        positive_int(k, par.get(k, 1)) if par.get(k, 1) else 0
        for k in (
            "pipeline_parallel_first_stage_less_layers",
            "pipeline_parallel_last_stage_less_layers",
        )
    )
    stages = -(-(num_layers(model) + extra) // per_stage)
    if stages % pp:
        raise GpuplanError(
            f"pipeline_parallel_layers_per_stage {per_stage} makes {stages} stages, not a"
            f" multiple of pipeline_parallel_degree {pp}"
        )
    return stages // pp


def _recompute(ac: dict[str, Any]) -> str:
    mode = str(ac.get("mode", "selective")).lower()
    if mode == "none":
        return "none"
    if mode == "full":
        return "full"
    if mode == "memory_budget":
        raise GpuplanError("torchtitan activation_checkpoint.mode = memory_budget is not modelled")
    if mode != "selective":
        raise GpuplanError(
            f"torchtitan activation_checkpoint.mode {mode!r} is not none, selective or full"
        )
    option = str(ac.get("selective_ac_option", "2")).lower()
    if option == "op":
        return "op"
    if not option.isdigit() or int(option) < 1:
        raise GpuplanError(
            f"torchtitan selective_ac_option must be 'op' or a positive integer, got {option!r}"
        )
    return f"every:{int(option)}"


def _float8(doc: dict[str, Any]) -> tuple[bool, bool]:
    old = _section(doc, "float8")
    new = _section(_section(_section(doc, "quantize"), "linear"), "float8")
    converters = [str(c) for c in _section(doc, "model").get("converters", [])]
    on = boolean("float8.enable_float8_linear", old.get("enable_float8_linear", False)) or any(
        "float8" in c for c in converters
    )
    all_gather = boolean(
        "enable_fsdp_float8_all_gather",
        old.get("enable_fsdp_float8_all_gather", new.get("enable_fsdp_float8_all_gather", False)),
    )
    return on, on and all_gather


def read(
    text: str, gpus: int | None = None, num_layers: Callable[[str], int] | None = None
) -> TrainOverrides:
    """A torchtitan TOML → train() arguments; `gpus` resolves data_parallel_shard_degree = -1;
    `num_layers(model)` counts a named model's layers (for layers-per-stage schedules)."""
    doc = load_toml(text, "the torchtitan TOML")
    training, par = _section(doc, "training"), _parallelism(doc)
    tp, pp, cp, ep, replicate, shard = _degrees(par, gpus)
    local, micro = _batch(training, par, pp)
    compile_section = _section(doc, "compile")
    compiled = boolean(
        "compile.enable", compile_section.get("enable", training.get("compile", False))
    )
    # [compile] components (2025: default ["model", "loss"]); 2024's training.compile compiled
    # the transformer blocks only. The loss mode itself stays the framework's (loss parallel
    # under TP): only whether compile reaches it changes.
    default = ["model", "loss"] if "enable" in compile_section else ["model"]
    components = [str(c) for c in compile_section.get("components", default)]
    unknown = sorted(set(components) - {"model", "loss"})
    if unknown:
        raise GpuplanError(f"torchtitan compile.components {unknown} are not model or loss")
    float8, fp8_gather = _float8(doc)
    kernel = _optimizer_kernel(_section(doc, "optimizer"))
    reshard = str(par.get("fsdp_reshard_after_forward", "default")).lower()
    if reshard not in ("default", "always", "never"):
        raise GpuplanError(
            f"fsdp_reshard_after_forward must be default, always or never, got {reshard!r}"
        )
    kwargs: dict[str, Any] = {
        "gpus": shard * replicate * tp * pp * cp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "vpp": _virtual_stages(par, pp, _model(doc), num_layers),
        "sp": tp > 1,
        "seq": positive_int("training.seq_len", training.get("seq_len", 2048)),
        "micro_batch": micro if pp > 1 else local,
        "grad_accum": local // micro if pp > 1 else 1,
        "checkpointing": _recompute(_section(doc, "activation_checkpoint")),
        "compile": compiled and "model" in components,
        "compile_loss": compiled and "loss" in components,
        "optimizer_kernel": kernel,
        "stage": None,
    }
    kwargs.update(_sharding(shard * cp, replicate, reshard))
    if float8:
        kwargs["fp8"] = "torchao"
        kwargs["fp8_all_gather"] = fp8_gather
    if boolean("training.enable_cpu_offload", training.get("enable_cpu_offload", False)):
        kwargs["offload"] = "params"
    notes = []
    if boolean("enable_async_tensor_parallel", par.get("enable_async_tensor_parallel", False)):
        notes.append("async tensor parallel: its overlap buffers are not modelled")
    return TrainOverrides("torchtitan", _model(doc), kwargs, tuple(notes))


LEGACY = (  # 2024 layout: degrees under [training] and [experimental] (config_manager.py)
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "pipeline_parallel_schedule",
    "pipeline_parallel_microbatches",
    "enable_async_tensor_parallel",
)


def _parallelism(doc: dict[str, Any]) -> dict[str, Any]:
    """[parallelism], or the 2024 layout: data_parallel_degree / tensor_parallel_degree under
    [training] (data_parallel_type fsdp | ddp), pipeline and context degrees, the schedule and
    the microbatch count under [experimental] (torchtitan config_manager.py, 2024 releases)."""
    par = dict(_section(doc, "parallelism"))
    training, experimental = _section(doc, "training"), _section(doc, "experimental")
    for section in (experimental, training):
        for key in LEGACY:
            if key in section:
                par.setdefault(key, section[key])
    if "data_parallel_degree" in training:
        kind = str(training.get("data_parallel_type", "fsdp")).lower()
        if kind not in ("fsdp", "ddp"):
            raise GpuplanError(f"training.data_parallel_type must be fsdp or ddp, got {kind!r}")
        degree = training["data_parallel_degree"]
        if kind == "ddp":
            par.setdefault("data_parallel_replicate_degree", degree)
            par.setdefault("data_parallel_shard_degree", 1)
        else:
            par.setdefault("data_parallel_shard_degree", degree)
    return par


def _degrees(par: dict[str, Any], gpus: int | None) -> tuple[int, int, int, int, int, int]:
    """(tp, pp, cp, ep, replicate, shard) from [parallelism]; data_parallel_shard_degree = -1
    takes the ranks left over from `gpus`, and a `gpus` the degrees do not make is refused."""
    tp = positive_int("tensor_parallel_degree", par.get("tensor_parallel_degree", 1))
    pp = positive_int("pipeline_parallel_degree", par.get("pipeline_parallel_degree", 1))
    cp = positive_int("context_parallel_degree", par.get("context_parallel_degree", 1))
    ep = positive_int("expert_parallel_degree", par.get("expert_parallel_degree", 1))
    replicate = positive_int(
        "data_parallel_replicate_degree", par.get("data_parallel_replicate_degree", 1)
    )
    shard = par.get("data_parallel_shard_degree", -1)
    if shard == -1:
        if gpus is None:
            raise GpuplanError(
                "torchtitan data_parallel_shard_degree = -1 takes the ranks left over: give --gpus"
            )
        rest, left = divmod(gpus, tp * pp * cp * replicate)
        if left or rest < 1:
            raise GpuplanError(
                f"{gpus} GPUs do not divide into tp {tp} × pp {pp} × cp {cp} × replicate {replicate}"
            )
        shard = rest
    shard = positive_int("data_parallel_shard_degree", shard)
    world = shard * replicate * tp * pp * cp
    if gpus is not None and gpus != world:
        raise GpuplanError(f"the torchtitan degrees make {world} GPUs, not the {gpus} given")
    return tp, pp, cp, ep, replicate, shard


def _batch(training: dict[str, Any], par: dict[str, Any], pp: int) -> tuple[int, int]:
    """(local batch, pipeline microbatch size): local_batch_size (batch_size before 2025);
    with pipelining the local batch is split into microbatches of
    pipeline_parallel_microbatch_size."""
    local = training.get("local_batch_size", training.get("batch_size", 8))
    local = positive_int("training.local_batch_size", local)
    micro = positive_int(
        "pipeline_parallel_microbatch_size", par.get("pipeline_parallel_microbatch_size", 1)
    )
    count = par.get("pipeline_parallel_microbatches")  # 2024: the count, not the size
    if pp > 1 and count is not None:
        count = positive_int("pipeline_parallel_microbatches", count)
        if local % count:
            raise GpuplanError(
                f"batch_size {local} does not split into {count} pipeline microbatches"
            )
        micro = local // count
    if pp > 1 and local % micro:
        raise GpuplanError(
            f"local_batch_size {local} is not a multiple of the microbatch size {micro}"
        )
    return local, micro


def _optimizer_kernel(optimizer: dict[str, Any]) -> str:
    """[optimizer] implementation (2025: default "fused"); 2024 releases had a `fused` flag,
    off by default."""
    default = "fused" if "fused" not in optimizer or optimizer["fused"] else "foreach"
    return str(optimizer.get("implementation", default))


def _sharding(sharded: int, replicate: int, reshard: str) -> dict[str, Any]:
    """FSDP over the shard (× cp) ranks, hybrid when also replicated; plain replicas as
    ZeRO-0; fsdp_reshard_after_forward when not left at its default."""
    out: dict[str, Any] = {}
    if sharded > 1:
        out["fsdp"] = "hybrid_shard" if replicate > 1 else "full_shard"
    elif replicate > 1:
        out["zero"] = 0
    if reshard != "default":
        out["reshard_after_forward"] = reshard == "always"
    return out
