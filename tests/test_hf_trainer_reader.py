"""The Hugging Face Trainer / PEFT / TRL reader: TrainingArguments as JSON, YAML or a command line.

Expected values are what transformers, PEFT and TRL do with each argument (their defaults and
documented meaning), not gpuplan's output: per_device_train_batch_size defaults to 8
(training_args.py), optim names map to the optimizer classes of trainer.py
get_optimizer_cls_and_kwargs, PEFT casts adapters to fp32, a ds_config's "auto" values are
filled from TrainingArguments (integrations/deepspeed.py).
"""

from __future__ import annotations

import json

import pytest

import gpuplan
from gpuplan.api.framework_configs import detect_format
from gpuplan.engine.frameworks.hf_trainer import read
from gpuplan.errors import GpuplanError

ARGS = {
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 4,
    "gradient_checkpointing": True,
    "bf16": True,
    "optim": "paged_adamw_8bit",
    "max_length": 2048,
}
YAML = """
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
gradient_checkpointing: true
bf16: true
optim: paged_adamw_8bit
max_length: 2048
"""
COMMAND = (
    "accelerate launch train.py --per_device_train_batch_size 2 --gradient_accumulation_steps=4"
    " --gradient_checkpointing --bf16 --optim paged_adamw_8bit --max_length 2048"
)


@pytest.mark.parametrize("text", [json.dumps(ARGS), YAML, COMMAND], ids=["json", "yaml", "cli"])
def test_three_forms_read_alike(text):
    assert detect_format(text) == "hf-trainer"
    kw = read(text).kwargs
    assert kw["micro_batch"] == 2 and kw["grad_accum"] == 4 and kw["seq"] == 2048
    assert kw["checkpointing"] == "full"
    assert kw["recipe"] == "paged-adamw8bit-amp"  # fp32 parameters under autocast, paged states


@pytest.mark.parametrize(
    ("optim", "recipe"),
    [
        ("adamw_torch", "adamw-amp-bf16"),
        ("adamw_torch_fused", "adamw-amp-bf16"),
        ("adamw_bnb_8bit", "adamw8bit-amp"),
        ("paged_adamw_32bit", "paged-adamw32bit-amp"),
        ("adamw_torch_4bit", "torchao-adamw4bit-amp"),
        ("adafactor", "adafactor-amp"),
        ("sgd", "sgd-amp"),
        ("lion_8bit", "lion8bit-amp"),
        ("paged_lion_32bit", "paged-lion32bit-amp"),
    ],
)
def test_optim_values(optim, recipe):
    assert read(json.dumps({"bf16": True, "optim": optim})).kwargs["recipe"] == recipe


def test_defaults_and_load_dtype():
    kw = read("{}").kwargs
    assert kw["micro_batch"] == 8 and kw["grad_accum"] == 1  # TrainingArguments defaults
    assert kw["recipe"] == "adamw-fp32"  # no bf16/fp16: fp32 AdamW
    pure = read(json.dumps({"bf16": True, "dtype": "bfloat16"})).kwargs
    assert pure["recipe"] == "adamw-pure-bf16"  # torch AdamW keeps states like bf16 parameters


def test_lora_config_and_qlora_loading():
    doc = {
        "bf16": True,
        "dtype": "bfloat16",
        "peft_config": {
            "r": 32,
            "lora_alpha": 64,
            "target_modules": ["q_proj", "v_proj"],
            "modules_to_save": ["lm_head"],
        },
        "quantization_config": {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
        },
    }
    kw = read(json.dumps(doc)).kwargs
    assert kw["lora_rank"] == 32 and kw["lora_targets"] == ("q_proj", "v_proj")
    assert kw["lora_modules_to_save"] == ("lm_head",)
    assert kw["lora_base"] == "nf4-dq"
    assert kw["recipe"] == "adamw-amp-bf16"  # adapters are fp32 (PEFT autocast_adapter_dtype)


