"""One declaration per question: every knob a user sets, declared once, and the request records
built from the declarations.

A `Knob` is one input: its name (the API keyword, the web field, the MCP argument and the CLI
destination, all the same), its kind (which fixes its type), closed set, bounds, default, help
and CLI spellings. A request is a tuple of knobs; `request_record` makes it a frozen record that
validates its values at construction (bounds and closed sets, one-line GpuplanError). Every
interface is generated from these tuples: the click options and the fast path's table
(cli/specs.py `opt`), the web's pydantic request bodies (web/schema.py `model_for`), the MCP tools'
input schemas (cli/mcp.py `tool`); tests/test_declarations.py checks that they agree.

No click, no pydantic here: the fast path (cli/fast.py) and the web's schema both import it.
"""

from __future__ import annotations

from typing import Any, Literal

from gpuplan.api.common import (
    MAX_CAPACITY_FACTOR,
    MAX_GPUS,
    MAX_SEQUENCES,
    MAX_TOKENS,
    real_number,
    whole_number,
)
from gpuplan.engine.frozen import field, fields, record
from gpuplan.engine.serving import DEFAULT_HEADROOM
from gpuplan.errors import GpuplanError

# kind → the value's Python type (None also, where the default is None)
KINDS: dict[str, Any] = {
    "name": str,  # a name or short text: a catalog id, an alias, a size with its unit
    "size": str | int,  # bytes: an int, or text with a unit (80GB, 79.2GiB)
    "count": int,  # a whole number within bounds
    "tokens": int,  # a token count; the CLI reads 32k / 32K / 16M (cli/specs.py read_count)
    "number": float,  # a finite real within bounds
    "flag": bool,
    "choice": str,  # one of `choices`
    "names": tuple[str, ...],  # repeated names (the CLI repeats the option)
    "gpus": int | Literal["auto"],  # a GPU count or 'auto' (the fewest that fit)
    "name_or_flag": str | bool,  # a mode by name, or True / False for the usual one
    "mapping": dict[str, Any],  # field name → value (the API's only)
}


@record
class Knob:
    """One input of a request (module docstring). `ge`/`gt`/`le`: bounds of a count, token count
    or number; `cli`: its spellings on the command line (none: not a CLI option); `off`: a flag's
    negative spellings (`--no-compile`), its value then True, False or None (not given)."""

    name: str
    kind: str
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    cli: tuple[str, ...] = ()
    off: tuple[str, ...] = ()
    label: str = ""  # its name in messages, where not the name with dashes
    also: tuple[str, ...] = ()  # values the API takes beyond the CLI's choices (offload none)
    refusal: str = (
        ""  # the message refusing a value outside the set ({value!r}, {either}, {listed})
    )

    @property
    def type(self) -> Any:
        """The value's type (its closed set as a Literal), without None."""
        if self.choices:
            return Literal[self.choices]
        return KINDS[self.kind]

    def check(self, value: Any) -> Any:
        """`value` within this knob's closed set and bounds, or a one-line GpuplanError (worded
        as the API always worded it: tests/test_declarations.py)."""
        if value is None:
            return value
        label = self.label or self.name.replace("_", "-")
        allowed = (*self.also, *self.choices)
        if self.choices and _norm(value) not in {_norm(c) for c in allowed}:
            template = self.refusal or "{label} must be {either}, got {value!r}"
            words = {"label": label, "value": value, "listed": ", ".join(allowed)}
            raise GpuplanError(template.format(either=_either(allowed), **words))
        if self.kind == "gpus" and isinstance(value, str):
            if value != "auto":
                raise GpuplanError(f"gpus must be a number or 'auto', got {value!r}")
            return value
        if self.kind in ("count", "tokens", "gpus"):
            low = int(self.ge or 0)
            high = None if self.le is None else int(self.le)
            few = high is not None and high - low < 4  # a few values: named as a closed set
            if few and (isinstance(value, bool) or value not in range(low, (high or 0) + 1)):
                values = _either(range(low, (high or 0) + 1))
                raise GpuplanError(f"{label} must be {values}, got {value!r}")
            whole_number(label, value, low, high)
        elif self.kind == "number" and not (self.ge == 0 and value == 0):
            real_number(label, value, self.le or float("inf"), self.ge or (self.gt or 0) + 1e-9)
        return value


