"""Engine adapters: the memory bill a real serving engine draws up at startup, one adapter each.

The lesson's bill (`engine/serving.py`, `--engine generic`) charges a fixed workspace and CUDA
context against a headroom. An adapter instead mirrors one engine's own accounting: how it sizes
its budget, what it subtracts, and how it cuts the rest into KV-cache blocks or token slots, so
that `kv_capacity_tokens` is the figure that engine will print in its startup log.

    vllm/      vLLM, by version: the V1 engine (0.10 → newest) and the legacy V0 engine (0.5–0.9)
    sglang/    SGLang: mem_fraction_static × free-before-load − weights → max_total_num_tokens
    trtllm/    TensorRT-LLM (PyTorch backend): free_gpu_memory_fraction × memory free after loading
    llamacpp/  llama.cpp (llama-server, GGUF): layers per GPU / host by --n-gpu-layers, KV cells
    common.py  what they share: stage weights, RoPE tables, page arithmetic, version rules
    flags.py   flag tables: spellings, kinds (size suffixes), defaults, effect on memory

An adapter (`EngineAdapter`) is: a name, its flag table (package data), the common knobs in its
own names, version rules as data keyed by version range, `launch(...)` (its arguments → an
`EngineLaunch`), `bill(launch)` → `EngineBill`, and `launch_command(model, args)` → the line
that starts it. `register` adds one; `get_adapter(name)` finds it. Nothing here reads a file
other than the adapters' own package data.
"""

from __future__ import annotations

import importlib
import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.bill import Bill, LineItem
from gpuplan.engine.frozen import field, record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.precision import Precision
from gpuplan.engine.profiles.common import GIB, engine_kv_precision, engine_weight_format, gib
from gpuplan.engine.profiles.flags import FlagTable, ParsedFlags
from gpuplan.engine.weights import WeightFormat
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_yaml

if TYPE_CHECKING:
    from gpuplan.engine.checkpoint import Checkpoint

__all__ = ["GIB", "gib"]  # re-exported for the adapters (defined in common.py)

# The knobs every engine has, each spelled its own way (an adapter's `knobs` maps them).
KNOBS = (
    "tp",  # tensor-parallel degree
    "pp",  # pipeline-parallel degree
    "dp",  # data-parallel replicas
    "max_model_len",  # tokens per request
    "memory_fraction",  # the engine's memory share (of total, of free, of what is left)
    "max_seqs",  # concurrent sequences
    "max_batched_tokens",  # tokens per step / prefill chunk
    "block_size",  # KV page in tokens
    "enforce_eager",  # no CUDA graphs
    "dtype",  # weights' base dtype (torch names)
    "quantization",  # weight quantisation method
    "kv_cache_dtype",  # KV cache dtype
    "gpus",  # GPUs one process spreads layers over (llama.cpp --device)
    "gpu_layers",  # layers offloaded to GPU, the rest in host RAM (llama.cpp -ngl)
    "split_mode",  # how layers or rows spread over GPUs (llama.cpp -sm)
    "tensor_split",  # the GPUs' shares (llama.cpp -ts)
)


@record
class EngineLaunch:
    """One engine launch: the model, the GPUs, and the engine's own arguments (`args`, by its
    own names, only those given: an absent name means the engine's default)."""

    engine: str
    arch: Architecture
    weights: WeightFormat
    kv: Precision
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    dp: int = 1
    args: Mapping[str, Any] = field(default_factory=dict)
    version: str = ""  # the engine version the rules are taken from ("" = the adapter's newest)
    extra_params: int = 0  # weights the text decoder does not hold (vision encoder, projector)
    is_multimodal: bool = False
    draft: Architecture | None = None  # a speculative-decoding draft model, when one is named
    interconnect: str = ""  # "nvlink" | "pcie" | "" (unknown: from the GPU)

    def arg(self, name: str, default: Any = None) -> Any:
        value = self.args.get(name)
        return default if value is None else value


@record
class Range:
    """A figure gpuplan cannot pin down: nominal, low-high, and what moves it."""

    nominal: int
    low: int
    high: int
    moved_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "nominal": self.nominal,
            "low": self.low,
            "high": self.high,
            "moved_by": self.moved_by,
        }