def test_trl_model_config_flags():
    cl = (
        "trl sft --model_name_or_path meta-llama/Llama-3.1-8B --use_peft --lora_r 64"
        " --lora_target_modules q_proj k_proj v_proj o_proj --load_in_8bit --dtype bfloat16"
    )
    r = read(cl)
    assert r.model == "meta-llama/Llama-3.1-8B"
    assert r.kwargs["lora_rank"] == 64
    assert r.kwargs["lora_targets"] == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert r.kwargs["lora_base"] == "int8"
    assert read("--use_peft --dtype bfloat16").kwargs["lora_base"] == "bf16"
    assert read("--use_peft").kwargs["lora_rank"] == 16  # TRL ModelConfig.lora_r default


def test_fsdp_and_inline_deepspeed():
    fsdp = read(
        json.dumps(
            {
                "fsdp": "full_shard auto_wrap",
                "fsdp_config": {"fsdp_offload_params": True, "activation_checkpointing": True},
            }
        )
    ).kwargs
    assert fsdp["fsdp"] == "full_shard" and fsdp["offload"] == "params"
    assert fsdp["checkpointing"] == "full"
    ds = {
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "bf16": {"enabled": "auto"},
    }
    text = json.dumps({"per_device_train_batch_size": 4, "bf16": True, "deepspeed": ds})
    assert detect_format(text) == "hf-trainer"
    kw = read(text).kwargs
    assert kw["zero"] == 3 and kw["offload"] == "optimizer" and kw["micro_batch"] == 4


def test_notes_for_settings_without_memory_effect():
    notes = read(
        json.dumps(
            {
                "torch_empty_cache_steps": 4,
                "gradient_checkpointing": True,
                "gradient_checkpointing_kwargs": {"use_reentrant": False},
            }
        )
    ).notes
    assert any("torch_empty_cache_steps" in n for n in notes)
    assert any("use_reentrant" in n for n in notes)


@pytest.mark.parametrize(
    "text",
    [
        '{"bf16": true, "fp16": true}',
        '{"optim": "rmsprop"}',
        '{"deepspeed": "ds_config.json"}',
        '{"fsdp": "full_shard", "deepspeed": {"zero_optimization": {"stage": 2}}}',
        '{"per_device_train_batch_size": 0}',
        '{"dtype": "int3"}',
        '{"load_in_4bit": true}',
        "--per_device_train_batch_size 'unterminated",
    ],
)
def test_bad_arguments_are_refused_in_one_line(text):
    with pytest.raises(GpuplanError) as e:
        read(text)
    assert "\n" not in str(e.value)


def test_train_from_a_command_line():
    plan = gpuplan.train_from(
        "python train.py --per_device_train_batch_size 1 --bf16 --dtype bfloat16"
        " --gradient_checkpointing --use_peft --lora_r 16 --lora_target_modules all-linear"
        " --load_in_4bit --use_bnb_nested_quant --optim paged_adamw_8bit --max_length 1024",
        "llama-3.1-8b",
        gpus=1,
        gpu="a100-80gb",
    )
    setup = plan.bill.setup
    assert setup.lora is not None and setup.lora.quantized and setup.lora.rank == 16
    assert setup.recipe.id == "paged-adamw8bit-amp"
    assert setup.base is not None and setup.base.precision.id == "nf4-dq"


AXOLOTL = """
base_model: NousResearch/Meta-Llama-3.1-8B
load_in_4bit: true
adapter: qlora
lora_r: 32
lora_alpha: 16
lora_target_linear: true
sequence_len: 4096
sample_packing: true
micro_batch_size: 2
gradient_accumulation_steps: 4
optimizer: paged_adamw_8bit
bf16: auto
gradient_checkpointing: true
"""


def test_axolotl_yaml():
    """axolotl's keys (docs/config.qmd): qlora = 4-bit NF4 base, lora_target_linear = every
    linear layer, bf16 auto on a bf16 GPU; adapters stay fp32 (PEFT)."""
    assert detect_format(AXOLOTL, "qlora.yml") == "hf-trainer"
    r = read(AXOLOTL)
    kw = r.kwargs
    assert r.model == "NousResearch/Meta-Llama-3.1-8B"
    assert (kw["seq"], kw["micro_batch"], kw["grad_accum"]) == (4096, 2, 4)
    assert kw["lora_rank"] == 32 and kw["lora_targets"] == ("all-linear",)
    assert kw["lora_base"] == "nf4-dq" and kw["checkpointing"] == "full"
    assert kw["recipe"] == "paged-adamw8bit-amp"


