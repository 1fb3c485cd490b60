"""Activation memory: every tensor autograd saves for the backward pass, per layer and micro-batch.

The estimate is a list, not a fudge factor. For each layer it names the tensors the forward pass
of a PyTorch / Hugging Face `transformers` decoder saves for backward (what
`torch.autograd.graph.saved_tensors_hooks` sees; tests/test_reference_activations.py counts them
on tiny Llama, Qwen3-MoE and GPT-2 models). T = micro-batch × sequence ÷ cp tokens on one GPU,
h hidden, a bytes per activation element (2 for bf16, 4 for fp32), heads and widths per TP rank:

  RMSNorm (LlamaRMSNorm: upcast to fp32, x·rsqrt(mean x² + ε), weight · x̂.to(dtype)):
      x in fp32 (4·T·h, the upcast copy, or x itself in fp32), x̂ (a·T·h), rsqrt (4·T),
      and its output y (a·T·h), saved by the projection that reads it.
  LayerNorm (GPT-2, aten native_layer_norm): x (a·T·h), mean and rstd (4·T each: fp32 on CUDA;
      the CPU kernel keeps them in a bf16 input's dtype, the 0.1 % the reference test shows), output y.
  Attention, SDPA / flash kernel (no s² scores): q and k after RoPE, v, the output and the
      log-sum-exp (fp32, one per head and token): a·T·(n_q·d + n_kv·d + n_kv·d_v + n_q·d_v) + 4·T·n_q.
      The o-projection reads the output without a copy. Per-head q/k RMSNorm (Qwen3) adds its own
      x (fp32), x̂ and rsqrt for q and k.
  Attention, eager (matmul-softmax-matmul): q, k and v repeated to every query head, the softmax
      probabilities in fp32 (4·b·n_q·s²; plus an a-byte copy when a ≠ 4; GPT-2 keeps them in the
      compute dtype) and the merged output.
  Gated MLP (SwiGLU): gate, up, act(gate), act(gate)·up: 4·a·T·i.
  Plain MLP (GPT-2): fc output and the activation output (2·a·T·i); the unfused Python
      `gelu_new` adds its tanh, 1 + tanh and 0.5·x (3·a·T·i more).
  MoE block (top-k routing, Qwen3-MoE / Mixtral in transformers 5 with grouped GEMMs), per token-
      expert assignment (A = T·k·capacity factor): gathered x (a·h), gate_up (2·a·i_e), act (a·i_e),
      product (a·i_e), expert output (a·h), routing weight (a); the router's softmax (4·T·E),
      top-k values and indices and the sort indices of the dispatch; shared experts as a gated MLP.
  Model level: token ids (8·T) on the first stage; final norm and the fp32 log-softmax of the
      loss (4·T·V, vocab-parallel ÷ tp) and labels (8·T) on the last; RoPE cos/sin (shared).

Family variations (tests/test_reference_activations.py measures ten families): norms that scale in
fp32 (Gemma's (1 + w), OLMo 2, Cohere's fp32 LayerNorm) keep their normalised input in fp32;
post-norms (OLMo 2) and sandwich norms (Gemma 2) add a norm after attention and FFN whose output
goes to the residual add (nothing reads it to save); a parallel block with one norm (GPT-J, Phi,
Falcon, Cohere) feeds the same normed input to attention and FFN; eager softcapped attention
(Gemma 2: tanh(s/c)·c) keeps the tanh output (s² per head) and softcapped logits keep tanh of the
logits (a·T·V); a ReLU MLP keeps only the ReLU output (the fc2 input).

Residual adds and dropout with p = 0 save nothing. Under tensor parallelism the tensors inside
attention and MLP are ÷ tp; those at the layer boundary (norm inputs and outputs) are divided
only with sequence parallelism (Korthikanti et al. 2022, §4.2.2). Context parallelism divides
the tokens. Full recompute keeps only each layer's input (a·T·h, ÷ tp with SP) and recomputes one
layer at a time in backward; selective recompute drops the s² attention scores of an eager kernel
(flash never stores them).

`megatron_layer_bytes` is the closed form of Korthikanti et al. 2022 (eqs. 1-5) for Megatron's
GPT layer (fp16, dropout masks, fused kernels), kept to reproduce the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.errors import GpuplanError

KERNELS = ("flash", "sdpa", "eager")
RECOMPUTE = ("none", "selective", "full")
UNFUSED_GELU = ("gelu_new", "gelu_fast", "gelu_python", "quick_gelu")


@dataclass(frozen=True)
class ActivationSpec:
    """What decides one micro-batch's activations on one GPU."""

    seq: int
    micro_batch: int
    act_bytes: int = 2  # bytes per activation element (the compute dtype)
    kernel: str = "flash"  # "flash"/"sdpa" (no s² scores) or "eager"
    recompute: str = "none"
    tp: int = 1
    sp: bool = False
    cp: int = 1
    capacity_factor: float = 1.0  # MoE: slots per expert ÷ fair share (1.0 = dropless average)
    lora_rank: int = 0
    lora_modules: int = 0  # adapted linear modules per layer

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one GPU (context parallelism splits the sequence)."""
        return self.micro_batch * self.seq // self.cp


@dataclass(frozen=True)
class Saved:
    """One tensor saved for backward: its name and bytes on one GPU for one micro-batch."""

    name: str
    bytes: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def validate_activations(spec: ActivationSpec) -> None:
    for name in ("seq", "micro_batch", "tp", "cp"):
        value = getattr(spec, name)
        if value < 1:
            raise GpuplanError(f"{name.replace('_', '-')} must be at least 1, got {value}")
    if spec.kernel not in KERNELS:
        raise GpuplanError(f"unknown attention kernel {spec.kernel!r}; use flash, sdpa or eager")
    if spec.recompute not in RECOMPUTE:
        raise GpuplanError(f"unknown checkpointing {spec.recompute!r}; use none, selective or full")
    if spec.seq % spec.cp:
        raise GpuplanError(f"cp={spec.cp} does not divide the sequence length {spec.seq}")
    if spec.capacity_factor <= 0:
        raise GpuplanError(f"capacity factor must be positive, got {spec.capacity_factor}")


def _norm(prefix: str, rows: int, width: int, a: int, kind: str) -> list[Saved]:
    """A norm's saved tensors over `rows` rows of `width` (its output y is listed by its reader)."""
    if kind == "layernorm":
        return [
            Saved(f"{prefix}.input", a * rows * width),
            Saved(f"{prefix}.mean+rstd", 8 * rows),
        ]
    return [
        Saved(f"{prefix}.input_fp32", 4 * rows * width),
        Saved(f"{prefix}.normalized", a * rows * width),
        Saved(f"{prefix}.rsqrt", 4 * rows),
    ]