def _norm(value: Any) -> str:
    """A closed set's value as the API reads it: case, surrounding blanks and - / _ aside."""
    return str(value).strip().lower().replace("-", "_")


def _either(values: Any) -> str:
    """'a, b or c'."""
    words = [str(v) for v in values]
    return ", ".join(words[:-1]) + " or " + words[-1]


def count(name: str, default: Any = None, le: float = MAX_GPUS, **kw: Any) -> Knob:
    """A whole-number knob from 1 (unless `ge` is given)."""
    return Knob(name, "count", default, ge=kw.pop("ge", 1), le=le, **kw)


def tokens(name: str, default: Any = None, le: float = MAX_TOKENS, **kw: Any) -> Knob:
    return Knob(name, "tokens", default, ge=1, le=le, **kw)


def request_record(name: str, knobs: tuple[Knob, ...], doc: str) -> type:
    """A frozen record with one field per knob (its default), checked at construction."""

    def __post_init__(self: Any) -> None:
        for knob in knobs:
            knob.check(getattr(self, knob.name))

    namespace: dict[str, Any] = {
        "__annotations__": {k.name: "Any" for k in knobs},
        "__doc__": doc,
        "__module__": __name__,
        "__post_init__": __post_init__,
        "KNOBS": knobs,
        "kwargs": lambda self: {f.name: getattr(self, f.name) for f in fields(self)},
    }
    for knob in knobs:
        namespace[knob.name] = field(default=knob.default, kw_only=True)
    return record(type(name, (), namespace))


def by_name(knobs: tuple[Knob, ...]) -> dict[str, Knob]:
    return {k.name: k for k in knobs}


def pick(knobs: tuple[Knob, ...], names: tuple[str, ...]) -> tuple[Knob, ...]:
    """The knobs named, in that order (an interface's subset of a request)."""
    table = by_name(knobs)
    return tuple(table[n] for n in names)


# ---- shared knobs -------------------------------------------------------------------------------

GPU = Knob("gpu", "name", "h100", "GPU name or alias (see `gpuplan gpus`).", cli=("--gpu",))
GPUS = Knob(
    "gpus",
    "gpus",
    None,
    "GPU count or 'auto' (fewest that fit). [default: auto]",
    ge=1,
    le=MAX_GPUS,
    cli=("--gpus",),
)
HEADROOM = Knob(
    "headroom",
    "number",
    DEFAULT_HEADROOM,
    "Fraction of GPU memory the plan may use.",
    gt=0,
    le=1,
    cli=("--headroom",),
)
GPU_MEMORY = Knob(
    "gpu_memory",
    "size",
    None,
    "The GPU memory a plan is measured against: a size (80GB, 79.2GiB), or marketed /"
    " driver for the catalog's round or driver-reported figure (default: driver).",
    cli=("--gpu-memory",),
)
CALIBRATION = Knob(
    "calibration",
    "name",
    None,
    "A file from `gpuplan calibrate RESULTS... --out FILE`: its fitted speed figures"
    " replace the defaults.",
    cli=("--calibration",),
)
DEFAULT_CONTEXT = 4096  # tokens per sequence of the lesson's bill when no context is given

# ---- gpuplan.serve (the lesson's own bill) ------------------------------------------------------

SERVE = (
    Knob(
        "revision",
        "name",
        None,
        "Branch, tag or commit of a Hugging Face model.",
        cli=("--revision",),
    ),
    GPU,
    GPUS,
    count("tp", help="Tensor-parallel degree.", cli=("--tp", "--tensor-parallel-size")),
    count("pp", help="Pipeline-parallel degree.", cli=("--pp", "--pipeline-parallel-size")),
    Knob(
        "dtype",
        "name",
        None,
        "Weight format: bf16, fp16, fp8, int4, awq, gptq, nf4, mxfp4... [default: the checkpoint's]",
        cli=("--dtype", "--quantization"),
    ),
    Knob(
        "kv_dtype",
        "name",
        None,
        "KV-cache dtype: bf16, fp16, fp8, int8, fp32. Only this option sets it: --dtype fp8/int8/int4"
        " quantises the weights, never the KV cache. [default: the model's compute dtype, 16-bit]",
        cli=("--kv-dtype", "--kv-cache-dtype"),
    ),
    tokens(
        "context",
        None,  # serve_context: DEFAULT_CONTEXT, or with a speed request its prompt + output
        help="Tokens per sequence, e.g. 8192 or 32k; engines also take auto / -1 (the longest that"
        " fits). [default: 4096; engines: the model's]",
        cli=("--context", "--max-model-len"),
    ),
    count("users", 1, MAX_SEQUENCES, help="Concurrent sequences.", cli=("--users",)),
    HEADROOM,
    GPU_MEMORY,
    Knob(
        "workspace",
        "size",
        None,
        "Workspace allowance per GPU [default: 1.5GB].",
        cli=("--workspace",),
    ),
    Knob(
        "cuda_context",
        "size",
        None,
        "CUDA context allowance per GPU [default: 1GB].",
        cli=("--cuda-context",),
    ),
)