@record
class EngineBill(Bill):
    """What the engine will do with one GPU (the rank that sets the KV size)."""

    launch: EngineLaunch
    engine: str
    version: str  # the engine version whose rules were applied
    total_bytes: int  # the memory the engine sees on one GPU
    budget_bytes: int  # the share it lets itself use (requested memory)
    items: tuple[LineItem, ...]  # the budget lines, KV cache last
    kv_cache_bytes: int  # may be negative: a failed start
    kv_capacity_tokens: int
    max_concurrency: float
    max_model_len: int
    kv_bytes_per_token: int  # one token on this GPU, all its layer slots
    block_size: int
    num_blocks: int
    fits: bool
    failure: str | None = None
    outside_budget: tuple[LineItem, ...] = ()  # allocated after KV sizing (e.g. CUDA graphs)
    ranges: dict[str, Range] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)  # the defaults the engine picked
    unmodelled: tuple[str, ...] = ()  # flags given that change memory but are not followed
    # Sequences the engine runs at once by its own limit (llama.cpp -np slots), apart from how
    # many full-length requests the KV cache holds (max_concurrency); None where not separate.
    slots: int | None = None

    def extra_lines(self) -> tuple[LineItem, ...]:
        return self.outside_budget

    def to_dict(self, units: str = "GB") -> dict[str, Any]:
        return {
            "name": self.engine,
            "version": self.version,
            "total_bytes": self.total_bytes,
            "budget_bytes": self.budget_bytes,
            "lines": [i.to_dict(units) for i in self.items],
            "outside_budget": [i.to_dict(units) for i in self.outside_budget],
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "slots": self.slots,
            "max_model_len": self.max_model_len,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "fits": self.fits,
            "failure": self.failure,
            "ranges": {k: r.to_dict() for k, r in self.ranges.items()},
            "settings": dict(self.settings),
            "notes": list(self.notes),
            "unmodelled_flags": list(self.unmodelled),
        }


@record
class PlanLaunch:
    """What a plan decided, in engine-neutral terms (gpuplan precision ids), for an adapter to
    spell as its own flags."""

    model: str
    tp: int = 1
    pp: int = 1
    max_model_len: int | None = None
    memory_fraction: float | None = None
    max_seqs: int | None = None
    weights: str = "bf16"  # the weight format's precision id
    base: str = "bf16"  # its 16-bit base
    kv: str = "bf16"  # the KV cache precision id
    checkpoint_quantised: bool = False  # the checkpoint already holds `weights`


