"""LoRA and QLoRA bills: adapter counts, frozen-base formats, and combination with ZeRO/FSDP."""

import pytest

import gpuplan
from gpuplan.catalog import get_precision

GB = 10**9


def test_lora_adapter_count_attention():
    # Llama 3.1 8B, r = 16 on q, k, v, o: per layer 16 × ((4096 + 4096) + 2 × (4096 + 1024)
    # + (4096 + 4096)) = 425,984; × 32 layers = 13,631,488 (what PEFT prints for this setup)
    plan = gpuplan.train("llama-3.1-8b", gpus=1, lora_rank=16)
    h, kv, layers, r = 4096, 8 * 128, 32, 16  # config.json: hidden, KV heads × head_dim, layers
    assert plan.bill.trainable_params == layers * r * ((h + h) + 2 * (h + kv) + (h + h))


def test_lora_adapter_count_all_linear():
    # + gate, up, down: 3 × 16 × (4096 + 14336) per layer → 41,943,040 in all
    plan = gpuplan.train("llama-3.1-8b", gpus=1, lora_rank=16, lora_targets="all-linear")
    h, kv, inter, layers, r = 4096, 8 * 128, 14336, 32, 16
    attention = (h + h) + 2 * (h + kv) + (h + h)
    assert plan.bill.trainable_params == layers * r * (attention + 3 * (h + inter))


def test_adapters_carry_the_recipe_and_the_base_only_weights():
    plan = gpuplan.train("llama-3.1-8b", gpus=1, lora_rank=16)
    n = plan.bill.trainable_params
    items = {i.key: i.bytes for i in plan.items}
    assert items["gradients"] == 2 * n
    assert items["master"] + items["optimizer"] == 12 * n
    assert items["weights"] == 2 * plan.params_total + 2 * n  # bf16 base + bf16 adapters


def test_qlora_base_is_nf4_with_double_quantisation():
    plan = gpuplan.train("llama-3.1-8b", gpus=1, qlora=True)
    b = plan.bill
    linear = b.params.linear
    other = b.params.total - linear
    nf4 = get_precision("nf4-dq").bytes_for(linear)  # 4 + 8/64 + 32/(64·256) bits
    base = nf4 + 2 * other
    adapters = 2 * b.trainable_params
    assert plan.item("weights").bytes == pytest.approx(base + adapters, rel=1e-6)
    assert plan.to_dict()["lora"]["targets"][:3] == ["q_proj", "k_proj", "v_proj"]  # all-linear


def test_qlora_70b_fits_one_80gb_gpu_with_checkpointing():
    # the QLoRA paper's point (Dettmers et al. 2023 §1: a 65B model on one 48 GB GPU): a 70B
    # model's NF4 linear weights are ~35 GB, its 16-bit embedding and head 4 GB, the r = 64
    # all-linear adapters 1.7 GB; with recompute a 1k-token micro-batch fits one 80 GB GPU
    plan = gpuplan.train(
        "llama-3.1-70b", gpus=1, qlora=True, seq=1024, checkpointing="full", gpu_memory="80GB"
    )
    assert 39 * GB < plan.item("weights").bytes < 43 * GB
    assert plan.fits


def test_lora_combines_with_fsdp():
    one = gpuplan.train("llama-3.1-70b", gpus=8, lora_rank=16, zero=0, seq=1024)
    full = gpuplan.train("llama-3.1-70b", gpus=8, lora_rank=16, fsdp="full_shard", seq=1024)
    # FSDP shards the frozen base too
    assert full.item("weights").bytes == pytest.approx(one.item("weights").bytes / 8, rel=1e-3)
    assert full.item("allgather_buffer").bytes > 0


def test_lora_flops_skip_weight_gradients():
    full = gpuplan.train("llama-3.1-8b", gpus=1)
    lora = gpuplan.train("llama-3.1-8b", gpus=1, lora_rank=16)
    n = full.bill.params.active - full.bill.params.embedding
    assert full.step_flops - lora.step_flops == 2 * n * 4096  # 6N → 4N per token


def test_context_parallel_divides_activations():
    one = gpuplan.train("llama-3.1-8b", gpus=1, seq=8192).bill.activation_bytes_per_layer
    cp2 = gpuplan.train("llama-3.1-8b", gpus=2, cp=2, seq=8192)
    assert cp2.bill.activation_bytes_per_layer * 2 == one
    assert cp2.bill.comm.cp > 0


def test_expert_parallel_divides_experts():
    base = gpuplan.train("qwen3-30b-a3b", gpus=8, zero=0, seq=1024)
    ep8 = gpuplan.train("qwen3-30b-a3b", gpus=8, ep=8, zero=0, seq=1024)
    assert ep8.bill.stage.experts * 8 == pytest.approx(base.bill.stage.experts, abs=8)
    assert ep8.model_states_bytes < base.model_states_bytes / 4
    assert ep8.bill.comm.ep > 0
