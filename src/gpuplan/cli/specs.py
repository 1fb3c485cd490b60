"""Options as data: each knob's spellings, destination, type, default, help and reader, defined
once; and the request and answer of serve's own bill built from their values.

click reads this table through `cli/options.py` (`click_option`), and the fast path
(`cli/fast.py`) reads it directly to answer `serve MODEL … --json` without importing click
(cold start, issue 14); both build serve's request with `serve_ask` and its answer with
`serve_data`. A reader turns an option's text into its value or raises BadValue with the
message both paths show. Nothing here imports click.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Opt:
    """One command-line option: `kind` is str, int, float, or bool for a flag; `reader` turns
    its text into its value (raising ValueError) after click's own type check. `multiple`: the
    option repeats and its value is the tuple of what was given; `off`: a flag's negative
    spellings (`--no-compile`), its value then True, False or None (not given); `unset`: a flag
    whose value is None, not False, when not given."""

    __slots__ = (
        "names",
        "dest",
        "kind",
        "default",
        "help",
        "show_default",
        "choices",
        "metavar",
        "reader",
        "multiple",
        "off",
    )

    def __init__(
        self,
        names: tuple[str, ...],
        dest: str,
        kind: type = str,
        default: Any = None,
        help: str = "",
        show_default: bool = False,
        choices: tuple[str, ...] = (),
        metavar: str | None = None,
        reader: Callable[[str], Any] | None = None,
        multiple: bool = False,
        off: tuple[str, ...] = (),
        unset: bool = False,
    ) -> None:
        self.names = names
        self.dest = dest
        self.kind = kind
        self.multiple = multiple
        self.off = off
        if kind is bool:
            default = None if (off or unset) else False
        self.default = () if multiple else default
        self.help = help
        self.show_default = show_default
        self.choices = choices
        self.metavar = metavar
        self.reader = reader


class BadValue(ValueError):
    """An option's text that its reader cannot take; `hint` names the option for click."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def read_units(text: str) -> str:
    """--units: GB or GiB, in any case."""
    for choice in UNITS.choices:
        if text.lower() == choice.lower():
            return choice
    raise BadValue(f"{text!r} is not one of 'GB', 'GiB'", "--units")


# shared by several commands
UNITS = Opt(
    ("--units",),
    "units",
    default="GB",
    show_default=True,
    choices=("GB", "GiB"),
    reader=read_units,
    help="Display units: GB (10^9, as in the lesson) or GiB (2^30).",
)
GPUS = Opt(("--gpus",), "gpus", help="GPU count or 'auto' (fewest that fit). [default: auto]")
HEADROOM = Opt(
    ("--headroom",),
    "headroom",
    float,
    0.9,
    show_default=True,
    help="Fraction of GPU memory the plan may use.",
)
GPU_MEMORY = Opt(
    ("--gpu-memory",),
    "gpu_memory",
    help="The GPU memory a plan is measured against: a size (80GB, 79.2GiB), or marketed /"
    " driver for the catalog's round or driver-reported figure (default: driver).",
)
JSON = Opt(("--json",), "as_json", bool, help="Print the JSON schema of docs/json.md.")

