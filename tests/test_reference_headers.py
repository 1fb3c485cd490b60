"""Reference test: a checkpoint header built from the `meta`-device model's own parameters.

For every catalog model, transformers builds the model on the `meta` device (shapes, no memory);
each named parameter becomes a safetensors header entry (name, BF16, shape, its byte span).
gpuplan's header reader and tensor classifier must then agree with its architecture count
exactly: the same total, the same parameters per kind, and (bf16 on both sides) the same bytes
per GPU under tensor and pipeline parallelism as engine/weights.py's architecture math.
"""

from __future__ import annotations

import json
import struct

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoModelForImageTextToText  # noqa: E402

from gpuplan.catalog.sources.safetensors_header import parse_header  # noqa: E402
from gpuplan.engine.architecture import architecture_from_config  # noqa: E402
from gpuplan.engine.checkpoint import Checkpoint, agreement  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.precision import Precision  # noqa: E402
from gpuplan.engine.sharding import tp_problem  # noqa: E402
from gpuplan.engine.weights import WeightFormat, weights_per_gpu  # noqa: E402
from test_reference_params import CATALOG, _hf_config, _sizing_config  # noqa: E402

pytestmark = pytest.mark.reference

BF16 = Precision("bf16", 16)


def _meta_header(cfg: dict) -> bytes:
    """A safetensors header (8-byte length + JSON) for the meta model's parameters, bf16."""
    builder = AutoModelForImageTextToText if "vision_config" in cfg else AutoModelForCausalLM
    with torch.device("meta"):
        model = builder.from_config(_hf_config(cfg))
    header, offset = {}, 0
    for name, p in model.named_parameters():
        size = p.numel() * 2
        header[name] = {
            "dtype": "BF16",
            "shape": list(p.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_meta_header_agrees_with_architecture(model_id: str) -> None:
    cfg = _sizing_config(CATALOG[model_id])
    blob = _meta_header(cfg)
    (n,) = struct.unpack("<Q", blob[:8])
    ckpt = Checkpoint("safetensors", tuple(parse_header(blob[8 : 8 + n], model_id)))
    arch = architecture_from_config(cfg, model_id)
    counts = count_params(arch)
    assert ckpt.params_total == counts.total
    assert ckpt.params_by_kind == counts.by_kind
    report = agreement(ckpt, dict(counts.by_kind), arch)
    assert not report.flagged and report.header_params == counts.total
    fmt = WeightFormat(BF16, BF16)
    stored = WeightFormat(BF16, BF16, stored=ckpt)
    for tp, pp in ((1, 1), (2, 1), (1, 2), (4, 2), (8, 1)):
        if tp_problem(arch, tp) or arch.attention.num_heads % tp or pp > arch.num_layers:
            continue
        assert (
            weights_per_gpu(arch, stored, tp, pp).bytes == weights_per_gpu(arch, fmt, tp, pp).bytes
        ), (tp, pp)