# How gpuplan's precision ids are written as engine flags (torch dtype names; the quantisation
# method names vLLM and SGLang share; 16-bit KV is the engine's "auto").
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
QUANTIZATION_NAMES = {
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


class EngineAdapter:
    """The shape every engine takes. Subclasses set the class attributes and `bill`.

    name      the engine id (`--engine NAME`)
    title     how it is written ("vLLM")
    flags     its flag table (flags.py), with its entry points and its spellings
    knobs     KNOBS → its own argument names (absent: it has no such knob)
    versions  the versions whose rules it holds, oldest first; the last is the default
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    flags: FlagTable
    knobs: ClassVar[Mapping[str, str]] = {}
    versions: ClassVar[tuple[str, ...]] = ()

    @property
    def newest(self) -> str:
        return self.versions[-1] if self.versions else ""

    def resolve_version(self, version: str | None) -> str:
        """The version whose rules apply: the one given (checked by the adapter), or the newest."""
        return str(version) if version else self.newest

    def knob(self, knob: str) -> str | None:
        return self.knobs.get(knob)

    def knob_args(self, knob: str, value: Any) -> dict[str, Any]:
        """A common knob's value as the engine's own argument(s) ({} if it has no such knob)."""
        name = self.knob(knob)
        return {name: value} if name else {}

    def layout(self, args: Mapping[str, Any]) -> tuple[int, int, int]:
        """(tp, pp, dp) from the engine's arguments."""
        out = []
        for knob in ("tp", "pp", "dp"):
            name = self.knob(knob)
            value = args.get(name) if name else None
            out.append(int(value) if value is not None else 1)
        return out[0], out[1], out[2]

    def weight_format(
        self, arch: Architecture, args: Mapping[str, Any], stored: Checkpoint | None = None
    ) -> WeightFormat:
        """The weights as the engine loads them, from its dtype / quantization arguments;
        `stored` (the checkpoint's headers) gives exact bytes when nothing converts them."""
        return engine_weight_format(
            arch,
            args.get(self.knob("dtype") or ""),
            args.get(self.knob("quantization") or ""),
            stored,
        )

    def kv_precision(self, weights: WeightFormat, args: Mapping[str, Any]) -> Precision:
        return engine_kv_precision(weights, args.get(self.knob("kv_cache_dtype") or ""))

    def launch(
        self,
        arch: Architecture,
        gpu: GpuSpec,
        args: Mapping[str, Any],
        *,
        version: str | None = None,
        draft: Architecture | None = None,
        stored: Checkpoint | None = None,
    ) -> EngineLaunch:
        """An `EngineLaunch` from the engine's own arguments (coerced by its flag table)."""
        typed = self.flags.coerce(args)
        tp, pp, dp = self.layout(typed)
        weights = self.weight_format(arch, typed, stored)
        extra = arch.vision_params
        return EngineLaunch(
            engine=self.name,
            arch=arch,
            weights=weights,
            kv=self.kv_precision(weights, typed),
            gpu=gpu,
            tp=tp,
            pp=pp,
            dp=dp,
            args=typed,
            version=self.resolve_version(version),
            extra_params=extra,
            is_multimodal=extra > 0,
            draft=draft,
        )

    def bill(self, launch: EngineLaunch) -> EngineBill:
        raise NotImplementedError

    kv_fp8_name: ClassVar[str] = "fp8"  # how the engine names an fp8 KV cache

    def plan_args(self, plan: PlanLaunch) -> dict[str, Any]:
        """A plan as this engine's arguments (the knobs it has, in its own names)."""
        dtype = DTYPE_NAMES.get(plan.weights) or DTYPE_NAMES.get(plan.base, "auto")
        quant = QUANTIZATION_NAMES.get(plan.weights)
        values: dict[str, Any] = {
            "tp": plan.tp,
            "pp": plan.pp,
            "max_model_len": plan.max_model_len,
            "memory_fraction": plan.memory_fraction,
            "max_seqs": plan.max_seqs,
            "dtype": dtype,
            "quantization": quant if quant and not plan.checkpoint_quantised else None,
            "kv_cache_dtype": self.kv_fp8_name if plan.kv == "fp8" else None,
        }
        out: dict[str, Any] = {}
        for knob, value in values.items():
            name = self.knob(knob)
            if name and value is not None:
                out[name] = value
        return out

    def config_args(self, text: str) -> ParsedFlags:
        """The flags in a config file (`--config serve.yaml`): a YAML mapping of flag names
        (dashes or underscores) to values, read as vLLM's FlexibleArgumentParser.load_config_file
        does: `true` gives the switch (`false` is dropped), a list gives its items, a nested
        mapping gives JSON."""
        return self.flags.parse(yaml_flag_tokens(text))

    def launch_command(self, model: str, args: Mapping[str, Any]) -> str:
        """The command line that starts the engine with `args` (its own names and spellings)."""
        cmd = list(self.flags.launcher or self.flags.commands[0])
        if self.flags.model_positional:
            cmd.append(model)
        elif self.flags.model_flag:
            cmd += [self.flags.get(self.flags.model_flag).spelling, model]
        return shlex.join(cmd + self.flags.emit(args))


MAX_CONFIG_CHARS = 1_000_000


def read_yaml_mapping(text: str) -> dict[str, Any]:
    """A YAML config file's top-level mapping (bounded; a one-line error otherwise)."""
    if len(text) > MAX_CONFIG_CHARS:
        raise GpuplanError(f"config file is larger than {MAX_CONFIG_CHARS:,} characters")
    data = load_yaml(text, "config file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GpuplanError("config file must be a YAML mapping of flag names to values")
    return data


def yaml_flag_tokens(text: str) -> list[str]:
    """A YAML mapping of flags as command-line words (utils/argparse_utils.py::load_config_file)."""

    out: list[str] = []
    for key, value in read_yaml_mapping(text).items():
        flag = "--" + str(key)
        if isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, list):
            if value:
                out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            try:
                out += [flag, json.dumps(value)]
            except (TypeError, ValueError):
                raise GpuplanError(f"config file: {key} is not plain data") from None
        elif value is not None:
            out += [flag, str(value)]
    return out


_ADAPTERS: dict[str, EngineAdapter] = {}
_BUILTIN = {
    "vllm": "gpuplan.engine.profiles.vllm",
    "sglang": "gpuplan.engine.profiles.sglang",
    "trtllm": "gpuplan.engine.profiles.trtllm",
    "llamacpp": "gpuplan.engine.profiles.llamacpp",
}


def register(adapter: EngineAdapter) -> EngineAdapter:
    """Add an adapter to the registry (each adapter module calls this for its own)."""
    _ADAPTERS[adapter.name] = adapter
    return adapter


def register_builtin(name: str, module: str) -> None:
    """Name a module that registers an adapter when imported (loaded on first use)."""
    _BUILTIN[name] = module


def engine_names() -> tuple[str, ...]:
    """Every engine with an adapter, besides `generic` (the lesson's bill)."""
    return tuple(dict.fromkeys([*_BUILTIN, *_ADAPTERS]))


def get_adapter(name: str) -> EngineAdapter:
    """The adapter of engine `name`, or a one-line error naming the engines there are."""
    key = (name or "").lower()
    if key not in _ADAPTERS and key in _BUILTIN:
        importlib.import_module(_BUILTIN[key])
    if key not in _ADAPTERS:
        raise GpuplanError(f"unknown engine {name!r}; choose one of {', '.join(engine_names())}")
    return _ADAPTERS[key]


def all_adapters() -> tuple[EngineAdapter, ...]:
    return tuple(get_adapter(n) for n in engine_names())


def engine_bill(launch: EngineLaunch) -> EngineBill:
    """The bill of `launch.engine`, with what its weight format assumed (a quantisation method
    named without the checkpoint's quantization_config: the method's standard layout) in its
    notes, whichever engine."""
    validate_launch(launch)
    bill = get_adapter(launch.engine).bill(launch)
    extra = tuple(n for n in launch.weights.notes if n not in bill.notes)
    if not extra:
        return bill
    from dataclasses import replace

    return replace(bill, notes=(*bill.notes, *extra))


def validate_launch(launch: EngineLaunch) -> None:
    for name in ("tp", "pp", "dp"):
        if getattr(launch, name) < 1:
            raise GpuplanError(f"{name} must be at least 1, got {getattr(launch, name)}")
        if getattr(launch, name) > 4096:
            raise GpuplanError(f"{name} {getattr(launch, name)} is beyond any real layout")
    if launch.arch.attention.num_heads % launch.tp:
        raise GpuplanError(
            f"tensor parallel size {launch.tp} does not divide the"
            f" {launch.arch.attention.num_heads} attention heads of {launch.arch.name}"
        )
    if launch.pp > launch.arch.num_layers:
        raise GpuplanError(
            f"pipeline parallel size {launch.pp} exceeds the {launch.arch.num_layers} layers"
        )
    if any(launch.arch.attention_of(s).compress_rate for s, _ in launch.arch.layer_groups()):
        raise GpuplanError(
            f"{launch.engine}: {launch.arch.name} has DeepSeek-V4's compressed attention, whose"
            " engine KV pools (compressed MLA pages, compressor state) gpuplan does not model"
            " — size it without --engine (transformers' caches)"
        )


def budget_item(
    key: str, label: str, nbytes: int, formula: str, inputs: dict[str, Any], category: str
) -> LineItem:
    """A budget line whose explanation is its formula and result."""
    return LineItem(
        key=key,
        label=label,
        bytes=max(0, int(nbytes)),
        formula=formula,
        template=formula + " = {bytes}",
        inputs=inputs,
        category=category,
    )