# `gpuplan serve`'s own bill (no engine): what the fast path answers
REVISION = Opt(("--revision",), "revision", help="Branch, tag or commit of a Hugging Face model.")
GPU = Opt(
    ("--gpu",),
    "gpu",
    default="h100",
    show_default=True,
    help="GPU name or alias (see `gpuplan gpus`).",
)
TP = Opt(("--tp", "--tensor-parallel-size"), "tp", int, help="Tensor-parallel degree.")
PP = Opt(("--pp", "--pipeline-parallel-size"), "pp", int, help="Pipeline-parallel degree.")
DTYPE = Opt(
    ("--dtype", "--quantization"),
    "dtype",
    help="Weight format: bf16, fp16, fp8, int4, awq, gptq, nf4, mxfp4... [default: the checkpoint's]",
)
KV_DTYPE = Opt(
    ("--kv-dtype", "--kv-cache-dtype"),
    "kv_dtype",
    help="KV-cache dtype: bf16, fp16, fp8, int8, fp32. Only this option sets it: --dtype fp8/int8/int4"
    " quantises the weights, never the KV cache. [default: the model's compute dtype, 16-bit]",
)
CONTEXT = Opt(
    ("--context", "--max-model-len"),
    "context",
    help="Tokens per sequence, e.g. 8192 or 32k; engines also take auto / -1 (the longest that"
    " fits). [default: 4096; engines: the model's]",
)
USERS = Opt(("--users",), "users", int, 1, show_default=True, help="Concurrent sequences.")
WORKSPACE = Opt(("--workspace",), "workspace", help="Workspace allowance per GPU [default: 1.5GB].")
CUDA_CONTEXT = Opt(
    ("--cuda-context",), "cuda_context", help="CUDA context allowance per GPU [default: 1GB]."
)
EXPLAIN = Opt(
    ("--explain",),
    "explain",
    bool,
    help="Show each line's arithmetic with the numbers substituted.",
)


def read_rate(value: Any) -> float | None:
    """--request-rate: requests per second, above 0 (vllm bench serve's Poisson mode); click and
    the fast path hand it the float their type check made."""
    if value is not None and not 0 < value < float("inf"):
        raise BadValue(f"--request-rate must be above 0 requests/s, got {value}", "--request-rate")
    return value


# `gpuplan serve --speed`: the pinned layout's speed under `vllm bench serve` (api/serving_speed.py)
SPEED = Opt(
    ("--speed",),
    "speed",
    bool,
    help="Also time the layout as `vllm bench serve` would: TTFT, TPOT, ITL, throughput, where"
    " the time goes and the sources (vLLM V1's default scheduler).",
)
SPEED_PROMPT = Opt(
    ("--prompt",),
    "prompt",
    reader=lambda text: None if text is None else read_count(text, "--prompt"),
    help="--speed: prompt tokens per request, e.g. 2000 or 2k. [default: 1024]",
)
SPEED_OUTPUT = Opt(
    ("--output",),
    "output",
    reader=lambda text: None if text is None else read_count(text, "--output"),
    help="--speed: output tokens per request. [default: 256]",
)
REQUEST_RATE = Opt(
    ("--request-rate",),
    "request_rate",
    float,
    reader=read_rate,
    help="--speed: Poisson arrivals at this many requests/s (200 prompts) instead of --users"
    " requests in flight.",
)
CALIBRATION = Opt(
    ("--calibration",),
    "calibration",
    help="A file from `gpuplan calibrate RESULTS... --out FILE`: its fitted speed figures"
    " replace the defaults.",
)
EAGER = Opt(("--eager",), "eager", bool, help="--speed: no CUDA graphs (vLLM --enforce-eager).")
SPEED_DEFAULTS = {"prompt": 1024, "output": 256}

SERVE_OWN_BILL = (
    REVISION,
    GPU,
    GPUS,
    TP,
    PP,
    DTYPE,
    KV_DTYPE,
    CONTEXT,
    USERS,
    HEADROOM,
    GPU_MEMORY,
    WORKSPACE,
    CUDA_CONTEXT,
    UNITS,
    JSON,
    EXPLAIN,
    SPEED,
    SPEED_PROMPT,
    SPEED_OUTPUT,
    REQUEST_RATE,
    EAGER,
    CALIBRATION,
)

DEFAULT_CONTEXT = 4096  # tokens per sequence of the lesson's bill when --context is not given


