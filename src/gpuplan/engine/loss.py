"""The language-model loss: what the cross entropy over the vocabulary keeps, and its peaks.

T tokens of one micro-batch on one GPU, V' = vocabulary (÷ tp when the loss is vocab-parallel),
a bytes per activation element (2 for bf16, 4 for fp32). Each mode names what is alive at the
end of its forward (`forward`), the most it holds while computing its gradient (`backward`) and
what it keeps from forward to backward (`saved`):

  standard        F.cross_entropy(logits.float()) — transformers' ForCausalLMLoss, torchtitan's
                  cross_entropy_loss. Forward: the logits (a·T·V'), their fp32 copy (4·T·V', freed
                  once log_softmax has run) and log_softmax's output (4·T·V', saved): (a + 8)·T·V'
                  (8·T·V' in fp32, where .float() is a no-op). Backward: the saved log-softmax,
                  nll_loss's gradient (4·T·V') and log_softmax's gradient (4·T·V'): 12·T·V' — the
                  12 bytes × tokens × vocabulary measured under the HF Trainer, 14 when the training
                  loop still holds the logits (a `model(...).loss.backward()` loop does; the HF
                  Trainer, torchtitan (`del pred`) and torchtune (`del logits`) drop them).
  plain           F.cross_entropy on the logits in their own dtype (torch.nn.CrossEntropyLoss on a
                  bf16 model's output, as torchtune's recipes call it): log_softmax keeps a·T·V';
                  forward 2·a·T·V', backward 3·a·T·V' (+ a·T·V' if the loop holds the logits).
  shift copy      transformers 4.46-4.49's ForCausalLMLoss (loss/loss_utils.py) shifts the logits
                  rather than the labels: `logits[..., :-1, :].contiguous()` copies the fp32
                  logits once more before the cross entropy, while the model's forward still
                  holds its bf16 logits: forward (a + 12)·T·V' (`standard`), and a model that
                  shifts the bf16 logits itself before nn.CrossEntropyLoss (GPTBigCode's
                  forward in those releases) adds a·T·V' to `plain`'s forward. Later releases
                  pad the labels instead (no copy); earlier ones let the bf16 logits go when
                  upcasting (`logits = logits.float()` in the model's forward). Profile field
                  `loss_shift_copy`.
  chunked:n       torchtune CEWithChunkedOutputLoss (the LM head applied to n chunks of the hidden
                  states, each chunk upcast and reduced on its own): forward holds every chunk's
                  logits (a·T·V'), one chunk's fp32 copy (4·T·V'/n) and the saved log-softmax of all
                  chunks (4·T·V'); backward works one chunk at a time: 4·T·V' + 8·T·V'/n.
  compile         a chunked loss under torch.compile (torchtune compiles each chunk's cross
                  entropy) keeps each chunk's logits and log-sum-exp instead: a·T·V' saved, one
                  chunk's gradient more in backward.
  compiled        torch.compile of the same loss (torchtitan `compile.components = ["loss"]`):
                  Inductor fuses upcast, log_softmax and nll into one kernel that keeps the logits
                  and one fp32 log-sum-exp per token (4·T); backward writes the logits' gradient in
                  the logits' dtype: 2·a·T·V'.
  fused           Liger-Kernel's fused linear cross entropy (LigerFusedLinearCrossEntropyFunction):
                  logits are never whole; chunks of c = next_pow2(⌈T ÷ ⌈V' ÷ h⌉⌉) tokens are
                  projected, upcast and turned into gradients in forward, which keeps the hidden
                  states' gradient (a·T·h) and the LM head's (a·V'·h) for backward:
                  (a + 8)·c·V' transient.
  loss_parallel   PyTorch's DTensor loss parallelism (torch.distributed.tensor.parallel.loss_parallel,
                  torch/distributed/tensor/parallel/loss.py; torchtitan under tensor parallelism):
                  the same F.cross_entropy(logits.float()) on vocabulary shards, but log_softmax and
                  its backward run as separate ops. Forward `_log_softmax`: the fp32 copy, x − max,
                  its exp (freed after the sum) and the result: (a + 12)·T·V' ((a + 8) in fp32).
                  Backward `_nll_loss_and_log_softmax_backward` = (zeros with −1 at the targets +
                  exp(x)) × grad: the saved log-softmax, the zeros, exp(x) and their sum, then the
                  product: 16·T·V'.
  vocab_parallel  Megatron-LM's _VocabParallelCrossEntropy (megatron/core/tensor_parallel/
                  cross_entropy.py): the bf16 logits (a·T·V') upcast once (4·T·V'), turned into the
                  softmax in place and saved; backward rewrites that softmax into the gradient in
                  place and autograd casts it back to the logits' dtype: (a + 4)·T·V' both ways.
  vocab_parallel_fused  Megatron-LM --cross-entropy-loss-fusion (megatron/core/fusions/
                  fused_cross_entropy.py, native impl, releases before its in-place steps were
                  compiled apart): the same cross entropy with each step under torch.compile
                  (jit_fuser). Inductor keeps an in-place update in place only when pointwise ops
                  alone consume it; the exp written into the fp32 logits and then summed, and the
                  gradient scattered into the softmax, are materialised in a fresh T·V' fp32 buffer
                  and copied back (the file's own note): one more 4·T·V' in forward and in
                  backward, (a + 8)·T·V' both ways.
  te_fused        --cross-entropy-fusion-impl te (Transformer Engine parallel_cross_entropy, a
                  Triton kernel): the gradient is computed in forward and written into the logits
                  themselves, which are kept for backward: a·T·V' (+ 4·T for the per-token
                  statistics) both ways.
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError

LOSS_MODES = (
    "standard",
    "plain",
    "chunked",
    "linear_chunked",
    "compiled",
    "fused",
    "loss_parallel",
    "vocab_parallel",
    "vocab_parallel_fused",
    "te_fused",
)
CHUNKED = ("chunked", "linear_chunked")
DEFAULT_CHUNKS = 8  # torchtune CEWithChunkedOutputLoss(num_output_chunks=8)


@record
class LossSpec:
    """How the cross entropy is computed: a mode, its chunk count, and whether the training
    loop still references the logits during backward."""

    mode: str = "standard"
    chunks: int = DEFAULT_CHUNKS
    keep_logits: bool = False
    compiled: bool = False  # torch.compile over the loss (engine/frameworks: compile)
    shift_copy: bool = False  # the logits shifted by a copy (module docstring: shift copy)

    def mode_text(self) -> str:
        """The mode as `parse_loss` reads it back ('chunked:8')."""
        return f"{self.mode}:{self.chunks}" if self.mode in CHUNKED else self.mode

    def describe(self) -> str:
        if self.mode == "chunked":
            return f"chunked cross entropy ({self.chunks} chunks)"
        if self.mode == "linear_chunked":
            return f"chunked linear cross entropy ({self.chunks} chunks)"
        return {
            "standard": "cross entropy on fp32-upcast logits",
            "plain": "cross entropy in the logits' dtype",
            "compiled": "compiled (fused) cross entropy",
            "fused": "fused linear cross entropy (Liger)",
            "loss_parallel": "cross entropy on fp32-upcast logits, DTensor loss parallel",
            "vocab_parallel": "vocab-parallel cross entropy (in place)",
            "vocab_parallel_fused": "Megatron fused vocab-parallel cross entropy (compiled)",
            "te_fused": "Transformer Engine fused cross entropy (gradient in the logits)",
        }[self.mode]


@record
class LossMemory:
    """Bytes of the loss on the last pipeline stage, for one micro-batch."""

    saved: int  # kept from the loss's forward to its backward
    forward: int  # the most alive during its forward (saved included)
    backward: int  # the most alive while computing its gradient (saved included)


@lru_cache(maxsize=256)
def parse_loss(text: str) -> LossSpec:
    """'standard', 'chunked', 'chunked:16', 'linear_chunked:8', 'compiled', 'fused',
    'loss_parallel', 'vocab_parallel', 'vocab_parallel_fused', 'te_fused'."""
    name, _, arg = text.strip().lower().replace("-", "_").partition(":")
    if name not in LOSS_MODES:
        raise GpuplanError(f"unknown loss {text!r}; use {', '.join(LOSS_MODES)} (chunked:N)")
    if name not in CHUNKED and arg:
        raise GpuplanError(f"loss {name} takes no argument, got {text!r}")
    chunks = DEFAULT_CHUNKS
    if arg:
        if not arg.isdigit() or int(arg) < 1:
            raise GpuplanError(f"chunked loss needs a positive chunk count, got {text!r}")
        chunks = int(arg)
    return LossSpec(name, chunks)


def fused_chunk_tokens(tokens: int, vocab: int, hidden: int) -> int:
    """Liger's chunk: next power of two of ⌈T ÷ ⌈V ÷ h⌉⌉ tokens (fused_linear_cross_entropy.py)."""
    ratio = -(-vocab // hidden)
    want = -(-tokens // ratio)
    return min(tokens, 1 << max(0, (want - 1).bit_length()))


def loss_memory(spec: LossSpec, tokens: int, vocab: int, hidden: int, a: int) -> LossMemory:
    """The loss's saved bytes and its forward / backward peaks (module docstring)."""
    tv = tokens * vocab
    logits = a * tv
    if spec.compiled and spec.mode in ("standard", "plain", "loss_parallel"):
        spec = LossSpec("compiled")
    if spec.compiled and spec.mode in CHUNKED:
        # each chunk's compiled cross entropy keeps its logits (and one log-sum-exp per token)
        # for its fused backward, which writes that chunk's gradient in the logits' dtype
        chunk = -(-logits // max(1, spec.chunks))
        return LossMemory(logits + 4 * tokens, logits + 4 * tokens, logits + chunk + 4 * tokens)
    if spec.mode == "standard":
        upcast = 0 if a == 4 else 4 * tv
        held = logits if spec.keep_logits else 0
        shifted = 4 * tv if spec.shift_copy else 0
        return LossMemory(4 * tv, logits + upcast + shifted + 4 * tv, 12 * tv + held)
    if spec.mode == "chunked":
        n = max(1, spec.chunks)
        upcast = 0 if a == 4 else -(-4 * tv // n)
        held = logits if spec.keep_logits else 0
        return LossMemory(4 * tv, logits + 4 * tv + upcast, 4 * tv + 2 * -(-4 * tv // n) + held)
    if spec.mode == "plain":
        held = logits if spec.keep_logits else 0
        shifted = logits if spec.shift_copy else 0
        return LossMemory(logits, 2 * logits + shifted, 3 * logits + held)
    if spec.mode == "linear_chunked":
        n = max(1, spec.chunks)
        chunk = -(-tv // n)
        return LossMemory(4 * tv, 4 * tv + (a + (0 if a == 4 else 4)) * chunk, 4 * tv + 8 * chunk)
    if spec.mode == "compiled":
        lse = 4 * tokens
        return LossMemory(logits + lse, logits + lse, 2 * logits + lse)
    if spec.mode == "fused":
        kept = a * tokens * hidden + a * vocab * hidden
        c = fused_chunk_tokens(tokens, vocab, hidden)
        return LossMemory(kept, kept + (a + 8) * c * vocab, kept)
    if spec.mode == "loss_parallel":
        upcast = 0 if a == 4 else 4 * tv
        held = logits if spec.keep_logits else 0
        return LossMemory(4 * tv, logits + upcast + 8 * tv, 16 * tv + held)
    if spec.mode == "vocab_parallel":
        return LossMemory(4 * tv, logits + 4 * tv, 4 * tv + logits)
    if spec.mode == "vocab_parallel_fused":
        return LossMemory(4 * tv, logits + 8 * tv, 8 * tv + logits)
    if spec.mode == "te_fused":
        return LossMemory(logits + 4 * tokens, logits + 4 * tokens, logits + 4 * tokens)
    raise GpuplanError(f"unknown loss mode {spec.mode!r}")
