"""Megatron-LM: read `pretrain_gpt.py` flags (a launch line, or the MODEL_ARGS block of a
functional-test model_config.yaml) into a GPT architecture and train() arguments.

The architecture follows megatron/training/arguments.py defaults: LayerNorm, a GELU MLP of
4·h (with --swiglu a gated one of int(8·h/3 ÷ 64)·64), learned absolute positions, biases on
every linear, tied embeddings, multi-head attention; the vocabulary padded up to a multiple of
--make-vocab-size-divisible-by (128) × tp (arguments.py `_vocab_size_with_padding`); the GPT-2
BPE tokenizer's 50,257 tokens when no --vocab-size is given. Memory-relevant training flags map
to gpuplan's knobs; flags with no memory effect are accepted silently and the rest are noted.
"""

from __future__ import annotations

import shlex
from typing import Any

from gpuplan.engine.architecture import (
    Architecture,
    AttentionSpec,
    LayerSpec,
    MLPSpec,
    MoESpec,
    RopeSpec,
)
from gpuplan.engine.frameworks.overrides import TrainOverrides, positive_int
from gpuplan.errors import GpuplanError
from gpuplan.safe_read import load_yaml

GPT2_BPE_VOCAB = 50257  # GPT2BPETokenizer (megatron/training/tokenizer)
VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by default

# flags read for the model and the layout; any other flag in NO_MEMORY_EFFECT is silently fine
NO_MEMORY_EFFECT = {
    "lr",
    "min-lr",
    "lr-decay-style",
    "lr-decay-iters",
    "lr-warmup-fraction",
    "lr-warmup-iters",
    "weight-decay",
    "clip-grad",
    "adam-beta1",
    "adam-beta2",
    "adam-eps",
    "train-iters",
    "train-samples",
    "log-interval",
    "save-interval",
    "eval-interval",
    "eval-iters",
    "save",
    "load",
    "data-path",
    "vocab-file",
    "merge-file",
    "split",
    "tokenizer-type",
    "tensorboard-dir",
    "distributed-backend",
    "timing-log-level",
    "log-params-norm",
    "log-num-zeros-in-grad",
    "log-validation-ppl-to-tensorboard",
    "log-timers-to-tensorboard",
    "log-throughput",
    "log-memory-to-tensorboard",
    "deterministic-mode",
    "no-gradient-accumulation-fusion",
    "use-mcore-models",
    "ckpt-format",
    "dist-ckpt-strictness",
    "data-cache-path",
    "mock-data",
    "async-save",
    "use-persistent-ckpt-worker",
    "overlap-grad-reduce",
    "overlap-param-gather",
    "attention-softmax-in-fp32",
    "init-method-std",
    "seed",
    "micro-batch-size",
    "no-ckpt-fully-parallel-save",
    "use-checkpoint-opt-param-scheduler",
    "wandb-project",
    "exit-interval",
    "manual-gc",
    "bias-gelu-fusion",
    "no-bias-gelu-fusion",
    "apply-layernorm-1p",
    "rotary-percent",
    "rotary-base",
    "use-flash-attn",
    "accumulate-allreduce-grads-in-fp32",
    "no-masked-softmax-fusion",
    "no-bias-dropout-fusion",
    "no-bias-swiglu-fusion",
    "ckpt-fully-parallel-load",
    "no-create-attention-mask-in-dataloader",
    "calculate-per-token-loss",
    "ddp-average-in-collective",
    "decoupled-lr",
    "decoupled-min-lr",
    "tp-comm-overlap",
    "num-workers",
    "dataloader-type",
    "eod-mask-loss",
    "reset-position-ids",
    "reset-attention-mask",
    "no-load-optim",
    "no-load-rng",
    "finetune",
    "bf16",
    "fp16",
}