def test_unsloth_offloaded_checkpointing():
    """use_gradient_checkpointing="unsloth" checkpoints each layer and offloads its input."""
    kw = read(
        "max_seq_length: 2048\nload_in_4bit: true\nr: 16\ntarget_modules: all-linear\n"
        "use_gradient_checkpointing: unsloth\nper_device_train_batch_size: 2\n"
    ).kwargs
    assert kw["checkpointing"] == "full" and kw["offload_activations"] is True
    assert kw["lora_base"] == "nf4-dq" and kw["seq"] == 2048


QLORA = {
    "bf16": True,
    "gradient_checkpointing": True,
    "r": 16,
    "load_in_4bit": True,
}


@pytest.mark.parametrize(
    ("extra", "prepared"),
    [
        ({}, True),  # one GPU, 4-bit weights loaded on it: TRL prepares the model
        ({"load_in_4bit": False, "load_in_8bit": True}, True),  # LLM.int8 as well
        ({"fsdp": "full_shard auto_wrap"}, False),  # sharded QLoRA: TRL's is_sharded_qlora
        ({"deepspeed": {"zero_optimization": {"stage": 3}}}, False),
        ({"load_in_4bit": False}, False),  # a 16-bit base is not k-bit prepared
    ],
)
def test_kbit_preparation_where_trl_runs_it(extra, prepared):
    """TRL's SFTTrainer calls peft's prepare_model_for_kbit_training for a 4/8-bit base unless
    the QLoRA is sharded (FSDP / ZeRO-3 load the quantised weights on the CPU or meta device);
    its fp32 norms make the residual stream fp32."""
    kw = read(json.dumps({**QLORA, **extra})).kwargs
    assert kw.get("framework_overrides", {}).get("kbit_fp32_residual", False) is prepared


def test_unsloth_prepares_its_own_model():
    kw = read("max_seq_length: 2048\nload_in_4bit: true\nr: 16\nuse_gradient_checkpointing: true\n")
    assert "framework_overrides" not in kw.kwargs


def test_kbit_preparation_doubles_the_checkpointed_inputs():
    """With full checkpointing each decoder layer keeps its input: an fp32 residual stream adds
    one more 2-byte copy of it per layer (2·T·h·L bytes over the same run with a bf16 stream;
    the fms-acceleration CSV rows differ by exactly this, hf_trainer.toml)."""
    common = {
        "gpus": 1,
        "seq": 1024,
        "micro_batch": 2,
        "checkpointing": "full",
        "qlora": True,
        "framework": "hf-trainer",
    }
    plain = gpuplan.train("llama-3.1-8b", "h100", **common)
    prepared = gpuplan.train(
        "llama-3.1-8b", "h100", **common, framework_overrides={"kbit_fp32_residual": True}
    )
    arch = plain.bill.setup.arch
    extra = 2 * 1024 * 2 * arch.hidden_size * arch.num_layers
    assert prepared.activations_bytes - plain.activations_bytes == extra


def test_fsdp_version_2_reshards_the_root():
    """accelerate's fsdp_version 2 applies fully_shard with reshard_after_forward=True, so the
    root unit is not kept gathered as FSDP1 keeps it (profile fsdp_keeps_root)."""
    one = read(json.dumps({"fsdp": "full_shard", "dtype": "bfloat16"})).kwargs
    two = read(
        json.dumps({"fsdp": "full_shard", "fsdp_config": {"fsdp_version": 2}, "dtype": "bfloat16"})
    ).kwargs
    assert "fsdp_keeps_root" not in one.get("framework_overrides", {})
    assert two["framework_overrides"]["fsdp_keeps_root"] is False
