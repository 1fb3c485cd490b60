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

from functools import lru_cache

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.encdec_activations import (
    decoder_layer_tensors,
    decoder_side_tensors,
    encoder_layer_tensors,
    encoder_of,
    encoder_side_tensors,
    source_tokens,
)
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.mixer_activations import MixerRun, mixer_tensors, mixer_widths
from gpuplan.errors import GpuplanError
from gpuplan.units import ceil_div

KERNELS = ("flash", "sdpa", "eager")
PLAIN_RECOMPUTE = ("none", "selective", "op", "full")  # with no count; COUNTED take one
FUSED = ("none", "te", "compile")
UNFUSED_GELU = ("gelu_new", "gelu_fast", "gelu_python", "quick_gelu")


@record(cache_hash=True)
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
    fused: str = "none"  # "none" (eager PyTorch), "te" (Transformer Engine), "compile" (Inductor)
    dropout: bool = False  # hidden dropout on: its boolean masks are saved
    sp_gathered: bool = False  # sequence parallelism that saves the all-gathered linear input
    gqa_expanded: bool = False  # k and v copied out to every query head before attention
    residual_bytes: int = 0  # bytes per residual-stream element (0: act_bytes; 4: fp32 stream)
    source: int = 0  # an encoder-decoder's encoder length per sequence (0: seq, the decoder's)

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one GPU (context parallelism splits the sequence)."""
        return self.micro_batch * self.seq // self.cp


@record
class Saved:
    """One tensor saved for backward: its name and bytes on one GPU for one micro-batch."""

    name: str
    bytes: int


def validate_activations(spec: ActivationSpec) -> None:
    for name in ("seq", "micro_batch", "tp", "cp"):
        value = getattr(spec, name)
        if value < 1:
            raise GpuplanError(f"{name.replace('_', '-')} must be at least 1, got {value}")
    if spec.kernel not in KERNELS:
        raise GpuplanError(f"unknown attention kernel {spec.kernel!r}; use flash, sdpa or eager")
    parse_recompute(spec.recompute)
    if spec.fused not in FUSED:
        raise GpuplanError(f"unknown kernel fusion {spec.fused!r}; use none, te or compile")
    if spec.seq % spec.cp:
        raise GpuplanError(f"cp={spec.cp} does not divide the sequence length {spec.seq}")
    if spec.capacity_factor <= 0:
        raise GpuplanError(f"capacity factor must be positive, got {spec.capacity_factor}")


COUNTED = ("every", "block", "uniform")  # modes that take a layer count


@lru_cache(maxsize=256)
def parse_recompute(text: str) -> tuple[str, int]:
    """'none', 'selective', 'op', 'full', 'every:k', 'block:n' or 'uniform:k' → (mode, k).

    every:k    torchtitan's layer-level selective AC: each k-th block checkpointed
    block:n    Megatron --recompute-method block: the first n layers of each stage
    uniform:k  Megatron --recompute-method uniform: groups of k layers, one checkpoint each
    """
    mode, _, arg = text.partition(":")
    if mode in COUNTED and arg.isdigit() and int(arg) >= 1:
        return mode, int(arg)
    if mode in PLAIN_RECOMPUTE and not arg:
        return mode, 1
    raise GpuplanError(
        f"unknown checkpointing {text!r}; use none, selective, op, full, every:K (each K-th"
        " layer), block:N (the first N of a stage) or uniform:K (groups of K)"
    )


def _norm(
    prefix: str, rows: int, width: int, a: int, kind: str, fused: str = "none"
) -> list[Saved]:
    """A norm's saved tensors over `rows` rows of `width` (its output y is listed by its reader).

    Fused norms keep the input in its own dtype and the per-row statistics: Transformer Engine's
    (Layer|RMS)NormLinear saves input, mu (LayerNorm only) and rsigma (transformer_engine/pytorch/
    module/layernorm_linear.py), and a compiled block's fused norm the same: the fp32 copies of
    the unfused kernel are gone."""
    if fused != "none":
        stats = 8 * rows if kind == "layernorm" else 4 * rows
        return [Saved(f"{prefix}.input", a * rows * width), Saved(f"{prefix}.stats", stats)]
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


def _model_norm(
    arch: Architecture, prefix: str, rows: int, width: int, a: int, fused: str = "none"
) -> list[Saved]:
    """A hidden-width norm of `arch`'s kind (its output is listed by its reader, if any):
    fp32-scaling norms keep x and x̂ in fp32 (OlmoRMSNorm, GemmaRMSNorm and its (1 + w) in fp32,
    CohereLayerNorm: x, x − mean, rstd, x̂ and the weight in fp32). A fused kernel (`fused`)
    keeps only the input and the statistics whatever the kind (`_norm`)."""
    if not arch.norm_fp32 or fused != "none":
        return _norm(prefix, rows, width, a, arch.norm, fused)
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
    nq = ceil_div(at.num_heads, tp)
    nkv = max(1, ceil_div(at.num_kv_heads, tp))
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
    if at.output_gate:  # Qwen3-Next: o_proj reads attention output × sigmoid(gate)
        out += [
            Saved("output gate (sigmoid)", a * t * nq * dv),
            Saved("gated attention output (o_proj input)", a * t * nq * dv),
        ]
        if at.qk_norm and a == 4:  # q and the gate share q_proj's output; fp32 saves all of it
            out.append(Saved("q_proj output's gate half (read by q_norm)", a * t * nq * dk))
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
    if spec.gqa_expanded:  # torchtune: k.unsqueeze(2).expand(...).flatten(1, 2) copies
        nkv = nq
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
    intermediates (GPT2MLP with `gelu_new`). Fused: Megatron's bias_swiglu keeps its input (gate
    and up, 2·a·T·i) and the second linear its input (a·T·i) (megatron/core/fusions/
    fused_bias_swiglu.py); Inductor's partition of a compiled block keeps the same three (the
    activation and the product are one fused kernel whose output the down projection saves) —
    torchtune's published compile saving on Llama 3.2 3B (9 GiB over 28 layers at 2 × 4096
    tokens) is exactly this set and the fused norms'."""
    a, w = spec.act_bytes, ceil_div(width, spec.tp)
    if gated:
        if spec.fused != "none":
            return [Saved("mlp.gate+up", 2 * a * t * w), Saved("mlp.act(gate)*up", a * t * w)]
        return [
            Saved("mlp.gate", a * t * w),
            Saved("mlp.up", a * t * w),
            Saved("mlp.act(gate)", a * t * w),
            Saved("mlp.act(gate)*up", a * t * w),
        ]
    if arch.hidden_act == "relu":  # ReLU keeps only its output, which fc2 reads
        return [Saved("mlp.relu output", a * t * w)]
    out = [Saved("mlp.fc", a * t * w), Saved("mlp.act", a * t * w)]
    if arch.hidden_act in UNFUSED_GELU and spec.fused == "none":
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
    i_e = ceil_div(m.expert_intermediate_size, spec.tp)
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
        if m.shared_expert_gate:  # sigmoid(gate(x)) × shared expert output saves both
            out.append(Saved("shared_expert_gate and shared output", a * t * (1 + h)))
    return out


