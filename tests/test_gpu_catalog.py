"""The GPU catalog (catalog/data/gpus.toml) as data: every row parses, every figure names sources
that exist, dense peaks sit at half the vendors' 2:4-sparse figures, and a missing figure is refused
in one line instead of being guessed."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from gpuplan.catalog.gpus import figure_sources, get_gpu, gpu_figure, list_gpus
from gpuplan.engine.gpu import PEAK_KEYS
from gpuplan.errors import GpuplanError


def _text() -> str:
    return resources.files("gpuplan.catalog").joinpath("data/gpus.toml").read_text()


def _data() -> dict:
    return tomllib.loads(_text())


FIGURE = re.compile(r"(_tflops|_tops|_bytes_per_s|_per_dir)$")
SPARSE = {
    "bf16_sparse_tflops": "bf16_dense_tflops",
    "fp8_sparse_tflops": "fp8_dense_tflops",
    "fp4_sparse_tflops": "fp4_dense_tflops",
    "int8_sparse_tops": "int8_dense_tops",
}

# Blackwell Ultra's FP4: the GB300 NVL72 datasheet gives 1,440 | 1,080 PFLOPS (sparse | dense).
NOT_DOUBLED = {("gb300", "fp4_dense_tflops")}


def test_every_row_parses_into_a_gpu():
    rows = _data()["gpu"]
    assert len(list_gpus()) == len(rows) == len({r["id"] for r in rows})
    for row in rows:
        assert get_gpu(row["id"]).id == row["id"]


def test_every_figure_names_sources_that_exist():
    data = _data()
    known = set(data["sources"])
    for row in data["gpu"]:
        figures = {k for k in row if FIGURE.search(k)}
        named = row.get("figure_sources", {})
        assert figures == set(named), row["id"]
        for key, keys in named.items():
            assert keys and set(keys) <= known, (row["id"], key, set(keys) - known)
        assert set(row.get("memory_sources", [])) <= known, row["id"]
        assert set(row.get("spec_sources", [])) <= known, row["id"]


def test_the_header_explains_every_key_a_row_uses():
    header = _text().split("\n[[gpu]]\n")[0]
    used = {k for row in _data()["gpu"] for k in row} - {"figure_sources"}
    for key in used:
        explained = key in header or key in ("id", "name", "aliases", "vendor", "notes")
        explained = explained or key in ("memory_sources", "spec_sources")
        assert explained, key


def test_dense_is_half_the_marketed_sparse_figure():
    """NVIDIA's and AMD's 2:4 structured sparsity doubles the dense tensor rate (the datasheets'
    'with sparsity' footnotes); a dense figure above its sparse one is the old sparse-as-dense slip.
    2 % slack: the L40S datasheet prints BF16 as 362.05 | 733 (1.2 % off an exact double)."""
    checked = 0
    for row in _data()["gpu"]:
        for sparse, dense in SPARSE.items():
            if sparse in row and dense in row:
                assert row[dense] <= row[sparse], (row["id"], dense)
                if (row["id"], dense) in NOT_DOUBLED:
                    continue
                assert row[dense] == pytest.approx(row[sparse] / 2, rel=0.02), (row["id"], dense)
                checked += 1
    assert checked >= 60


def test_geforce_bf16_is_the_dense_fp32_accumulate_rate():
    """GA102 whitepaper Appendix A: RTX 3090 BF16 71 | 142 TF (dense | sparse); Ada whitepaper:
    RTX 4090 BF16 165.2 | 330.4. The catalog once held 142 and 330.25 (the sparse / FP16-accumulate
    figures), issue 23 finding 9."""
    assert get_gpu("rtx-3090").bf16_dense_tflops == 71.0
    assert get_gpu("rtx-4090").bf16_dense_tflops == 165.2


# Tensor FLOP per SM per clock, BF16/FP16 with FP32 accumulate: GeForce runs it at half the
# workstation / datacenter rate (GA102 and Ada whitepaper tables).
GEFORCE, FULL = 512, 1024

# (row, SMs, boost MHz, FLOP/clk/SM, whitepaper's or datasheet's dense BF16): the cards NVIDIA's
# tables list, which the SM x clock rule must reproduce before it is trusted for the others.
RULE_CHECKS = [
    ("rtx-3090", 82, 1695, GEFORCE, 71.0),  # [NV-GA102-WP] Appendix A
    ("rtx-a6000", 84, 1800, FULL, 154.8),  # [NV-GA102-WP]
    ("a10", 72, 1695, FULL, 125.0),  # [NV-A10-DS]
    ("rtx-4090", 128, 2520, GEFORCE, 165.2),  # [NV-ADA-WP]
    ("rtx-4080", 76, 2505, GEFORCE, 97.5),  # [NV-ADA-WP]
    ("rtx-6000-ada", 142, 2505, FULL, 364.2),  # [NV-ADA-WP]
]

# (row, SMs, boost MHz, FLOP/clk/SM, Ada): SM counts (CUDA cores / 128) and boost clocks from
# NVIDIA's product pages and datasheets ([NV-GEFORCE-SPECS], [NV-RTXA-DS], [NV-RTXPRO-ADA-DS]).
DERIVED = [
    ("rtx-3060", 28, 1777, GEFORCE, False),
    ("rtx-3080-12gb", 70, 1710, GEFORCE, False),
    ("rtx-3080-ti", 80, 1665, GEFORCE, False),
    ("rtx-3090-ti", 84, 1860, GEFORCE, False),
    ("rtx-a5000", 64, 1695, FULL, False),
    ("rtx-a4500", 56, 1650, FULL, False),
    ("rtx-a4000", 48, 1560, FULL, False),
    ("rtx-4080-super", 80, 2550, GEFORCE, True),
    ("rtx-4070-ti-super", 66, 2610, GEFORCE, True),
    ("rtx-4070-ti", 60, 2610, GEFORCE, True),
    ("rtx-4070", 46, 2475, GEFORCE, True),
    ("rtx-4060-ti-16gb", 34, 2535, GEFORCE, True),
    ("rtx-4060", 24, 2460, GEFORCE, True),
    ("rtx-5000-ada", 100, 2550, FULL, True),
    ("rtx-4500-ada", 60, 2580, FULL, True),
]


@pytest.mark.parametrize(("gpu", "sms", "mhz", "rate", "listed"), RULE_CHECKS)
def test_sm_clock_rule_reproduces_nvidias_tables(gpu, sms, mhz, rate, listed):
    assert sms * mhz * 1e6 * rate / 1e12 == pytest.approx(listed, abs=0.3)
    assert get_gpu(gpu).bf16_dense_tflops == pytest.approx(listed, abs=0.1)


@pytest.mark.parametrize(("gpu", "sms", "mhz", "rate", "ada"), DERIVED)
def test_derived_peaks_are_sm_count_times_clock_times_rate(gpu, sms, mhz, rate, ada):
    """[NV-TENSOR-RATE]: each row's dense BF16/FP16 (and Ada FP8, twice it) from first principles."""
    spec = get_gpu(gpu)
    bf16 = sms * mhz * 1e6 * rate / 1e12
    assert spec.bf16_dense_tflops == spec.fp16_dense_tflops == pytest.approx(bf16, abs=0.06)
    assert "NV-TENSOR-RATE" in figure_sources(gpu, "bf16_dense_tflops")
    if ada:
        assert spec.fp8_dense_tflops == pytest.approx(2 * bf16, abs=0.06)


