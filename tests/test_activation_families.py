"""Reference test: training activations of the layer kinds beyond Llama, on tiny models of eleven
more families (tests/test_reference_activations.py covers Llama, Qwen3-MoE and GPT-2).

Each tiny model (hidden 128, 2 layers, vocab 1000) runs one forward + loss in fp32 and bf16, with
the SDPA kernel and the eager one, under `torch.autograd.graph.saved_tensors_hooks`; the bytes of
the unique storages it saves (parameters excluded) must be within 10 % of
`saved_activation_bytes`. The families bring: non-gated MLPs (GELU, ReLU), LayerNorms with bias,
without bias in fp32 (Cohere), parallel blocks with one norm (GPT-J, Phi, Cohere) and with two
(GPT-NeoX), post-norms (OLMo 2) and sandwich norms with softcapped eager attention and logits
(Gemma 2), q/k norms over the whole projection (OLMo 2), sliding windows (Mistral, StarCoder2),
ALiBi (BLOOM) and learned positions (OPT).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from gpuplan.engine.activations import ActivationSpec, saved_activation_bytes  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402

pytestmark = pytest.mark.reference

VOCAB = 1000
BATCH, SEQ = 2, 48
TOLERANCE = 0.10
_NO_DROPOUT = {"attention_dropout": 0.0, "hidden_dropout": 0.0}

FAMILIES = {
    "gemma2": dict(
        model_type="gemma2",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        sliding_window=16,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    ),
    "gpt_neox": dict(
        model_type="gpt_neox",
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        **_NO_DROPOUT,
    ),
    "gptj": dict(
        model_type="gptj",
        n_embd=128,
        n_layer=2,
        n_head=4,
        rotary_dim=16,
        n_positions=512,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    ),
    "phi": dict(
        model_type="phi",
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
    ),
    "opt": dict(
        model_type="opt",
        hidden_size=128,
        ffn_dim=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        word_embed_proj_dim=128,
    ),
    "starcoder2": dict(
        model_type="starcoder2",
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=16,
        residual_dropout=0.0,
        embedding_dropout=0.0,
    ),
    "olmo2": dict(
        model_type="olmo2",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
    ),
    "cohere": dict(
        model_type="cohere",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
    ),
    "mistral": dict(
        model_type="mistral",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=16,
    ),
    "bloom": dict(model_type="bloom", hidden_size=128, n_layer=2, n_head=4, **_NO_DROPOUT),
    "stablelm": dict(
        model_type="stablelm",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
    ),
}
EAGER_ONLY = ("gemma2", "bloom")  # transformers has no SDPA path for them


def _measure(model: torch.nn.Module) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(7))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    return sum(seen.values())


def _cases() -> list:
    cases = []
    for family in FAMILIES:
        for kernel in ("sdpa", "eager"):
            if kernel == "sdpa" and family in EAGER_ONLY:
                continue
            for dtype in ("float32", "bfloat16"):
                cases.append(pytest.param(family, kernel, dtype, id=f"{family}-{kernel}-{dtype}"))
    return cases


@pytest.mark.parametrize(("family", "kernel", "dtype"), _cases())
def test_saved_activations_within_ten_percent(family: str, kernel: str, dtype: str) -> None:
    cfg = dict(FAMILIES[family])
    model_type = cfg.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type, vocab_size=VOCAB, **cfg)
        config._attn_implementation = kernel
        torch.manual_seed(0)
        torch_dtype = getattr(torch, dtype)
        model = AutoModelForCausalLM.from_config(config).to(torch_dtype).train()
        measured = _measure(model)
    arch = architecture_from_config({"model_type": model_type, **config.to_dict()}, family)
    spec = ActivationSpec(
        seq=SEQ,
        micro_batch=BATCH,
        act_bytes=torch_dtype.itemsize,
        kernel="flash" if kernel == "sdpa" else "eager",
    )
    estimate = saved_activation_bytes(arch, spec)
    error = (estimate - measured) / measured
    assert abs(error) <= TOLERANCE, (family, kernel, dtype, measured, estimate, f"{error:+.1%}")
