"""Launch configs for real training engines, from a training bill.

Only what the bill decided is written: the sharding stage, CPU offload, precision, micro-batch,
gradient accumulation, recompute and the parallel degrees. The keys are the engines' own:

- DeepSpeed: the ds_config JSON keys of `deepspeed/runtime/config.py` and the ZeRO section of
  `deepspeed/runtime/zero/config.py` (`stage`, `offload_optimizer`/`offload_param` with
  `device`, `overlap_comm`, `contiguous_gradients`, `reduce_bucket_size`, `allgather_bucket_size`),
  `train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel
  world size` as DeepSpeed checks it, `bf16.enabled` / `fp16.enabled`, `gradient_clipping`.
- PyTorch FSDP through Hugging Face Accelerate: the `accelerate config` file keys
  (`distributed_type: FSDP`, `mixed_precision`, `num_processes`, `num_machines`) and its
  `fsdp_config` block (`fsdp_sharding_strategy` = torch's `ShardingStrategy` names,
  `fsdp_offload_params` = `CPUOffload(offload_params=True)`, `fsdp_auto_wrap_policy`,
  `fsdp_state_dict_type`, `fsdp_activation_checkpointing`, `fsdp_backward_prefetch`,
  `fsdp_use_orig_params`); Accelerate reads a config file ending in `.json` as JSON.
- Megatron-LM: the flags of `megatron/training/arguments.py` (`--tensor-model-parallel-size`,
  `--pipeline-model-parallel-size`, `--sequence-parallel`, `--context-parallel-size`,
  `--expert-model-parallel-size`, `--use-distributed-optimizer`, `--recompute-granularity`,
  `--recompute-method`, `--recompute-num-layers`, `--micro-batch-size`, `--global-batch-size`
  in sequences, `--seq-length`, `--bf16`/`--fp16`).

What an engine cannot run is said in notes, and `engine_allows` narrows the planner's search to
layouts the engine runs as exported here (DeepSpeed and FSDP: data parallelism with sharding;
Megatron-LM: tp/pp/dp with at most its distributed optimizer, ZeRO-1).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.catalog.frameworks import get_framework
from gpuplan.engine.frozen import record
from gpuplan.engine.sharding import Layout
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:  # annotations only: a serving plan's export never loads the training code
    from gpuplan.engine.training import TrainingBill

TRAIN_ENGINES = ("deepspeed", "fsdp", "megatron")
DEEPSPEED_BUCKET = 500_000_000  # DeepSpeed's default reduce/allgather bucket (elements)

# torch.distributed.fsdp.ShardingStrategy for a ZeRO stage (Zhao et al. 2023 §3.2); FSDP has no
# ZeRO-1, and SHARD_GRAD_OP holds a subset of its memory at the same 2Ψ traffic.
FSDP_STRATEGY = {0: "NO_SHARD", 1: "SHARD_GRAD_OP", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}


@record
class TrainExport:
    """What to hand an engine: its config (or None), the launch command, and caveats."""

    engine: str
    config: dict[str, Any] | None
    command: str
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "config": self.config,
            "command": self.command,
            "notes": list(self.notes),
        }


def fsdp_strategy(layout: Layout) -> str:
    """torch's ShardingStrategy name for a layout's ZeRO stage (HYBRID_SHARD when hybrid)."""
    if layout.hybrid:
        return "HYBRID_SHARD" if layout.zero == 3 else "_HYBRID_SHARD_ZERO2"
    return FSDP_STRATEGY[layout.zero]


# the framework profile (catalog/data/frameworks.toml) each export target trains as
ENGINE_FRAMEWORK = {"deepspeed": "deepspeed", "fsdp": "fsdp2", "megatron": "megatron"}
DEFAULT_RECIPE = "adamw-bf16"


def engine_recipe(engine: str | None, recipe: str) -> str:
    """The recipe a plan for `engine` bills: in place of gpuplan's default (`adamw-bf16`), the
    recipe of the engine's framework profile (Megatron-LM: bf16 weights with fp32 gradients, 18
    bytes/param); any other recipe, or no engine, is kept."""
    if engine is None or recipe != DEFAULT_RECIPE:
        return recipe
    return get_framework(ENGINE_FRAMEWORK[engine]).recipe


def engine_allows(engine: str | None) -> Callable[[Layout, str], bool]:
    """A filter for the planner: the (layout, offload) pairs `engine` runs as exported here."""
    if engine is None:
        return lambda layout, offload: True
    if engine == "deepspeed":
        return lambda lo, offload: lo.tp == 1 and lo.pp == 1 and not lo.hybrid
    if engine == "fsdp":
        # FSDP offloads parameters, gradients and optimizer together (CPUOffload) under
        # FULL_SHARD; it has no ZeRO-1 and no optimizer-only offload.
        return lambda lo, offload: (
            lo.tp == 1 and lo.pp == 1 and lo.zero != 1 and offload in ("none", "params")
        )
    if engine == "megatron":
        return lambda lo, offload: lo.zero <= 1 and not lo.hybrid and offload == "none"
    raise GpuplanError(f"unknown training engine {engine!r}; use one of {', '.join(TRAIN_ENGINES)}")


def _precision(bill: TrainingBill) -> str:
    return bill.setup.recipe.weights.id  # bf16, fp16 or fp32


def _nodes(bill: TrainingBill) -> int:
    s = bill.setup
    return -(-s.layout.gpus // s.gpu.gpus_per_node)


def _model_parallel_note(bill: TrainingBill, engine: str) -> list[str]:
    lo = bill.setup.layout
    if lo.tp == 1 and lo.pp == 1:
        return []
    return [
        f"{engine} alone does not do tensor/pipeline parallelism here (tp={lo.tp}, pp={lo.pp}):"
        " launch this layout with Megatron-LM (or Megatron-DeepSpeed), `--export megatron`"
    ]


def _recompute_note(bill: TrainingBill, how: str) -> list[str]:
    r = bill.setup.recompute
    if r == "none":
        return []
    return [f"activation checkpointing ({r}): {how}"]


def deepspeed_config(bill: TrainingBill) -> dict[str, Any]:
    """The ds_config dict for this bill (keys of DeepSpeed's `runtime/config.py` and
    `runtime/zero/config.py`): ZeRO stage, CPU offload, precision, batch arithmetic."""
    s = bill.setup
    lo = s.layout
    zero: dict[str, Any] = {
        "stage": lo.zero,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": DEEPSPEED_BUCKET,
    }
    if lo.zero in (1, 2):
        zero["allgather_bucket_size"] = DEEPSPEED_BUCKET
    if s.offload in ("optimizer", "params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if s.offload == "params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    precision = _precision(bill)
    return {
        "train_batch_size": s.micro_batch * s.micro_batches * lo.dp,
        "train_micro_batch_size_per_gpu": s.micro_batch,
        "gradient_accumulation_steps": s.micro_batches,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": precision == "fp16"},
        "zero_optimization": zero,
    }


def deepspeed_export(bill: TrainingBill, script: str = "train.py") -> TrainExport:
    """ds_config.json, the `deepspeed` launcher line, and what the config cannot say."""
    s = bill.setup
    nodes = _nodes(bill)
    argv = ["deepspeed"]
    if nodes > 1:
        argv += ["--hostfile", "hostfile", "--num_nodes", str(nodes)]
    argv += ["--num_gpus", str(min(s.layout.gpus, s.gpu.gpus_per_node)), script]
    argv += ["--deepspeed", "ds_config.json"]
    notes = _model_parallel_note(bill, "DeepSpeed")
    notes += _recompute_note(
        bill,
        "switch it on in the model (Transformers: gradient_checkpointing_enable(), or"
        " deepspeed.checkpointing.checkpoint around each layer); the ds_config cannot",
    )
    if s.recipe.master is None:
        notes.append(
            "this recipe keeps no fp32 master copy; DeepSpeed's bf16/fp16 optimizers keep one"
        )
    return TrainExport("deepspeed", deepspeed_config(bill), shlex.join(argv), tuple(notes))


def fsdp_config(bill: TrainingBill) -> dict[str, Any]:
    """Hugging Face Accelerate's config for the FSDP plugin (`accelerate config` keys)."""
    s = bill.setup
    lo = s.layout
    precision = _precision(bill)
    return {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "mixed_precision": precision if precision in ("bf16", "fp16") else "no",
        "num_machines": _nodes(bill),
        "num_processes": lo.gpus,
        "machine_rank": 0,
        "main_training_function": "main",
        "use_cpu": False,
        "fsdp_config": {
            "fsdp_sharding_strategy": fsdp_strategy(lo),
            "fsdp_offload_params": s.offload == "params",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT" if lo.zero == 3 else "FULL_STATE_DICT",
            "fsdp_activation_checkpointing": s.recompute == "full",
            "fsdp_use_orig_params": True,
            "fsdp_sync_module_states": True,
            "fsdp_cpu_ram_efficient_loading": True,
        },
    }


