"""The engine-log corpus (tests/data/engine_logs/*.json) as prediction cases, shared by
tests/test_engine_logs.py and bench/engine_accuracy.py.

Each case gives the engine, its version, the GPU, the model's config.json and the launch
arguments its source states; gpuplan's adapter predicts the same launch and the logged figures
are compared: weights, KV-cache memory and KV tokens (V0 logs: GPU blocks), and for failed
starts whether a failure is predicted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.api import engine_serve
from gpuplan.catalog import get_gpu
from gpuplan.catalog.engine_logs import parse_log
from gpuplan.catalog.llamacpp_logs import parse_llamacpp_log
from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.profiles.llamacpp import ADAPTER as LLAMACPP
from gpuplan.engine.profiles.llamacpp.bill import (
    context_cells,
    gpu_layers,
    kv_layout,
    options_from_args,
    requested_context,
)
from gpuplan.engine.profiles.trtllm.engine_start import EngineStart, engine_start
from gpuplan.errors import GpuplanError

DATA = Path(__file__).parent / "data"
LOG_FILES = (
    "vllm-0.19-h100.json",
    "public-reports.json",
    "public-logs.json",
    "public-logs-3.json",
    "public-logs-4.json",
    "public-logs-6.json",
    "public-logs-7.json",
)
# SGLang and TensorRT-LLM logs of issue 20 (tests/test_engine_logs_engines.py holds their bars)
ENGINE_FILES = ("public-logs-5.json",)
ALL_LOG_FILES = LOG_FILES + ENGINE_FILES
GIB = 2**30

# the GPU a case ran on, from its `gpu_model` text (older files), most specific first
_GPU_TEXT = {
    "3090": "rtx-3090",
    "4090": "rtx-4090",
    "5090": "rtx-5090",
    "A100 40GB": "a100-40gb",
    "A100": "a100-80gb",
    "L40S": "l40s",
    "L4": "l4",
    "A10": "a10",
    "H200": "h200",
    "H100": "h100",
    "B200": "b200",
    "MI300X": "mi300x",
}


def config_for(model_id: str, name: str | None = None) -> dict[str, Any]:
    want = (name or model_id.replace("/", "--") + ".json").lower()
    for p in (DATA / "engine_configs").glob("*.json"):
        if p.name.lower() == want:
            return dict(json.loads(p.read_text()))
    raise FileNotFoundError(f"no config.json for {model_id}")


@dataclass(frozen=True)
class Case:
    """One log (or log-derived measurement) ready to be predicted."""

    case_id: str
    file: str
    engine: str
    version: str | None
    gpu: str
    model_id: str
    config: str | None
    args: dict[str, Any]
    logged: dict[str, float]
    failed: bool
    inputs_known: bool
    record: dict[str, Any]

    @property
    def gpu_total_bytes(self) -> int | None:
        total = self.logged.get("total_gib")
        return round(total * GIB) if total else None


def _version(text: str | None) -> str | None:
    m = re.search(r"(\d+\.\d+\.\d+)", text or "")
    return m.group(1) if m else None


def _old_case(c: dict[str, Any], file: str) -> Case:
    """A case of the first two files, whose fields predate `launch_args`."""
    text = c.get("gpu_model") or ""
    known_gpu = bool(text) and not text.startswith("unspecified")
    gpu = next((v for k, v in _GPU_TEXT.items() if k in text), "h100")
    args: dict[str, Any] = {}
    log_args: dict[str, Any] = {}
    observed: dict[str, str] = {}
    try:
        log = parse_log(c["verbatim_excerpt"])
        log_args, observed = dict(log.args), dict(log.observed)
        figures = dict(log.figures)
    except GpuplanError:
        figures = {}
    engine = c["engine"]
    names = {
        "vllm": ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len"),
        "sglang": ("tp_size", "pp_size", "context_length"),
        "trtllm": ("tp_size", "pp_size", "max_seq_len"),
    }[engine]
    for key, name in zip(
        ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len"), names, strict=True
    ):
        if c.get(key):
            args[name] = c[key]
    for key in ("gpu_memory_utilization", "mem_fraction_static", "quantization", "kv_cache_dtype"):
        if c.get(key) not in (None, "auto"):
            args[key] = c[key]
    for key, value in log_args.items():
        args.setdefault(key, value)
    args.update(observed)
    if "utilization" in figures and engine == "vllm":
        args.setdefault("gpu_memory_utilization", figures["utilization"])
    logged = {k: v for k, v in figures.items()}
    for key in (
        "weights_gib",
        "kv_cache_gib",
        "kv_cache_tokens",
        "activation_peak_gib",
        "non_torch_gib",
    ):
        if c.get(key) is not None:
            logged[key] = c[key]
    if c.get("gpu_blocks"):
        logged["gpu_blocks"] = c["gpu_blocks"]
    total = c.get("gpu_total_memory_reported")
    if total and "GiB" in str(total):
        logged["total_gib"] = float(str(total).split()[0])
    version = _version(c.get("engine_version"))
    if "V0" in (c.get("engine_version") or "") and engine == "vllm":
        args["vllm_engine"] = "v0"
        version = version if version and version.startswith("0.") else "0.6.4"
    # a start that failed after the KV cache was sized (an OOM during graph capture) is
    # compared on its KV figures; one that failed before is a predicted-failure case
    outcome = str(c.get("outcome", "started"))
    failed = outcome.startswith("failed") and "OutOfMemoryError" not in outcome
    return Case(
        c["case_id"],
        file,
        engine,
        version if version and version.startswith("0.") or engine != "vllm" else None,
        gpu,
        c["model_id"],
        None,
        args,
        logged,
        failed,
        known_gpu and version is not None,
        c,
    )


def _new_case(c: dict[str, Any], file: str) -> Case:
    args = dict(c.get("launch_args") or {})
    return Case(
        c["case_id"],
        file,
        c["engine"],
        c.get("engine_version"),
        c["gpu"],
        c["model_id"],
        c.get("config"),
        args,
        dict(c.get("logged") or {}),
        str(c.get("outcome", "started")).startswith("failed"),
        bool(c.get("inputs_known", True)),
        c,
    )


def load_cases(files: tuple[str, ...] = LOG_FILES) -> list[Case]:
    out = []
    for name in files:
        for c in json.loads((DATA / "engine_logs" / name).read_text())["cases"]:
            if c["engine"] in ("trtllm", "tensorrt-llm") and (
                (c.get("launch_args") or {}).get("backend") != "pytorch"
            ):
                continue  # TensorRT-engine runs: trtllm_records() / predict_trtllm_engine
            out.append(_new_case(c, name) if "launch_args" in c else _old_case(c, name))
    return out


@dataclass(frozen=True)
class Result:
    case: Case
    bill: Any  # EngineBill, or None when the launch is refused
    refused: str | None
    weights_err: float | None
    kv_mem_err: float | None
    tokens_err: float | None  # KV tokens (V0: GPU blocks; SGLang: pool tokens)

    @property
    def predicted_fail(self) -> bool:
        return self.refused is not None or (self.bill is not None and not self.bill.fits)

    @property
    def weights_ok(self) -> bool | None:
        return None if self.weights_err is None else abs(self.weights_err) <= 0.02

    @property
    def kv_ok(self) -> bool | None:
        """KV tokens within 10 % (KV memory when no token figure is logged); a failed start
        must be predicted as a failure."""
        if self.case.failed:
            return self.predicted_fail
        if self.predicted_fail:
            return False
        err = self.tokens_err if self.tokens_err is not None else self.kv_mem_err
        return None if err is None else abs(err) <= 0.10


def _rel(pred: float, logged: float | None) -> float | None:
    if logged is None or logged == 0:
        return None
    return pred / logged - 1


def predict(case: Case) -> Result:
    config = config_for(case.model_id, case.config)
    try:
        plan = engine_serve(
            config,
            case.gpu,
            engine=case.engine,
            args=case.args,
            gpu_memory=case.gpu_total_bytes,
            name=case.model_id,
            version=case.version,
        )
    except GpuplanError as err:
        return Result(case, None, str(err), None, None, None)
    bill = plan.bill
    lg = case.logged
    weights = bill.item("weights").bytes / GIB
    if case.engine == "sglang":
        w_err = _rel(weights, lg.get("weights_gb"))
        kv = bill.kv_capacity_tokens * bill.kv_bytes_per_token / GIB
        kv_logged = (lg["k_size_gb"] + lg["v_size_gb"]) if "k_size_gb" in lg else None
        return Result(
            case,
            bill,
            None,
            w_err,
            _rel(kv, kv_logged),
            _rel(bill.kv_capacity_tokens, lg.get("kv_cache_tokens")),
        )
    w_err = _rel(weights, lg.get("weights_gib"))
    kv_err = (
        _rel(bill.kv_cache_bytes / GIB, lg.get("kv_cache_gib"))
        if lg.get("kv_cache_gib", 0) > 0
        else None
    )
    if lg.get("kv_cache_tokens"):
        t_err = _rel(bill.kv_capacity_tokens, lg["kv_cache_tokens"])
    elif lg.get("gpu_blocks"):
        t_err = _rel(bill.num_blocks, lg["gpu_blocks"])
    else:
        t_err = None
    return Result(case, bill, None, w_err, kv_err, t_err)


GPU_CLASSES = ("SXM", "PCIe datacenter", "workstation/consumer", "AMD")


def gpu_class(gpu_id: str) -> str:
    """Issue 20's GPU classes, from the catalog: AMD; SXM (NVLink through NVSwitch: HGX boards,
    NVL72); workstation/consumer (RTX and GTX cards); the rest PCIe datacenter (L4, L40S, A10G, T4,
    A100/H100 PCIe, ...)."""
    g = get_gpu(gpu_id)
    if g.vendor == "amd":
        return "AMD"
    if g.interconnect_kind == "nvswitch":
        return "SXM"
    if g.id.startswith(("rtx", "gtx")):
        return "workstation/consumer"
    return "PCIe datacenter"


def false_alarms(results: list[Result]) -> tuple[int, int]:
    """(runs that started but gpuplan says will not start, runs that started)."""
    started = [r for r in results if not r.case.failed]
    return sum(r.predicted_fail for r in started), len(started)


def class_counts(results: list[Result]) -> dict[str, dict[str, tuple[int, int]]]:
    """summary_counts per GPU class."""
    return {
        cls: summary_counts([r for r in results if gpu_class(r.case.gpu) == cls])
        for cls in GPU_CLASSES
    }


def summary_counts(results: list[Result]) -> dict[str, tuple[int, int]]:
    """(passing, counted) for weights, KV (inputs known) and failed starts."""
    w = [r.weights_ok for r in results if r.weights_ok is not None]
    kv = [
        r.kv_ok
        for r in results
        if r.case.inputs_known and r.kv_ok is not None and not r.case.failed
    ]
    fails = [r.kv_ok for r in results if r.case.failed]
    return {
        "weights": (sum(bool(x) for x in w), len(w)),
        "kv": (sum(bool(x) for x in kv), len(kv)),
        "failed_starts": (sum(bool(x) for x in fails), len(fails)),
    }


# --------------------------------------------------------------------------------------
# llama.cpp load logs (llamacpp-logs.json): KV cells, KV buffer per device, compute buffers
# --------------------------------------------------------------------------------------

LLAMACPP_FILE = "llamacpp-logs.json"
MIB = 2**20


def llamacpp_records() -> list[dict[str, Any]]:
    return list(json.loads((DATA / "engine_logs" / LLAMACPP_FILE).read_text())["cases"])


def config_from_log(meta: dict[str, Any]) -> dict[str, Any]:
    """A Llama-style config.json holding the shapes a llama.cpp log prints (print_info /
    llm_load_print_meta): enough for the KV cache and the compute graph's tensor sizes."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": meta["n_embd"],
        "num_hidden_layers": meta["n_layer"],
        "num_attention_heads": meta["n_head"],
        "num_key_value_heads": meta["n_head_kv"],
        "head_dim": meta["n_embd_head_k"],
        "intermediate_size": meta["n_ff"],
        "vocab_size": meta["n_vocab"],
        "max_position_embeddings": meta["n_ctx_train"],
    }


