"""Serving as an engine does it: `engine_serve`, `serve_launch` (a launch line), `engine_args`
(gpuplan's settings in the engine's own names), `check_log` (a startup log)."""

from __future__ import annotations

from typing import Any

from gpuplan.api.common import resolve, resolve_gpu
from gpuplan.api.serving import ServingPlan
from gpuplan.catalog import load_architecture
from gpuplan.catalog.launch import parse_launch
from gpuplan.catalog.models import list_models
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.profiles import engine_bill, get_adapter
from gpuplan.engine.serving import ServingSetup, serving_bill
from gpuplan.errors import GpuplanError
from gpuplan.lookup import normalise


@record
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
                "engine": b.to_dict(units),
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
    version: str | None = None,
    revision: str | None = None,
) -> EnginePlan:
    """What `engine` will do when launched with `args` (its own argument names, as in
    `vllm serve --help` with underscores, or a "non-default args" log line). `version`: the
    engine version whose rules apply (default: the newest the adapter reads). `ignored`: flags
    given that gpuplan does not model (reported as such). `revision`: the branch, tag or commit
    of a Hugging Face model; when its headers were read, the weights are their stored bytes."""

    adapter = get_adapter(engine)
    if isinstance(model, dict):
        ref = resolve(model, name=name or str(model.get("_name_or_path") or "config.json"))
    else:
        ref = resolve(model, revision)
    arch, model_id, hf_id = ref.arch, ref.model_id, ref.hf_id
    spec = resolve_gpu(gpu, gpu_memory)
    launch = adapter.launch(
        arch, spec, dict(args or {}), version=version, draft=_draft(args), stored=ref.stored
    )
    bill = engine_bill(launch)
    if ignored:
        bill = replace(bill, unmodelled=tuple(dict.fromkeys(bill.unmodelled + tuple(ignored))))
    setup = ServingSetup(
        arch=arch,
        weights=launch.weights,
        kv=launch.kv,
        gpu=spec,
        tp=launch.tp,
        pp=launch.pp,
        context=max(1, bill.max_model_len),
    )
    generic = ServingPlan(serving_bill(setup), model_id, hf_id)
    return EnginePlan(bill, generic, model_id, hf_id, bill.unmodelled)


def _draft(args: dict[str, Any] | None) -> Any:
    """The draft model a speculative-decoding config names, when it is in the catalog (a path
    is never opened here; an unknown draft is reported as unmodelled by the adapter)."""
    spec = (args or {}).get("speculative_config")
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), str):
        return None

    try:
        return load_architecture(catalog_model_of_log(spec["model"]))
    except GpuplanError:
        return None


def serve_launch(
    line: str,
    gpu: str | GpuSpec = "h100",
    gpu_memory: str | int | None = None,
    *,
    version: str | None = None,
    read_config: Any = None,
) -> EnginePlan:
    """`engine_serve` from a launch line: `vllm serve MODEL --tensor-parallel-size 4 …`.
    read_config: a callable path → text for a `--config FILE` the user named (None: not read)."""

    parsed = parse_launch(line, read_config)
    return engine_serve(
        parsed.model,
        gpu,
        engine=parsed.engine,
        args=parsed.args,
        gpu_memory=gpu_memory,
        ignored=parsed.unmodelled,
        version=version,
    )


class UnknownSetting(GpuplanError):
    """A setting the engine has no argument for (a command line reports it as a usage error)."""


# gpuplan's 16/32-bit dtype spellings as the engines' `--dtype` / `--kv-cache-dtype` take them
_PLAIN_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "auto": "auto"}


def engine_args(
    engine: str,
    knobs: dict[str, Any],
    *,
    tp: int | None = None,
    pp: int | None = None,
    context: str | None = None,
    gpus: int | str | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
) -> dict[str, Any]:
    """gpuplan's settings in `engine`'s own argument names and types (its adapter's knobs), for
    `engine_serve(args=...)`. `knobs`: common knob → value (memory_fraction, max_seqs, ...; None
    is unset); `context` is the engine's max model length as written (auto / -1 / 32k); `gpus`
    (a count) only reaches an engine that places layers itself. `dtype` is a 16/32-bit dtype
    (bf16 → the engines' bfloat16) or else a quantisation (fp8 variants → fp8); `kv_dtype` in the
    engines' spelling. A setting the engine lacks raises `UnknownSetting`."""

    adapter = get_adapter(engine)
    if gpus == "auto":
        raise UnknownSetting(
            f"--gpus auto is not a setting of {adapter.title}: give a count (or tp/pp), or ask"
            " `gpuplan plan` for the fewest GPUs"
        )
    if isinstance(gpus, int) and not adapter.knob("gpus"):
        tp, pp = _gpus_as_layout(gpus, tp, pp)
    values = {**knobs, "tp": tp, "pp": pp, "max_model_len": context}
    if adapter.knob("gpus") and gpus is not None:
        values["gpus"] = gpus
    if dtype:
        key = dtype.lower()
        if key in _PLAIN_DTYPES or key in ("bfloat16", "float16", "float32", "half"):
            values["dtype"] = _PLAIN_DTYPES.get(key, key)
        else:
            values["quantization"] = "fp8" if key.startswith("fp8") else key
    if kv_dtype:
        values["kv_cache_dtype"] = _PLAIN_DTYPES.get(kv_dtype.lower(), kv_dtype)
    args: dict[str, Any] = {}
    for knob, value in values.items():
        if value is None:
            continue
        if adapter.knob(knob) is None:
            raise UnknownSetting(f"{adapter.title} has no {knob.replace('_', ' ')} setting")
        for name, v in adapter.knob_args(knob, value).items():
            args[name] = adapter.flags.get(name).coerce(v)
    return args