# `gpuplan plan`'s token counts, read as serve's --context is (read_count)
PLAN_CONTEXT = Opt(
    ("--context",),
    "context",
    default="4096",
    show_default=True,
    reader=lambda text: read_count(text, "--context"),
    help="Tokens per sequence, e.g. 4096 or 32k (k = 1,000, K = 1,024, as vLLM reads them).",
)
PLAN_PROMPT = Opt(
    ("--prompt",),
    "prompt_tokens",
    reader=lambda text: None if text is None else read_count(text, "--prompt"),
    help="Prompt tokens per request for the speed model, e.g. 3k. [default: 3/4 of --context]",
)
PLAN_OUTPUT = Opt(
    ("--output",),
    "output_tokens",
    reader=lambda text: None if text is None else read_count(text, "--output"),
    help="Output tokens per request. [default: the rest of --context]",
)
SEQ = Opt(
    ("--seq",),
    "seq",
    reader=lambda text: None if text is None else read_count(text, "--seq"),
    help="--train: sequence length, e.g. 4096 or 8K. [default: 4096]",
)
GLOBAL_BATCH_TOKENS = Opt(
    ("--global-batch-tokens",),
    "global_batch_tokens",
    reader=lambda text: (
        None if text is None else read_count(text, "--global-batch-tokens", MAX_STEP_TOKENS)
    ),
    help="--train: tokens per optimizer step, e.g. 4M or 16M (M = 2^20). [default: gpus × seq ×"
    " 8; with --tokens, the same at every GPU count: about 4M tokens]",
)
TPOT = Opt(
    ("--tpot",),
    "tpot",
    help="Time per output token target, with its unit: 33ms or 0.05s (a bare number is refused).",
)
TTFT = Opt(
    ("--ttft",),
    "ttft",
    help="Time to first token target, with its unit: 500ms or 2s (a bare number is refused).",
)


PLAN_GPU = Opt(
    ("--gpu",),
    "gpus",
    multiple=True,
    help="GPU types to consider (repeat). [default: h100 h200 b200 a100-80gb l40s mi300x]",
)
PLAN_DTYPE = Opt(
    ("--dtype",),
    "dtypes",
    multiple=True,
    help="Weight formats to consider (repeat). [default: the checkpoint's, and fp8 linear weights]",
)
PLAN_KV_DTYPE = Opt(
    ("--kv-dtype",),
    "kv_dtype",
    help="KV-cache dtype (only this option sets it). [default: the model's 16-bit dtype]",
)
PLAN_USERS = Opt(("--users",), "users", int, 1, show_default=True, help="Concurrent users.")
OBJECTIVE = Opt(
    ("--objective",),
    "objective",
    default="gpus",
    show_default=True,
    choices=("gpus", "cost", "token-cost", "throughput", "latency"),
    help="What to rank plans by: fewest GPUs; cost = $/hour for all the users; token-cost = $ per"
    " million output tokens at each layout's speed; output tokens/s per GPU; TPOT. (--train"
    " --tokens: cost and token-cost both rank by the job's total price.)",
)
PRICE = Opt(
    ("--price",),
    "prices",
    multiple=True,
    help="GPU price per GPU-hour, e.g. H100=2.5 (repeat); overrides the price table.",
)
MAX_GPUS = Opt(("--max-gpus",), "max_gpus", int, help="Most GPUs a plan may use.")
MATRIX = Opt(
    ("--matrix",),
    "matrix",
    bool,
    help="Budget table: context × users (serving) or memory vs GPUs per ZeRO stage (--train).",
)
CSV = Opt(("--csv",), "as_csv", bool, help="With --matrix or a ranking: CSV output.")
EXPORT = Opt(
    ("--export",),
    "engine",
    choices=("vllm", "sglang", "deepspeed", "fsdp", "megatron", "k8s", "kserve", "skypilot", "ray"),
    help="Print the launch command (serving: vllm, sglang) or config (--train: deepspeed,"
    " fsdp, megatron) for the top option; or a deployment manifest for it (k8s, kserve,"
    " skypilot, ray; --train: k8s, skypilot) running --engine, alone on stdout.",
)
RUN_ENGINE = Opt(
    ("--engine",),
    "run_engine",
    choices=("vllm", "sglang", "deepspeed", "fsdp", "megatron"),
    help="With a manifest --export: the engine it runs. [default: vllm; --train: required]",
)