@pytest.mark.parametrize(
    ("gpu", "per_bf16"),
    [("rtx-5090", 8), ("rtx-5070-ti", 8), ("rtx-5070", 8), ("rtx-5060-ti-16gb", 8)]
    + [("rtx-pro-6000-ws", 4), ("rtx-pro-5000", 4), ("rtx-pro-4500", 4), ("rtx-pro-4000", 4)],
)
def test_rtx_blackwell_peaks_follow_the_fp4_ratios(gpu, per_bf16):
    """RTX 5090 whitepaper table: FP4 1676, FP8 419, BF16 209.5 dense with FP32 accumulate (GeForce
    halves FP32 accumulate); RTX PRO runs it at full rate ([AIC] Server Edition 467.8 / 935.6 /
    1871.2), so BF16 is FP4 / 4 there and FP8 FP4 / 2."""
    spec = get_gpu(gpu)
    assert spec.bf16_dense_tflops == pytest.approx(spec.fp4_dense_tflops / per_bf16, abs=0.06)
    assert spec.fp8_dense_tflops == pytest.approx(2 * spec.fp4_dense_tflops / per_bf16, abs=0.06)


@pytest.mark.parametrize("gpu", ["t4", "v100-16gb", "v100-32gb", "mi50", "mi60"])
def test_no_bf16_figure_where_the_hardware_has_no_bf16_rate(gpu):
    """Turing, Volta and Vega 20 have no BF16 matrix rate (T4, V100, MI50/MI60 datasheets)."""
    spec = get_gpu(gpu)
    assert spec.bf16_dense_tflops is None and spec.fp16_dense_tflops
    with pytest.raises(GpuplanError, match="bf16_dense_tflops"):
        spec.peak_flops("bf16")