@lru_cache(maxsize=8192)
def layer_tensors(arch: Architecture, layer: LayerSpec, spec: ActivationSpec) -> tuple[Saved, ...]:
    """The tensors one decoder layer saves for one micro-batch on one GPU (no recompute): its
    token mixer (attention, a state mixer, or both side by side) behind its norm, then its FFN
    behind its own norm. A block with one sub-block (Mamba, Nemotron-H) has one norm. An
    encoder-decoder's layers are its decoder's (engine/encdec_activations.py)."""
    if arch.encoder is not None:
        return tuple(Saved(name, n) for name, n in decoder_layer_tensors(arch, spec))
    t = spec.tokens
    a, h = spec.act_bytes, arch.hidden_size
    edge = _edge_tokens(spec)  # tokens at the layer boundary
    if layer.has_state and spec.cp > 1:
        raise GpuplanError(
            f"{arch.name}: context parallelism over {layer.mixer} layers is not modelled"
            " (their scan runs over the whole sequence); use cp=1"
        )
    # the linears after a norm save their input: under PyTorch DTensor sequence parallelism that
    # is the all-gathered (whole-sequence) tensor, under Megatron-LM the sequence shard, which
    # it all-gathers again in backward (tensor_parallel/layers.py LinearWithGradAccumulation...)
    linear_in = t if spec.sp_gathered else edge
    out: list[Saved] = []
    placement = arch.norm_placement
    one_norm = arch.parallel_block and arch.norms_per_layer == 1  # GPT-J, Phi, Falcon-7B, Cohere
    fused = spec.fused
    if layer.mixer != "none":
        if placement == "post":  # OLMo 2: attention reads the residual stream itself
            out.append(Saved("layer input (read by q, k, v)", a * edge * h))
        else:
            out += _model_norm(arch, "attn_norm", edge, h, a, fused)
            if layer.mixer == "hybrid":  # FalconH1DecoderLayer: each branch scales its own copy
                out.append(Saved("attn_norm.output × multiplier (attention, mamba)", 2 * a * t * h))
            else:
                out.append(Saved("attn_norm.output", a * linear_in * h))
        if layer.has_attention:
            out += _attention(arch, spec, t)
        if layer.has_state:
            out += [Saved(name, size) for name, size in mixer_tensors(arch, layer, _run(spec))]
        if placement != "pre":
            out += _model_norm(arch, "post_attn_norm", edge, h, a, fused)
    if layer.ffn:
        if placement == "post":
            out.append(Saved("residual (read by the FFN)", a * edge * h))
        elif not one_norm or layer.mixer == "none":
            out += _model_norm(arch, "mlp_norm", edge, h, a, fused)
            out.append(Saved("mlp_norm.output", a * linear_in * h))
        if placement != "pre":
            out += _model_norm(arch, "post_ffn_norm", edge, h, a, fused)
        if layer.moe and arch.moe is not None:
            out += _moe(arch, spec, t)
        elif arch.mlp is not None:
            out += _mlp(
                arch, spec, t, layer.mlp_width or arch.mlp.intermediate_size, arch.mlp.gated
            )
    if spec.lora_rank and spec.lora_modules:
        out.append(Saved("lora_A outputs", spec.lora_modules * a * t * spec.lora_rank))
    if spec.dropout:  # bias-dropout-add after attention and after the MLP: one bool per element
        out.append(Saved("dropout masks (attention, MLP)", 2 * edge * h))
    return tuple(out)


