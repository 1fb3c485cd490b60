"""Training activations of an encoder-decoder: the tensors both stacks save for backward.

engine/activations.py lists a decoder's; this lists what transformers' T5, BART (and its
relatives), M2M100 / NLLB and Whisper models save in a training forward (what
`torch.autograd.graph.saved_tensors_hooks` sees; tests/test_encdec_training.py counts them on
tiny models). b is the micro-batch, S the source (encoder) length, L the target (decoder) length,
N = b·S or b·L the rows of a tensor, a bytes per activation element, h = d_model, H heads of d,
f the FFN width:

  norms      T5LayerNorm (no mean, no bias: x.to(fp32).pow(2).mean, x · rsqrt, weight · x̂): the
             fp32 copy of x (4·N·h), x itself when it is not fp32, rsqrt (4·N) and x̂ (a·N·h);
             LayerNorm (BART, M2M100, Whisper): x and mean + rstd (aten native_layer_norm).
             Each norm's output y (a·N·h) is saved by the linears that read it.
  stack      pre-norm (T5, mBART, Pegasus, M2M100, Whisper): a norm before each sub-block and a
             final norm; post-norm (BART, Marian, PLBart): a norm after each sub-block, and the
             stack's input saved by the first layer's q, k, v (an embedding LayerNorm's output,
             or the embeddings). The encoder's last output is saved once by every decoder
             layer's cross-attention k and v (the same tensor).
  attention  self-attention over N rows, cross-attention with queries over the target and k, v
             over the source. SDPA / flash: q, k, v, the output and the fp32 log-sum-exp of every
             head and query; eager (and T5's self-attention, whose relative-position bias needs a
             gradient: PyTorch's SDPA has no fused CPU kernel taking one and runs its math path):
             q, k, v, the b·H·Lq·Lk probabilities and the merged output read by o. T5 keeps its
             relative-position buckets (int64, Lq·Lk per stack), and its SDPA cross-attention
             the zero bias it passes as a mask (1·H·L·S). Under gradient checkpointing each
             stack's position bias (1·H·Lq·Lk, computed once, passed to every block) and the
             cross-attention's zero bias (made to require a gradient) are the blocks' inputs
             the checkpoints keep; the buckets are rebuilt inside the first block. Whisper
             makes q, k and v contiguous head-first, so SDPA's output is copied to merge the
             heads (o's input, a·N·H·d). (On CUDA the memory-efficient kernel takes a bias
             that needs a gradient; the bill keeps the math path, an upper bound, and says so.)
  FFN        ReLU (T5 v1.0, M2M100): its output; GELU (BART, Whisper): fc1's and the
             activation's outputs; T5 v1.1's gated gelu_new: wi_0's and wi_1's outputs, the
             activation and the product, and gelu_new's unfused tanh intermediates (3·a·N·f).
  front-end  Whisper's two convolutions over the mel frames F (3000): the features
             (a·b·mels·F), conv1's and its GELU's outputs (2·a·b·h·F), conv2's output
             (a·b·h·F/2) before its GELU; token ids (int64) for a text encoder.
  loss side  the decoder's ids and the labels (int64 over b·L); the loss's own log-softmax is
             engine/loss.py's.
  dropout    as the config trains (T5's dropout_rate; the others' dropout, attention_dropout,
             activation_dropout): a one-byte mask (CUDA's fused native_dropout keeps a bool
             mask; the CPU keeps its noise in the input's dtype, which the tests account for)
             of each stack's input, each sub-block's output before its residual add, the FFN's
             activation (ReLU then keeps its output and the dropped copy) and T5's final norm
             output; on the attention probabilities of eager attention and SDPA's math path the
             mask and the dropped copy that the product with v saves. Flash and memory-efficient
             kernels keep only their RNG seed and offset and regenerate the mask in backward
             (Dao et al. 2022, FlashAttention §3.1), so SDPA's dropout costs nothing there.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.encoder_decoder import EncoderSpec
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:  # engine/activations.py reads this module: its spec is only a type here
    from gpuplan.engine.activations import ActivationSpec

UNFUSED_GELU = ("gelu_new", "gelu_fast", "gelu_python", "quick_gelu")
MASK = "dropout mask"
MASK_BYTES = 1
Named = tuple[str, int]  # a saved tensor's name and bytes (activations.py makes them `Saved`)


def encoder_of(arch: Architecture) -> EncoderSpec:
    if arch.encoder is None or not arch.encoder.training:
        raise GpuplanError(f"{arch.name}: not an encoder-decoder gpuplan trains")
    return arch.encoder


def source_tokens(arch: Architecture, spec: ActivationSpec) -> int:
    """The encoder's length per sample: the record's fixed one (Whisper's 1500 frames after
    its convolutions), else the spec's source length, else its (decoder) sequence."""
    return encoder_of(arch).encoder_tokens or spec.source or spec.seq