def accelerate_command(bill: TrainingBill, script: str = "train.py") -> str:
    """`accelerate launch` with the process and machine counts of the bill."""
    argv = ["accelerate", "launch", "--config_file", "accelerate_fsdp.json"]
    argv += ["--num_processes", str(bill.setup.layout.gpus)]
    argv += ["--num_machines", str(_nodes(bill)), script]
    return shlex.join(argv)


def fsdp_export(bill: TrainingBill, script: str = "train.py") -> TrainExport:
    """accelerate_fsdp.json, the `accelerate launch` line, and what the config cannot say."""
    s = bill.setup
    notes = _model_parallel_note(bill, "FSDP")
    notes.append(
        f"per-GPU batch {s.micro_batch} and gradient accumulation {s.micro_batches} are the"
        " training script's (Trainer: --per_device_train_batch_size,"
        " --gradient_accumulation_steps); Accelerate's FSDP config does not hold them"
    )
    if s.layout.zero == 1:
        notes.append("FSDP has no ZeRO-1: SHARD_GRAD_OP (ZeRO-2) uses less memory, same traffic")
    if s.offload == "optimizer":
        notes.append(
            "FSDP cannot offload only the optimizer: fsdp_offload_params would move parameters"
            " and gradients too; use DeepSpeed for ZeRO-Offload of the optimizer"
        )
    if s.recompute == "selective":
        notes.append("selective recompute is not an FSDP option; wrap attention in the script")
    if _nodes(bill) > 1:
        notes.append("on each node set machine_rank, main_process_ip and main_process_port")
    return TrainExport("fsdp", fsdp_config(bill), accelerate_command(bill, script), tuple(notes))