def _run(spec: ActivationSpec) -> MixerRun:
    """The state mixers' view of `spec`: the fused kernels unless the eager path is asked for."""
    return MixerRun(spec.micro_batch, spec.seq, spec.act_bytes, spec.tp, spec.kernel != "eager")


def _attention_mixer(arch: Architecture, layer: LayerSpec) -> None:
    if layer.mixer != "attention":
        raise GpuplanError(
            f"{arch.name}: torchtitan's op-level selective recompute of {layer.mixer} layers is"
            " not modelled; use --checkpointing full, every:K or none"
        )


def layer_input_bytes(arch: Architecture, spec: ActivationSpec) -> int:
    """A layer's input: what a checkpoint keeps (a·T·h, ÷ tp with sequence parallelism), in
    the residual stream's own dtype when that differs from the compute dtype. An fp32 stream:
    peft's prepare_model_for_kbit_training (peft/utils/other.py) and TRL's
    peft_module_casting_to_bf16 (trl/trainer/utils.py) leave the norms of a 4/8-bit base in
    fp32, so a norm returns fp32 (weight · x); bitsandbytes' Linear4bit casts its output back to
    its input's dtype (bitsandbytes/nn/modules.py), so the MLP's down projection returns fp32
    and the residual add promotes the stream: every decoder layer's input after the first is
    fp32 (tests/test_kbit_residual.py), and the final norm's saved input with it. Billed as L
    fp32 inputs: fms-acceleration's one-GPU QLoRA rows with and without this preparation differ
    by exactly 2·T·h·L bytes (tests/data/training_measurements/hf_trainer.toml).
    """
    width = spec.residual_bytes or spec.act_bytes
    return width * _edge_tokens(spec) * arch.hidden_size