@dataclass(frozen=True)
class LlamaCppResult:
    """One llama.cpp log against the adapter: cells, KV MiB per device, compute MiB per device
    (GPU devices by index, the host as "host")."""

    record: dict[str, Any]
    cells: int
    cells_logged: int | None
    kv: dict[str, float]
    kv_logged: dict[str, float]
    compute: dict[str, float]
    compute_logged: dict[str, float]
    predicted_fail: bool = False

    @property
    def failed(self) -> bool:
        return str(self.record.get("outcome", "started")).startswith("failed")

    @property
    def kv_exact(self) -> bool:
        """Every device's KV buffer within 0.01 MiB (the log prints two decimals)."""
        keys = set(self.kv_logged) | {k for k, v in self.kv.items() if v}
        return bool(self.kv_logged) and all(
            abs(self.kv.get(k, 0.0) - self.kv_logged.get(k, 0.0)) <= 0.01 for k in keys
        )

    def compute_errors(self) -> dict[str, float]:
        return {
            k: self.compute.get(k, 0.0) / v - 1 for k, v in self.compute_logged.items() if v > 0
        }


def _device_key(name: str) -> str:
    """CUDA0 / ROCm1 / Vulkan0 → GPU0 / GPU1; CUDA_Host, ROCm_Host, CPU → host."""
    m = re.fullmatch(r"(?:CUDA|ROCm|Vulkan|SYCL|MTL)(\d+)", name)
    return f"GPU{m.group(1)}" if m else "host"


