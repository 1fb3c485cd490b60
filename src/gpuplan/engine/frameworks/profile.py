"""A training framework's memory semantics: what it keeps, when it frees it, what it fuses.

The same model, recipe and layout cost different memory under torchtitan, torchtune, Megatron-LM,
DeepSpeed or the Hugging Face Trainer, because each decides differently:

  gradient lifetime     `set_to_none`: `optimizer.zero_grad()` frees every gradient after the
                        step (torch ≥ 2.0 default), so the first micro-batch's forward runs
                        without them and backward builds them layer by layer; `persistent`: a
                        buffer allocated once holds them for the whole run (Megatron-LM's
                        contiguous `main_grad` buffer, DeepSpeed's gradient partitions).
  DDP buckets           torch DDP's Reducer flattens gradients into buckets it allocates at
                        construction; unless `gradient_as_bucket_view=True` the buckets are a
                        second copy of every gradient (torch/nn/parallel/distributed.py docstring).
  FSDP2 mixed precision MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the sharded
                        parameter is fp32 and doubles as the master; bf16 weights exist only for
                        all-gathered units; a unit's unsharded gradient is upcast to fp32 before
                        its reduce-scatter (_fsdp_collectives.foreach_reduce).
  reshard after forward `always` frees a unit's gathered weights after its forward; `never` keeps
                        every unit unsharded until backward (FSDP2 `reshard_after_forward=False`,
                        ZeRO-2-like); `unless_pp` is torchtitan's default (never with pipeline
                        parallelism, whose micro-batches would otherwise re-gather).
  FSDP1 root            `fsdp_keeps_root`: FullyShardedDataParallel (FSDP1: accelerate's default
                        fsdp_version, so the HF Trainer's) keeps its root unit — embedding, final
                        norm, LM head — gathered from forward to the end of backward
                        (engine/gathered.py); FSDP layouts only (not DeepSpeed ZeRO-3).
  KV cache in training  `train_kv_cache`: "qkv" when the model's forward builds its KV cache while
                        training (use_cache left on: transformers 4.48 GPTBigCode does not turn it
                        off under gradient checkpointing) and each layer's cache is a view of its
                        fused QKV projection's output, which it keeps whole until the forward —
                        the loss included — returns; "none" otherwise.
  optimizer             `foreach` (torch.optim on CUDA by default) builds one temporary per
                        state tensor for the whole group (torch/optim/adam.py `_multi_tensor_adam`:
                        `torch._foreach_sqrt(exp_avg_sqs)`); `for-loop` one parameter's worth at a
                        time; `none` for fused kernels (torch `fused=True`, apex / TE FusedAdam).
                        `optimizer_in_backward` steps each parameter as soon as its gradient exists
                        and frees it (torchtune `optimizer_in_bwd`).
  loss                  its default mode (engine/loss.py), the mode it switches to under tensor
                        parallelism (`tp_loss`: torchtitan's DTensor loss parallel), and whether
                        the training loop still holds the logits during backward.
  fused kernels         `te` (Transformer Engine / Megatron fusions: LayerNorm+linear, bias-SwiGLU)
                        or `none` (eager PyTorch); `compile`: torch.compile's Inductor fuses norms,
                        RoPE and SwiGLU (their pointwise intermediates recomputed in backward) and,
                        with `compile_loss` the loss (torchtitan compile.components, torchtune
                        compile=True — torchtune's own chunked losses only: `compile_plain_loss`).
  dropout               probability of the hidden dropout whose boolean masks are saved (Megatron's
                        bias-dropout-add; 0 in Llama-style recipes).
  fp8                   `te`: Transformer Engine keeps an fp8 copy of each weight and its transpose
                        for backward; `torchao`: Float8Linear recasts per matmul (no resident copy)
                        and, with `fp8_all_gather`, FSDP gathers weights in fp8.
  workspaces            cuBLAS's workspace comes from PyTorch's caching allocator (32 MiB on Hopper,
                        aten/src/ATen/cuda/CublasHandlePool.cpp getNewWorkspace), Transformer
                        Engine adds its own GEMM workspace (module/base.py get_workspace).
  allocator             `expandable_segments`: the caching allocator maps one growing segment
                        instead of fixed blocks, so freed memory is reused without fragmentation.
  deferred wgrad        `defer_embedding_wgrad` (Megatron --defer-embedding-wgrad-compute): the last
                        stage keeps each micro-batch's LM-head input (gathered under sequence
                        parallelism) and output gradient until the pipeline flush computes the
                        head's weight gradient at once (megatron/core/tensor_parallel/layers.py
                        LinearWithGradAccumulationAndAsyncCommunication, wgrad_deferral_limit).

Each field's value for each framework, and where it was read, is in catalog/data/frameworks.toml.
"""

