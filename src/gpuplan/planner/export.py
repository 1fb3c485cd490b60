"""Launch configs for real engines, from a plan.

Serving (here): each engine's adapter (engine/profiles/<engine>/) spells the plan as its own
flags. Only what the plan decided is written: parallel layout, dtypes, context, memory fraction
and the concurrency the KV cache was sized for.

Training (planner/training_export.py, re-exported here): DeepSpeed's ds_config, Accelerate's
FSDP config with its `accelerate launch` line, and Megatron-LM's command-line flags.
"""

from __future__ import annotations

from gpuplan.engine.serving import ServingBill
from gpuplan.errors import GpuplanError
from gpuplan.planner.training_export import (
    TRAIN_ENGINES,
    TrainExport,
    accelerate_command,
    deepspeed_config,
    fsdp_config,
    megatron_args,
    training_export,
)

__all__ = [
    "ENGINES",
    "TRAIN_ENGINES",
    "TrainExport",
    "accelerate_command",
    "deepspeed_config",
    "fsdp_config",
    "launch_command",
    "megatron_args",
    "training_export",
]

ENGINES = ("vllm", "sglang", "trtllm")


def launch_command(bill: ServingBill, model: str, engine: str = "vllm") -> str:
    """The command line that launches this plan on `engine` (its adapter spells the flags)."""
    from gpuplan.engine.profiles import PlanLaunch, get_adapter

    if engine not in ENGINES:
        raise GpuplanError(f"unknown engine {engine!r}; export to one of {', '.join(ENGINES)}")
    s = bill.setup
    adapter = get_adapter(engine)
    checkpoint = s.arch.quantization
    plan = PlanLaunch(
        model=model,
        tp=s.tp,
        pp=s.pp,
        max_model_len=s.context,
        memory_fraction=s.headroom,
        max_seqs=max(1, min(bill.max_concurrent_sequences, 1024)),
        weights=s.weights.precision.id,
        base=s.weights.base.id,
        kv=s.kv.id,
        checkpoint_quantised=checkpoint is not None
        and checkpoint.precision == s.weights.precision.id,
    )
    return adapter.launch_command(model, adapter.plan_args(plan))
