"""What the serving speed model times, and what it refuses to time.

The operator model (engine/speed/shape.py and step.py) times a decoder-only step: dense and MoE
GEMMs, softmax attention over a KV cache (MHA/GQA/MQA, sliding windows, MLA), the LM head and
tensor-parallel communication, as vLLM's and SGLang's decoder runners execute them. Three kinds
of model run kernels it has no figures for, and a time for them would be a guess presented as a
prediction, so `--speed` and the planner's latency goals refuse them in one line naming what is
missing (the memory bill is unaffected):

* encoder-decoders (T5, BART, Whisper): the encoder pass per request and the decoder's
  cross-attention over the encoder output (vLLM's encoder-decoder runner);
* recurrent and linear-attention mixers (Mamba, gated DeltaNet, lightning, RG-LRU, mLSTM,
  RWKV, short convolutions): their chunked scans in prefill and state updates in decode;
* DeepSeek-V4's compressed attention (compressors, the lightning indexer over compressed
  entries, the shared K=V head and grouped output projection).
"""

from __future__ import annotations

from gpuplan.engine.model_records import Architecture
from gpuplan.errors import GpuplanError


def unmodelled_for_speed(arch: Architecture) -> str | None:
    """What in `arch` the speed model does not time (None: everything it runs is timed)."""
    if arch.encoder is not None:
        return f"an encoder-decoder ({arch.model_type}: its encoder pass and cross-attention)"
    a = arch.attention
    if (
        a.compress_rate
        or a.shared_kv_head
        or any(
            layer.attention is not None
            and (layer.attention.compress_rate or layer.attention.shared_kv_head)
            for layer in arch.layers
        )
    ):
        return "compressed attention (DeepSeek-V4's compressors and shared K=V head)"
    mixers = sorted({layer.mixer for layer in arch.layers if layer.has_state})
    if mixers:
        return f"{', '.join(mixers)} layers (their scans and state updates)"
    return None


def check_speed_scope(arch: Architecture) -> None:
    """Refuse, in one line, to time a model whose kernels the speed model has no figures for."""
    what = unmodelled_for_speed(arch)
    if what is not None:
        raise GpuplanError(
            f"{arch.name}: serving speed is not modelled for {what}; --speed and latency goals"
            " time decoder-only attention models (the memory bill, without them, is unaffected)"
        )