def _model_norm(arch: Architecture, prefix: str, rows: int, width: int, a: int) -> list[Saved]:
    """A hidden-width norm of `arch`'s kind (its output is listed by its reader, if any):
    fp32-scaling norms keep x and x̂ in fp32 (OlmoRMSNorm, GemmaRMSNorm and its (1 + w) in fp32,
    CohereLayerNorm: x, x − mean, rstd, x̂ and the weight in fp32)."""
    if not arch.norm_fp32:
        return _norm(prefix, rows, width, a, arch.norm)
    if arch.norm == "layernorm":
        return [
            Saved(f"{prefix}.input_fp32", 4 * rows * width),
            Saved(f"{prefix}.centered_fp32", 4 * rows * width),
            Saved(f"{prefix}.rstd", 4 * rows),
            Saved(f"{prefix}.normalized_fp32", 4 * rows * width),
            Saved(f"{prefix}.weight_fp32", 4 * width),
        ]
    out = [
        Saved(f"{prefix}.input_fp32", 4 * rows * width),
        Saved(f"{prefix}.normalized_fp32", 4 * rows * width),
        Saved(f"{prefix}.rsqrt", 4 * rows),
    ]
    if arch.family.startswith("gemma"):
        out.append(Saved(f"{prefix}.(1+weight) fp32", 4 * width))
    return out