@pytest.mark.parametrize(
    "name",
    [
        "L20",
        "RTX 5080",
        "RTX 4080",
        "RTX 4060 Ti 16GB",
        "A800",
        "MI50",
        "MI60",
        "RTX PRO 4500",
        "RTX PRO 5000",
        "RTX PRO 6000 Workstation",
        "RX 7900 XTX",
        "RX 7900 XT",
        "W7900",
        "RTX 5070 Ti",
        "RTX 3060",
        "A40",
        "L40",
        "H800",
        "H200 NVL",
    ],
)
def test_the_gpus_users_asked_for_are_in_the_catalog(name):
    assert get_gpu(name).memory_bytes >= 12e9


def test_every_nvidia_and_amd_gpu_has_bandwidth_and_a_link_kind():
    kinds = {"nvswitch", "nvlink-bridge", "xgmi", "pcie", "roce", "ici"}
    topologies = {"switch", "mesh", "bridge", "host", "torus"}
    for g in list_gpus():
        if g.vendor not in ("nvidia", "amd"):
            continue
        assert g.memory_bandwidth_bytes_per_s, g.id
        assert g.interconnect_kind in kinds and g.interconnect_topology in topologies, g.id
        if g.id != "gh200":  # the Grace Hopper GPU hangs off NVLink-C2C, not PCIe
            assert g.pcie_generation in (3, 4, 5, 6), g.id
        if g.interconnect_kind in ("nvswitch", "nvlink-bridge"):
            assert g.nvlink_generation in (2, 3, 4, 5), g.id


def test_a_missing_figure_is_refused_in_one_line_naming_gpu_and_figure():
    gpu = get_gpu("a10g")  # AWS publishes no tensor figure for its A10 variant
    with pytest.raises(GpuplanError) as e:
        gpu_figure(gpu, "bf16_dense_tflops")
    message = str(e.value)
    assert "\n" not in message and gpu.name in message and "bf16_dense_tflops" in message
    with pytest.raises(GpuplanError, match="unknown dtype"):
        gpu.peak_flops("fp3")


def test_a_present_figure_comes_back_with_its_sources():
    assert gpu_figure("h100-sxm", "interconnect_bytes_per_s_per_dir") == 450e9
    assert get_gpu("mi300x").peak_flops("fp8") == pytest.approx(2614.9e12)
    assert "NV-H100-DS" in figure_sources("h100-sxm", "bf16_dense_tflops")
    assert set(PEAK_KEYS) == {"bf16", "fp16", "fp8", "fp4", "int8", "tf32"}


def test_vllm_interconnect_classes_follow_the_catalog_link():
    """The vLLM adapter's all-reduce buffers depend on the link class (non_torch.py); from the
    catalog's interconnect_kind every GPU its fitted lists named keeps its class, and the new
    GPUs get theirs by the same rule (H800: NVSwitch of NVLink 4; A800: NVSwitch of NVLink 3)."""
    from pathlib import Path

    from gpuplan.engine.profiles.vllm import non_torch

    lists = tomllib.loads(
        (Path(non_torch.__file__).parent / "interconnect.toml").read_text("utf-8")
    )
    for cls in ("nvswitch", "nvlink"):
        for gpu in lists[cls]["gpus"]:
            assert non_torch.interconnect_class(get_gpu(gpu)) == cls, gpu
    expected = {"h800": "nvswitch", "a800-80gb": "nvlink", "h200-nvl": "nvlink"}
    expected |= {"mi250x": "nvlink", "l20": "pcie", "rtx-5080": "pcie"}
    for gpu, cls in expected.items():
        assert non_torch.interconnect_class(get_gpu(gpu)) == cls, gpu


@pytest.mark.parametrize("gpu", ["t4", "v100-32gb"])
def test_a_gpu_without_bf16_is_timed_at_its_fp16_rate(gpu):
    """Engines and trainers run bf16 checkpoints in fp16 where the GPU has no bf16 rate, so the
    speed model's 16-bit peak there is the datasheet's FP16 tensor figure (T4 65, V100 125)."""
    spec = get_gpu(gpu)
    assert spec.half_dense_tflops == spec.fp16_dense_tflops == {"t4": 65.0, "v100-32gb": 125.0}[gpu]
