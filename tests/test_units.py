"""units.py: sizes at the edges. Per-token KV sizes print in MB (or MiB), never as 0.00 GB."""

import pytest

from gpuplan.cli.main import main
from gpuplan.errors import GpuplanError
from gpuplan.units import format_per_token, human_int

# Llama-3.1-70B, bf16 KV: 2 (K and V) × 80 layers × 8 KV heads × 128 × 2 bytes per token
KV_70B = 2 * 80 * 8 * 128 * 2


def test_per_token_sizes_in_mb_or_mib():
    assert KV_70B == 327_680
    assert format_per_token(KV_70B) == "0.33 MB"
    assert format_per_token(KV_70B, "GiB") == "0.312 MiB"  # 327,680 / 2^20
    with pytest.raises(GpuplanError):
        format_per_token(KV_70B, "TB")


@pytest.mark.parametrize(
    ("units", "shown"), [("GB", "KV 0.33 MB/token"), ("GiB", "KV 0.312 MiB/token")]
)
def test_inspect_and_serve_print_the_same_per_token_size(capsys, units, shown):
    assert main(["inspect", "llama-3.1-70b", "--units", units]) == 0
    assert shown in capsys.readouterr().out
    assert main(["serve", "llama-3.1-70b", "--units", units]) == 0
    assert f"({shown.removeprefix('KV ').removesuffix('/token')} of KV cache per token)" in (
        capsys.readouterr().out
    )


def test_token_counts_as_engines_read_them():
    # vLLM's human_readable_int: lower-case suffixes are decimal, upper-case binary
    assert human_int("16k") == 16_000
    assert human_int("4K") == 4_096
    assert human_int("25.6k") == 25_600
    with pytest.raises(ValueError):
        human_int("1.5K")