def _attention(arch: Architecture, spec: ActivationSpec, t: int) -> list[Saved]:
    """An attention block's saved tensors, heads ÷ tp: flash/SDPA keeps q, k, v, the output and
    the fp32 log-sum-exp (Dao et al. 2022 §3.1: only O and the softmax statistics are stored);
    eager keeps k, v repeated to the query heads and the s² probabilities (transformers'
    eager_attention_forward); MLA adds the q_a / kv_a norms (DeepseekV3Attention)."""
    at, a, tp = arch.attention, spec.act_bytes, spec.tp
    nq = _ceil_div(at.num_heads, tp)
    nkv = max(1, _ceil_div(at.num_kv_heads, tp))
    d, dv = at.head_dim, at.v_head_dim
    out: list[Saved] = []
    if at.is_mla:
        assert at.kv_lora_rank is not None
        if at.q_lora_rank:
            out += _norm("q_a_norm", t, at.q_lora_rank, a, "rms")
            out.append(Saved("q_a_norm.output", a * t * at.q_lora_rank))
        out += _norm("kv_a_norm", t, at.kv_lora_rank, a, "rms")
        out.append(Saved("kv_a_norm.output", a * t * at.kv_lora_rank))
        nkv, dk = nq, d
    else:
        dk = d
        if at.qk_norm and at.qk_norm_scope == "proj":  # one norm over all heads (OLMo 2)
            out += _model_norm(arch, "q_norm", t, nq * d, a)
            out += _model_norm(arch, "k_norm", t, nkv * d, a)
        elif at.qk_norm:
            out += (
                _model_norm(arch, "q_norm", t * nq, d, a)
                if arch.norm == "rms"
                else _norm("q_norm", t * nq, d, a, "layernorm")
            )
            out += (
                _model_norm(arch, "k_norm", t * nkv, d, a)
                if arch.norm == "rms"
                else _norm("k_norm", t * nkv, d, a, "layernorm")
            )
    eager = spec.kernel == "eager" and spec.recompute == "none"
    if eager:
        s_q = spec.seq // spec.cp
        probs = spec.micro_batch * nq * s_q * spec.seq
        out += [
            Saved("q", a * t * nq * dk),
            Saved("k (repeated to query heads)", a * t * nq * dk),
            Saved("v (repeated to query heads)", a * t * nq * dv),
            Saved("attention output (merged heads)", a * t * nq * dv),
        ]
        if arch.attn_softcap:  # Gemma 2: tanh(scores / cap) × cap keeps the tanh output
            out.append(Saved("softcapped scores (tanh)", a * probs))
        if arch.model_type == "gpt2":  # GPT-2's eager softmax stays in the compute dtype
            out.append(Saved("softmax probabilities", a * probs))
        else:  # Llama-family eager_attention_forward: softmax(dtype=float32).to(dtype)
            out.append(Saved("softmax probabilities (fp32)", 4 * probs))
            if a != 4:
                out.append(Saved("softmax probabilities (cast)", a * probs))
        return out
    out += [
        Saved("q", a * t * nq * dk),
        Saved("k", a * t * nkv * dk),
        Saved("v", a * t * nkv * dv),
        Saved("attention output", a * t * nq * dv),
        Saved("logsumexp (fp32)", 4 * t * nq),
    ]
    return out


def _mlp(arch: Architecture, spec: ActivationSpec, t: int, width: int, gated: bool) -> list[Saved]:
    """A dense FFN's saved tensors, width ÷ tp: SwiGLU's gate, up, act(gate), act(gate)·up
    (LlamaMLP, 4·a·T·i); GPT-2's fc and activation outputs, plus the unfused tanh-GELU's three
    intermediates (GPT2MLP with `gelu_new`)."""
    a, w = spec.act_bytes, _ceil_div(width, spec.tp)
    if gated:
        return [
            Saved("mlp.gate", a * t * w),
            Saved("mlp.up", a * t * w),
            Saved("mlp.act(gate)", a * t * w),
            Saved("mlp.act(gate)*up", a * t * w),
        ]
    if arch.hidden_act == "relu":  # ReLU keeps only its output, which fc2 reads
        return [Saved("mlp.relu output", a * t * w)]
    out = [Saved("mlp.fc", a * t * w), Saved("mlp.act", a * t * w)]
    if arch.hidden_act in UNFUSED_GELU:
        out.append(Saved("mlp.gelu intermediates (tanh, 1+tanh, x/2)", 3 * a * t * w))
    return out


