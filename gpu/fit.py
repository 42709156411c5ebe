"""Least-squares fits of α-β cost parameters from measured (size, time) samples.

Independent of where the timings come from (this package's GPU runs,
nccl-tests logs, or synthetic data): a time is modelled as a linear function
``t = overhead + messages · α + bytes · β`` (Hockney's model with a fixed
overhead; TACCL §5 fits α and β per link type the same way), and the
non-negative least-squares solution is found with
:func:`scipy.optimize.lsq_linear` when SciPy is installed, else with
:func:`numpy.linalg.lstsq` (then clipped at zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simcoll.errors import ModelError


@dataclass(frozen=True)
class Fit:
    """Fitted parameters (seconds, seconds per message, seconds per byte) and
    the relative residual of every sample."""

    overhead_s: float
    alpha_s: float
    beta_s_per_byte: float
    relative_residuals: tuple[float, ...]
    method: str

    @property
    def bandwidth_Bps(self) -> float:
        return 1.0 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else float("inf")

    @property
    def median_relative_error(self) -> float:
        return float(np.median(np.abs(self.relative_residuals)))

    def predict(self, size_bytes: float, messages: float = 1.0) -> float:
        return self.overhead_s + messages * self.alpha_s + size_bytes * self.beta_s_per_byte


def fit_alpha_beta(
    sizes_bytes: Sequence[float],
    times_s: Sequence[float],
    messages: Sequence[float] | None = None,
    *,
    with_overhead: bool | None = None,
) -> Fit:
    """Fit ``t = overhead + messages·α + bytes·β`` to the samples.

    Without ``messages`` (one message per sample) α and the overhead cannot be
    told apart: only α is fitted. With ``messages`` (e.g. TACCL's serial vs
    together pair: k messages of n/k bytes) the overhead is fitted too unless
    ``with_overhead=False``. Samples are weighted by 1/t, so small and large
    sizes count alike (relative error).

    Raises
    ------
    ModelError
        On mismatched lengths, non-positive times, or too few distinct samples.
    """
    x = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    m = np.ones_like(x) if messages is None else np.asarray(messages, dtype=float)
    if not (x.shape == t.shape == m.shape) or x.ndim != 1:
        raise ModelError(f"fit needs equally long 1-D samples, got {x.shape}, {t.shape}, {m.shape}")
    if np.any(t <= 0) or np.any(x < 0) or np.any(m < 0):
        raise ModelError("fit needs positive times and non-negative sizes and message counts")
    overhead = messages is not None if with_overhead is None else with_overhead
    columns = [m, x] + ([np.ones_like(x)] if overhead else [])
    a = np.stack(columns, axis=1)
    if len(np.unique(x)) < 2 or np.linalg.matrix_rank(a) < a.shape[1]:
        raise ModelError(f"fit needs samples that determine {a.shape[1]} parameters (vary sizes and messages)")
    w = 1.0 / t
    aw, tw = a * w[:, None], t * w
    try:
        from scipy.optimize import lsq_linear

        solution = lsq_linear(aw, tw, bounds=(0.0, np.inf)).x
        method = "scipy.optimize.lsq_linear"
    except ImportError:
        solution = np.clip(np.linalg.lstsq(aw, tw, rcond=None)[0], 0.0, None)
        method = "numpy.linalg.lstsq"
    alpha, beta = float(solution[0]), float(solution[1])
    over = float(solution[2]) if overhead else 0.0
    predicted = a @ solution
    return Fit(over, alpha, beta, tuple(float(v) for v in (predicted - t) / t), method)
