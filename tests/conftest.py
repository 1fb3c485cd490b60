"""Shared fixtures: the lesson's GPU (an H100 counted as 80 GB, as the lesson does)."""

import pytest

LESSON_GPU_MEMORY = "80GB"  # the lesson: "eight H100s with 80 GB of HBM each"


@pytest.fixture
def lesson_gpu_memory() -> str:
    return LESSON_GPU_MEMORY