def _edge_tokens(spec: ActivationSpec) -> int:
    """Tokens of a layer-boundary tensor on one GPU: ÷ tp with sequence parallelism."""
    return ceil_div(spec.tokens, spec.tp) if spec.sp else spec.tokens


@lru_cache(maxsize=8192)
def mm_outputs(arch: Architecture, layer: LayerSpec, spec: ActivationSpec) -> tuple[Saved, ...]:
    """The outputs of one layer's matmuls in the order its forward runs them, per TP rank:
    q, k, v, o, then gate, up, down (or fc1, fc2; or a MoE block's grouped experts). Under
    sequence parallelism the o and down projections end in a reduce-scatter whose
    sequence-sharded output is what is kept."""
    at, a, t, h, tp = arch.attention, spec.act_bytes, spec.tokens, arch.hidden_size, spec.tp
    nq = ceil_div(at.num_heads, tp)
    nkv = nq if at.is_mla else max(1, ceil_div(at.num_kv_heads, tp))
    edge = _edge_tokens(spec)
    out = [
        Saved("q_proj", a * t * nq * at.head_dim),
        Saved("k_proj", a * t * nkv * at.head_dim),
        Saved("v_proj", a * t * nkv * at.v_head_dim),
        Saved("o_proj", a * edge * h),
    ]
    if layer.moe and arch.moe is not None:
        m = arch.moe
        slots = t * m.experts_per_token
        i_e = ceil_div(m.expert_intermediate_size, tp)
        out += [Saved("experts.gate_up", 2 * a * slots * i_e), Saved("experts.down", a * slots * h)]
        if m.shared_intermediate_size:
            w = ceil_div(m.shared_intermediate_size, tp)
            out += [
                Saved("shared.gate", a * t * w),
                Saved("shared.up", a * t * w),
                Saved("shared.down", a * edge * h),
            ]
        return tuple(out)
    if arch.mlp is not None:
        w = ceil_div(arch.mlp.intermediate_size, tp)
        if arch.mlp.gated:
            out += [Saved("gate_proj", a * t * w), Saved("up_proj", a * t * w)]
        else:
            out.append(Saved("fc1", a * t * w))
        out.append(Saved("down_proj", a * edge * h))
    return tuple(out)


def op_sac_tensors(arch: Architecture, layer: LayerSpec, spec: ActivationSpec) -> list[Saved]:
    """torchtitan's per-op selective checkpointing of one block (torchtitan/distributed/
    activation_checkpoint.py SelectiveAC): the checkpoint keeps the block's input, attention's
    outputs (output and log-sum-exp) are saved, matmul outputs are saved except every second one
    (the 1st, 3rd, 5th, ... in forward order), and everything else is recomputed in backward."""
    _attention_mixer(arch, layer)
    at, a, t, tp = arch.attention, spec.act_bytes, spec.tokens, spec.tp
    nq = ceil_div(at.num_heads, tp)
    out = [
        Saved("block input", a * _edge_tokens(spec) * arch.hidden_size),
        Saved("attention output", a * t * nq * at.v_head_dim),
        Saved("logsumexp (fp32)", 4 * t * nq),
    ]
    out += [m for i, m in enumerate(mm_outputs(arch, layer, spec)) if i % 2 == 0]
    return out