def _stack_norm(enc: EncoderSpec, prefix: str, rows: int, a: int, read: bool) -> list[Named]:
    """One norm over `rows` rows of d_model and, when a linear reads it, its output."""
    h = enc.width
    if enc.shape("t5_norm"):
        out = [
            (f"{prefix}.input_fp32", 4 * rows * h),
            (f"{prefix}.rsqrt", 4 * rows),
            (f"{prefix}.normalized", a * rows * h),
        ]
        if a != 4:  # the mul saves x in its own dtype beside the fp32 copy pow saved
            out.append((f"{prefix}.input", a * rows * h))
    else:
        out = [(f"{prefix}.input", a * rows * h), (f"{prefix}.mean+rstd", 8 * rows)]
    if read:
        out.append((f"{prefix}.output", a * rows * h))
    return out


def _attention(
    enc: EncoderSpec, spec: ActivationSpec, heads: int, q_len: int, kv_len: int, biased: bool
) -> list[Named]:
    """One attention's saved tensors (q over q_len, k and v over kv_len per sample)."""
    a, b, inner = spec.act_bytes, spec.micro_batch, heads * enc.shape("head_dim")
    nq, nk = b * q_len, b * kv_len
    merged = ("attention output (o input)", a * nq * inner)
    probs = b * heads * q_len * kv_len
    if biased and spec.kernel != "eager":  # SDPA's math path: q, k, v and softmax in fp32
        w = max(a, 4)
        qkv = [("q (fp32)", w * nq * inner), ("k (fp32)", w * nk * inner)]
        qkv += [("v (fp32)", w * nk * inner)]
        dropped = _dropped_probs(enc, probs, w)
        return [*qkv, ("softmax probabilities (fp32)", w * probs), *dropped, merged]
    qkv = [("q", a * nq * inner), ("k", a * nk * inner), ("v", a * nk * inner)]
    if spec.kernel == "eager":
        dropped = _dropped_probs(enc, probs, a)
        return [*qkv, ("softmax probabilities", a * probs), *dropped, merged]
    out = [*qkv, ("attention output", a * nq * inner), ("logsumexp", 4 * b * heads * q_len)]
    if enc.shape("heads_first"):  # q, k, v head-first (Whisper): the output is copied to merge
        out.append(merged)
    return out


def _dropped_probs(enc: EncoderSpec, elements: int, width: int) -> list[Named]:
    """Dropout on the softmax probabilities (eager attention, SDPA's math path): its mask and
    the dropped copy the product with v saves (flash and memory-efficient kernels keep only
    their RNG seed and offset)."""
    if not enc.dropouts[1]:
        return []
    return [_mask("attention probabilities", elements), ("dropped probabilities", width * elements)]


def _mask(where: str, elements: int) -> Named:
    """A dropout mask: one byte per element (CUDA's fused native_dropout keeps a bool mask;
    PyTorch's CPU dropout keeps its noise in the input's dtype instead)."""
    return (f"{MASK} ({where})", MASK_BYTES * elements)