def megatron_args(bill: TrainingBill) -> list[str]:
    """Megatron-LM command-line flags (`megatron/training/arguments.py`) for the bill's layout,
    batch arithmetic, recompute and precision, plus the model's shape."""
    s = bill.setup
    lo, a = s.layout, s.arch
    args = [
        "--tensor-model-parallel-size",
        str(lo.tp),
        "--pipeline-model-parallel-size",
        str(lo.pp),
    ]
    if lo.sp:
        args.append("--sequence-parallel")
    if lo.cp > 1:
        args += ["--context-parallel-size", str(lo.cp)]
    if lo.ep > 1 or a.moe is not None:
        args += ["--expert-model-parallel-size", str(lo.ep)]
    if lo.zero >= 1:
        args.append("--use-distributed-optimizer")
    if s.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif s.recompute == "full":
        args += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    args += [
        "--micro-batch-size",
        str(s.micro_batch),
        "--global-batch-size",
        str(s.micro_batch * s.micro_batches * lo.dp),
        "--seq-length",
        str(s.seq),
        "--max-position-embeddings",
        str(s.seq),
        "--num-layers",
        str(a.num_layers),
        "--hidden-size",
        str(a.hidden_size),
        "--num-attention-heads",
        str(a.attention.num_heads),
    ]
    att = a.attention
    if not att.is_mla and att.num_kv_heads != att.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(att.num_kv_heads)]
    if a.mlp is not None:
        args += ["--ffn-hidden-size", str(a.mlp.intermediate_size)]
    precision = _precision(bill)
    if precision in ("bf16", "fp16"):
        args.append(f"--{precision}")
    return args


def megatron_export(bill: TrainingBill, script: str = "pretrain_gpt.py") -> TrainExport:
    """The `torchrun … pretrain_gpt.py` line with the flags, and what they leave out."""
    s = bill.setup
    lo = s.layout
    per_node = min(lo.gpus, s.gpu.gpus_per_node)
    argv = ["torchrun", "--nproc_per_node", str(per_node), "--nnodes", str(_nodes(bill))]
    argv += [script, *megatron_args(bill)]
    notes = [
        "model-definition flags (--swiglu, --normalization RMSNorm, rotary embeddings,"
        " tokenizer, data and optimizer settings) are the model's own and not written here"
    ]
    if lo.zero >= 2:
        notes.append(
            f"Megatron-LM's distributed optimizer shards like ZeRO-1; ZeRO-{lo.zero} needs its"
            " FSDP path or DeepSpeed"
        )
    if s.offload != "none":
        notes.append("CPU offload is not exported for Megatron-LM; use DeepSpeed")
    if s.recipe.grads.id != "fp32" and _precision(bill) == "bf16":
        notes.append(
            "Megatron-LM keeps bf16 gradients in fp32 (accumulate_allreduce_grads_in_fp32):"
            " plan with --recipe megatron for its 18 bytes/param"
        )
    return TrainExport("megatron", None, shlex.join(argv), tuple(notes))


def training_export(bill: TrainingBill, engine: str) -> TrainExport:
    """The export of `bill` for `engine` (deepspeed, fsdp or megatron)."""
    if engine == "deepspeed":
        return deepspeed_export(bill)
    if engine == "fsdp":
        return fsdp_export(bill)
    if engine == "megatron":
        return megatron_export(bill)
    raise GpuplanError(f"unknown training engine {engine!r}; use one of {', '.join(TRAIN_ENGINES)}")
