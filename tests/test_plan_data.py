"""api/plan_data.py (the `gpuplan plan` documents), api.engines.engine_args (gpuplan's settings
in an engine's own names) and planner.training_export.engine_recipe."""

from __future__ import annotations

import pytest

from gpuplan.api.engines import UnknownSetting, engine_args
from gpuplan.api.plan_data import (
    PLAN_SCHEMA_VERSION,
    serving_plan_data,
    training_goal_data,
    training_plan_data,
)
from gpuplan.api.training_plans import plan_training, plan_training_goal
from gpuplan.errors import GpuplanError
from gpuplan.planner.training_export import engine_recipe


def test_serving_plan_data_is_the_plan_document_with_the_top_plans():
    data = serving_plan_data("llama-3.1-8b", gpus=("h100",), users=4, tpot="50ms", top=1)
    assert data["schema"] == PLAN_SCHEMA_VERSION == "gpuplan.plan/1"
    assert data["tpot_s"] == pytest.approx(0.05) and data["ttft_s"] is None
    assert len(data["options"]) == 1 and data["fixes"] == []
    # the speed model's default split of the 4,096-token context: 3/4 prompt, the rest output
    assert (data["prompt_tokens"], data["output_tokens"]) == (3072, 1024)


def test_serving_plan_data_answers_with_fixes_when_nothing_meets_the_ask():
    # 405B parameters in bf16 are 810 GB: no single 48 GB L40S holds them
    data = serving_plan_data("llama-3.1-405b", gpus=("l40s",), max_gpus=1)
    assert data["options"] == [] and data["fixes"]


def test_training_documents_name_the_model_and_the_ask():
    ranked = plan_training("llama-3.1-8b", gpus=8, top=2)
    data = training_plan_data(ranked, engine="deepspeed")
    assert data["schema"] == "gpuplan.plan-train/1" and data["gpus"] == 8
    assert len(data["options"]) == 2 and data["options"][0]["export"]["engine"] == "deepspeed"
    goal = plan_training_goal("llama-3.1-8b", tokens="1T", days=60)
    doc = training_goal_data(goal, days=60, objective="gpus")
    assert doc["schema"] == "gpuplan.plan-train-goal/1" and doc["tokens"] == 10**12
    assert doc["model"] == "llama-3.1-8b"
    assert training_goal_data(goal, days=60, objective="gpus", model="Llama")["model"] == "Llama"


def test_engine_args_spell_gpuplan_settings_as_the_engine_does():
    # vLLM's --dtype takes torch names (bfloat16); an fp8 weight format is --quantization fp8
    args = engine_args("vllm", {"max_seqs": 64}, tp=2, dtype="bf16", kv_dtype="fp8")
    assert args["tensor_parallel_size"] == 2 and args["dtype"] == "bfloat16"
    assert args["max_num_seqs"] == 64 and args["kv_cache_dtype"] == "fp8"
    assert engine_args("vllm", {}, dtype="fp8-tensor")["quantization"] == "fp8"
    assert "device" not in engine_args("vllm", {}, gpus=4)  # vLLM lays out GPUs by tp/pp
    with pytest.raises(UnknownSetting, match="llama.cpp has no pp setting"):
        engine_args("llamacpp", {}, pp=2)
    assert issubclass(UnknownSetting, GpuplanError)


def test_engine_recipe_is_the_export_engines_own_default():
    # Megatron-LM accumulates bf16 gradients in fp32 (--accumulate-allreduce-grads-in-fp32)
    assert engine_recipe("megatron", "adamw-bf16") == "adamw-bf16-fp32grad"
    assert engine_recipe("deepspeed", "adamw-bf16") == "adamw-bf16"
    assert engine_recipe("fsdp", "adamw-bf16") == "adamw-bf16"
    assert engine_recipe("megatron", "adamw-amp-bf16") == "adamw-amp-bf16"
    assert engine_recipe(None, "adamw-bf16") == "adamw-bf16"


def test_a_gpu_count_becomes_the_engines_layout_or_is_refused():
    # an engine told its layout: --gpus N alone is tp N; with tp given the rest is pp
    assert engine_args("vllm", {}, gpus=4)["tensor_parallel_size"] == 4
    both = engine_args("vllm", {}, gpus=8, tp=4)
    assert both["tensor_parallel_size"] == 4 and both["pipeline_parallel_size"] == 2
    assert engine_args("sglang", {}, gpus=8, pp=2)["tp_size"] == 4
    with pytest.raises(GpuplanError, match="--gpus 4 does not match tp 3"):
        engine_args("vllm", {}, gpus=4, tp=3)
    with pytest.raises(UnknownSetting, match="--gpus auto"):
        engine_args("vllm", {}, gpus="auto")