def _moe(arch: Architecture, spec: ActivationSpec, t: int) -> list[Saved]:
    """A MoE block's saved tensors: the router's fp32 softmax and top-k, the dispatch indices, and
    per token-expert assignment (T·k·capacity factor, Fedus et al. 2021 §2.2) the gathered input,
    gate_up, act, product, output and routing weight (Qwen3MoeSparseMoeBlock, grouped GEMMs);
    shared experts as a gated MLP."""
    assert arch.moe is not None
    m, a, h = arch.moe, spec.act_bytes, arch.hidden_size
    k, e = m.experts_per_token, m.num_experts
    assignments = int(t * k * spec.capacity_factor)
    i_e = _ceil_div(m.expert_intermediate_size, spec.tp)
    out = [
        Saved("router.softmax (fp32)", 4 * t * e),
        Saved("router.top-k values and sum (fp32)", 4 * t * k + 4 * t),
        Saved("router.top-k indices", 8 * t * k),
        Saved("dispatch indices", 3 * 8 * assignments + 4 * e),
        Saved("experts.gathered input", a * assignments * h),
        Saved("experts.gate_up", 2 * a * assignments * i_e),
        Saved("experts.act(gate)", a * assignments * i_e),
        Saved("experts.act(gate)*up", a * assignments * i_e),
        Saved("experts.output", a * assignments * h),
        Saved("experts.routing weight", a * assignments),
    ]
    if m.shared_intermediate_size:
        shared = _mlp(arch, spec, t, m.shared_intermediate_size, True)
        out += [Saved("shared_" + s.name, s.bytes) for s in shared]
        if m.shared_expert_gate:
            out.append(Saved("shared_expert_gate", a * t))
    return out


@lru_cache(maxsize=8192)
def layer_tensors(arch: Architecture, layer: LayerSpec, spec: ActivationSpec) -> tuple[Saved, ...]:
    """The tensors one decoder layer saves for one micro-batch on one GPU (no recompute)."""
    t = spec.tokens
    a, h = spec.act_bytes, arch.hidden_size
    edge = _ceil_div(t, spec.tp) if spec.sp else t  # tokens at the layer boundary
    if layer.mixer != "attention":
        raise GpuplanError(
            f"{arch.name}: training activations of {layer.mixer} layers are not modelled yet;"
            " gpuplan sizes serving for this model but not training"
        )
    out: list[Saved] = []
    placement = arch.norm_placement
    one_norm = arch.parallel_block and arch.norms_per_layer == 1  # GPT-J, Phi, Falcon-7B, Cohere
    if placement == "post":  # OLMo 2: attention reads the residual stream itself
        out.append(Saved("layer input (read by q, k, v)", a * edge * h))
    else:
        out += _model_norm(arch, "attn_norm", edge, h, a)
        out.append(Saved("attn_norm.output", a * edge * h))
    out += _attention(arch, spec, t)
    if placement != "pre":
        out += _model_norm(arch, "post_attn_norm", edge, h, a)
    if placement == "post":
        out.append(Saved("residual (read by the FFN)", a * edge * h))
    elif not one_norm:
        out += _model_norm(arch, "mlp_norm", edge, h, a)
        out.append(Saved("mlp_norm.output", a * edge * h))
    if placement != "pre":
        out += _model_norm(arch, "post_ffn_norm", edge, h, a)
    if layer.moe and arch.moe is not None:
        out += _moe(arch, spec, t)
    elif arch.mlp is not None:
        out += _mlp(arch, spec, t, arch.mlp.intermediate_size, arch.mlp.gated)
    if spec.lora_rank and spec.lora_modules:
        out.append(Saved("lora_A outputs", spec.lora_modules * a * t * spec.lora_rank))
    return tuple(out)


@lru_cache(maxsize=8192)
def layer_bytes(arch: Architecture, layer: LayerSpec, spec: ActivationSpec) -> int:
    """Bytes one layer keeps for one micro-batch: its saved tensors, or only its input under
    full recompute (torch.utils.checkpoint saves the checkpointed function's inputs)."""
    if spec.recompute == "full":
        edge = _ceil_div(spec.tokens, spec.tp) if spec.sp else spec.tokens
        return spec.act_bytes * edge * arch.hidden_size
    return sum(s.bytes for s in layer_tensors(arch, layer, spec))


@lru_cache(maxsize=4096)
def layer_kinds(arch: Architecture, start: int, stop: int) -> tuple[tuple[LayerSpec, int], ...]:
    """The distinct layer kinds in layers [start, stop) and how many of each."""
    counts: dict[LayerSpec, int] = {}
    for layer in arch.layers[start:stop]:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(counts.items())