def parse_flags(text: str) -> dict[str, Any]:
    """`--name value` / `--flag` pairs from a launch line or from a YAML MODEL_ARGS block
    (`  --name: value`). Values stay strings; a bare flag is True."""
    if "MODEL_ARGS" in text or "\n  --" in text:
        return _yaml_flags(text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError as e:
        raise GpuplanError(f"cannot read the Megatron-LM launch line: {e}") from None
    flags: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, eq, inline = word[2:].partition("=")
            name = name.replace("_", "-")
            if eq:
                flags[name] = inline
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                flags[name] = words[i + 1]
                i += 1
            else:
                flags[name] = True
        i += 1
    return flags


def _yaml_flags(text: str) -> dict[str, Any]:
    doc = load_yaml(text, "the Megatron-LM model_config.yaml")
    args = doc.get("MODEL_ARGS", doc) if isinstance(doc, dict) else None
    if not isinstance(args, dict):
        raise GpuplanError("a Megatron-LM model_config.yaml needs a MODEL_ARGS mapping of flags")
    return {str(k).lstrip("-").replace("_", "-"): v for k, v in args.items()}


# flag → the config_schema field whose bounds it shares (the table config.json is read through)
BOUNDS = {
    "num-layers": "num_hidden_layers",
    "hidden-size": "hidden_size",
    "ffn-hidden-size": "intermediate_size",
    "num-attention-heads": "num_attention_heads",
    "kv-channels": "head_dim",
    "num-query-groups": "num_key_value_heads",
    "vocab-size": "vocab_size",
    "max-position-embeddings": "max_position_embeddings",
    "seq-length": "max_position_embeddings",
    "num-experts": "num_experts",
    "moe-router-topk": "experts_per_token",
    "moe-ffn-hidden-size": "moe_intermediate_size",
    "make-vocab-size-divisible-by": "block_multiple_of",
    "recompute-num-layers": "num_hidden_layers",
    "num-layers-per-virtual-pipeline-stage": "num_hidden_layers",
    "num-virtual-stages-per-pipeline-rank": "num_hidden_layers",
    "tensor-model-parallel-size": "num_attention_heads",
    "pipeline-model-parallel-size": "num_hidden_layers",
    "context-parallel-size": "num_attention_heads",
    "expert-model-parallel-size": "experts_per_token",
}


def _int(flags: dict[str, Any], name: str, default: int | None = None) -> int | None:
    if name not in flags or flags[name] is None:
        return default
    return positive_int(f"--{name}", flags[name], BOUNDS.get(name))


def _fraction(flags: dict[str, Any], name: str, default: float) -> float:
    """A probability flag (--hidden-dropout): a finite number in [0, 1]."""
    value = flags.get(name, default)
    try:
        p = float(value) if not isinstance(value, bool) and len(str(value)) <= 40 else -1.0
    except (TypeError, ValueError):
        p = -1.0
    if not 0 <= p <= 1:
        raise GpuplanError(f"--{name} must be a number in [0, 1], got {str(value)[:40]!r}")
    return p


def _on(flags: dict[str, Any], name: str) -> bool:
    value = flags.get(name, False)
    return value is True or str(value).lower() in ("true", "1")


def padded_vocab(vocab: int, tp: int, divisor: int = VOCAB_DIVISOR) -> int:
    """Megatron pads the vocabulary to a multiple of divisor × tp (arguments.py)."""
    step = divisor * tp
    return -(-vocab // step) * step


def architecture(flags: dict[str, Any], tp: int) -> Architecture:
    """The GPT the flags describe (module docstring for the defaults)."""
    layers = _int(flags, "num-layers")
    hidden = _int(flags, "hidden-size")
    heads = _int(flags, "num-attention-heads")
    if not (layers and hidden and heads):
        raise GpuplanError(
            "Megatron-LM flags need --num-layers, --hidden-size and --num-attention-heads"
        )
    if hidden % heads and "kv-channels" not in flags:
        raise GpuplanError(f"--hidden-size {hidden} is not a multiple of {heads} attention heads")
    head_dim = _int(flags, "kv-channels", hidden // heads) or hidden // heads
    groups = (
        _int(flags, "num-query-groups", heads) if _on(flags, "group-query-attention") else heads
    )
    assert groups is not None
    if heads % groups:
        raise GpuplanError(f"--num-query-groups {groups} does not divide {heads} attention heads")
    swiglu = _on(flags, "swiglu")
    default_ffn = (int(4 * hidden * 2 / 3) // 64) * 64 if swiglu else 4 * hidden
    ffn = _int(flags, "ffn-hidden-size", default_ffn) or default_ffn
    bias = not _on(flags, "disable-bias-linear")
    rope = str(flags.get("position-embedding-type", "learned_absolute")) == "rope"
    vocab = _int(flags, "vocab-size", GPT2_BPE_VOCAB) or GPT2_BPE_VOCAB
    divisor = _int(flags, "make-vocab-size-divisible-by", VOCAB_DIVISOR) or VOCAB_DIVISOR
    norm = str(flags.get("normalization", "LayerNorm")).lower()
    experts = _int(flags, "num-experts", 0) or 0
    moe = None
    if experts:
        topk = _int(flags, "moe-router-topk", 2) or 2
        if topk > experts:  # megatron/core/transformer/moe/router.py routes top-k of the experts
            raise GpuplanError(f"--moe-router-topk {topk} exceeds --num-experts {experts}")
        moe = MoESpec(
            num_experts=experts,
            experts_per_token=topk,
            expert_intermediate_size=_int(flags, "moe-ffn-hidden-size", ffn) or ffn,
        )
    attention = AttentionSpec(
        num_heads=heads,
        num_kv_heads=groups,
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=bias or _on(flags, "add-qkv-bias"),
        o_bias=bias,
    )
    if _on(flags, "multi-latent-attention"):
        attention = _mla(flags, heads, bias)
    return Architecture(
        name="megatron-gpt",
        model_type="megatron_gpt",
        hidden_size=hidden,
        num_layers=layers,
        vocab_size=padded_vocab(vocab, tp, divisor),
        attention=attention,
        layers=tuple(LayerSpec(moe=bool(experts)) for _ in range(layers)),
        mlp=MLPSpec(ffn, gated=swiglu, bias=bias),
        moe=moe,
        tie_word_embeddings=not _on(flags, "untie-embeddings-and-output-weights"),
        norm="rms" if norm == "rmsnorm" else "layernorm",
        learned_positions=0 if rope else (_int(flags, "max-position-embeddings", 0) or 0),
        max_position_embeddings=_int(flags, "max-position-embeddings", 0) or 0,
        hidden_act="silu" if swiglu else "gelu",
        rope=RopeSpec() if rope else None,
    )


def _mla(flags: dict[str, Any], heads: int, bias: bool) -> AttentionSpec:
    """Multi-latent attention (--multi-latent-attention; megatron/training/arguments.py MLA
    defaults: --q-lora-rank none (a plain q projection), --kv-lora-rank 32, --qk-head-dim 128,
    --qk-pos-emb-head-dim 64, --v-head-dim 128; megatron/core/transformer/
    multi_latent_attention.py)."""
    q_rank = _int(flags, "q-lora-rank")
    kv_rank = _int(flags, "kv-lora-rank", 32) or 32
    nope = _int(flags, "qk-head-dim", 128) or 128
    rope = _int(flags, "qk-pos-emb-head-dim", 64) or 64
    v = _int(flags, "v-head-dim", 128) or 128
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        v_head_dim=v,
        qkv_bias=bias,
        o_bias=bias,
        q_lora_rank=q_rank,
        kv_lora_rank=kv_rank,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
    )


def _loss_and_attention(flags: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """--cross-entropy-loss-fusion (engine/loss.py vocab_parallel_fused, or te_fused with
    --cross-entropy-fusion-impl te) and --attention-backend: unfused (TE's
    UnfusedDotProductAttention) and local (Megatron's DotProductAttention) keep the s²
    softmax; flash, fused (cuDNN) and auto do not (megatron/core/transformer/enums.py
    AttnBackend)."""
    if _on(flags, "cross-entropy-loss-fusion"):
        impl = str(flags.get("cross-entropy-fusion-impl", "native"))
        if impl not in ("native", "te"):
            raise GpuplanError(f"--cross-entropy-fusion-impl must be native or te, got {impl!r}")
        kwargs["loss"] = "te_fused" if impl == "te" else "vocab_parallel_fused"
    backend = str(flags.get("attention-backend", "auto"))
    if backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise GpuplanError(
            f"--attention-backend must be auto, flash, fused, unfused or local, got {backend!r}"
        )
    if backend in ("unfused", "local"):
        kwargs["attention"] = "eager"


def _optimizer(flags: dict[str, Any], kwargs: dict[str, Any], notes: list[str]) -> None:
    """--optimizer adam (default), sgd or muon (one momentum buffer, Megatron's fp32 main_grad
    and main params kept)."""
    name = str(flags.get("optimizer", "adam")).lower()
    if name == "adam":
        return
    if kwargs["recipe"] != "adamw-bf16-fp32grad":
        raise GpuplanError(f"--optimizer {name} is modelled with --bf16 only")
    if name == "sgd":
        kwargs["recipe"] = "sgd-megatron"
    elif name in ("muon", "dist_muon"):
        kwargs["recipe"] = "muon-megatron"
        notes.append(
            "Muon: every parameter billed with one fp32 momentum buffer (Megatron applies Adam"
            " to embeddings, output layer and vectors: slightly more for those)"
        )
    else:
        raise GpuplanError(f"--optimizer {name} is not modelled (adam, sgd, muon)")


def _expert_tp(flags: dict[str, Any], tp: int, kwargs: dict[str, Any]) -> None:
    """--expert-tensor-parallel-size: the experts split etp ways instead of tp (engine/
    sharding.py; expert parallelism may then span the tensor-parallel ranks)."""
    etp = _int(flags, "expert-tensor-parallel-size", tp)
    if etp != tp:
        kwargs["etp"] = etp


def _recompute(flags: dict[str, Any]) -> str:
    granularity = flags.get("recompute-granularity")
    if granularity in (None, False, "null"):
        return "none"
    if granularity == "selective":
        return "selective"
    if granularity != "full":
        raise GpuplanError(
            f"--recompute-granularity must be full or selective, got {granularity!r}"
        )
    method = flags.get("recompute-method", "uniform")
    n = _int(flags, "recompute-num-layers", 1) or 1
    if method == "block":
        return f"block:{n}"
    if method != "uniform":
        raise GpuplanError(f"--recompute-method must be uniform or block, got {method!r}")
    if n != 1:  # uniform groups of n layers: one checkpoint per group
        return f"uniform:{n}"
    return "full"


def _virtual_stages(flags: dict[str, Any], layers: int, pp: int) -> int:
    """Model chunks per pipeline rank: --num-virtual-stages-per-pipeline-rank, or
    layers ÷ (pp × --num-layers-per-virtual-pipeline-stage) (megatron/training/arguments.py
    checks that the layers split evenly)."""
    per_rank = _int(flags, "num-virtual-stages-per-pipeline-rank")
    per_stage = _int(flags, "num-layers-per-virtual-pipeline-stage")
    if per_rank is not None and per_stage is not None:
        raise GpuplanError(
            "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank"
            " both set the virtual pipeline; give one"
        )
    if per_stage is None:
        return per_rank or 1
    if per_stage < 1 or layers % pp or (layers // pp) % per_stage:
        raise GpuplanError(
            f"--num-layers-per-virtual-pipeline-stage {per_stage} does not split the"
            f" {layers // pp if layers % pp == 0 else layers} layers of a pipeline stage"
        )
    if pp == 1:
        raise GpuplanError("--num-layers-per-virtual-pipeline-stage needs a pipeline (pp > 1)")
    return layers // pp // per_stage


def read(text: str) -> TrainOverrides:
    """Megatron-LM flags → the GPT and train() arguments (gpus are the launcher's: not in flags)."""
    flags = parse_flags(text)
    tp = _int(flags, "tensor-model-parallel-size", 1) or 1
    pp = _int(flags, "pipeline-model-parallel-size", 1) or 1
    cp = _int(flags, "context-parallel-size", 1) or 1
    ep = _int(flags, "expert-model-parallel-size", 1) or 1
    if _on(flags, "bf16") and _on(flags, "fp16"):
        raise GpuplanError("--bf16 and --fp16 contradict each other; give one")
    arch = architecture(flags, tp)
    if arch.attention.num_heads % tp:
        raise GpuplanError(
            f"--tensor-model-parallel-size {tp} does not divide {arch.attention.num_heads} heads"
        )
    if pp > arch.num_layers:
        raise GpuplanError(f"--pipeline-model-parallel-size {pp} exceeds --num-layers")
    vpp = _virtual_stages(flags, arch.num_layers, pp)
    seq = _int(flags, "seq-length")
    if seq is None:
        raise GpuplanError("Megatron-LM flags need --seq-length")
    micro = _int(flags, "micro-batch-size", 1) or 1
    kwargs: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "vpp": vpp,
        "sp": _on(flags, "sequence-parallel") and tp > 1,
        "seq": seq,
        "micro_batch": micro,
        "checkpointing": _recompute(flags),
        "recipe": "adamw-fp16-megatron" if _on(flags, "fp16") else "adamw-bf16-fp32grad",
        "zero": 1 if _on(flags, "use-distributed-optimizer") else 0,
        "dropout": _fraction(flags, "hidden-dropout", 0.1),
        "stage": "last",  # Megatron logs memory from the last rank: the last pipeline stage
    }
    if not _on(flags, "bf16") and not _on(flags, "fp16"):
        kwargs["recipe"] = "adamw-fp32"
    if "fp8-format" in flags or _on(flags, "fp8"):
        kwargs["fp8"] = "te"
    if _on(flags, "optimizer-cpu-offload"):
        kwargs["offload"] = "optimizer"
    if _on(flags, "defer-embedding-wgrad-compute"):
        text = str(flags.get("wgrad-deferral-limit", 0))
        if not text.isdigit():
            raise GpuplanError(f"--wgrad-deferral-limit must be a whole number ≥ 0, got {text!r}")
        overrides = kwargs.setdefault("framework_overrides", {})
        overrides["defer_embedding_wgrad"] = int(text)  # 0: every micro-batch of the step
    if str(flags.get("transformer-impl", "transformer_engine")) == "local":
        # Megatron's own layers: unfused norms and MLP, core attention keeping the s² softmax
        kwargs["attention"] = "eager"
        kwargs.setdefault("framework_overrides", {})["fused"] = "none"
    global_batch = _int(flags, "global-batch-size")
    notes: list[str] = []
    _loss_and_attention(flags, kwargs)
    _optimizer(flags, kwargs, notes)
    _expert_tp(flags, tp, kwargs)
    if global_batch is not None:
        kwargs["global_batch"] = global_batch
    unknown = sorted(
        k
        for k in flags
        if k not in NO_MEMORY_EFFECT and k not in READ and k.replace("no-", "", 1) not in READ
    )
    if unknown:
        notes.append("not modelled: " + ", ".join(f"--{k}" for k in unknown))
    return TrainOverrides("megatron", arch, kwargs, tuple(notes))


READ = {
    "num-layers",
    "hidden-size",
    "ffn-hidden-size",
    "num-attention-heads",
    "kv-channels",
    "group-query-attention",
    "num-query-groups",
    "swiglu",
    "disable-bias-linear",
    "add-qkv-bias",
    "position-embedding-type",
    "max-position-embeddings",
    "vocab-size",
    "make-vocab-size-divisible-by",
    "normalization",
    "untie-embeddings-and-output-weights",
    "num-experts",
    "moe-router-topk",
    "moe-ffn-hidden-size",
    "tensor-model-parallel-size",
    "pipeline-model-parallel-size",
    "num-layers-per-virtual-pipeline-stage",
    "num-virtual-stages-per-pipeline-rank",
    "context-parallel-size",
    "expert-model-parallel-size",
    "sequence-parallel",
    "seq-length",
    "global-batch-size",
    "recompute-granularity",
    "recompute-method",
    "recompute-num-layers",
    "use-distributed-optimizer",
    "hidden-dropout",
    "attention-dropout",
    "fp8-format",
    "fp8",
    "optimizer-cpu-offload",
    "transformer-impl",
    "cross-entropy-loss-fusion",
    "cross-entropy-fusion-impl",
    "attention-backend",
    "multi-latent-attention",
    "q-lora-rank",
    "kv-lora-rank",
    "qk-head-dim",
    "qk-pos-emb-head-dim",
    "v-head-dim",
    "optimizer",
    "expert-tensor-parallel-size",
    "defer-embedding-wgrad-compute",
    "wgrad-deferral-limit",
}