@lru_cache(maxsize=8192)
def layer_bytes(arch: Architecture, layer: LayerSpec, spec: ActivationSpec) -> int:
    """Bytes one layer keeps for one micro-batch: its saved tensors; only its input under full
    recompute (torch.utils.checkpoint saves the checkpointed function's inputs); the op-level
    selective set (`op_sac_tensors`). Under every:k this is a layer left un-checkpointed."""
    mode, _ = parse_recompute(spec.recompute)
    if mode in ("full", "uniform"):
        return layer_input_bytes(arch, spec)
    if mode == "op":
        return sum(s.bytes for s in op_sac_tensors(arch, layer, spec))
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
    """Saved tensors outside the decoder layers: ids, RoPE tables, final norm, labels. The loss's
    own (the log-softmax, or what its mode keeps) are engine/loss.py's. An encoder-decoder's first
    edge is its whole encoder (`encoder_tensors`), its last the decoder's loss side."""
    if arch.encoder is not None:
        loss_side = [Saved(name, n) for name, n in decoder_side_tensors(arch, spec)]
        return (*(encoder_tensors(arch, spec) if first else ()), *(loss_side if last else ()))
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
        edge = _edge_tokens(spec)
        if arch.final_norm:  # the LM head saves its input: all-gathered under DTensor SP
            out += _model_norm(arch, "final_norm", edge, h, a, spec.fused)
            out.append(Saved("final_norm.output", a * (t if spec.sp_gathered else edge) * h))
        if arch.final_softcap:  # tanh(logits / cap) × cap keeps the tanh output
            out.append(
                Saved("softcapped logits (tanh)", a * t * ceil_div(arch.vocab_size, spec.tp))
            )
        out.append(Saved("labels (int64)", 8 * t))
    return tuple(out)


def encoder_tensors(arch: Architecture, spec: ActivationSpec) -> tuple[Saved, ...]:
    """An encoder-decoder's encoder as the decoder's backward finds it: its input side and every
    layer's saved tensors, or under full recompute each layer's input (b·S·h, what the
    checkpoint keeps) — the encoder runs before the decoder and is backpropagated after it."""
    layers = encoder_of(arch).shape("encoder_layers")
    out = [Saved(name, n) for name, n in encoder_side_tensors(arch, spec)]
    if parse_recompute(spec.recompute)[0] == "full":
        rows = spec.micro_batch * source_tokens(arch, spec)
        width = spec.residual_bytes or spec.act_bytes
        return (*out, Saved("encoder layer inputs", layers * width * rows * arch.hidden_size))
    one = sum(n for _, n in encoder_layer_tensors(arch, spec))
    return (*out, Saved(f"encoder layers ({layers})", layers * one))


@lru_cache(maxsize=8192)
def edge_bytes(arch: Architecture, spec: ActivationSpec, first: bool, last: bool) -> int:
    """Bytes of the tensors saved outside the decoder layers (`edge_tensors`)."""
    return sum(s.bytes for s in edge_tensors(arch, spec, first, last))


def checkpointed_layers(spec: ActivationSpec, layers: int) -> int:
    """Layers of a stage that are checkpointed: all under full, none without recompute, and
    under every:k each k-th block (torchtitan's layer-level selective AC: a block is wrapped when
    its running count is a multiple of k, activation_checkpoint.py `_apply_layer_sac`)."""
    mode, k = parse_recompute(spec.recompute)
    if mode == "every":
        return layers // k
    if mode == "block":
        return min(k, layers)
    return layers if mode in ("full", "uniform") else 0


def is_checkpointed(spec: ActivationSpec, position: int) -> bool:
    """Whether the layer at `position` (0-based, within its stage) is rebuilt in backward
    as a whole block: every layer under full and op-level recompute, each k-th under every:k."""
    mode, k = parse_recompute(spec.recompute)
    if mode == "every":
        return (position + 1) % k == 0
    if mode == "block":
        return position < k
    return mode in ("full", "op", "uniform")


