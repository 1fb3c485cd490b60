"""Reference test: the fp32 residual stream of a k-bit-prepared QLoRA model, on the CPU.

peft's prepare_model_for_kbit_training (and TRL's peft_module_casting_to_bf16 after it) leaves
the norms of a 4/8-bit base in fp32; bitsandbytes' Linear4bit computes in its compute dtype and
casts its output back to its input's dtype (bitsandbytes/nn/modules.py). bitsandbytes' 4-bit
kernels need CUDA, so a tiny bf16 Llama is built here with its norms cast to fp32 and every
decoder linear wrapped to do what Linear4bit does with dtypes. Under bf16 autocast (HF Trainer's
--bf16), the input each decoder layer receives — what gradient checkpointing keeps — is then
fp32 from the second layer on, and its bytes are `layer_input_bytes` with an fp32 stream; with
bf16 norms (fms-acceleration's own preparation) it stays bf16.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from gpuplan.engine.activations import ActivationSpec, layer_input_bytes  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402

pytestmark = pytest.mark.reference

CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 200,
    "max_position_embeddings": 128,
}


class CastBackLinear(torch.nn.Module):
    """A frozen linear with Linear4bit's dtype rule: compute in bf16, return the input's dtype."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.to(torch.bfloat16)).to(x.dtype)


def _model(fp32_norms: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation="sdpa"))
    model = model.to(torch.bfloat16)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(parent, name, CastBackLinear(child))
    if fp32_norms:
        for name, module in model.named_modules():
            if "norm" in name:
                module.to(torch.float32)
    return model


def _layer_inputs(model: LlamaForCausalLM, batch: int, seq: int) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(
            lambda _m, args, kwargs: seen.append(
                kwargs.get("hidden_states", args[0] if args else None)
            ),
            with_kwargs=True,
        )
    ids = torch.randint(0, CONFIG["vocab_size"], (batch, seq))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids)
    return seen


@pytest.mark.parametrize(("batch", "seq"), [(1, 16), (2, 32)])
def test_fp32_norms_make_every_later_layer_input_fp32(batch, seq):
    arch = architecture_from_config(CONFIG | {"architectures": ["LlamaForCausalLM"]})
    prepared = _layer_inputs(_model(fp32_norms=True), batch, seq)
    plain = _layer_inputs(_model(fp32_norms=False), batch, seq)
    assert [t.dtype for t in prepared] == [torch.bfloat16] + [torch.float32] * 2
    assert all(t.dtype == torch.bfloat16 for t in plain)
    fp32 = ActivationSpec(seq=seq, micro_batch=batch, residual_bytes=4)
    bf16 = ActivationSpec(seq=seq, micro_batch=batch)
    assert prepared[-1].nbytes == layer_input_bytes(arch, fp32)
    assert plain[-1].nbytes == layer_input_bytes(arch, bf16)