def _by_device(table: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, mib in table.items():
        if name in ("CPU_Mapped",):
            continue
        key = _device_key(name)
        out[key] = round(out.get(key, 0.0) + mib, 2)
    return out


def predict_llamacpp(record: dict[str, Any]) -> LlamaCppResult:
    """The adapter's KV cells, KV layout and compute buffers for the case's launch (its own
    arguments, its build's rules), without its GGUF file."""
    log = parse_llamacpp_log(record["verbatim_excerpt"])
    if record.get("config"):
        config = config_for(record["model_id"], record["config"])
    else:
        config = config_from_log(record.get("hparams") or log.meta)
    arch = architecture_from_config(config)
    args = dict(record["launch_args"])
    o = options_from_args(args, version=f"b{record['build']}" if record.get("build") else None)
    n_ctx = context_cells(o, requested_context(o, arch.max_position_embeddings or 4096))
    ngl = gpu_layers(o, arch.num_layers)
    p = kv_layout(arch, o, LLAMACPP.cache_types(args), n_ctx, ngl)
    kv = {d.name: round(d.kv / MIB, 2) for d in p.devices if d.kv}
    compute = {d.name: round(d.compute / MIB, 2) for d in p.devices if d.compute}
    logged = record["logged"]
    logged_cells = log.context.get("kv_size") or log.context.get("n_ctx")
    if logged_cells is None and log.kv_total.get("cells"):  # "512 cells, …, 10/10 seqs"
        logged_cells = log.kv_total["cells"][0] * log.kv_total["streams"]
    kv_logged = _by_device(logged.get("kv_mib") or logged.get("failed_alloc_mib") or {})
    return LlamaCppResult(
        record,
        n_ctx,
        logged_cells,
        kv,
        kv_logged,
        compute,
        _by_device(logged.get("compute_mib") or {}),
        _fails(record, p),
    )


def _fails(record: dict[str, Any], p: Any) -> bool:
    """Whether a GPU's KV cache and compute buffer alone exceed its memory (the weights are
    not counted here: no GGUF file), with the memory the source states or the catalog's."""
    mib = record.get("gpu_memory_mib")
    if mib is None:
        try:
            mib = get_gpu(record["gpu"]).memory_bytes / MIB
        except GpuplanError:
            return False
    return any((d.kv + d.compute) / MIB > mib for d in p.devices[:-1])


# --------------------------------------------------------------------------------------
# TensorRT-LLM engine-backend logs (ENGINE_FILES): the KV pool from the free memory logged
# --------------------------------------------------------------------------------------


def trtllm_records(files: tuple[str, ...] = ENGINE_FILES) -> list[dict[str, Any]]:
    return [
        c
        for name in files
        for c in json.loads((DATA / "engine_logs" / name).read_text())["cases"]
        if c["engine"] == "trtllm" and c["launch_args"].get("backend") == "tensorrt"
    ]


@dataclass(frozen=True)
class TrtllmEngineResult:
    """One TensorRT-engine log against trtllm/bill.py's engine_kv_blocks: the blocks the logged
    free memory gives (a range: 'available' is printed to 0.01 GiB) and the KV bytes per token
    (from config.json, or implied by the log when the model is not named)."""

    record: dict[str, Any]
    per_token: int
    per_token_from_config: bool
    blocks: tuple[int, int] | None  # (low, high) for available ± 0.005 GiB
    kv_bytes_error: float | None  # logged KV bytes vs blocks × block × per-token, relative
    # the pool and its headroom at available ± 0.005 GiB (trtllm/engine_start.py)
    start: tuple[EngineStart, EngineStart] | None = None

    @property
    def failed(self) -> bool:
        return str(self.record.get("outcome", "started")).startswith("failed")

    @property
    def predicted_fail(self) -> bool:
        """A failed start when the headroom is below the floor across the printed range."""
        return self.start is not None and all(s.fails for s in self.start)

    @property
    def blocks_ok(self) -> bool | None:
        logged = self.record["logged"].get("num_blocks")
        if self.blocks is None or logged is None:
            return None
        return self.blocks[0] <= logged <= self.blocks[1]


def _trt_per_token(record: dict[str, Any]) -> tuple[int, bool]:
    """Bytes per token: the adapter's (config.json and the KV dtype argument), else the log's
    KV bytes ÷ tokens."""
    lg = record["logged"]
    if record.get("config") or record.get("model_id") and record["model_id"].count("/") == 1:
        try:
            config = config_for(record["model_id"], record.get("config"))
        except FileNotFoundError:
            config = None
        if config is not None:
            args = {k: v for k, v in record["launch_args"].items() if k == "kv_cache_dtype"}
            plan = engine_serve(config, "h100", engine="trtllm", args=args, name="log")
            return plan.bill.kv_bytes_per_token, True  # bytes per token do not depend on the GPU
    kv = lg.get("kv_cache_bytes") or lg["kv_cache_gib"] * GIB
    return round(kv / lg["kv_cache_tokens"]), False


# trtllm-build's tokens per block when the log does not print it: 32 from the 0.1x releases
# whose PluginConfig has paged context FMHA on by default (tensorrt_llm/plugin/plugin.py
# _tokens_per_block; 64 before), the figure the 0.19 RTX 5090 log prints
TRT_BUILD_TOKENS_PER_BLOCK = 32


def _compute_capability(record: dict[str, Any]) -> str | None:
    try:
        return get_gpu(record["gpu"]).compute_capability
    except GpuplanError:
        return record.get("compute_capability")


def predict_trtllm_engine(record: dict[str, Any]) -> TrtllmEngineResult:
    lg = record["logged"]
    per_token, from_config = _trt_per_token(record)
    blocks = start = None
    if lg.get("available_gib") is not None:
        frac = float(
            lg.get("fraction") or record["launch_args"].get("free_gpu_memory_fraction", 0.9)
        )
        block = int(lg.get("tokens_per_block") or TRT_BUILD_TOKENS_PER_BLOCK)
        seq = record["launch_args"].get("max_seq_len")
        cc = _compute_capability(record)
        low, high = (int((lg["available_gib"] + d) * GIB) for d in (-0.005, 0.005))
        start = (
            engine_start(low, frac, per_token, block, seq, cc),
            engine_start(high, frac, per_token, block, seq, cc),
        )
        if lg.get("tokens_per_block"):
            blocks = (start[0].blocks, start[1].blocks)
    err = None
    if from_config and lg.get("kv_cache_tokens"):
        logged = lg.get("kv_cache_bytes") or lg["kv_cache_gib"] * GIB
        err = lg["kv_cache_tokens"] * per_token / logged - 1
    return TrtllmEngineResult(record, per_token, from_config, blocks, err, start)