def read_top(text: str) -> int:
    """--top: how many options to show, 1 to 1000."""
    try:
        value = int(text)
    except ValueError:
        raise BadValue(f"{text!r} is not a valid integer.", "--top") from None
    if not 1 <= value <= 1000:
        raise BadValue(f"{value} is not in the range 1<=x<=1000.", "--top")
    return value


TOP = Opt(("--top",), "top", default="10", show_default=True, reader=read_top, metavar="1-1000")
TRAIN_FLAG = Opt(
    ("--train",),
    "train",
    bool,
    help="Rank training layouts (ZeRO/FSDP, tp, pp, micro-batch, recompute).",
)
PLAN_GPU_COUNT = Opt(("--gpus",), "gpu_count", int, help="--train: GPU count. [default: 8]")
PLAN_RECIPE = Opt(("--recipe",), "recipe", help="--train: training recipe. [default: adamw-bf16]")
PLAN_LORA_RANK = Opt(
    ("--lora-rank",), "lora_rank", int, help="--train: LoRA adapters of this rank."
)
PLAN_QLORA = Opt(("--qlora",), "qlora", bool, unset=True, help="--train: QLoRA (NF4 base).")
PLAN_GPU_MEMORY = Opt(("--gpu-memory",), "gpu_memory", help="Override the GPU's memory, e.g. 80GB.")
TOKENS = Opt(("--tokens",), "tokens", help="--train: tokens to train, e.g. 2T (T = 10^12).")
DAYS = Opt(("--days",), "days", float, help="--train: deadline in days.")
PLAN_MFU = Opt(
    ("--mfu",),
    "mfu",
    float,
    help="--train: pin the MFU. [default: from operators, engine/train_speed.py]",
)

PLAN_TP = Opt(
    ("--tp", "--tensor-parallel-size"),
    "tp",
    int,
    help="Pin each replica's tensor-parallel degree. [default: searched]",
)
PLAN_PP = Opt(
    ("--pp", "--pipeline-parallel-size"),
    "pp",
    int,
    help="Pin each replica's pipeline-parallel degree. [default: searched]",
)
PLAN_EP = Opt(
    ("--ep",),
    "ep",
    bool,
    off=("--no-ep",),
    help="Pin expert parallelism on (--ep) or off (--no-ep) for MoE. [default: searched]",
)

# `gpuplan plan`: every option, in --help's order (cli/plan.py builds its click command from it)
PLAN_OPTIONS = (
    PLAN_GPU,
    PLAN_DTYPE,
    PLAN_KV_DTYPE,
    PLAN_CONTEXT,
    PLAN_USERS,
    TPOT,
    TTFT,
    PLAN_PROMPT,
    PLAN_OUTPUT,
    PLAN_TP,
    PLAN_PP,
    PLAN_EP,
    OBJECTIVE,
    PRICE,
    MAX_GPUS,
    MATRIX,
    CSV,
    HEADROOM,
    EXPORT,
    RUN_ENGINE,
    TOP,
    TRAIN_FLAG,
    PLAN_GPU_COUNT,
    SEQ,
    GLOBAL_BATCH_TOKENS,
    PLAN_RECIPE,
    PLAN_LORA_RANK,
    PLAN_QLORA,
    PLAN_GPU_MEMORY,
    TOKENS,
    DAYS,
    PLAN_MFU,
    CALIBRATION,
    UNITS,
    JSON,
)


