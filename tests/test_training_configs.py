"""`train --from`: framework configs read into the bill, and bad ones refused in one line."""

from __future__ import annotations

import json

import pytest

import gpuplan
from gpuplan.api.framework_configs import detect_format, read_framework_config
from gpuplan.cli.main import main
from gpuplan.errors import GpuplanError

TORCHTITAN = """
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 2
seq_len = 8192

[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[compile]
enable = true
components = ["model", "loss"]

[optimizer]
name = "AdamW"
implementation = "foreach"
"""

TORCHTUNE = """
model:
  _component_: torchtune.models.llama3_2.lora_llama3_2_3b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_rank: 64
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  max_seq_len: 4096
dataset:
  packed: True
batch_size: 2
gradient_accumulation_steps: 1
optimizer:
  _component_: torch.optim.AdamW
loss:
  _component_: torchtune.modules.loss.LinearCrossEntropyLoss
compile: False
enable_activation_checkpointing: True
enable_activation_offloading: False
dtype: bf16
"""

MEGATRON = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096"
    " --num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu"
    " --normalization RMSNorm --position-embedding-type rope --disable-bias-linear"
    " --untie-embeddings-and-output-weights --vocab-size 128256 --seq-length 4096"
    " --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64"
    " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel"
    " --use-distributed-optimizer --recompute-granularity full --recompute-method uniform"
    " --recompute-num-layers 1 --bf16 --hidden-dropout 0 --attention-dropout 0"
)

DEEPSPEED = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu"},
        "reduce_bucket_size": 5e7,
    },
}

TRAINER = {
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "gradient_checkpointing": True,
    "bf16": True,
    "optim": "adamw_torch_fused",
    "max_seq_length": 2048,
}


def test_formats_are_detected():
    assert detect_format(TORCHTITAN, "llama3_8b.toml") == "torchtitan"
    assert detect_format(TORCHTUNE, "3B_lora.yaml") == "torchtune"
    assert detect_format(MEGATRON) == "megatron"
    assert detect_format(json.dumps(DEEPSPEED), "ds_config.json") == "deepspeed"
    assert detect_format(json.dumps(TRAINER)) == "hf-trainer"


def test_torchtitan_toml():
    read = read_framework_config(TORCHTITAN, gpus=8)
    assert read.framework == "torchtitan" and read.model == "llama-3.1-8b"
    kw = read.kwargs
    assert (kw["seq"], kw["micro_batch"], kw["checkpointing"]) == (8192, 2, "op")
    assert kw["fsdp"] == "full_shard" and kw["compile"] is True
    assert kw["optimizer_kernel"] == "foreach"
    plan = gpuplan.train_from(TORCHTITAN, gpus=8)
    assert plan.layout.zero == 3 and plan.layout.dp == 8
    assert plan.bill.setup.framework.optimizer_kernel == "foreach"
    with pytest.raises(GpuplanError, match="give --gpus"):
        read_framework_config(TORCHTITAN)


