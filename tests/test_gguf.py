"""GGUF files written by the `gguf` package: header-only reads, exact bytes, GGML block types,
metadata → architecture, and the llama.cpp serving bill."""

from __future__ import annotations

import struct
import tomllib
from importlib import resources
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")

from gpuplan.api import engine_serve, serve_launch  # noqa: E402
from gpuplan.api.common import resolve  # noqa: E402
from gpuplan.catalog import get_precision  # noqa: E402
from gpuplan.catalog.launch import parse_launch  # noqa: E402
from gpuplan.catalog.models import resolve_source  # noqa: E402
from gpuplan.catalog.sources.gguf_header import read_gguf  # noqa: E402
from gpuplan.cli.main import main  # noqa: E402
from gpuplan.engine.params import count_params  # noqa: E402
from gpuplan.engine.profiles import get_adapter  # noqa: E402
from gpuplan.engine.profiles.llamacpp.bill import layer_device, options_from_args  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402
from model_files import write_gguf  # noqa: E402

GIB = 2**30


def test_block_types_in_the_catalog_match_the_gguf_package() -> None:
    data = tomllib.loads(
        resources.files("gpuplan.catalog").joinpath("data/precisions.toml").read_text("utf-8")
    )
    rows = [r for r in data["precision"] if "block_size" in r]
    assert len(rows) >= 20
    for row in rows:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[row["id"].upper()]]
        assert (row["block_size"], row["block_bytes"]) == (block, size), row["id"]
        assert get_precision(row["id"]).bytes_for(block * 3) == 3 * size


@pytest.mark.parametrize(
    "types",
    [
        {},
        {"attn": "Q5_K", "ffn": "IQ4_XS", "embd": "Q4_0", "out": "Q6_K"},
        {"attn": "F16", "ffn": "Q2_K", "embd": "Q8_0", "out": "F16", "norm": "F32"},
        {"attn": "IQ2_XXS", "ffn": "IQ3_S", "embd": "Q5_0", "out": "MXFP4"},
    ],
)
def test_bytes_equal_what_the_gguf_package_wrote(tmp_path: Path, types: dict[str, str]) -> None:
    written = write_gguf(tmp_path / "m.gguf", types=types)
    meta, tensors = read_gguf(tmp_path / "m.gguf")
    assert sum(t.nbytes for t in tensors) == written
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    assert {t.name: int(t.n_bytes) for t in reader.tensors} == {t.name: t.nbytes for t in tensors}
    assert meta["general.architecture"] == "llama"


def test_truncated_data_still_reads_and_bad_magic_fails(tmp_path: Path) -> None:
    written = write_gguf(tmp_path / "m.gguf")
    raw = (tmp_path / "m.gguf").read_bytes()
    _, tensors = read_gguf(tmp_path / "m.gguf")
    data_start = gguf.GGUFReader(str(tmp_path / "m.gguf")).data_offset
    (tmp_path / "cut.gguf").write_bytes(raw[: data_start + 16])  # data section cut short
    _, again = read_gguf(tmp_path / "cut.gguf")
    assert sum(t.nbytes for t in again) == written and len(again) == len(tensors)
    (tmp_path / "bad.gguf").write_bytes(b"GGML" + raw[4:200])
    with pytest.raises(GpuplanError, match="not a GGUF file"):
        read_gguf(tmp_path / "bad.gguf")
    (tmp_path / "short.gguf").write_bytes(raw[:100])
    with pytest.raises(GpuplanError, match="ends early"):
        read_gguf(tmp_path / "short.gguf")