@lru_cache(maxsize=4096)
def edge_tensors(
    arch: Architecture, spec: ActivationSpec, first: bool, last: bool
) -> tuple[Saved, ...]:
    """Saved tensors outside the decoder layers: ids, RoPE tables, final norm, loss."""
    t, a, h = spec.tokens, spec.act_bytes, arch.hidden_size
    out: list[Saved] = []
    if first:
        out.append(Saved("token ids (int64)", 8 * t))
        if arch.learned_positions:
            out.append(Saved("position ids (int64)", 8 * (spec.seq // spec.cp)))
    if spec.kernel == "eager" and spec.recompute == "full" and arch.model_type == "gpt2":
        # GPT2Block receives the additive causal mask positionally: the checkpoint saves it
        out.append(
            Saved(
                "attention mask (checkpoint input)",
                a * spec.micro_batch * (spec.seq // spec.cp) * spec.seq,
            )
        )
    if not arch.learned_positions and spec.recompute != "full":
        rot = arch.attention.qk_rope_head_dim or arch.attention.head_dim
        out.append(
            Saved("rope cos+sin (shared by all layers)", 2 * a * (spec.seq // spec.cp) * rot)
        )
    if last:
        edge = _ceil_div(t, spec.tp) if spec.sp else t
        if arch.final_norm:
            out += _model_norm(arch, "final_norm", edge, h, a)
            out.append(Saved("final_norm.output", a * edge * h))
        if arch.final_softcap:  # tanh(logits / cap) × cap keeps the tanh output
            out.append(
                Saved("softcapped logits (tanh)", a * t * _ceil_div(arch.vocab_size, spec.tp))
            )
        out.append(
            Saved("log-softmax of the logits (fp32)", 4 * t * _ceil_div(arch.vocab_size, spec.tp))
        )
        out.append(Saved("labels (int64)", 8 * t))
    return tuple(out)


def logits_peak_bytes(arch: Architecture, spec: ActivationSpec) -> int:
    """The loss's transient peak beyond the saved log-softmax: the logits in the compute dtype
    and their fp32 upcast in forward (or the fp32 gradient of the logits in backward):
    (a + 4) × tokens × vocab ÷ tp (vocab-parallel cross entropy, Megatron-LM)."""
    return (spec.act_bytes + 4) * spec.tokens * _ceil_div(arch.vocab_size, spec.tp)


@lru_cache(maxsize=8192)
def edge_bytes(arch: Architecture, spec: ActivationSpec, first: bool, last: bool) -> int:
    """Bytes of the tensors saved outside the decoder layers (`edge_tensors`)."""
    return sum(s.bytes for s in edge_tensors(arch, spec, first, last))


def stage_bytes(
    arch: Architecture, spec: ActivationSpec, layers: range, first: bool, last: bool
) -> int:
    """Saved bytes of one micro-batch on one pipeline stage: its layers plus the edge tensors."""
    total = sum(
        n * layer_bytes(arch, kind, spec)
        for kind, n in layer_kinds(arch, layers.start, layers.stop)
    )
    return total + edge_bytes(arch, spec, first, last)


def saved_activation_bytes(arch: Architecture, spec: ActivationSpec) -> int:
    """All bytes saved for backward by one micro-batch through the whole model on one GPU
    (pp = 1): what `saved_tensors_hooks` counts for the same forward + loss."""
    validate_activations(spec)
    return stage_bytes(arch, spec, range(arch.num_layers), True, True)


@lru_cache(maxsize=8192)
def recompute_buffer_bytes(arch: Architecture, spec: ActivationSpec, layers: range) -> int:
    """Under full recompute, backward re-runs one layer's forward and holds its saved tensors."""
    if spec.recompute != "full" or not layers:
        return 0
    full = replace(spec, recompute="none")
    return max(
        layer_bytes(arch, kind, full) for kind, _ in layer_kinds(arch, layers.start, layers.stop)
    )


def megatron_layer_bytes(
    s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none"
) -> float:
    """Activation bytes of one Megatron GPT layer, Korthikanti et al. 2022 (fp16, with dropout):

    no parallelism           s·b·h·(34 + 5·a·s/h)                        (eq. 1)
    tensor parallel          s·b·h·(10 + 24/t + 5·a·s/(h·t))              (eq. 2)
    tensor + sequence par.   s·b·h/t·(34 + 5·a·s/h)                       (eq. 4)
    + selective recompute    s·b·h/t·34  (or s·b·h·(10 + 24/t) without SP) (eq. 5)
    full recompute           2·s·b·h  (the layer input, ÷ t with SP)       (§4.1)
    """
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    scores = 0.0 if recompute == "selective" else 5 * a * s / h
    if sp:
        return s * b * h / t * (34 + scores)
    return s * b * h * (10 + 24 / t + scores / t)
