"""safetensors headers: exact bytes of real files written by the safetensors library."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuplan.api.common import resolve  # noqa: E402
from gpuplan.catalog.models import resolve_source  # noqa: E402
from gpuplan.catalog.sources.safetensors_header import read_file_header  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.weights import stage_layers  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from model_files import TINY, save, write_checkpoint  # noqa: E402


def test_bytes_per_dtype_equal_what_was_written(tmp_path: Path) -> None:
    """Several dtypes in one file: the header's bytes per dtype are the sums written."""
    tensors = {
        "a.weight": torch.zeros(7, 5, dtype=torch.bfloat16),
        "b.weight": torch.zeros(3, 11, dtype=torch.float32),
        "c.weight": torch.zeros(16, 4, dtype=torch.float8_e4m3fn),
        "d.qweight": torch.zeros(2, 9, dtype=torch.int32),
        "e.weight": torch.zeros(13, dtype=torch.uint8),
        "f.weight": torch.zeros(2, 3, dtype=torch.float16),
        "g.weight": torch.zeros(5, dtype=torch.int64),
    }
    written = save(tmp_path / "m.safetensors", tensors)
    got = read_file_header(tmp_path / "m.safetensors")
    assert sum(t.nbytes for t in got) == written
    by_name = {t.name: t for t in got}
    for name, value in tensors.items():
        assert by_name[name].nbytes == value.numel() * value.element_size()
        assert by_name[name].shape == tuple(value.shape)
    assert by_name["c.weight"].dtype == "F8_E4M3"


def test_sharded_index_reads_every_shard(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "m", shards=3)
    src = resolve_source(str(tmp_path / "m"))
    assert src.checkpoint is not None and src.checkpoint.files == 3
    assert src.checkpoint.total_bytes == written
    assert src.checkpoint.params_total == count_params(resolve(str(tmp_path / "m")).arch).total


def test_truncated_data_section_still_reads(tmp_path: Path) -> None:
    """Only the 8 + N header bytes are read: a file cut right after its header reads."""
    written = write_checkpoint(tmp_path / "m")
    f = tmp_path / "m" / "model.safetensors"
    (n,) = struct.unpack("<Q", f.read_bytes()[:8])
    with f.open("r+b") as handle:
        handle.truncate(8 + n + 3)
    assert resolve_source(str(tmp_path / "m")).checkpoint.total_bytes == written  # type: ignore[union-attr]


def test_stored_bytes_per_tp_shard_and_pp_stage(tmp_path: Path) -> None:
    """Per GPU, derived here from the written tensors: layers split evenly over stages,
    linear weights ÷ tp, norms replicated, embedding first, head and final norm last."""
    write_checkpoint(tmp_path / "m", dtype="float32")
    ref = resolve(str(tmp_path / "m"))
    from gpuplan.api.common import resolve_weight_format

    fmt = resolve_weight_format(ref.arch, None, ref.stored)
    assert fmt.stored is None  # an fp32 checkpoint served in bf16 is not sized as stored
    write_checkpoint(tmp_path / "b")
    ref = resolve(str(tmp_path / "b"))
    fmt = resolve_weight_format(ref.arch, None, ref.stored)
    assert fmt.stored is not None
    from gpuplan.engine.weights import weights_per_gpu

    h, i, v, kv = 64, 128, 256, 32
    layer_split = 2 * (h * h * 2 + kv * h * 2 + 3 * h * i)
    norms = 2 * 2 * h
    for tp, pp in ((1, 1), (2, 1), (1, 2), (2, 2), (1, 3)):
        stages = stage_layers(TINY["num_hidden_layers"], pp)
        expect = []
        for s, layers in enumerate(stages):
            b = len(layers) * (layer_split // tp + norms)
            if s == 0:
                b += 2 * v * h // tp
            if s == pp - 1:
                b += 2 * v * h // tp + 2 * h
            expect.append(b)
        assert weights_per_gpu(ref.arch, fmt, tp, pp).bytes == max(expect), (tp, pp)


def test_serve_weights_line_is_the_stored_bytes(tmp_path: Path) -> None:
    import gpuplan

    written = write_checkpoint(tmp_path / "m")
    plan = gpuplan.serve(str(tmp_path / "m"), gpus=1)
    line = plan.bill.item("weights")
    assert line.bytes == written and line.inputs["source"] == "checkpoint headers"
    assert "architecture math" in line.explain()
    assert plan.model_id == "m"


def test_quantised_checkpoint_unpacks_parameters(tmp_path: Path) -> None:
    """GPTQ packs 8 int4 values per int32 qweight: the header's parameter count (unpacked) is
    the architecture's, and scales / zeros / g_idx add bytes but no parameters."""
    cfg = TINY | {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}}
    folder = tmp_path / "q"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    from model_files import llama_shapes

    tensors = {}
    for name, shape in llama_shapes(cfg).items():
        linear = len(shape) == 2 and "layers" in name
        if not linear:
            tensors[name] = torch.zeros(shape, dtype=torch.float16)
            continue
        out, inp = shape
        base = name.removesuffix(".weight")
        tensors[base + ".qweight"] = torch.zeros(inp // 8, out, dtype=torch.int32)
        tensors[base + ".qzeros"] = torch.zeros(inp // 32, out // 8, dtype=torch.int32)
        tensors[base + ".scales"] = torch.zeros(inp // 32, out, dtype=torch.float16)
        tensors[base + ".g_idx"] = torch.zeros(inp, dtype=torch.int32)
    written = save(folder / "model.safetensors", tensors)
    ref = resolve(str(folder))
    assert ref.stored is not None and ref.stored.total_bytes == written
    assert ref.stored.params_total == count_params(ref.arch).total
    import gpuplan

    assert gpuplan.serve(str(folder), gpus=1).bill.item("weights").bytes == written


def test_corrupt_files_fail_in_one_line(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "m")
    f = tmp_path / "m" / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(struct.pack("<Q", len(data) * 4) + data[8:])
    with pytest.raises(GpuplanError, match="runs past the end"):
        resolve_source(str(tmp_path / "m"))
    bad = json.dumps({"x": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}).encode()
    f.write_bytes(struct.pack("<Q", len(bad)) + bad)
    with pytest.raises(GpuplanError, match="unknown dtype"):
        resolve_source(str(tmp_path / "m"))
    os.remove(f)
    (tmp_path / "m" / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../../etc/passwd"}})
    )
    with pytest.raises(GpuplanError, match="invalid file"):
        resolve_source(str(tmp_path / "m"))