def test_metadata_becomes_the_architecture(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf", layers=3, hidden=256, ff=512, heads=8, kv_heads=2, vocab=1024)
    ref = resolve(str(tmp_path / "m.gguf"))
    a = ref.arch
    assert (a.num_layers, a.hidden_size, a.vocab_size, a.max_position_embeddings) == (
        3,
        256,
        1024,
        4096,
    )
    assert (a.attention.num_heads, a.attention.num_kv_heads, a.attention.head_dim) == (8, 2, 32)
    assert ref.stored is not None and ref.stored.params_total == count_params(a).total
    tied = resolve(str(_tied(tmp_path)))
    assert tied.arch.tie_word_embeddings


def _tied(tmp_path: Path) -> Path:
    write_gguf(tmp_path / "t.gguf", tie=True)
    return tmp_path / "t.gguf"


# --------------------------------------------------------------------------------------
# llama.cpp
# --------------------------------------------------------------------------------------


def _layer_bytes(tmp_path: Path) -> tuple[dict[int, int], int, int, int]:
    _, tensors = read_gguf(tmp_path / "m.gguf")
    per: dict[int, int] = {}
    for t in tensors:
        if t.name.startswith("blk."):
            i = int(t.name.split(".")[1])
            per[i] = per.get(i, 0) + t.nbytes
    embd = next(t.nbytes for t in tensors if t.name == "token_embd.weight")
    out = sum(t.nbytes for t in tensors if t.name in ("output.weight", "output_norm.weight"))
    return per, embd, out, sum(t.nbytes for t in tensors)


def test_layer_placement_rule() -> None:
    """llama-model.cpp: i_gpu_start = max(n_layer + 1 - ngl, 0); the output layer is n_layer."""
    n = 32
    assert [layer_device(i, n, 33, [1.0]) for i in (0, 31, 32)] == [0, 0, 0]
    assert [layer_device(i, n, 10, [1.0]) for i in (22, 23, 32)] == [None, 0, 0]
    assert [layer_device(i, n, 0, [1.0]) for i in (0, 32)] == [None, None]
    two = [0.5, 1.0]
    assert [layer_device(i, n, 33, two) for i in (0, 16, 17, 32)] == [0, 0, 1, 1]


def test_llamacpp_bill_all_layers_on_one_gpu(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf", layers=4, hidden=256, heads=4, kv_heads=2)
    per, embd, out, _ = _layer_bytes(tmp_path)
    plan = engine_serve(
        str(tmp_path / "m.gguf"),
        "h100",
        engine="llamacpp",
        args={
            "ctx_size": 1000,
            "cache_type_k": "q8_0",
            "cache_type_v": "q4_0",
            "n_gpu_layers": "99",
        },
    )
    b = plan.bill
    n_ctx = 1024  # padded to 256
    kv_dims = 2 * 64  # kv heads × head dim
    kv = 4 * n_ctx * (kv_dims // 32 * 34 + kv_dims // 32 * 18)  # q8_0 K + q4_0 V rows
    assert b.kv_capacity_tokens == n_ctx and b.item("kv_cache").bytes == kv
    assert b.item("weights").bytes == sum(per.values()) + out
    host = {d["device"]: d for d in b.settings["devices"]}["host"]
    assert host["weights_bytes"] == embd and host["layers"] == ""
    assert b.fits


def test_llamacpp_partial_offload_and_layer_split(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf", layers=6)
    per, embd, out, _ = _layer_bytes(tmp_path)
    plan = serve_launch(
        f"llama-server -m {tmp_path / 'm.gguf'} -c 2048 -ngl 3 -ts 1,1 --no-kv-offload"
    )
    devices = {d["device"]: d for d in plan.bill.settings["devices"]}
    # ngl 3 of 7 slots: layers 4, 5 and the output layer (6) on GPU; split points 0.5, 1.0:
    # (4-4)/3 and (5-4)/3 < 0.5 → GPU0, (6-4)/3 → GPU1
    assert devices["GPU0"]["layers"] == "4-5" and devices["GPU1"]["layers"] == "6"
    assert devices["host"]["weights_bytes"] == embd + sum(per[i] for i in range(4))
    assert devices["GPU0"]["weights_bytes"] == per[4] + per[5]
    assert devices["GPU1"]["weights_bytes"] == out
    assert devices["GPU0"]["kv_bytes"] == 0 and devices["host"]["kv_bytes"] > 0


def test_llamacpp_tied_output_duplicates_the_embedding(tmp_path: Path) -> None:
    p = _tied(tmp_path)
    _, tensors = read_gguf(p)
    embd = next(t.nbytes for t in tensors if t.name == "token_embd.weight")
    plan = engine_serve(str(p), engine="llamacpp", args={"n_gpu_layers": "all", "ctx_size": 512})
    gpu0 = plan.bill.settings["devices"][0]
    layers = sum(t.nbytes for t in tensors if t.name.startswith("blk."))
    norm = next(t.nbytes for t in tensors if t.name == "output_norm.weight")
    assert gpu0["weights_bytes"] == layers + norm + embd


def test_llamacpp_fit_shrinks_the_context(tmp_path: Path) -> None:
    """With no -c, llama.cpp starts from the training context; --fit lowers it to what fits."""
    write_gguf(tmp_path / "m.gguf", context=10**7)
    plan = engine_serve(
        str(tmp_path / "m.gguf"), "h100", engine="llamacpp", args={}, gpu_memory="4GiB"
    )
    assert 4096 <= plan.bill.kv_capacity_tokens < 10**7
    assert plan.bill.kv_capacity_tokens % 256 == 0 and plan.bill.fits
    assert any("--fit" in n for n in plan.bill.notes)


def test_launch_line_round_trip(tmp_path: Path) -> None:
    line = "llama-server -m m.gguf -c 8192 -np 2 -ngl 20 -ctk q8_0 -ctv q4_0 -sm row -ts 3,1 -fa off --swa-full"
    parsed = parse_launch(line)
    assert parsed.engine == "llamacpp" and parsed.model == "m.gguf"
    adapter = get_adapter("llamacpp")
    again = parse_launch(adapter.launch_command(parsed.model, parsed.args))
    assert again.args == parsed.args
    assert options_from_args(parsed.args) == options_from_args(again.args)
    assert set(adapter.flags.names()) >= set(parsed.args)


def test_bad_llamacpp_values_fail_in_one_line(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf")
    for args in ({"cache_type_k": "q3_k"}, {"split_mode": "diagonal"}, {"tensor_split": "a,b"}):
        with pytest.raises(GpuplanError):
            engine_serve(str(tmp_path / "m.gguf"), engine="llamacpp", args=args)
    write_gguf(tmp_path / "n.gguf")
    (tmp_path / "dir").mkdir()
    with pytest.raises(GpuplanError, match="GGUF"):
        engine_serve("llama-3.1-8b", engine="llamacpp")


def test_cli_serve_gguf_with_llamacpp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_gguf(tmp_path / "m.gguf")
    assert (
        main(
            [
                "serve",
                str(tmp_path / "m.gguf"),
                "--engine",
                "llamacpp",
                "--kv-dtype",
                "q8_0",
                "--context",
                "2048",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "GPU0" in out and "host" in out and "q8_0" in out
    assert (
        main(["serve", "--from", f"llama-server -m {tmp_path / 'm.gguf'} -c 4096 -ngl 2", "--json"])
        == 0
    )
    assert '"engine"' in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "m.gguf")]) == 0
    assert "Q4_K" in capsys.readouterr().out


def test_split_gguf_reads_every_part(tmp_path: Path) -> None:
    a = write_gguf(tmp_path / "x.gguf", layers=2)
    raw = (tmp_path / "x.gguf").read_bytes()
    (tmp_path / "m-00001-of-00002.gguf").write_bytes(raw)
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(raw)
    src = resolve_source(str(tmp_path / "m-00001-of-00002.gguf"))
    assert src.checkpoint is not None and src.checkpoint.total_bytes == 2 * a
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(GpuplanError, match="missing"):
        resolve_source(str(tmp_path / "m-00001-of-00002.gguf"))


def test_gguf_value_types(tmp_path: Path) -> None:
    """Every metadata value type the spec defines reads back (arrays too)."""
    w = gguf.GGUFWriter(str(tmp_path / "v.gguf"), "llama")
    w.add_uint8("a.u8", 7)
    w.add_int16("a.i16", -3)
    w.add_float64("a.f64", 0.5)
    w.add_bool("a.b", True)
    w.add_array("a.arr", [1, 2, 3])
    w.add_array("a.strs", ["x", "y"])
    w.add_uint64("a.u64", 2**40)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta, tensors = read_gguf(tmp_path / "v.gguf")
    assert (meta["a.u8"], meta["a.i16"], meta["a.f64"], meta["a.b"]) == (7, -3, 0.5, True)
    assert meta["a.arr"] == [1, 2, 3] and meta["a.strs"] == ["x", "y"] and meta["a.u64"] == 2**40
    assert tensors == []
    assert struct.unpack("<I", (tmp_path / "v.gguf").read_bytes()[4:8])[0] == 3


def test_llamacpp_concurrency_is_kv_capacity_and_slots_are_apart(tmp_path: Path, capsys) -> None:
    """Issue 20: `-c 32768 -np 4` printed 'Maximum concurrency … 4.00x' (the slot count). The four
    slots share one unified cache of 32,768 cells, so one 32,768-token request fills it: 1.00x
    (the capacity over one request's tokens, as vLLM's line means it), and 4 slots beside it."""
    write_gguf(tmp_path / "m.gguf")
    line = f"llama-server -m {tmp_path / 'm.gguf'} -c 32768 -np 4 -ngl 99"
    b = serve_launch(line).bill
    assert b.kv_capacity_tokens == 32768 and b.max_model_len == 32768
    assert b.max_concurrency == pytest.approx(32768 / 32768) and b.slots == 4
    assert main(["serve", "--from", line]) == 0
    out = capsys.readouterr().out
    assert "tokens per request: 1.00x" in out and "4.00x" not in out
    assert "Parallel slots: 4" in out