def test_torchtune_yaml_and_overrides():
    read = read_framework_config(TORCHTUNE)
    assert read.model == "llama-3.2-3b"
    assert read.kwargs["method"] == "lora" and read.kwargs["lora_rank"] == 64
    assert read.kwargs["lora_targets"] == (
        "q_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    assert read.kwargs["loss"] == "linear_chunked:8" and read.kwargs["checkpointing"] == "full"
    over = read_framework_config(TORCHTUNE, overrides=["batch_size=8", "compile=True"])
    assert over.kwargs["micro_batch"] == 8 and over.kwargs["compile"] is True
    plan = gpuplan.train_from(TORCHTUNE, gpus=1)
    assert plan.bill.setup.lora is not None and plan.bill.setup.recipe.id == "adamw-pure-bf16"


def test_megatron_flags():
    read = read_framework_config(MEGATRON)
    arch = read.model
    assert arch.num_layers == 32 and arch.attention.num_kv_heads == 8
    assert arch.mlp.gated and arch.mlp.intermediate_size == 10880  # int(8h/3 ÷ 64) × 64
    assert arch.vocab_size == 128256  # already a multiple of 128 × tp
    kw = read.kwargs
    assert (kw["tp"], kw["pp"], kw["sp"], kw["zero"]) == (2, 2, True, 1)
    assert kw["checkpointing"] == "full" and kw["recipe"] == "adamw-bf16-fp32grad"
    plan = gpuplan.train_from(MEGATRON, gpus=8)
    assert plan.layout.dp == 2 and plan.bill.setup.micro_batches == 32  # 64 ÷ (1 × dp 2)
    assert plan.bill.stage.stage == 1  # Megatron logs from the last rank: the last stage


def test_deepspeed_json():
    read = read_framework_config(json.dumps(DEEPSPEED))
    kw = read.kwargs
    assert (kw["zero"], kw["offload"], kw["micro_batch"], kw["grad_accum"]) == (
        3,
        "optimizer",
        2,
        4,
    )
    assert kw["framework_overrides"] == {"reduce_bucket_elems": 50_000_000}
    plan = gpuplan.train_from(json.dumps(DEEPSPEED), "llama-3.1-8b", gpus=8)
    assert plan.bill.host_bytes_per_gpu > 0


def test_trainer_arguments():
    read = read_framework_config(json.dumps(TRAINER))
    kw = read.kwargs
    assert (kw["micro_batch"], kw["grad_accum"], kw["seq"]) == (4, 2, 2048)
    assert kw["recipe"] == "adamw-amp-bf16" and kw["checkpointing"] == "full"
    plan = gpuplan.train_from(json.dumps(TRAINER), "llama-3.2-1b", gpus=1)
    assert plan.bill.setup.recipe.autocast
    casts = {i.key: i.bytes for i in plan.bill.phase("forward").lines}
    assert casts["autocast_casts"] > 0


BAD = [
    ("torchtitan", TORCHTITAN.replace('mode = "selective"', 'mode = "sometimes"'), "mode"),
    ("torchtitan", TORCHTITAN.replace("local_batch_size = 2", "local_batch_size = 0"), "batch"),
    ("torchtitan", "[training\nseq_len = 1", "TOML"),
    (
        "torchtune",
        TORCHTUNE.replace(
            "gradient_accumulation_steps: 1",
            "gradient_accumulation_steps: 4\noptimizer_in_bwd: True",
        ),
        "optimizer_in_bwd",
    ),
    (
        "torchtune",
        TORCHTUNE.replace(
            "enable_activation_checkpointing: True",
            "enable_activation_checkpointing: False\nenable_activation_offloading: True",
        ).replace("enable_activation_offloading: False", ""),
        "offloading",
    ),
    ("torchtune", TORCHTUNE.replace("max_seq_len: 4096", "max_seq_len: null"), "max_seq_len"),
    ("megatron", MEGATRON + " --fp16", "contradict"),
    (
        "megatron",
        MEGATRON.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 3"),
        "divide",
    ),
    ("megatron", MEGATRON.replace("--num-query-groups 8", "--num-query-groups 5"), "query-groups"),
    ("deepspeed", json.dumps({**DEEPSPEED, "fp16": {"enabled": True}}), "contradict"),
    ("deepspeed", json.dumps({"zero_optimization": {"stage": 5}}), "stage"),
    (
        "deepspeed",
        json.dumps({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}),
        "offload_param",
    ),
    ("hf-trainer", json.dumps({**TRAINER, "fp16": True}), "contradict"),
    ("hf-trainer", json.dumps({**TRAINER, "optim": "lion"}), "optim"),
]


@pytest.mark.parametrize(("fmt", "text", "word"), BAD, ids=[f"{f}-{w}" for f, _, w in BAD])
def test_bad_configs_are_one_line_errors(fmt, text, word, tmp_path, capsys):
    with pytest.raises(GpuplanError, match=word):
        gpuplan.train_from(text, "llama-3.1-8b", format=fmt, gpus=8)
    path = tmp_path / "config.txt"
    path.write_text(text)
    code = main(["train", "llama-3.1-8b", "--from", str(path), "--format", fmt, "--gpus", "8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("gpuplan: error:")


def test_deepspeed_batch_must_add_up():
    bad = json.dumps({**DEEPSPEED, "train_batch_size": 99})
    with pytest.raises(GpuplanError, match="train_batch_size"):
        gpuplan.train_from(bad, "llama-3.1-8b", gpus=8)


def test_a_missing_config_file_is_named(capsys):
    code = main(["train", "--from", "no/such/config.toml", "--gpus", "8"])
    assert code == 2 and "no such config file" in capsys.readouterr().err
