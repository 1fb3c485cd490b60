"""Launch configs for real engines, from a plan.

Serving (here): the flags are the engines' own (vLLM `vllm serve` engine arguments, SGLang
`launch_server` server arguments). Only what the plan decided is written: parallel layout,
dtypes, context, memory fraction and the concurrency the KV cache was sized for.

Training (planner/training_export.py, re-exported here): DeepSpeed's ds_config, Accelerate's
FSDP config with its `accelerate launch` line, and Megatron-LM's command-line flags.
"""

from __future__ import annotations

import shlex

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

ENGINES = ("vllm", "sglang")

# vLLM / SGLang spell dtypes as torch does; weight formats map to their --quantization names.
_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_QUANTIZATION = {
    "fp8": "fp8",
    "fp8-tensor": "fp8",
    "fp8-block128": "fp8",
    "awq-int4-g128": "awq",
    "gptq-int4-g128": "gptq",
    "gptq-int8-g128": "gptq",
    "mxfp4": "mxfp4",
    "nf4": "bitsandbytes",
    "nf4-dq": "bitsandbytes",
}
_KV = {"fp8": "fp8", "bf16": "auto", "fp16": "auto", "fp32": "auto"}


def launch_command(bill: ServingBill, model: str, engine: str = "vllm") -> str:
    """The command line that launches this plan on `engine`."""
    s = bill.setup
    fmt = s.weights
    dtype = _DTYPE.get(fmt.precision.id) or _DTYPE.get(fmt.base.id, "auto")
    quant = _QUANTIZATION.get(fmt.precision.id)
    checkpoint_quantised = (
        s.arch.quantization is not None and s.arch.quantization.precision == fmt.precision.id
    )
    seqs = max(1, min(bill.max_concurrent_sequences, 1024))
    if engine == "vllm":
        args = [
            "vllm",
            "serve",
            model,
            "--tensor-parallel-size",
            str(s.tp),
            "--pipeline-parallel-size",
            str(s.pp),
            "--max-model-len",
            str(s.context),
            "--gpu-memory-utilization",
            f"{s.headroom:g}",
            "--max-num-seqs",
            str(seqs),
            "--dtype",
            dtype,
        ]
        if quant and not checkpoint_quantised:
            args += ["--quantization", quant]
        if _KV.get(s.kv.id, "auto") != "auto":
            args += ["--kv-cache-dtype", _KV[s.kv.id]]
        return shlex.join(args)
    if engine == "sglang":
        args = [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--tp-size",
            str(s.tp),
            "--pp-size",
            str(s.pp),
            "--context-length",
            str(s.context),
            "--mem-fraction-static",
            f"{s.headroom:g}",
            "--max-running-requests",
            str(seqs),
            "--dtype",
            dtype,
        ]
        if quant and not checkpoint_quantised:
            args += ["--quantization", quant]
        if _KV.get(s.kv.id, "auto") != "auto":
            args += ["--kv-cache-dtype", "fp8_e4m3"]
        return shlex.join(args)
    raise GpuplanError(f"unknown engine {engine!r}; export to one of {', '.join(ENGINES)}")
