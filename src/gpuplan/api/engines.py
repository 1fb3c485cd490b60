"""Serving as an engine does it: `engine_serve`, `serve_launch` (a launch line), `check_log` (a startup log)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuplan.api.common import (
    quantized_format,
    resolve,
    resolve_gpu,
    resolve_weight_format,
)
from gpuplan.api.serving import ServingPlan
from gpuplan.catalog import get_precision
from gpuplan.engine.architecture import Architecture
from gpuplan.engine.checkpoint import Checkpoint
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.precision import Precision
from gpuplan.engine.quantization import standard_layout
from gpuplan.engine.serving import (
    ServingSetup,
    serving_bill,
)
from gpuplan.engine.weights import WeightFormat
from gpuplan.errors import GpuplanError
from gpuplan.units import parse_bytes

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
    "llamacpp": {},  # its settings travel as llama.cpp's own options (engine/profiles/llamacpp.py)
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


_ONLINE_METHODS = {"fp8": "fp8-tensor", "bitsandbytes": "nf4", "w8a8_fp8": "fp8-tensor"}


def engine_weight_format(
    arch: Architecture,
    dtype: str | None,
    quantization: str | None,
    stored: Checkpoint | None = None,
) -> WeightFormat:
    """The weights as an engine loads them, from its --dtype and --quantization.

    --dtype sets the 16-bit (or fp32) base; a quantised checkpoint keeps its own format
    (--quantization naming its method is a no-op); --quantization fp8 / bitsandbytes on a
    16-bit checkpoint quantises the linear weights while loading (vLLM's online fp8:
    per-tensor scales, embeddings and LM head kept at the base). A checkpoint method (awq,
    gptq, compressed-tensors, ...) named for a config without a quantization_config is sized
    as that method's standard layout, with a note saying so (engine/quantization.py).
    `stored` (the checkpoint's headers) gives the exact bytes when nothing converts them."""
    key = (dtype or "auto").lower()
    if key not in _DTYPES:
        raise GpuplanError(f"--dtype {dtype!r} is not one of auto, bfloat16, float16, float32")
    base_id = _DTYPES[key]
    checkpoint = resolve_weight_format(arch, None, stored)
    base = get_precision(base_id) if base_id else checkpoint.base
    q = (quantization or "").lower().replace("-", "_") or None
    if arch.quantization is not None:
        return replace(checkpoint, base=base)
    if q is None:
        return WeightFormat(
            base, base, stored=checkpoint.stored if base == checkpoint.base else None
        )
    if q in _ONLINE_METHODS:
        return WeightFormat(get_precision(_ONLINE_METHODS[q]), base)
    standard = standard_layout(q)
    if standard is not None:
        return quantized_format(standard, base, None)
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
    revision: str | None = None,
) -> EnginePlan:
    """What `engine` will do when launched with `args` (its own argument names, as in
    `vllm serve --help` with underscores, or a "non-default args" log line)."""
    from gpuplan.engine.profiles import EngineLaunch, engine_bill

    if engine not in ENGINE_ARG_NAMES:
        raise GpuplanError(f"unknown engine {engine!r}; choose vllm, sglang, trtllm or llamacpp")
    args = dict(args or {})
    if isinstance(model, dict):
        model_id = name or str(model.get("_name_or_path") or "config.json")
        ref = resolve(model, name=model_id)
    else:
        ref = resolve(model, revision)
    arch, model_id, hf_id = ref.arch, ref.model_id, ref.hf_id
    fmt = engine_weight_format(arch, args.get("dtype"), args.get("quantization"), ref.stored)
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
    if engine == "llamacpp":
        fields["engine_options"] = _llamacpp_options(args)
        kv = fields["engine_options"][1][1][0]
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


_LLAMACPP_KV = {"f16": "fp16", "f32": "fp32", "bf16": "bf16"}


def _llamacpp_options(args: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """llama-server's arguments as its adapter's options, with K and V cache types resolved."""
    from gpuplan.engine.profiles.llamacpp import options_from_args

    options = options_from_args(args)
    k = get_precision(_LLAMACPP_KV.get(options.cache_type_k, options.cache_type_k), for_kv=True)
    v = get_precision(_LLAMACPP_KV.get(options.cache_type_v, options.cache_type_v), for_kv=True)
    return (("options", options), ("kv_types", (k, v)))


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
        raise GpuplanError(
            "the log names no model (no launch-arguments line); pass --model PATH/TO/config.json"
        )
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
