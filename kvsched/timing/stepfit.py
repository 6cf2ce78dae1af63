"""Fit the cheap linear time model to an expensive one (a roofline or a profile) over a grid of
batches, so small scenarios keep `kind: linear` with honest numbers."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvsched.timing import LinearStep, TimeModel

# (prefill tokens, decodes, KV context per decode): from idle decode to a full 8k budget
PREFILL_GRID = (0, 128, 512, 2048, 8192)
DECODE_GRID = (0, 1, 8, 32, 128, 256)
CONTEXT_GRID = (256, 1024, 4096)


@dataclass(frozen=True, slots=True)
class LinearFit:
    """The fitted model and how far it is from the model it imitates over the grid (abs %)."""

    model: LinearStep
    median_error: float
    max_error: float
    num_batches: int


def batch_grid() -> list[tuple[int, int, int]]:
    """(prefill_tokens, num_decodes, kv_read_tokens) of the default grid, empty batch left out."""
    grid = {(p, n, n * c) for p, n, c in itertools.product(PREFILL_GRID, DECODE_GRID,
                                                          CONTEXT_GRID) if p or n}
    return sorted(grid)


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0 (an active set: drop the negative, refit)."""
    free = np.ones(a.shape[1], dtype=bool)
    x = np.zeros(a.shape[1])
    for _ in range(a.shape[1]):
        x[:] = 0
        x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        if (x >= 0).all():
            break
        free &= x > 0
    return np.maximum(x, 0)


def fit_linear(model: TimeModel,
               batches: Iterable[tuple[int, int, int]] | None = None) -> LinearFit:
    """LinearStep coefficients fitted to `model.duration` on `batches` (default `batch_grid()`),
    minimising the relative error; the swap price is the model's own price of one block."""
    rows = list(batches) if batches is not None else batch_grid()
    if not rows:
        raise ValueError("fit_linear needs at least one batch")
    target = np.array([model.duration(p, n, kv, 0) for p, n, kv in rows])
    design = np.array([[1.0, p, n, kv] for p, n, kv in rows])
    weights = 1 / target  # relative error: a 1 ms step counts as much as a 1 s one
    coef = _nonnegative_lstsq(design * weights[:, None], target * weights)
    base = max(float(coef[0]), 1e-9)
    swap = max(model.duration(0, 0, 0, 1) - model.duration(0, 0, 0, 0), 0.0)
    linear = LinearStep(base=base, per_prefill_token=float(coef[1]), per_decode=float(coef[2]),
                        per_kv_token=float(coef[3]), per_swapped_block=swap)
    fitted = np.array([linear.duration(p, n, kv, 0) for p, n, kv in rows])
    errors = np.abs(fitted / target - 1) * 100
    return LinearFit(linear, float(np.median(errors)), float(errors.max()), len(rows))
