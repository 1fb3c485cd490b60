"""Reference test: the loss's forward and backward peaks (engine/loss.py) against PyTorch's
MemTracker, for the cross entropies whose code differs across transformers releases.

Each loss below is written here step by step as the named release runs it, on CPU tensors: a
bf16 hidden state (2 × 256 tokens, width 64) through a frozen bf16 LM head (vocabulary 4,000),
then the loss and its backward. The tracker's peak over the loss's forward (from the LM head on)
and over its backward, above what was alive before, must be within 5 % of `loss_memory`'s
`forward` and `backward`:

  transformers 4.46-4.49 ForCausalLMLoss   the model's forward keeps its bf16 logits while
                                           loss/loss_utils.py upcasts them and shifts the fp32
                                           copy with .contiguous(): `standard` + shift_copy
  transformers 4.48 GPTBigCodeForCausalLM  lm_logits[..., :-1, :].contiguous() in bf16, then
                                           nn.CrossEntropyLoss without upcast: `plain` + shift_copy
  transformers ≥ 4.50 ForCausalLMLoss      the labels padded and shifted instead, no logits
                                           copy: `standard`

and the KV cache transformers 4.48's GPTBigCode builds while training (profile train_kv_cache
"qkv"): each layer's `present` is a view of its fused c_attn output, which it keeps whole; the
bill's `kv_cache` line against what MemTracker sees still alive after the layers ran.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuplan.engine.loss import LossSpec, loss_memory  # noqa: E402

pytestmark = pytest.mark.reference

TOLERANCE = 0.05
BATCH, SEQ, HIDDEN, VOCAB = 2, 256, 64, 4000


def _cross_entropy(logits, labels):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def _loss_utils_446(logits, labels):
    """4.46-4.49 loss/loss_utils.py ForCausalLMLoss: upcast, then shift the logits by a copy."""
    upcast = logits.float()
    shifted = upcast[..., :-1, :].contiguous()
    return _cross_entropy(shifted, labels[..., 1:].contiguous())


def hf_446(hidden, weight, labels):
    logits = torch.nn.functional.linear(hidden, weight)  # held by the model's forward frame
    return _loss_utils_446(logits, labels)


def gpt_bigcode_448(hidden, weight, labels):
    lm_logits = torch.nn.functional.linear(hidden, weight)
    shifted = lm_logits[..., :-1, :].contiguous()
    return _cross_entropy(shifted, labels[..., 1:].contiguous())


def hf_450(hidden, weight, labels):
    logits = torch.nn.functional.linear(hidden, weight)
    padded = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    return _cross_entropy(logits.float(), padded)


CASES = {
    "transformers-4.46-for-causal-lm-loss": (hf_446, LossSpec("standard", shift_copy=True)),
    "transformers-4.48-gpt-bigcode": (gpt_bigcode_448, LossSpec("plain", shift_copy=True)),
    "transformers-4.50-for-causal-lm-loss": (hf_450, LossSpec("standard")),
}


def _total(tracker, which):
    return sum(snap["Total"] for snap in tracker.get_tracker_snapshot(which).values())


def measure(loss_fn):
    """(forward peak, backward peak) above what was alive before the LM head."""
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    weight = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16)
    hidden = torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    tracker = MemTracker()
    with tracker:
        base = _total(tracker, "current")
        tracker.reset_mod_stats()
        loss = loss_fn(hidden, weight, labels)
        forward = _total(tracker, "peak") - base
        tracker._peak_mem = {
            d: s["Total"] for d, s in tracker.get_tracker_snapshot("current").items()
        }
        loss.backward()
        backward = _total(tracker, "peak") - base
    return forward, backward


@pytest.mark.parametrize("name", list(CASES))
def test_loss_peaks_match_memtracker(name):
    loss_fn, spec = CASES[name]
    forward, backward = measure(loss_fn)
    billed = loss_memory(spec, BATCH * SEQ, VOCAB, HIDDEN, 2)
    for phase, got, want in (
        ("forward", billed.forward, forward),
        ("backward", billed.backward, backward),
    ):
        assert abs(got - want) <= TOLERANCE * want, (name, phase, want, got)


def test_shift_copy_costs_one_more_copy():
    """The shifted copy is one more fp32 (standard) or logits-dtype (plain) T·V buffer in the
    forward, and nothing in the backward."""
    tv = BATCH * SEQ * VOCAB
    for mode, extra in (("standard", 4 * tv), ("plain", 2 * tv)):
        plain = loss_memory(LossSpec(mode), BATCH * SEQ, VOCAB, HIDDEN, 2)
        shifted = loss_memory(LossSpec(mode, shift_copy=True), BATCH * SEQ, VOCAB, HIDDEN, 2)
        assert shifted.forward - plain.forward == extra
        assert shifted.backward == plain.backward


BIGCODE = {
    "model_type": "gpt_bigcode",
    "n_embd": 128,
    "n_head": 4,
    "n_inner": 512,
    "n_layer": 3,
    "n_positions": 1024,
    "vocab_size": 1000,
    "multi_query": True,
}


def _kept_presents(tokens: int) -> int:
    """transformers 4.48 GPTBigCode's training forward with use_cache on, as its attention runs
    it (written here): each layer's fused c_attn output split into the query and the multi-query
    key_value, `present = key_value` appended to `presents` under checkpointing's no-grad
    forward. The bytes still alive once every layer has run, above what was alive before."""
    from torch.distributed._tools.mem_tracker import MemTracker

    h, kv = BIGCODE["n_embd"], 2 * BIGCODE["n_embd"] // BIGCODE["n_head"]
    torch.manual_seed(0)
    tracker = MemTracker()
    with tracker, torch.no_grad():
        c_attn = [torch.randn(h + kv, h, dtype=torch.bfloat16) for _ in range(BIGCODE["n_layer"])]
        hidden = torch.randn(1, tokens, h, dtype=torch.bfloat16)
        base = _total(tracker, "current")
        presents = []
        for weight in c_attn:
            _, key_value = torch.nn.functional.linear(hidden, weight).split((h, kv), dim=2)
            presents.append(key_value)  # a view: the whole c_attn output stays
        kept = _total(tracker, "current") - base
    assert len(presents) == BIGCODE["n_layer"]
    return kept


def test_gpt_bigcode_training_kv_cache_matches_memtracker():
    """The `kv_cache` line of a bill with train_kv_cache "qkv" is what the views keep alive."""
    import gpuplan

    tokens = 256
    plan = gpuplan.train(
        BIGCODE,
        framework="hf-trainer",
        gpu="h100",
        gpus=1,
        seq=tokens,
        micro_batch=1,
        recipe="adamw-pure-bf16",
        checkpointing="full",
        framework_overrides={"train_kv_cache": "qkv"},
    )
    loss = next(p for p in plan.bill.phases if p.name == "loss")
    billed = sum(line.bytes for line in loss.lines if line.key == "kv_cache")
    kept = _kept_presents(tokens)
    assert abs(billed - kept) <= TOLERANCE * kept, (kept, billed)