def _ffn_bytes(
    arch: Architecture, kind: LayerSpec, spec: ActivationSpec, gated: int, plain: int
) -> int:
    """`gated` (or `plain`) × a × the FFN's width × its tokens, for a layer kind: the dense MLP's
    width, or a MoE block's per token-expert slot; 0 for a layer without an FFN."""
    a, t, tp = spec.act_bytes, spec.tokens, spec.tp
    if arch.encoder is not None:  # a decoder layer's FFN (engine/encdec_activations.py)
        enc = encoder_of(arch)
        return (gated if enc.shape("gated") else plain) * a * t * enc.shape("ffn_decoder")
    if not kind.ffn:
        return 0
    if kind.moe and arch.moe is not None:
        m = arch.moe
        slots = int(t * m.experts_per_token * spec.capacity_factor)
        return (
            (gated if m.expert_gated else plain)
            * a
            * slots
            * ceil_div(m.expert_intermediate_size, tp)
        )
    if arch.mlp is not None:
        width = ceil_div(kind.mlp_width or arch.mlp.intermediate_size, tp)
        return (gated if arch.mlp.gated else plain) * a * t * width
    return 0


def _mixer_working_bytes(arch: Architecture, kind: LayerSpec, spec: ActivationSpec) -> int:
    """A state mixer's in_proj output and the input of its out_proj (a·T·(W + d)), alive while
    its forward or backward runs (their gradients in backward)."""
    if not kind.has_state:
        return 0
    width_in, width_out = mixer_widths(arch, kind, spec.tp)
    return spec.act_bytes * spec.tokens * (width_in + width_out)


def forward_working_set_bytes(arch: Architecture, spec: ActivationSpec, layers: range) -> int:
    """What a checkpointed layer holds beyond its saved tensors while its forward runs: the MLP's
    input and the residual beside it (2·a·T·h) and, inside the gated MLP, act(gate), up and their
    product (3·a·T·i; 2·a·T·i plain), or a state mixer's projections, none of which the
    checkpoint keeps."""
    if not layers:
        return 0
    widest = 0
    for kind, _ in layer_kinds(arch, layers.start, layers.stop):
        widest = max(
            widest, _ffn_bytes(arch, kind, spec, 3, 2), _mixer_working_bytes(arch, kind, spec)
        )
    return 2 * spec.act_bytes * _edge_tokens(spec) * arch.hidden_size + widest


