"""Launch lines for real serving engines, from a plan: each engine's adapter
(engine/profiles/<engine>/) spells the plan as its own flags. Only what the plan decided is
written: parallel layout, dtypes, context, memory fraction and the concurrency the KV cache was
sized for. (Training exports — DeepSpeed, Accelerate FSDP, Megatron-LM — are
planner/training_export.py.)

Importing this module loads the engine adapters: import it only where a launch line is asked for.
"""

from __future__ import annotations

from gpuplan.engine.profiles import PlanLaunch, get_adapter
from gpuplan.engine.serving import ServingBill
from gpuplan.errors import GpuplanError

__all__ = ["ENGINES", "launch_command"]

ENGINES = ("vllm", "sglang", "trtllm")


def launch_command(bill: ServingBill, model: str, engine: str = "vllm") -> str:
    """The command line that launches this plan on `engine` (its adapter spells the flags)."""
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
