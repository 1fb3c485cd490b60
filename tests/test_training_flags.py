"""Framework flags that change memory (issue 21): Megatron-LM's fused cross entropy, attention
backends, MLA, Muon and expert tensor parallelism; torchtitan's compile components, loss
parallel under TP and its 2024 config layout; LoRA bases in fp32, bf16 and 8-bit.

Expected values are derived in each test from the mechanism its docstring names (the tensor
shapes the framework's code allocates), never from gpuplan's output.
"""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.api.framework_configs import read_framework_config
from gpuplan.catalog.recipes import get_recipe
from gpuplan.errors import GpuplanError
from test_training_configs import MEGATRON, TORCHTITAN

SEQ, MBS, TP, VOCAB = 4096, 1, 2, 128256


def _megatron(extra: str = "", **kw):
    return gpuplan.train_from(MEGATRON + extra, gpus=8, gpu="h100", **kw)


def test_megatron_fused_cross_entropy_adds_one_fp32_logits_buffer():
    """--cross-entropy-loss-fusion (native, compiled steps): Inductor materialises the exp of
    the fp32 logits in a fresh [s, b, v/tp] buffer before copying it back (the note in
    megatron/core/fusions/fused_cross_entropy.py): 4 bytes × T × V/tp more at the loss."""
    plain, fused = _megatron(), _megatron(" --cross-entropy-loss-fusion")
    assert fused.bill.setup.loss == "vocab_parallel_fused"
    vocab_per_rank = -(-VOCAB // (128 * TP)) * 128  # padded to 128 × tp, then ÷ tp
    extra = 4 * SEQ * MBS * vocab_per_rank
    assert fused.bill.phase("loss").total - plain.bill.phase("loss").total == extra
    te = _megatron(" --cross-entropy-loss-fusion --cross-entropy-fusion-impl te")
    assert te.bill.setup.loss == "te_fused"
    assert te.bill.phase("loss").total < plain.bill.phase("loss").total


@pytest.mark.parametrize(
    ("backend", "kernel"),
    [("unfused", "eager"), ("local", "eager"), ("flash", "flash"), ("fused", "flash")],
)
def test_megatron_attention_backend(backend, kernel):
    """unfused (TE UnfusedDotProductAttention) and local (Megatron DotProductAttention) keep
    the s² softmax; flash and fused (cuDNN) do not."""
    read = read_framework_config(MEGATRON + f" --attention-backend {backend}")
    assert read.kwargs.get("attention", "flash") == kernel
    assert not any("attention-backend" in n for n in read.notes)


def test_megatron_multi_latent_attention_and_muon():
    read = read_framework_config(
        MEGATRON + " --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512"
        " --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --optimizer muon"
    )
    a = read.model.attention
    assert a.is_mla and (a.q_lora_rank, a.kv_lora_rank) == (1536, 512)
    assert (a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (128, 64, 128)
    recipe = get_recipe(read.kwargs["recipe"])
    # bf16 params 2 + fp32 main_grad 4 + fp32 main params 4 + one fp32 momentum buffer 4
    assert recipe.bytes_per_param == 14
    with pytest.raises(GpuplanError, match="mixture-of-experts"):
        _megatron(" --expert-tensor-parallel-size 1")
    with pytest.raises(GpuplanError, match="not modelled"):
        read_framework_config(MEGATRON + " --optimizer lamb")


def test_torchtitan_compile_components_reach_only_what_they_name():
    only_model = TORCHTITAN.replace('components = ["model", "loss"]', 'components = ["model"]')
    kw = read_framework_config(only_model, gpus=8).kwargs
    assert kw["compile"] is True and kw["compile_loss"] is False
    assert "loss" not in kw  # the framework's loss stays (loss parallel under TP)
    tp = only_model.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2")
    plan = gpuplan.train_from(tp, gpus=8)
    assert plan.bill.setup.loss_spec.mode == "loss_parallel"
    assert plan.bill.setup.loss_spec.compiled is False
    both = gpuplan.train_from(TORCHTITAN, gpus=8)
    assert both.bill.setup.loss_spec.compiled is True


LEGACY = """
[model]
name = "llama3"
flavor = "8B"

[training]
batch_size = 8
seq_len = 8192
data_parallel_degree = -1
tensor_parallel_degree = 2
compile = true

[experimental]
pipeline_parallel_degree = 2
pipeline_parallel_microbatches = 4
pipeline_parallel_schedule = "1f1b"

[activation_checkpoint]
mode = "full"
"""


def test_torchtitan_2024_layout_is_read():
    """2024 config_manager.py: degrees under [training] and [experimental], batch_size and
    pipeline_parallel_microbatches (a count: 8 ÷ 4 = micro-batches of 2)."""
    kw = read_framework_config(LEGACY, gpus=16).kwargs
    assert (kw["tp"], kw["pp"], kw["gpus"]) == (2, 2, 16)
    assert (kw["micro_batch"], kw["grad_accum"]) == (2, 4)
    assert kw["fsdp"] == "full_shard"  # 16 ÷ (2 × 2) = 4 shards
    assert kw["compile"] is True and kw["compile_loss"] is False  # 2024: blocks only


def test_lora_base_formats():
    """The frozen base's bytes: fp32 4, bf16 2 per parameter; bitsandbytes LLM.int8 packs the
    linears into int8 and keeps embeddings/norms 16-bit."""

    def weights(base):
        plan = gpuplan.train("llama-3.2-1b", "h100", gpus=1, lora_rank=16, lora_base=base, seq=1024)
        return plan.bill.states.weights, plan.bill.params.total

    fp32, n = weights("fp32")
    bf16, _ = weights("bf16")
    int8, _ = weights("int8")
    adapters = 16 * 2 * 2048 * 16  # r × (in + out) ≥ this, small beside n
    assert fp32 - bf16 == pytest.approx(2 * n, abs=2 * adapters * 4)
    assert int8 < bf16 * 0.75
    with pytest.raises(GpuplanError, match="unknown LoRA base"):
        gpuplan.train("llama-3.2-1b", "h100", gpus=1, lora_rank=16, lora_base="int3")


def test_megatron_deferred_embedding_wgrad_keeps_the_head_inputs():
    """--defer-embedding-wgrad-compute: the last stage keeps, per micro-batch, the LM head's
    input (T × h, gathered under SP) and its output gradient (T × V/tp), bf16, until the flush;
    --wgrad-deferral-limit caps the count. MEGATRON: pp 2, gpus 8 → dp 2; global batch 64 →
    32 micro-batches per rank."""
    plain = _megatron()
    deferred = _megatron(" --defer-embedding-wgrad-compute")
    limited = _megatron(" --defer-embedding-wgrad-compute --wgrad-deferral-limit 4")
    vocab_per_rank = -(-VOCAB // (128 * TP)) * 128
    per = 2 * SEQ * MBS * (4096 + vocab_per_rank)
    m = deferred.bill.setup.micro_batches
    assert m == 64 // (8 // (TP * 2))  # global batch ÷ dp
    lines = {i.key: i.bytes for i in deferred.bill.phase("loss").lines}
    assert lines["deferred_wgrad"] == m * per
    limited_lines = {i.key: i.bytes for i in limited.bill.phase("loss").lines}
    assert limited_lines["deferred_wgrad"] == 4 * per
    assert "deferred_wgrad" not in {i.key for i in plain.bill.phase("loss").lines}


MOE = " --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024"


def test_expert_tensor_parallelism_apart_from_tp():
    """--expert-tensor-parallel-size 1 with tp 2 (Megatron-core ETP): each rank holds whole
    experts, ep × etp spans dp × cp × tp. MEGATRON on 16 GPUs: tp 2, pp 2, dp 4. With ep 4 the
    experts of a layer on one rank are 8 ÷ 4 = 2 whole ones (3 × h × f each, gated) instead of
    2 halves: one expert's worth more per MoE layer of the stage (16 layers)."""
    split = gpuplan.train_from(MEGATRON + MOE + " --expert-model-parallel-size 4", gpus=16)
    whole = gpuplan.train_from(
        MEGATRON + MOE + " --expert-model-parallel-size 4 --expert-tensor-parallel-size 1",
        gpus=16,
    )
    assert whole.layout.expert_tp == 1 and split.layout.expert_tp == 2
    one_expert = 3 * 4096 * 1024
    layers = len(whole.bill.stage.layers)
    assert whole.bill.stage.experts - split.bill.stage.experts == layers * one_expert
    # the expert-data-parallel group: dp × cp × tp ÷ (etp × ep) = 4 × 2 ÷ 4
    assert whole.layout.expert_shard_degree == 2 and split.layout.expert_shard_degree == 1
    # expert parallelism across the tensor-parallel ranks: ep 8 > dp 4, with etp 1
    wide = gpuplan.train_from(
        MEGATRON + MOE + " --expert-model-parallel-size 8 --expert-tensor-parallel-size 1",
        gpus=16,
    )
    assert wide.layout.ep == 8 and wide.bill.stage.experts * 2 == whole.bill.stage.experts
    with pytest.raises(GpuplanError, match="must divide"):
        gpuplan.train_from(MEGATRON + MOE + " --expert-model-parallel-size 8", gpus=16)