# `gpuplan train`: every option, in --help's order (cli/train.py builds its click command from it)
TRAIN_OPTIONS = (
    GPU,
    GPUS,
    Opt(
        ("--from",),
        "config",
        help="A framework config to read: torchtitan TOML, torchtune YAML, Megatron-LM flags or"
        " model_config.yaml, DeepSpeed JSON, TrainingArguments JSON.",
    ),
    Opt(
        ("--format",),
        "config_format",
        choices=("torchtitan", "torchtune", "megatron", "deepspeed", "hf-trainer"),
        help="The --from config's framework. [default: from its name and content]",
    ),
    Opt(
        ("--override",),
        "overrides",
        multiple=True,
        help="torchtune key=value override of the --from config (repeatable).",
    ),
    Opt(
        ("--framework",),
        "framework",
        help="How the job runs: generic (the lesson), torchtitan, torchtune, megatron, deepspeed,"
        " hf-trainer, fsdp2, ddp (see `gpuplan frameworks`). [default: generic]",
    ),
    Opt(("--zero",), "zero", int, help="ZeRO stage 0-3 (DeepSpeed). [default: searched]"),
    Opt(
        ("--fsdp",),
        "fsdp",
        help="FSDP sharding strategy: full_shard (=ZeRO-3), shard_grad_op (=ZeRO-2), hybrid_shard,"
        " no_shard.",
    ),
    Opt(("--tp",), "tp", int, help="Tensor-parallel degree."),
    Opt(("--pp",), "pp", int, help="Pipeline-parallel degree."),
    Opt(
        ("--sp",),
        "sp",
        bool,
        help="Sequence parallelism (splits norm/residual activations over tp).",
    ),
    Opt(("--cp",), "cp", int, 1, show_default=True, help="Context-parallel degree."),
    Opt(("--ep",), "ep", int, 1, show_default=True, help="Expert-parallel degree (MoE)."),
    Opt(
        ("--etp",),
        "etp",
        int,
        help="Experts' tensor-parallel degree when not tp (Megatron ETP; ep × etp spans dp × cp ×"
        " tp).",
    ),
    Opt(
        ("--virtual-stages",),
        "vpp",
        int,
        1,
        show_default=True,
        help="Model chunks per pipeline rank: interleaved 1F1B (Megatron's virtual pipeline).",
    ),
    Opt(
        ("--recipe",),
        "recipe",
        help="Training recipe (see `gpuplan recipes`). [default: the framework's; adamw-bf16]",
    ),
    Opt(
        ("--seq",),
        "seq",
        default="4096",
        show_default=True,
        reader=lambda text: read_count(text, "--seq"),
        help="Sequence length, e.g. 4096 or 8K (K = 1,024, as vLLM reads it).",
    ),
    Opt(
        ("--micro-batch",),
        "micro_batch",
        int,
        1,
        show_default=True,
        help="Sequences per micro-batch per GPU.",
    ),
    Opt(("--grad-accum",), "grad_accum", int, help="Micro-batches per step. [default: pp]"),
    Opt(
        ("--checkpointing",),
        "checkpointing",
        help="Recompute: none, selective (Megatron core attention), op (torchtitan op-level),"
        " full, every:K (each K-th layer), block:N, uniform:K. [default: the framework's; none]",
    ),
    Opt(
        ("--loss",),
        "loss",
        help="Loss: standard, plain, chunked:N, linear_chunked:N, compiled, fused,"
        " vocab_parallel, vocab_parallel_fused, te_fused. [default: the framework's]",
    ),
    Opt(
        ("--compile",),
        "compile_",
        bool,
        off=("--no-compile",),
        help="torch.compile the model and loss.",
    ),
    Opt(
        ("--grads",),
        "grads",
        choices=("set_to_none", "persistent"),
        help="Gradient lifetime: freed after each step, or a persistent buffer.",
    ),
    Opt(
        ("--reshard-after-forward",),
        "reshard_after_forward",
        bool,
        off=("--no-reshard-after-forward",),
        help="FSDP2: free gathered units after their forward.",
    ),
    Opt(
        ("--optimizer-in-backward",),
        "optimizer_in_backward",
        bool,
        unset=True,
        help="Step each parameter in backward.",
    ),
    Opt(
        ("--optimizer-kernel",),
        "optimizer_kernel",
        choices=("fused", "foreach", "for-loop"),
        help="The optimizer implementation (its step's temporaries).",
    ),
    Opt(("--fp8",), "fp8", choices=("none", "te", "torchao"), help="fp8 training."),
    Opt(("--stage",), "stage", help="Bill this pipeline stage: first, last or an index."),
    Opt(
        ("--attention",),
        "attention",
        default="flash",
        show_default=True,
        choices=("flash", "sdpa", "eager"),
        help="Attention and state-mixer kernels: flash/sdpa (no s² scores; fused mamba_ssm, fla,"
        " causal-conv1d kernels) or eager (s² scores; the transformers torch fallbacks).",
    ),
    Opt(
        ("--lora-rank",),
        "lora_rank",
        int,
        help="Train LoRA adapters of this rank on a frozen base.",
    ),
    Opt(
        ("--lora-targets",),
        "lora_targets",
        help="Comma-separated modules, or all-linear. [default: q,k,v,o]",
    ),
    Opt(
        ("--qlora",),
        "qlora",
        bool,
        help="QLoRA: NF4 base with double quantisation (rank 64 unless given).",
    ),
    Opt(
        ("--lora-base",),
        "lora_base",
        choices=("bf16", "fp16", "fp32", "int8", "nf4", "nf4-dq", "fp4"),
        help="The frozen LoRA base's format (int8: bitsandbytes LLM.int8). [default: bf16;"
        " nf4-dq with --qlora]",
    ),
    Opt(
        ("--lora-modules-to-save",),
        "lora_modules_to_save",
        help="PEFT modules_to_save trained in full (embed_tokens, lm_head), comma-separated.",
    ),
    Opt(("--offload",), "offload", choices=("optimizer", "params"), help="CPU offload."),
    Opt(
        ("--offload-activations",),
        "offload_activations",
        bool,
        help="Offload saved activations to CPU.",
    ),
    Opt(
        ("--capacity-factor",),
        "capacity_factor",
        float,
        1.0,
        show_default=True,
        help="MoE expert capacity factor.",
    ),
    HEADROOM,
    GPU_MEMORY,
    Opt(
        ("--mfu",),
        "mfu",
        float,
        help="Pin the utilisation of peak bf16 FLOP/s. [default: from operators,"
        " engine/train_speed.py]",
    ),
    Opt(
        ("--network",),
        "network",
        help="Inter-node bandwidth per GPU per direction [default: 50GB (/s)].",
    ),
    UNITS,
    JSON,
    Opt(
        ("--explain",),
        "explain",
        bool,
        help="Show each line's arithmetic and every phase of the step.",
    ),
)
# the train options that are not arguments of `gpuplan.api.train` (the command reads them)
TRAIN_OWN = ("gpus", "config", "config_format", "overrides", "units", "as_json", "explain")