# `serve --speed`: the pinned layout's speed under `vllm bench serve` (api/serving_speed.py)
SPEED = (
    tokens(
        "prompt",
        help="--speed: prompt tokens per request, e.g. 2000 or 2k. [default: 1024]",
        cli=("--prompt",),
    ),
    tokens("output", help="--speed: output tokens per request. [default: 256]", cli=("--output",)),
    Knob(
        "request_rate",
        "number",
        None,
        "--speed: Poisson arrivals at this many requests/s (200 prompts) instead of --users"
        " requests in flight.",
        gt=0,
        cli=("--request-rate",),
    ),
    Knob(
        "eager", "flag", False, "--speed: no CUDA graphs (vLLM --enforce-eager).", cli=("--eager",)
    ),
    CALIBRATION,
)
TIME = Knob(
    "speed",
    "flag",
    False,
    "Also time the layout as `vllm bench serve` would: TTFT, TPOT, ITL, throughput, where"
    " the time goes and the sources (vLLM V1's default scheduler).",
    cli=("--speed",),
)


def serve_context(context: int | None, prompt: int | None = None, output: int | None = None) -> int:
    """A serving request's context: as given; else with a speed request (prompt and output
    given) their sum; else DEFAULT_CONTEXT."""
    if context is not None:
        return context
    if prompt is not None and output is not None:
        return prompt + output
    return DEFAULT_CONTEXT


