"""Shared builders for the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

from kvsched import Request  # noqa: E402

# `make test` draws the same examples on every machine, so CI's verdict is the change's and
# not the luck of a seed; `make explore` draws new ones (KVSCHED_HYPOTHESIS=explore) to find
# what the fixed draw misses, and a case it finds becomes a test of its own.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("KVSCHED_HYPOTHESIS", "fixed"))


def make_requests(n: int, prompt_len: int = 10, output_len: int = 5, arrival: float = 0,
                  interval: float = 0) -> list[Request]:
    """n requests r0..r{n-1}, all alike, arriving `interval` apart from `arrival`."""
    return [Request(f"r{i}", arrival + i * interval, prompt_len, output_len) for i in range(n)]


@pytest.fixture
def lesson_prompts() -> list[int]:
    """The prompt lengths of the lesson's interactive demo, r0..r19."""
    return [1461, 1873, 44, 136, 93, 228, 81, 156, 182, 80, 929, 114, 140, 1109, 64, 219, 69,
            1324, 194, 146]