def train_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """`gpuplan.api.train`'s keyword arguments from the train options' values."""
    kw = {k: v for k, v in values.items() if k not in TRAIN_OWN}
    kw["network_bandwidth"] = kw.pop("network")
    kw["compile"] = kw.pop("compile_")
    stage = kw.pop("stage")
    kw["stage"] = int(stage) if stage and stage.lstrip("-").isdigit() else stage
    return kw


def train_data(model: str, values: dict[str, Any]) -> dict[str, Any]:
    """`gpuplan.train/1` for MODEL from the train options' values (no --from config), with the
    ways out (`fixes`) when it does not fit."""
    from gpuplan.api import train

    ask = {"model": model, "gpus": read_gpus(values["gpus"]), **train_kwargs(values)}
    plan = train(**ask)
    data = plan.to_dict(values["units"])
    data["fixes"] = []
    if not plan.fits:  # the three answers (fewer bytes, bigger GPU, more GPUs)
        from gpuplan.api.planning import training_answers

        data["fixes"] = training_answers(ask, plan)
    return data


def read_gpus(text: str | None) -> int | str | None:
    """--gpus as the API takes it: None, "auto", or a count."""
    if text is None or text == "auto":
        return text
    if text.isdigit():
        return int(text)
    raise BadValue(f"--gpus takes a number or 'auto', got {text!r}")


MAX_TOKENS = 10**9  # tokens per sequence, prompt or output: the API's bound (api/common.py)
MAX_STEP_TOKENS = 10**16  # tokens per optimizer step: MAX_TOKENS × the API's most sequences