def speed_tokens(context: int, prompt: int | None, output: int | None) -> tuple[int, int]:
    """Prompt and output tokens of a timed request, one rule for `serve --speed`, the web, MCP and
    `plan`: as given, else 3/4 of the context and the rest. A load longer than the context the
    memory bill is sized for is refused in one line (its KV would not be the bill's)."""
    prompt = prompt if prompt is not None else max(1, context * 3 // 4)
    output = output if output is not None else max(1, context - prompt)
    if prompt < 1 or output < 1:
        raise GpuplanError(f"prompt ({prompt:,}) and output ({output:,}) tokens must be ≥ 1")
    if prompt + output > context:
        raise GpuplanError(
            f"prompt ({prompt:,}) + output ({output:,}) tokens exceed the context ({context:,}) the"
            " memory bill is sized for: raise the context or shorten the prompt / output"
        )
    return prompt, output


ServeRequest: Any = request_record("ServeRequest", SERVE, "The inputs of `gpuplan.api.serve`.")
SpeedRequest: Any = request_record(
    "SpeedRequest", SPEED, "The load and knobs of `layout_speed` (api/serving_speed.py)."
)

# ---- gpuplan.train ------------------------------------------------------------------------------

TRAIN = (
    GPU,
    GPUS,
    Knob(
        "framework",
        "name",
        None,
        "How the job runs: generic (the lesson), torchtitan, torchtune, megatron, deepspeed,"
        " hf-trainer, fsdp2, ddp (see `gpuplan frameworks`). [default: generic]",
        cli=("--framework",),
    ),
    count(
        "zero",
        ge=0,
        le=3,
        label="ZeRO stage",
        help="ZeRO stage 0-3 (DeepSpeed). [default: searched]",
        cli=("--zero",),
    ),
    Knob(
        "fsdp",
        "name_or_flag",
        None,
        "FSDP sharding strategy: full_shard (=ZeRO-3), shard_grad_op (=ZeRO-2), hybrid_shard,"
        " no_shard.",
        cli=("--fsdp",),
    ),
    count("tp", help="Tensor-parallel degree.", cli=("--tp",)),
    count("pp", help="Pipeline-parallel degree.", cli=("--pp",)),
    Knob(
        "sp",
        "flag",
        False,
        "Sequence parallelism (splits norm/residual activations over tp).",
        cli=("--sp",),
    ),
    count("cp", 1, help="Context-parallel degree.", cli=("--cp",)),
    count("ep", 1, help="Expert-parallel degree (MoE).", cli=("--ep",)),
    count(
        "etp",
        help="Experts' tensor-parallel degree when not tp (Megatron ETP; ep × etp spans dp × cp ×"
        " tp).",
        cli=("--etp",),
    ),
    count(
        "vpp",
        1,
        help="Model chunks per pipeline rank: interleaved 1F1B (Megatron's virtual pipeline).",
        cli=("--virtual-stages",),
    ),
    Knob(
        "recipe",
        "name",
        None,
        "Training recipe (see `gpuplan recipes`). [default: the framework's; adamw-bf16]",
        cli=("--recipe",),
    ),
    tokens(
        "seq",
        4096,
        help="Sequence length, e.g. 4096 or 8K (K = 1,024, as vLLM reads it).",
        cli=("--seq",),
    ),
    tokens(
        "target_seq",
        help="Encoder-decoders (T5, BART, Whisper): the decoder's target length; --seq is the"
        " encoder's source length (Whisper's encoder reads its 1500 frames). [default: --seq]",
        cli=("--target-seq",),
    ),
    count(
        "micro_batch",
        1,
        MAX_SEQUENCES,
        help="Sequences per micro-batch per GPU.",
        cli=("--micro-batch",),
    ),
    count(
        "grad_accum",
        None,
        MAX_SEQUENCES,
        help="Micro-batches per step. [default: pp]",
        cli=("--grad-accum",),
    ),
    Knob(
        "checkpointing",
        "name_or_flag",
        None,
        "Recompute: none, selective (Megatron core attention), op (torchtitan op-level),"
        " full, every:K (each K-th layer), block:N, uniform:K. [default: the framework's; none]",
        cli=("--checkpointing",),
    ),
    Knob(
        "loss",
        "name",
        None,
        "Loss: standard, plain, chunked:N, linear_chunked:N, compiled, fused,"
        " vocab_parallel, vocab_parallel_fused, te_fused. [default: the framework's]",
        cli=("--loss",),
    ),
    Knob(
        "compile",
        "flag",
        None,
        "torch.compile the model and loss.",
        cli=("--compile",),
        off=("--no-compile",),
    ),
    Knob(
        "grads",
        "choice",
        None,
        "Gradient lifetime: freed after each step, or a persistent buffer.",
        choices=("set_to_none", "persistent"),
        cli=("--grads",),
    ),
    Knob(
        "reshard_after_forward",
        "flag",
        None,
        "FSDP2: free gathered units after their forward.",
        cli=("--reshard-after-forward",),
        off=("--no-reshard-after-forward",),
    ),
    Knob(
        "optimizer_in_backward",
        "flag",
        None,
        "Step each parameter in backward.",
        cli=("--optimizer-in-backward",),
    ),
    Knob(
        "optimizer_kernel",
        "choice",
        None,
        "The optimizer implementation (its step's temporaries).",
        choices=("fused", "foreach", "for-loop"),
        cli=("--optimizer-kernel",),
    ),
    Knob("fp8", "choice", None, "fp8 training.", choices=("none", "te", "torchao"), cli=("--fp8",)),
    Knob(
        "stage",
        "name",
        None,
        "Bill this pipeline stage: first, last or an index.",
        cli=("--stage",),
    ),
    Knob(
        "attention",
        "choice",
        "flash",
        "Attention and state-mixer kernels: flash/sdpa (no s² scores; fused mamba_ssm, fla,"
        " causal-conv1d kernels) or eager (s² scores; the transformers torch fallbacks).",
        choices=("flash", "sdpa", "eager"),
        cli=("--attention",),
    ),
    count(
        "lora_rank",
        le=2**16,
        help="Train LoRA adapters of this rank on a frozen base.",
        cli=("--lora-rank",),
    ),
    Knob(
        "lora_targets",
        "name",
        None,
        "Comma-separated modules, or all-linear. [default: q,k,v,o]",
        cli=("--lora-targets",),
    ),
    Knob(
        "qlora",
        "flag",
        False,
        "QLoRA: NF4 base with double quantisation (rank 64 unless given).",
        cli=("--qlora",),
    ),
    Knob(
        "lora_base",
        "choice",
        None,
        "The frozen LoRA base's format (int8: bitsandbytes LLM.int8). [default: bf16;"
        " nf4-dq with --qlora]",
        choices=("bf16", "fp16", "fp32", "int8", "nf4", "nf4-dq", "fp4"),
        refusal="unknown LoRA base {value!r}; use {listed}",
        cli=("--lora-base",),
    ),
    Knob(
        "lora_modules_to_save",
        "name",
        None,
        "PEFT modules_to_save trained in full (embed_tokens, lm_head), comma-separated.",
        cli=("--lora-modules-to-save",),
    ),
    Knob(
        "offload",
        "choice",
        None,
        "CPU offload.",
        choices=("optimizer", "params"),
        also=("none",),
        refusal="unknown offload {value!r}; use {either}",
        cli=("--offload",),
    ),
    Knob(
        "offload_activations",
        "flag",
        False,
        "Offload saved activations to CPU.",
        cli=("--offload-activations",),
    ),
    Knob(
        "capacity_factor",
        "number",
        1.0,
        "MoE expert capacity factor.",
        gt=0,
        le=MAX_CAPACITY_FACTOR,
        cli=("--capacity-factor",),
    ),
    HEADROOM,
    GPU_MEMORY,
    Knob(
        "mfu",
        "number",
        None,
        "Pin the utilisation of peak bf16 FLOP/s. [default: from operators, engine/train_speed.py]",
        gt=0,
        le=1,
        cli=("--mfu",),
        label="MFU",
    ),
    Knob(
        "network_bandwidth",
        "size",
        None,
        "Inter-node bandwidth per GPU per direction [default: 50GB (/s)].",
        cli=("--network",),
    ),
    # the API's and the web page's, not on the command line (--from reads them from a config)
    count("dp", help="Data-parallel degree (then gpus = dp × tp × pp × cp)."),
    Knob(
        "method",
        "choice",
        None,
        "full, lora (rank 16 unless given) or qlora.",
        choices=("full", "lora", "qlora"),
    ),
    Knob("optimizer", "name", None, "A recipe alias (adamw, adam8bit, adafactor, sgd)."),
    Knob("cuda_context", "size", None, "CUDA context allowance per GPU [default: 1GB]."),
    Knob("fp8_all_gather", "flag", None, "fp8 all-gather of FSDP2 parameters."),
    Knob("dropout", "number", None, "Dropout probability (its masks are saved).", ge=0, le=1),
    Knob("compile_loss", "flag", None, "torch.compile the loss [default: as compile]."),
    count("global_batch", le=MAX_SEQUENCES, help="Sequences per optimizer step (sets grad_accum)."),
    Knob("framework_overrides", "mapping", None, "Any other framework profile field by name."),
)

TrainRequest: Any = request_record("TrainRequest", TRAIN, "The inputs of `gpuplan.api.train`.")

# ---- gpuplan.plan (serving plans to a goal; with --train, training layouts) ---------------------

PLAN = (
    Knob(
        "gpus",
        "names",
        (),
        "GPU types to consider (repeat). [default: h100 h200 b200 a100-80gb l40s mi300x]",
        cli=("--gpu",),
    ),
    Knob(
        "dtypes",
        "names",
        (),
        "Weight formats to consider (repeat). [default: the checkpoint's, and fp8 linear weights]",
        cli=("--dtype",),
    ),
    Knob(
        "kv_dtype",
        "name",
        None,
        "KV-cache dtype (only this option sets it). [default: the model's 16-bit dtype]",
        cli=("--kv-dtype",),
    ),
    tokens(
        "context",
        DEFAULT_CONTEXT,
        help="Tokens per sequence, e.g. 4096 or 32k (k = 1,000, K = 1,024, as vLLM reads them).",
        cli=("--context",),
    ),
    count("users", 1, MAX_SEQUENCES, help="Concurrent users.", cli=("--users",)),
    Knob(
        "tpot",
        "name",
        None,
        "Time per output token target, with its unit: 33ms or 0.05s (a bare number is refused).",
        cli=("--tpot",),
    ),
    Knob(
        "ttft",
        "name",
        None,
        "Time to first token target, with its unit: 500ms or 2s (a bare number is refused).",
        cli=("--ttft",),
    ),
    tokens(
        "prompt_tokens",
        help="Prompt tokens per request for the speed model, e.g. 3k. [default: 3/4 of --context]",
        cli=("--prompt",),
    ),
    tokens(
        "output_tokens",
        help="Output tokens per request. [default: the rest of --context]",
        cli=("--output",),
    ),
    count(
        "tp",
        help="Pin each replica's tensor-parallel degree. [default: searched]",
        cli=("--tp", "--tensor-parallel-size"),
    ),
    count(
        "pp",
        help="Pin each replica's pipeline-parallel degree. [default: searched]",
        cli=("--pp", "--pipeline-parallel-size"),
    ),
    Knob(
        "ep",
        "flag",
        None,
        "Pin expert parallelism on (--ep) or off (--no-ep) for MoE. [default: searched]",
        cli=("--ep",),
        off=("--no-ep",),
    ),
    Knob(
        "objective",
        "choice",
        "gpus",
        "What to rank plans by: fewest GPUs; cost = $/hour for all the users; token-cost = $ per"
        " million output tokens at each layout's speed; output tokens/s per GPU; TPOT. (--train"
        " --tokens: cost and token-cost both rank by the job's total price.)",
        choices=("gpus", "cost", "token-cost", "throughput", "latency"),
        cli=("--objective",),
    ),
    Knob(
        "prices",
        "names",
        (),
        "GPU price per GPU-hour, e.g. H100=2.5 (repeat); overrides the price table.",
        cli=("--price",),
    ),
    count("max_gpus", help="Most GPUs a plan may use.", cli=("--max-gpus",)),
    HEADROOM,
    Knob(
        "engine",
        "choice",
        None,
        "Print the launch command (serving: vllm, sglang) or config (--train: deepspeed,"
        " fsdp, megatron) for the top option; or a deployment manifest for it (k8s, kserve,"
        " skypilot, ray; --train: k8s, skypilot) running --engine, alone on stdout.",
        choices=(
            "vllm",
            "sglang",
            "deepspeed",
            "fsdp",
            "megatron",
            "k8s",
            "kserve",
            "skypilot",
            "ray",
        ),
        cli=("--export",),
    ),
    Knob(
        "run_engine",
        "choice",
        None,
        "With a manifest --export: the engine it runs. [default: vllm; --train: required]",
        choices=("vllm", "sglang", "deepspeed", "fsdp", "megatron"),
        cli=("--engine",),
    ),
    count("top", 10, 1000, cli=("--top",)),
    count("gpu_count", help="--train: GPU count. [default: 8]", cli=("--gpus",)),
    tokens(
        "seq", help="--train: sequence length, e.g. 4096 or 8K. [default: 4096]", cli=("--seq",)
    ),
    tokens(
        "global_batch_tokens",
        le=MAX_TOKENS * MAX_SEQUENCES,
        help="--train: tokens per optimizer step, e.g. 4M or 16M (M = 2^20). [default: gpus × seq ×"
        " 8; with --tokens, the same at every GPU count: about 4M tokens]",
        cli=("--global-batch-tokens",),
    ),
    Knob(
        "recipe", "name", None, "--train: training recipe. [default: adamw-bf16]", cli=("--recipe",)
    ),
    count("lora_rank", le=2**16, help="--train: LoRA adapters of this rank.", cli=("--lora-rank",)),
    Knob("qlora", "flag", None, "--train: QLoRA (NF4 base).", cli=("--qlora",)),
    Knob(
        "gpu_memory", "size", None, "Override the GPU's memory, e.g. 80GB.", cli=("--gpu-memory",)
    ),
    Knob(
        "tokens", "name", None, "--train: tokens to train, e.g. 2T (T = 10^12).", cli=("--tokens",)
    ),
    Knob("days", "number", None, "--train: deadline in days.", gt=0, cli=("--days",)),
    Knob(
        "mfu",
        "number",
        None,
        "--train: pin the MFU. [default: from operators, engine/train_speed.py]",
        gt=0,
        le=1,
        cli=("--mfu",),
    ),
    CALIBRATION,
)

PlanRequest: Any = request_record("PlanRequest", PLAN, "The inputs of `gpuplan plan`.")