def _ffn(enc: EncoderSpec, a: int, rows: int, width: int) -> list[Named]:
    act = enc.activation
    out = _ffn_saved(enc, a, rows, width)
    if enc.dropouts[2]:  # after the activation: the second linear saves the dropped copy
        out.append(_mask("FFN activation", rows * width))
        if act == "relu" and not enc.shape("gated"):  # ReLU still keeps its own output
            out.append(("ffn.dropped activation", a * rows * width))
    return out


def _ffn_saved(enc: EncoderSpec, a: int, rows: int, width: int) -> list[Named]:
    act = enc.activation
    if enc.shape("gated"):
        out = [(f"ffn.{n}", a * rows * width) for n in ("gate", "up", "act", "act*up")]
    elif act == "relu":
        return [("ffn.relu output", a * rows * width)]
    else:
        out = [("ffn.fc1", a * rows * width), ("ffn.act", a * rows * width)]
    if act in UNFUSED_GELU:
        out.append(("ffn.gelu intermediates (tanh, 1+tanh, x/2)", 3 * a * rows * width))
    return out


def _layer(
    enc: EncoderSpec, spec: ActivationSpec, length: int, source: int, decoder: bool
) -> list[Named]:
    """One layer of a stack: self-attention, cross-attention (decoder), FFN, each with its
    norm (before it, or after it for a post-norm model)."""
    a, rows = spec.act_bytes, spec.micro_batch * length
    heads = enc.cross_heads if decoder else enc.shape("encoder_heads")
    biased = bool(enc.shape("relative_bias"))
    blocks = [_attention(enc, spec, heads, length, length, biased)]
    if decoder:
        blocks.append(_attention(enc, spec, heads, length, source, False))
    width = enc.shape("ffn_decoder" if decoder else "ffn_encoder")
    blocks.append(_ffn(enc, a, rows, width))
    out: list[Named] = []
    for i, block in enumerate(blocks):
        out += _stack_norm(enc, f"norm{i}", rows, a, True) + block
        if enc.dropouts[0]:  # the sub-block's output dropped before the residual add
            out.append(_mask(f"sub-block {i} output", rows * enc.width))
    return out


@lru_cache(maxsize=1024)
def encoder_layer_tensors(arch: Architecture, spec: ActivationSpec) -> tuple[Named, ...]:
    enc = encoder_of(arch)
    return tuple(_layer(enc, spec, source_tokens(arch, spec), 0, False))


@lru_cache(maxsize=1024)
def decoder_layer_tensors(arch: Architecture, spec: ActivationSpec) -> tuple[Named, ...]:
    enc = encoder_of(arch)
    return tuple(_layer(enc, spec, spec.seq, source_tokens(arch, spec), True))


def _stack_edges(enc: EncoderSpec, spec: ActivationSpec, length: int, name: str) -> list[Named]:
    """A stack's tensors outside its layers: an embedding norm, the input a post-norm stack's
    first layer reads, the final norm, T5's position buckets."""
    a, rows, h = spec.act_bytes, spec.micro_batch * length, enc.width
    out: list[Named] = []
    if enc.dropouts[0]:  # the stack's input dropped (T5: after its final norm too)
        out.append(_mask(f"{name} input", rows * h))
        if enc.shape("t5_norm"):
            out.append(_mask(f"{name} output", rows * h))
    if enc.shape("embedding_norm"):
        out += _stack_norm(enc, f"{name}.embedding_norm", rows, a, False)
    if not enc.shape("pre_norm"):  # the first layer's q, k, v read the stack's input
        out.append((f"{name}.input (read by q, k, v)", a * rows * h))
    if enc.shape("final_norm"):
        out += _stack_norm(enc, f"{name}.final_norm", rows, a, False)
    if enc.shape("pre_norm"):  # the final norm's output: cross-attention k, v or the LM head
        out.append((f"{name}.output", a * rows * h))
    if enc.shape("relative_bias") and spec.recompute == "full":  # a checkpointed block's input
        heads = enc.cross_heads if name == "decoder" else enc.shape("encoder_heads")
        out.append((f"{name}.position bias", spec.act_bytes * heads * length * length))
    elif enc.shape("relative_bias"):
        out.append((f"{name}.relative position buckets (int64)", 8 * length * length))
    return out