def read_count(text: str, flag: str, limit: int = MAX_TOKENS, hint: str = "") -> int:
    """One grammar for every token count a command takes (--context, --seq, --prompt, --output,
    --global-batch-tokens): a whole number, or with vLLM's suffixes (human_readable_int: 32k =
    32,000, 32K = 32,768, 16M = 16,777,216); from 1 to `limit`, and a value out of range is
    echoed as typed with its reading beside it."""
    from gpuplan.units import human_int, shown

    try:
        value = human_int(text)
    except ValueError:
        raise BadValue(f"{shown(text)} is not a token count{hint}", flag) from None
    if not 1 <= value <= limit:
        reading = f" ({value:,})" if str(value) != text.strip() else ""
        raise BadValue(
            f"{flag.lstrip('-')} must be a token count from 1 to {limit:,}, got {shown(text)}{reading}",
            flag,
        )
    return value


def count_reader(flag: str, limit: int = MAX_TOKENS) -> Callable[[str | None], int | None]:
    """The reader of one token-count option (None stays None: the option's default applies)."""

    def read(text: str | None) -> int | None:
        return None if text is None else read_count(text, flag, limit)

    return read


def read_context(text: str | None) -> int:
    """--context for the lesson's bill: a token count (k/K suffixes as vLLM reads them)."""
    if text is None:
        return DEFAULT_CONTEXT
    return read_count(text, "--context", hint=" (auto needs --engine)")


def serve_ask(model: str, values: dict[str, Any]) -> dict[str, Any]:
    """The request `gpuplan.api.serving.serve` takes, from the options' values by destination
    (raises BadValue on a bad --gpus or --context)."""
    return {
        "model": model,
        "gpu": values["gpu"],
        "gpus": read_gpus(values["gpus"]),
        "tp": values["tp"],
        "pp": values["pp"],
        "dtype": values["dtype"],
        "kv_dtype": values["kv_dtype"],
        "context": _serve_context(values),
        "users": values["users"],
        "headroom": values["headroom"],
        "gpu_memory": values["gpu_memory"],
        "workspace": values["workspace"],
        "cuda_context": values["cuda_context"],
        "revision": values["revision"],
    }


def _serve_context(values: dict[str, Any]) -> int:
    """--context; with --speed and no --context, the request's prompt + output."""
    speed = speed_ask(values)
    if speed is not None and values["context"] is None:
        return int(speed["prompt"] + speed["output"])
    return read_context(values["context"])


SPEED_ONLY = (
    ("prompt", "--prompt"),
    ("output", "--output"),
    ("request_rate", "--request-rate"),
    ("eager", "--eager"),
    ("calibration", "--calibration"),
)


def speed_ask(values: dict[str, Any]) -> dict[str, Any] | None:
    """`layout_speed`'s load and knobs (api/serving_speed.py) with --speed, else None; a speed
    option without --speed is refused (BadValue)."""
    if not values.get("speed"):
        for dest, flag in SPEED_ONLY:
            if values.get(dest):
                raise BadValue(f"{flag} goes with --speed", flag)
        return None
    return {
        "users": values["users"],
        "prompt": values["prompt"] or SPEED_DEFAULTS["prompt"],
        "output": values["output"] or SPEED_DEFAULTS["output"],
        "request_rate": values["request_rate"],
        "eager": bool(values["eager"]),
        "calibration": values["calibration"],
    }


def serve_data(
    ask: dict[str, Any], units: str, speed: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`gpuplan.serve/1` for the lesson's bill, with the ways out (`fixes`) when it does not fit:
    fewer bytes, a bigger GPU, more GPUs; with `speed` (speed_ask), the layout's `speed`."""
    from gpuplan.api.serving import serve

    generic = serve(**ask)
    data = generic.to_dict(units)
    data["fixes"] = []
    if not generic.fits:
        from gpuplan.api.planning import serving_answers

        data["fixes"] = serving_answers(ask, generic)
    if speed is not None:
        from gpuplan.api.serving_speed import layout_speed, refuse_unfit

        refuse_unfit(generic.fits, generic.bill.setup)
        data["speed"] = layout_speed(generic.bill.setup, **speed)
    return data
