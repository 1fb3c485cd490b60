"""Shared fixtures: the lesson's GPU (an H100 counted as 80 GB, as the lesson does)."""

import os

import pytest

# One thread per test process: the suite runs on both cores through pytest-xdist, and torch's
# default (a thread per core in every worker) oversubscribes them. Set before torch is imported.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

LESSON_GPU_MEMORY = "80GB"  # the lesson: "eight H100s with 80 GB of HBM each"


@pytest.fixture
def lesson_gpu_memory() -> str:
    return LESSON_GPU_MEMORY


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test touches the network or the machine's Hugging Face cache: the Hub is off and the
    cache is an empty folder unless a test points HF_HUB_CACHE / HF_ENDPOINT elsewhere."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("empty-hf-cache")))
    monkeypatch.delenv("HF_TOKEN", raising=False)