def stage_bytes(
    arch: Architecture, spec: ActivationSpec, layers: range, first: bool, last: bool
) -> int:
    """Saved bytes of one micro-batch on one pipeline stage: its layers plus the edge tensors
    (the loss's own saved tensors excluded)."""
    if arch.hyper_streams:  # HYV4Model carries hc_mult copies of the residual stream
        raise GpuplanError(
            f"{arch.name}: training activations of hyper-connections (hc_mult ="
            f" {arch.hyper_streams} residual streams) are not modelled"
        )
    mode, k = parse_recompute(spec.recompute)
    if mode == "uniform":  # one saved input per group of k layers
        groups = -(-len(layers) // k)
        full = with_recompute(spec, "full")
        return groups * layer_input_bytes(arch, spec) + edge_bytes(arch, full, first, last)
    if mode in ("every", "block"):
        kept = with_recompute(spec, "full")
        plain = with_recompute(spec, "none")
        total = 0
        ck = checkpointed_layers(spec, len(layers))
        for kind, n in layer_kinds(arch, layers.start, layers.stop):
            share = round(ck * n / len(layers))
            total += share * layer_bytes(arch, kind, kept) + (n - share) * layer_bytes(
                arch, kind, plain
            )
        return total + edge_bytes(arch, plain, first, last)
    total = sum(
        n * layer_bytes(arch, kind, spec)
        for kind, n in layer_kinds(arch, layers.start, layers.stop)
    )
    return total + edge_bytes(arch, spec, first, last)


def saved_activation_bytes(arch: Architecture, spec: ActivationSpec) -> int:
    """All bytes saved for backward by one micro-batch through the whole model on one GPU
    (pp = 1): what `saved_tensors_hooks` counts for the same forward + loss — the layers, the
    edge tensors and the standard loss's fp32 log-softmax (4·T·V, engine/loss.py)."""
    validate_activations(spec)
    a = spec.act_bytes if arch.encoder is not None else 4  # seq2seq heads: nn.CrossEntropyLoss
    log_softmax = a * spec.tokens * ceil_div(arch.vocab_size, spec.tp)
    return stage_bytes(arch, spec, range(arch.num_layers), True, True) + log_softmax


@lru_cache(maxsize=8192)
def recompute_buffer_bytes(arch: Architecture, spec: ActivationSpec, layers: range) -> int:
    """What backward rebuilds for one layer at a time: the layer's full saved set minus what
    the recompute mode kept (full and every:k keep the input; op keeps its save list; selective
    the tensors outside core attention). Zero without recompute."""
    mode, k = parse_recompute(spec.recompute)
    if mode == "none" or not layers:
        return 0
    plain = with_recompute(spec, "none")
    kept = with_recompute(spec, "full") if mode in COUNTED else spec
    if mode in COUNTED and checkpointed_layers(spec, len(layers)) == 0:
        return 0
    one = max(
        layer_bytes(arch, kind, plain) - layer_bytes(arch, kind, kept)
        for kind, _ in layer_kinds(arch, layers.start, layers.stop)
    )
    if mode == "uniform":  # a group of k layers is re-run together: all of them but its input
        group = min(k, len(layers))
        return group * one + (group - 1) * layer_input_bytes(arch, spec)
    return one


def backward_released_bytes(arch: Architecture, spec: ActivationSpec, layers: range) -> int:
    """Saved bytes a layer's backward frees before it peaks: the input of the MLP's last linear
    (act(gate)·up, or the activation of a plain MLP; per slot for MoE experts), released once
    that linear's backward has run, before the gradients of the elementwise ops are built
    (nothing for a layer without an FFN)."""
    if not layers:
        return 0
    return min(
        _ffn_bytes(arch, kind, spec, 1, 1)
        for kind, _ in layer_kinds(arch, layers.start, layers.stop)
    )


def backward_transient_bytes(arch: Architecture, spec: ActivationSpec, layers: range) -> int:
    """Gradients of activations alive inside one layer's backward (beyond its saved tensors):
    the gradient arriving at the layer's output (a·T·h) plus, in the MLP, the gradient of the
    down projection's input and the two it splits into (gate and up: 3·a·T·i; 2·a·T·i for a plain
    MLP; per token-expert slot for MoE), in attention the output gradient and dq, dk, dv, or in a
    state mixer the gradients of its in_proj output and out_proj input — whichever is largest
    (autograd frees each node's inputs after it runs)."""
    if not layers:
        return 0
    at, a, t, tp = arch.attention, spec.act_bytes, spec.tokens, spec.tp
    nq = ceil_div(at.num_heads, tp)
    nkv = nq if at.is_mla else max(1, ceil_div(at.num_kv_heads, tp))
    attn = a * t * (2 * nq * at.head_dim + nkv * (at.head_dim + at.v_head_dim))
    widest = 0
    for kind, _ in layer_kinds(arch, layers.start, layers.stop):
        widest = max(
            widest,
            _ffn_bytes(arch, kind, spec, 3, 2),
            attn if kind.has_attention else 0,
            _mixer_working_bytes(arch, kind, spec),
        )
    return a * _edge_tokens(spec) * arch.hidden_size + widest


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


@lru_cache(maxsize=4096)
def with_recompute(spec: ActivationSpec, recompute: str) -> ActivationSpec:
    """`spec` under another recompute mode (cached: the bill asks for the same few often)."""
    return replace(spec, recompute=recompute)