@lru_cache(maxsize=1024)
def encoder_side_tensors(arch: Architecture, spec: ActivationSpec) -> tuple[Named, ...]:
    """The encoder's input side and edges (its layers are `encoder_layer_tensors`)."""
    enc = encoder_of(arch)
    a, b, h, s = spec.act_bytes, spec.micro_batch, enc.width, source_tokens(arch, spec)
    out: list[Named] = []
    mels, frames = enc.shape("mel_bins"), enc.shape("mel_frames")
    if mels:
        out += [
            ("input features", a * b * mels * frames),
            ("conv1 output, its GELU's output", 2 * a * b * h * frames),
            ("conv2 output", a * b * h * (frames // 2)),
        ]
    else:
        out.append(("source token ids (int64)", 8 * b * s))
    out += _stack_edges(enc, spec, s, "encoder")
    return tuple(out)


@lru_cache(maxsize=1024)
def decoder_side_tensors(arch: Architecture, spec: ActivationSpec) -> tuple[Named, ...]:
    """The decoder's edges and the loss side: its ids, its norms outside layers, the labels;
    T5's SDPA cross-attention bias."""
    enc = encoder_of(arch)
    b, length = spec.micro_batch, spec.seq
    out = [("decoder token ids (int64)", 8 * b * length)]
    out += _stack_edges(enc, spec, length, "decoder")
    if enc.shape("relative_bias") and (spec.kernel != "eager" or spec.recompute == "full"):
        s = source_tokens(arch, spec)
        out.append(("cross-attention zero bias", spec.act_bytes * enc.cross_heads * length * s))
    out.append(("labels (int64)", 8 * b * length))
    return tuple(out)


def training_notes(arch: Architecture, kernel: str, source: int, seq: int) -> tuple[str, ...]:
    """What an encoder-decoder's training bill says beside its lines (`source` tokens into
    the encoder unless its record fixes them, `seq` into the decoder)."""
    enc = encoder_of(arch)
    source = enc.encoder_tokens or source
    where = (
        f"its {source} positions (from {enc.shape('mel_frames')} mel frames)"
        if enc.shape("mel_bins")
        else f"{source} source tokens"
    )
    notes = [
        f"encoder-decoder: the encoder reads {where} and the decoder {seq} target tokens per"
        " sequence; both stacks' saved tensors and the cross-attention's are billed"
        " (engine/encdec_activations.py); the step's FLOPs are 6·N per token of each stack over"
        " its own length"
    ]
    if enc.shape("relative_bias") and kernel != "eager":
        notes.append(
            "T5's self-attention adds a relative-position bias that needs a gradient: SDPA runs"
            " its math path (q, k, v and the softmax in fp32, billed; CUDA's memory-efficient"
            " kernel, which takes such a bias, would keep less); transformers has no flash path"
            " for T5"
        )
    if enc.dropout:
        notes.append(
            f"dropout as config.json trains it (p up to {enc.dropout:g}): its one-byte masks"
            " (CUDA's native_dropout) and the dropped copies saved are billed; fused SDPA"
            " kernels regenerate theirs from the RNG state"
        )
    if enc.shape("mel_bins"):
        notes.append(
            "Whisper's encoder position table is frozen in transformers (requires_grad_(False)):"
            " its gradient and optimizer states are billed all the same (an upper bound)"
        )
    if enc.layerdrop:
        notes.append(
            f"config.json trains with LayerDrop (p up to {enc.layerdrop:g}): a step that skips"
            " layers saves less; every layer is billed (the step that skips none)"
        )
    return tuple(notes)
