"""What the engine adapters share: the weights one rank loads, RoPE tables, the KV bytes of one
token, the memory total the CUDA runtime reports, dtype and quantisation names, version rules.

Each function cites the engine source it mirrors; the adapters (vllm/, sglang/, trtllm/) call
these and add their own budget rules.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.checkpoint import Checkpoint
from gpuplan.engine.frozen import record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.engine.module_plan import planned_format
from gpuplan.engine.params import count_params
from gpuplan.engine.precision import Precision, get_precision, torch_dtype_precision
from gpuplan.engine.quantization import standard_layout
from gpuplan.engine.weights import WeightFormat, as_stored, per_layer_bytes
from gpuplan.errors import GpuplanError

GIB = 2**30


def gib(n: float) -> int:
    """n GiB as whole bytes."""
    return round(n * GIB)


VOCAB_PADDING = 64  # vLLM vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE (SGLang alike)

# The total the CUDA runtime reports (cudaMemGetInfo) is a little below nvidia-smi's total.
# H100 80GB: 79.19 GiB in every log of tests/data/engine_logs/vllm-0.19-h100.json vs 81559 MiB.
CUDA_TOTAL_BYTES = {"h100-sxm": gib(79.19), "h100-pcie": gib(79.19)}
CUDA_RESERVED_BYTES = 81559 * 2**20 - gib(79.19)  # the same gap assumed for other GPUs


def cuda_total_bytes(gpu: GpuSpec) -> int:
    """Total device memory as torch.cuda.mem_get_info reports it (the base of vLLM's budget)."""
    if gpu.memory_override:
        return gpu.memory_override
    if gpu.id in CUDA_TOTAL_BYTES:
        return CUDA_TOTAL_BYTES[gpu.id]
    if gpu.vendor == "amd":  # ROCm's hipMemGetInfo total is the amdgpu VRAM size itself: vLLM
        return gpu.memory_bytes  # logs total_gpu_memory=191.98GiB on MI300X (206,141,652,992 B)
    return gpu.memory_bytes - (CUDA_RESERVED_BYTES if gpu.driver_total_bytes else 0)


def pp_layers(num_layers: int, pp: int) -> list[range]:
    """Layers per pipeline stage as distributed/utils.py::get_pp_indices splits them: equal
    parts, the remainder going one each to the stages before the last, from the back."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append(range(start, start + n))
        start += n
    return out


def padded_vocab(vocab: int) -> int:
    """VocabParallelEmbedding pads the vocabulary to a multiple of 64 before the TP split."""
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


@record
class StageWeights:
    layers: int
    embedding: int
    lm_head: int
    extra: int
    buffers: int = 0  # non-parameter buffers built with the model (RoPE cos/sin tables)

    @property
    def total(self) -> int:
        return self.layers + self.embedding + self.lm_head + self.extra + self.buffers


def rope_tables(arch: Architecture) -> list[tuple[int, int]]:
    """(positions, rotary_dim) of each cos/sin table vLLM builds for the decoder.

    Every attention layer calls rotary_embedding/__init__.py::get_rope, which caches one
    RotaryEmbedding per distinct (head_size, rotary_dim, max_position, rope_parameters, dtype)
    in `_ROPE_DICT`; RotaryEmbeddingBase.__init__ (rotary_embedding/base.py) registers its
    `cos_sin_cache` buffer of [positions, rotary_dim] (cos ‖ sin halves) in the model dtype, on
    the GPU, inside load_model's DeviceMemoryProfiler, so "Model loading took" includes it, on
    every rank (not split by TP). Positions per class (read at upstream 28be48fa9):
    default / llama3 (Llama3RotaryEmbedding): max_position_embeddings; linear
    (linear_scaling_rope.py) and dynamic (dynamic_ntk_scaling_rope.py): max_position × factor;
    yarn (YaRNScalingRotaryEmbedding) and DeepSeek's yarn (DeepseekScalingRotaryEmbedding):
    original_max_position_embeddings × factor. rotary_dim = head_dim × partial_rotary_factor
    (MLA: qk_rope_head_dim). Gemma 3 (gemma3.py::Gemma3Attention) builds two: the configured
    rope for global layers and a default rope at `rope_local_base_freq` for sliding ones.
    Llama 4's NoPE layers build none, its chunked layers share one table. Vision towers' own
    2-D rotary tables are a few MB and not counted."""
    rope = arch.rope
    if rope is None or arch.learned_positions:
        return []
    a = arch.attention
    dim = a.qk_rope_head_dim if a.is_mla else int(a.head_dim * rope.partial_rotary_factor)
    max_pos = arch.max_position_embeddings
    if rope.kind in ("linear", "dynamic"):
        positions = int(max_pos * rope.factor)
    elif rope.kind == "yarn" and rope.original_max_position:
        positions = int(rope.original_max_position * rope.factor)
    else:
        positions = max_pos
    tables = [(positions, dim)]
    if arch.model_type in ("gemma3", "gemma3_text") and rope.kind != "default":
        tables.append((max_pos, dim))  # the sliding layers' unscaled local-base rope
    return tables


def rope_cache_bytes(arch: Architecture, fmt: WeightFormat) -> int:
    """Bytes of vLLM's RoPE cos/sin caches on one rank (see `rope_tables`), in the model dtype."""
    dtype = fmt.for_kind("embedding")
    return sum(dtype.bytes_for(positions * dim) for positions, dim in rope_tables(arch))


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def stage_weights(
    arch: Architecture,
    fmt: WeightFormat,
    tp: int,
    stages: list[range],
    extra_params: int,
    moe_padding_bytes: int = 0,
) -> list[StageWeights]:
    """Weights one rank of each stage loads: its layers' TP shards (KV heads replicated when
    tp > kv_heads, MLA down-projections replicated: engine/weights.py), the padded vocabulary
    ÷ tp for the embedding (first stage) and LM head + final norm (last stage; a tied head
    shares the embedding unless pp > 1), and a vision encoder (÷ tp) on the first stage."""
    counts = count_params(arch)
    h = arch.hidden_size
    vocab_rank = padded_vocab(arch.vocab_size) // tp
    emb = fmt.for_kind("embedding").bytes_for(vocab_rank * h)
    emb += fmt.for_kind("positions").bytes_for(counts.by_kind.get("positions", 0))
    head_params = 0 if arch.tie_word_embeddings else arch.vocab_size * h
    final_norm = counts.lm_head - head_params
    head = fmt.for_kind("norm").bytes_for(final_norm)
    if not arch.tie_word_embeddings or len(stages) > 1:
        head += fmt.for_kind("lm_head").bytes_for(vocab_rank * h)
    # layers of one kind (and one quantisation plan) weigh the same: engine/weights.py
    per_layer = [
        b + (moe_padding_bytes if layer.moe else 0)
        for b, layer in zip(per_layer_bytes(arch, fmt, tp), arch.layers, strict=True)
    ]
    # the encoder stays at the 16-bit base and is split over TP like the decoder (the TP2
    # Mistral-Small-3.1 and Kimi-VL logs match a split, not a replicated, encoder)
    extra = fmt.for_kind("embedding").bytes_for(extra_params // tp)
    out = []
    last = len(stages) - 1
    for s, layers in enumerate(stages):
        body = sum(per_layer[i] for i in layers)
        out.append(
            StageWeights(
                body,
                emb if s == 0 else 0,
                head if s == last else 0,
                extra if s == 0 else 0,
            )
        )
    return out


def kv_bytes_per_token_layer(arch: Architecture, kv: Precision, tp: int) -> float:
    """KV bytes one token takes in one attention layer of one rank: K and V of the rank's KV
    heads (replicated when tp > KV heads), or MLA's one latent + rope key (vLLM
    v1/kv_cache_interface.py MLAAttentionSpec; SGLang MLATokenToKVPool; TRT-LLM alike)."""
    a = arch.attention
    elem = kv.bytes_for(1024) / 1024
    if a.is_mla:
        assert a.kv_lora_rank is not None
        return (a.kv_lora_rank + a.qk_rope_head_dim) * elem
    heads = max(1, a.num_kv_heads // tp)
    return heads * (a.head_dim + a.v_head_dim) * elem


# --- dtype and quantisation names (vLLM, SGLang and TRT-LLM spell them as torch does) -------

DTYPES = {
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
CHECKPOINT_METHODS = (
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
    "gguf",
)
# in-flight quantisation of a 16-bit checkpoint; vLLM's bitsandbytes loader quantises to NF4 with
# double quantisation (quantize_4bit(compress_statistics=True, quant_type="nf4"),
# model_loader/bitsandbytes_loader.py), whatever BitsAndBytesConfig's defaults say
ONLINE_METHODS = {"fp8": "fp8-tensor", "bitsandbytes": "nf4-dq", "w8a8_fp8": "fp8-tensor"}


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
    as the method's standard layout, with a note (engine/quantization.py). `stored` (the
    checkpoint's headers) gives the exact bytes when nothing converts them."""
    key = (dtype or "auto").lower()
    if key not in DTYPES:
        raise GpuplanError(f"--dtype {dtype!r} is not one of auto, bfloat16, float16, float32")
    base_id = DTYPES[key]
    checkpoint_base = torch_dtype_precision(arch.torch_dtype)
    if checkpoint_base.id == "fp32":
        checkpoint_base = get_precision("bf16")  # engines serve fp32 checkpoints in 16-bit
    base = get_precision(base_id) if base_id else checkpoint_base
    q = (quantization or "").lower().replace("-", "_") or None
    if arch.quantization is not None:
        spec = arch.quantization
        layout = spec.layout or get_precision(spec.precision)
        return planned_format(arch, spec, layout, base, stored)
    if q is None:
        return WeightFormat(base, base, stored=as_stored(stored, base))
    if q in ONLINE_METHODS:
        return WeightFormat(get_precision(ONLINE_METHODS[q]), base)
    standard = standard_layout(q, arch.name)
    if standard is not None:
        layout = standard.layout or get_precision(standard.precision)
        return planned_format(arch, standard, layout, base)
    if q.replace("_", "-") in CHECKPOINT_METHODS or q in CHECKPOINT_METHODS:
        raise GpuplanError(
            f"--quantization {quantization} needs a checkpoint quantised with it, but"
            f" {arch.name}'s config.json has no quantization_config"
        )
    raise GpuplanError(f"--quantization {quantization!r} is not a method gpuplan knows")


def engine_kv_precision(weights: WeightFormat, kv_cache_dtype: str | None) -> Precision:
    """KV dtype: 'auto' is the model's activation dtype (fp32 for --dtype float32); fp8 names
    (fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla) are one byte."""
    key = (kv_cache_dtype or "auto").lower()
    if key == "auto":
        return weights.base
    if key.startswith("fp8"):
        return get_precision("fp8", for_kv=True)
    try:
        return get_precision(DTYPES.get(key) or key, for_kv=True)
    except GpuplanError:
        raise GpuplanError(f"--kv-cache-dtype {kv_cache_dtype!r} is not a KV dtype") from None


# --- version rules: data keyed by version range ---------------------------------------------

_VERSION = re.compile(r"v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.10.1.1', 'v0.19.0', '0.1.dev7548+gbaba038' → (major, minor, patch)."""
    m = _VERSION.match(str(text).strip())
    if not m:
        raise GpuplanError(f"{text!r} is not a version (expected e.g. 0.19.0)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@record
class VersionRule:
    """One fact about an engine that holds for versions in [since, until)."""

    key: str
    value: Any
    since: tuple[int, int, int]
    until: tuple[int, int, int] | None
    source: str

    def holds(self, version: tuple[int, int, int]) -> bool:
        return self.since <= version and (self.until is None or version < self.until)


@record
class VersionRules:
    """An engine's version-dependent facts (a TOML file of [[rule]] tables beside the adapter):
    `get(key, version)` is the value of the rule for `key` whose range holds `version`."""

    engine: str
    releases: tuple[str, ...]  # the versions read, oldest first
    rules: tuple[VersionRule, ...]

    def get(self, key: str, version: str) -> Any:
        v = parse_version(version)
        for rule in self.rules:
            if rule.key == key and rule.holds(v):
                return rule.value
        raise KeyError(f"{self.engine}: no rule for {key} at {version}")

    def rule(self, key: str, version: str) -> VersionRule:
        v = parse_version(version)
        for rule in self.rules:
            if rule.key == key and rule.holds(v):
                return rule
        raise KeyError(f"{self.engine}: no rule for {key} at {version}")

    def at(self, version: str) -> dict[str, Any]:
        """Every rule's value at `version`."""
        v = parse_version(version)
        return {r.key: r.value for r in self.rules if r.holds(v)}


def load_version_rules(path: Path) -> VersionRules:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rules = []
    for r in data.get("rule", ()):
        until = r.get("until")
        rules.append(
            VersionRule(
                key=r["key"],
                value=r["value"],
                since=parse_version(r.get("since", "0.0.0")),
                until=parse_version(until) if until else None,
                source=r.get("source", ""),
            )
        )
    return VersionRules(data["engine"], tuple(data.get("releases", ())), tuple(rules))


MIN_BUDGET = 2**20  # a memory share below 1 MiB is a typo (5e-324), not a plan


def require_budget(spelling: str, fraction: float, of_bytes: int, what: str) -> None:
    """Refuse, in one line, a memory fraction that leaves the engine (almost) nothing: the share
    `fraction × of_bytes` under 1 MiB (a budget that rounds to zero, or a negative one). A
    share that is merely too small for the model is a prediction ("will not start"), not this."""
    share = fraction * of_bytes
    if not share >= MIN_BUDGET:
        raise GpuplanError(
            f"{spelling} {fraction!r} leaves {max(0.0, share):.0f} bytes of the"
            f" {of_bytes / 2**30:.2f} GiB {what}: give a fraction that leaves at least 1 MiB"
        )


def refuse_state_layers(arch: Architecture, engine: str, pool: str) -> None:
    """Refuse a model with state layers (Mamba, gated DeltaNet, lightning, short conv) for an
    engine whose state pool gpuplan does not model: sizing its every layer as attention would
    be silently wrong (docs/engines-research.md §7)."""
    n = arch.num_state_layers
    if not n:
        return
    kinds = sorted({layer.mixer for layer in arch.layers if layer.has_state})
    raise GpuplanError(
        f"{engine}: {arch.name} has {n} state layers ({', '.join(kinds)}); {engine}'s {pool} is"
        " not modelled — size it with --engine vllm or --engine generic"
    )


# --- a dummy batch's forward pass and sampler: the tensors alive at the peak ------------------
# (vLLM's profile run, TRT-LLM's profiling context batch and SGLang's reserve all run one;
# vllm/profile_run.py describes what each moment holds)

FUSED_MOE_CHUNK = (
    32768  # VLLM_FUSED_MOE_CHUNK_SIZE: the fused-MoE caches cover at most this many tokens
)


@record
class ProfileBatch:
    """The profile run's dummy batch on one stage."""

    tokens: int  # T: tokens in the forward pass
    seqs: int  # S: rows the sampler sees
    sampler: bool  # this stage runs the sampler (the last pipeline stage)


@record
class PeakTerms:
    """The byte counts the peak is made of (shown in the bill's inputs)."""

    hidden: int  # one [T, h] activation tensor
    layer_transient: int  # the widest transient inside a layer
    moe_workspace: int  # fused-MoE caches
    sampler: int  # the sampler's logit-sized buffers
    forward: int  # the forward moment
    sampling: int  # the sampler moment
    encoder: int  # a multimodal encoder's dummy run
    constant: int

    @property
    def peak(self) -> int:
        return self.constant + self.encoder + max(self.forward, self.sampling)


def activation_bytes(fmt: WeightFormat) -> int:
    """Bytes of one activation element: the model dtype (fp32 checkpoints served in fp32: 4)."""
    return 4 if fmt.base.bits >= 32 else 2


def layer_terms(arch: Architecture, fmt: WeightFormat, tp: int, tokens: int) -> tuple[int, int]:
    """(widest non-MoE transient, fused-MoE caches) of one layer on `tokens` tokens."""
    a = activation_bytes(fmt)
    h = arch.hidden_size
    att = arch.attention
    q = att.num_heads * att.head_dim // tp
    kv = max(1, att.num_kv_heads // tp) * (att.head_dim + att.v_head_dim)
    widest = tokens * (q + kv) * a
    if arch.mlp is not None and any(not layer.moe for layer in arch.layers):
        inter = arch.mlp.intermediate_size // tp
        gate = 2 if arch.mlp.gated else 1
        widest = max(widest, tokens * (gate * inter + inter) * a)
    if arch.num_state_layers:
        widest = max(widest, tokens * state_mixer_width(arch) // tp * a)
    moe = 0
    if arch.moe is not None:
        m = arch.moe
        n = m.expert_intermediate_size // tp
        chunk = min(tokens, FUSED_MOE_CHUNK)
        moe = chunk * m.experts_per_token * (max(2 * n, h) + n) * a
        if m.shared_intermediate_size:
            shared = m.shared_intermediate_size // tp
            widest = max(widest, tokens * 3 * shared * a)
    return widest, moe


def state_mixer_width(arch: Architecture) -> int:
    """Channels the input projection of a state mixer writes per token (its widest tensor in a
    forward pass): Mamba-1 x and z (2·d_inner); Mamba-2 x, z, B, C and dt (vLLM
    MambaMixer2.in_proj); gated DeltaNet q, k, v, z and b, a (Qwen3-Next in_proj_qkvz +
    in_proj_ba); lightning q, k, v and the output gate; a short convolution's B, C, x (3h)."""
    widths = [0]
    if arch.mamba is not None:
        m = arch.mamba
        if m.version == 1:
            widths.append(2 * m.d_inner)
        else:
            widths.append(2 * m.d_inner + 2 * m.n_groups * m.d_state + m.n_heads)
    if arch.linear_attention is not None:
        la = arch.linear_attention
        if la.kind == "gated_delta":
            widths.append(2 * la.num_k_heads * la.k_head_dim + 2 * la.num_v_heads * la.v_head_dim)
        else:
            widths.append(4 * la.num_v_heads * la.v_head_dim)
    if arch.short_conv is not None:
        widths.append(3 * arch.hidden_size)
    return max(widths)


def peak_terms(
    arch: Architecture,
    fmt: WeightFormat,
    tp: int,
    batch: ProfileBatch,
    sampler_bytes: float,
    constant: int,
    encoder: int = 0,
) -> PeakTerms:
    """The profile run's torch peak on one stage, term by term (see the module docstring)."""
    a = activation_bytes(fmt)
    hidden = batch.tokens * arch.hidden_size * a
    widest, moe = layer_terms(arch, fmt, tp, batch.tokens)
    forward = 2 * hidden + max(widest, moe)
    rows = min(batch.seqs, batch.tokens)
    sampler = int(rows * padded_vocab(arch.vocab_size) * sampler_bytes) if batch.sampler else 0
    sampling = sampler + hidden + moe if batch.sampler else 0
    return PeakTerms(hidden, widest, moe, sampler, forward, sampling, encoder, constant)