def _gpus_as_layout(gpus: int, tp: int | None, pp: int | None) -> tuple[int | None, int | None]:
    """A GPU count for an engine that is told its layout: tp = gpus when neither tp nor pp is
    given (pp = gpus ÷ tp when only tp is), and a count that tp × pp contradicts refused."""
    if tp is None and pp is None:
        return gpus, None
    if pp is None and tp and gpus % tp == 0:
        return tp, (gpus // tp if gpus > tp else None)
    if tp is None and pp and gpus % pp == 0:
        return gpus // pp, pp
    if (tp or 1) * (pp or 1) != gpus:
        raise GpuplanError(
            f"--gpus {gpus} does not match tp {tp or 1} × pp {pp or 1} = {(tp or 1) * (pp or 1)}"
        )
    return tp, pp


CHECK_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("requested_gib", "Requested memory (budget)", "budget", "GiB"),
    ("weights_gib", "Weights", "weights", "GiB"),
    ("activation_peak_gib", "Activation peak", "activation_peak", "GiB"),
    ("non_torch_gib", "Non-torch memory", "non_torch", "GiB"),
    ("kv_cache_gib", "KV cache memory", "kv_cache", "GiB"),
    ("cudagraph_gib", "CUDA graphs (after KV sizing)", "cuda_graphs", "GiB"),
    ("kv_cache_tokens", "KV cache tokens", "tokens", "tokens"),
    ("gpu_blocks_v0", "GPU blocks (V0)", "blocks", "blocks"),
    ("max_concurrency", "Max concurrency", "concurrency", "x"),
)


@record
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


@record
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
    if key == "blocks":
        return float(bill.num_blocks)
    if key == "concurrency":
        return round(float(bill.max_concurrency), 2)
    if key == "kv_cache":
        return bill.kv_cache_bytes / g
    return bill.item(key).bytes / g


def catalog_model_of_log(name: str) -> str:
    """The catalog model a log names, matched by catalog name, HF id or the last part of a
    path ("/models/Qwen3-8B" → qwen3-8b). Never a file: a path named inside a log is not
    opened; a model outside the catalog needs --model."""

    tail = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    wanted = {normalise(name), normalise(tail)}
    for entry in list_models():
        names = (entry.id, entry.hf_id, entry.hf_id.split("/")[-1], *entry.aliases)
        if wanted & {normalise(n) for n in names}:
            return entry.id
    raise GpuplanError(
        f"the log names the model {name!r}, which is not in gpuplan's catalog"
        " (a path named inside a log is never opened); pass --model PATH/TO/config.json"
    )


def check_log(
    log: Any,
    model: str | dict[str, Any] | None = None,
    gpu: str | GpuSpec | None = None,
    gpu_memory: str | int | None = None,
    name: str | None = None,
    version: str | None = None,
) -> CheckReport:
    """Predict the launch a parsed startup log records and compare, figure by figure.

    model: what to size (catalog name, HF id in the catalog, config path, or a config dict);
    default: the catalog model the log names (never a path from the log). gpu_memory: default,
    the total the log printed. version: the engine version whose rules apply; default: the
    version the log prints, else the adapter's newest."""

    adapter = get_adapter(log.engine)
    problems = list(log.problems)
    target = model if model is not None else log.model
    if target is None:
        raise GpuplanError(
            "the log names no model (no launch-arguments line); pass --model PATH/TO/config.json"
        )
    if model is None:
        target = catalog_model_of_log(str(target))
    rules_version = version or _log_version(adapter, log, problems)
    f = log.figures
    if gpu_memory is None:
        if "total_gib" in f:
            gpu_memory = round(f["total_gib"] * 2**30)
        elif "requested_gib" in f and f.get("utilization"):
            gpu_memory = round(f["requested_gib"] / f["utilization"] * 2**30)
    args = {k: v for k, v in log.args.items() if k in adapter.flags.names()}
    args.update(getattr(log, "observed", {}))
    fraction = adapter.knob("memory_fraction")
    if "utilization" in f and fraction and fraction not in args and log.engine == "vllm":
        args[fraction] = f["utilization"]
    length = adapter.knob("max_model_len")
    if length and length not in args and "concurrency_len" in f:
        args[length] = int(f["concurrency_len"])
    plan = engine_serve(
        target,
        gpu or "h100",
        engine=log.engine,
        args=args,
        gpu_memory=gpu_memory,
        name=name,
        version=rules_version,
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
    return CheckReport(log, plan, tuple(rows), tuple(problems))


def _log_version(adapter: Any, log: Any, problems: list[str]) -> str | None:
    """The version the log prints, if the adapter has rules for it (else a note, newest)."""
    if not log.version:
        if log.v0:
            problems.append("a V0-engine log without a version: read with the last V0 rules (0.7)")
            return "0.7.3"
        problems.append(
            f"the log prints no {adapter.title} version: the newest rules ({adapter.newest}) were"
            " used (pass --engine-version)"
        )
        return None
    try:
        return str(adapter.resolve_version(log.version))
    except GpuplanError as err:
        problems.append(f"{err}; the newest rules were used")
        return None