from __future__ import annotations

from gpuplan.engine.frozen import field, record
from gpuplan.errors import GpuplanError

GRAD_LIFETIMES = ("set_to_none", "persistent")
RESHARD = ("always", "never", "unless_pp")
OPTIMIZER_KERNELS = ("none", "foreach", "for-loop")
FUSIONS = ("none", "te")
FP8 = ("none", "te", "torchao")
BUCKETS = ("none", "deepspeed")
KV_CACHES = ("none", "qkv")


@record(cache_hash=True)
class FrameworkProfile:
    """One framework's memory semantics (module docstring). Frozen: bills are cached by it."""

    id: str = "generic"
    name: str = "generic (the lesson's bill)"
    grads: str = "persistent"
    ddp_bucket_copy: bool = False
    fsdp_fp32_params: bool = False
    reduce_fp32: bool = False
    reshard_after_forward: str = "always"
    gather_units: int = 2
    fsdp_keeps_root: bool = False  # FSDP1: the root unit (embedding + head) stays gathered
    buckets: str = "deepspeed"
    reduce_bucket_elems: int = 500_000_000
    allgather_bucket_elems: int = 500_000_000
    optimizer_kernel: str = "none"
    optimizer_in_backward: bool = False
    loss: str = "standard"
    tp_loss: str = ""  # the loss mode when tp > 1 ("": the same as `loss`)
    keep_logits: bool = False
    train_kv_cache: str = "none"  # "qkv": a fused QKV output kept per layer (module docstring)
    loss_shift_copy: bool = False  # transformers 4.46-4.49 ForCausalLMLoss (engine/loss.py)
    recompute: str = "none"
    fused: str = "none"
    compile: bool = False
    compile_loss: bool = False
    compile_plain_loss: bool = True  # False: compile reaches only the framework's chunked losses
    dropout: float = 0.0
    fp8: str = "none"
    fp8_all_gather: bool = False
    expandable_segments: bool = False
    sequence_parallel: bool = False  # tensor parallelism always shards norms/dropout by sequence
    sp_saves_gathered: bool = False  # DTensor SP: linears save their all-gathered input
    gqa_expanded_kv: bool = False  # k, v repeated to every query head before attention
    kbit_fp32_residual: bool = False  # peft prepare_model_for_kbit_training on a quantised
    # base (TRL's SFTTrainer unless the QLoRA is sharded): fp32 norms make the residual stream,
    # and each checkpointed layer input, fp32 (engine/activations.py layer_input_bytes)
    workspace_bytes: int = 0  # GEMM workspaces taken from the caching allocator (cuBLAS, TE)
    defer_embedding_wgrad: int = -1  # Megatron --defer-embedding-wgrad-compute: micro-batches
    # whose LM-head input and output gradient are kept for the deferred weight gradient (-1: off,
    # 0: every micro-batch of the step, n: --wgrad-deferral-limit)
    recipe: str = "adamw-bf16"
    zero: int = -1  # the sharding it applies unless told (3: FSDP fully_shard); -1: none implied
    source: str = ""
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def source_of(self, name: str) -> str:
        """Where this framework's value of `name` was read (empty when not recorded)."""
        return dict(self.sources).get(name, "")


GENERIC = FrameworkProfile()


def validate_profile(p: FrameworkProfile) -> None:
    """Reject values no framework has, with a one-line reason."""
    for name, allowed in (
        ("grads", GRAD_LIFETIMES),
        ("reshard_after_forward", RESHARD),
        ("optimizer_kernel", OPTIMIZER_KERNELS),
        ("fused", FUSIONS),
        ("fp8", FP8),
        ("buckets", BUCKETS),
        ("train_kv_cache", KV_CACHES),
    ):
        value = getattr(p, name)
        if value not in allowed:
            raise GpuplanError(
                f"framework {p.id}: {name} {value!r} is not one of {', '.join(allowed)}"
            )
    if not 0 <= p.dropout < 1:
        raise GpuplanError(f"framework {p.id}: dropout must be in [0, 1), got {p.dropout}")
    if p.zero not in (-1, 0, 1, 2, 3):
        raise GpuplanError(f"framework {p.id}: zero must be -1 or 0-3, got {p.zero}")
    if p.defer_embedding_wgrad < -1:
        raise GpuplanError(f"framework {p.id}: defer_embedding_wgrad must be -1 or ≥ 0")
    if p.gather_units < 1:
        raise GpuplanError(f"framework {p.id}: gather_units must be at least 1")
    for name in ("reduce_bucket_elems", "allgather_bucket_elems"):
        if getattr(p, name) < 0:
            raise GpuplanError(f"framework {p.id}: {name} must not be negative")
