"""Least-squares fitting of cost-model parameters to measured times.

Independent of where the timings come from (the GPU microbenchmarks of
:mod:`simcoll.gpu.calibrate`, nccl-tests logs read by
:mod:`simcoll.calibration.nccl_tests`, or synthetic data): a caller states a
model as a function from a parameter vector to predicted times, gives the
measured times, bounds and an initial guess, and gets the fitted parameters,
the relative residual of every sample and a summary.

Two entry points:

- :func:`fit_model`: the general, possibly non-linear fit, with
  :func:`scipy.optimize.least_squares` (trust-region reflective, which honours
  bounds; Branch, Coleman & Li, SIAM J. Sci. Comput. 21(1), 1999). Residuals
  are relative, ``(predicted - measured) / measured``, so a 1 KB sample and a
  1 GB sample count alike; parameters are scaled by the magnitude of their
  initial guess, so seconds (1e-6) and seconds per byte (1e-11) are
  conditioned alike.
- :func:`fit_linear` and its α-β form :func:`fit_alpha_beta`: the fast path for
  times linear in the parameters, ``t = overhead + messages · α + bytes · β``
  (Hockney's model with a fixed overhead; TACCL §5 fits α and β per link type
  the same way), solved as bounded linear least squares with
  :func:`scipy.optimize.lsq_linear` on the 1/t-weighted system.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simcoll.errors import ModelError


@dataclass(frozen=True)
class FitResult:
    """Fitted parameters by name, the relative residual of every sample
    (``(predicted - measured) / measured``, in the samples' order) and how the
    fit was made."""

    params: Mapping[str, float]
    relative_residuals: tuple[float, ...]
    method: str
    success: bool = True
    message: str = ""

    def __getitem__(self, name: str) -> float:
        return self.params[name]

    @property
    def median_relative_error(self) -> float:
        """Median of ``|residual|`` (0 for no samples)."""
        r = np.abs(self.relative_residuals)
        return float(np.median(r)) if r.size else 0.0

    @property
    def max_relative_error(self) -> float:
        r = np.abs(self.relative_residuals)
        return float(r.max()) if r.size else 0.0

    def summary(self) -> dict[str, Any]:
        """A plain mapping for YAML/JSON reports: parameters, sample count,
        median / max / RMS relative error, method and solver status."""
        r = np.asarray(self.relative_residuals, dtype=float)
        return {
            "params": {k: float(v) for k, v in self.params.items()},
            "samples": int(r.size),
            "median_relative_error": self.median_relative_error,
            "max_relative_error": self.max_relative_error,
            "rms_relative_error": float(np.sqrt(np.mean(r**2))) if r.size else 0.0,
            "method": self.method,
            "success": self.success,
        }


def _samples(times_s: Sequence[float], what: str) -> np.ndarray:
    t = np.asarray(times_s, dtype=float)
    if t.ndim != 1 or t.size == 0:
        raise ModelError(f"{what} needs a non-empty 1-D sequence of measured times")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ModelError(f"{what} needs positive times (got {t[~(np.isfinite(t) & (t > 0))][:3].tolist()} ...)")
    return t


def fit_model(
    predict: Callable[[np.ndarray], np.ndarray],
    times_s: Sequence[float],
    names: Sequence[str],
    initial: Sequence[float],
    bounds: Sequence[tuple[float, float]] | None = None,
    *,
    max_evaluations: int = 2000,
    loss: str = "linear",
    f_scale: float = 1.0,
) -> FitResult:
    """Fit parameters so that ``predict(params)`` matches ``times_s``.

    Parameters
    ----------
    predict : callable
        ``params`` (a float array in the order of ``names``) -> predicted
        times, one per sample, in the order of ``times_s``.
    times_s : sequence of float
        Measured times (positive).
    names : sequence of str
        Parameter names.
    initial : sequence of float
        Initial guess; also the scale of each parameter (its magnitude, 1 when 0).
    bounds : sequence of (low, high), optional
        Per parameter; default ``(0, inf)`` for every one (cost parameters are
        non-negative).
    max_evaluations : int
        Budget of ``predict`` calls.
    loss : {"linear", "soft_l1", "huber", "cauchy", "arctan"}
        :func:`scipy.optimize.least_squares`'s loss on the relative
        residuals: ``linear`` is plain least squares; a robust loss such as
        ``soft_l1`` lets residuals beyond ``f_scale`` count about linearly,
        so a few sizes the model's physics cannot follow do not pull every
        parameter away from the sizes it can.
    f_scale : float
        The relative residual where a robust loss turns from quadratic to linear.

    Returns
    -------
    FitResult

    Raises
    ------
    ModelError
        On mismatched lengths, non-positive times, an initial guess outside
        its bounds, fewer samples than parameters, or a ``predict`` returning
        the wrong number of values.
    """
    t = _samples(times_s, "fit_model")
    names = tuple(names)
    x0 = np.asarray(initial, dtype=float)
    if x0.shape != (len(names),):
        raise ModelError(f"fit_model: {len(names)} names but an initial guess of shape {x0.shape}")
    if len(set(names)) != len(names):
        raise ModelError(f"fit_model: parameter names repeat: {names}")
    if t.size < len(names):
        raise ModelError(f"fit_model: {t.size} samples cannot determine {len(names)} parameters")
    b = [(0.0, np.inf)] * len(names) if bounds is None else list(bounds)
    if len(b) != len(names):
        raise ModelError(f"fit_model: {len(names)} parameters but {len(b)} bounds")
    low = np.array([lo for lo, _ in b], dtype=float)
    high = np.array([hi for _, hi in b], dtype=float)
    bad = [n for n, v, lo, hi in zip(names, x0, low, high, strict=True) if not lo <= v <= hi or lo >= hi]
    if bad:
        raise ModelError(f"fit_model: initial guess of {bad[0]} lies outside its bounds (or the bounds are empty)")
    scale = np.where(np.abs(x0) > 0, np.abs(x0), 1.0)

    def residuals(u: np.ndarray) -> np.ndarray:
        predicted = np.asarray(predict(u * scale), dtype=float)
        if predicted.shape != t.shape:
            raise ModelError(f"fit_model: predict returned {predicted.shape} values for {t.size} samples")
        return (predicted - t) / t

    from scipy.optimize import least_squares

    # strictly inside the bounds: trf needs a feasible interior start
    u0 = np.clip(x0 / scale, low / scale, high / scale)
    solution = least_squares(
        residuals,
        u0,
        bounds=(low / scale, high / scale),
        method="trf",
        x_scale="jac",
        max_nfev=max_evaluations,
        loss=loss,
        f_scale=f_scale,
    )
    x = solution.x * scale
    return FitResult(
        params=dict(zip(names, (float(v) for v in x), strict=True)),
        relative_residuals=tuple(float(v) for v in residuals(solution.x)),
        method=f"scipy.optimize.least_squares (trf, relative residuals, {loss} loss)",
        success=bool(solution.success),
        message=str(solution.message),
    )


def fit_linear(
    columns: Mapping[str, Sequence[float]],
    times_s: Sequence[float],
    *,
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> FitResult:
    """Fit ``t = Σ_k column_k · param_k`` (bounded linear least squares,
    weighted by 1/t so residuals are relative).

    Parameters
    ----------
    columns : mapping of str to sequence of float
        One regressor per parameter (e.g. ``{"overhead_s": ones, "alpha_s":
        messages, "beta_s_per_byte": bytes}``), each as long as ``times_s``.
    times_s : sequence of float
    bounds : mapping, optional
        Per parameter; default ``(0, inf)``.

    Raises
    ------
    ModelError
        On mismatched lengths, non-positive times, or columns that do not
        determine every parameter (rank-deficient design).
    """
    t = _samples(times_s, "fit_linear")
    names = tuple(columns)
    if not names:
        raise ModelError("fit_linear needs at least one column")
    a = np.stack([np.asarray(columns[n], dtype=float) for n in names], axis=1) if names else np.zeros((t.size, 0))
    if a.shape[0] != t.size:
        raise ModelError(f"fit_linear: columns of {a.shape[0]} samples for {t.size} times")
    if not np.all(np.isfinite(a)):
        raise ModelError("fit_linear: columns must be finite")
    if np.linalg.matrix_rank(a / np.where(np.abs(a).max(axis=0) > 0, np.abs(a).max(axis=0), 1.0)) < len(names):
        raise ModelError(
            f"fit_linear: the samples do not determine {len(names)} parameters ({', '.join(names)}); "
            "vary sizes and message counts"
        )
    b = bounds or {}
    low = np.array([b.get(n, (0.0, np.inf))[0] for n in names], dtype=float)
    high = np.array([b.get(n, (0.0, np.inf))[1] for n in names], dtype=float)
    w = 1.0 / t
    aw = a * w[:, None]
    norm = np.where(np.abs(aw).max(axis=0) > 0, np.abs(aw).max(axis=0), 1.0)  # column scaling
    from scipy.optimize import lsq_linear

    solution = lsq_linear(aw / norm, t * w, bounds=(low * norm, high * norm), method="bvls")
    x = solution.x / norm
    return FitResult(
        params=dict(zip(names, (float(v) for v in x), strict=True)),
        relative_residuals=tuple(float(v) for v in (a @ x - t) / t),
        method="scipy.optimize.lsq_linear (bvls, 1/t weights)",
        success=bool(solution.success),
        message=str(solution.message),
    )


@dataclass(frozen=True)
class AlphaBetaFit:
    """Result of :func:`fit_alpha_beta`: seconds, seconds per message, seconds
    per byte, and the relative residual of every sample."""

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
        """Predicted time of ``messages`` messages totalling ``size_bytes``."""
        return self.overhead_s + messages * self.alpha_s + size_bytes * self.beta_s_per_byte


def fit_alpha_beta(
    sizes_bytes: Sequence[float],
    times_s: Sequence[float],
    messages: Sequence[float] | None = None,
    *,
    with_overhead: bool | None = None,
) -> AlphaBetaFit:
    """Fit ``t = overhead + messages·α + bytes·β`` (see :func:`fit_linear`).

    Without ``messages`` (one message per sample) α and the overhead cannot be
    told apart, so only α is fitted. With ``messages`` (e.g. TACCL's serial vs
    together pair: k messages of n/k bytes against one of n bytes) the
    overhead is fitted too unless ``with_overhead=False``.

    Raises
    ------
    ModelError
        On mismatched lengths, non-positive times, negative sizes or message
        counts, or samples that do not determine the parameters.
    """
    x = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    m = np.ones_like(x) if messages is None else np.asarray(messages, dtype=float)
    if not (x.shape == t.shape == m.shape) or x.ndim != 1:
        raise ModelError(f"fit needs equally long 1-D samples, got {x.shape}, {t.shape}, {m.shape}")
    if np.any(t <= 0) or np.any(x < 0) or np.any(m < 0):
        raise ModelError("fit needs positive times and non-negative sizes and message counts")
    if len(np.unique(x)) < 2:
        raise ModelError("fit needs samples that determine α and β (at least two distinct sizes)")
    overhead = messages is not None if with_overhead is None else with_overhead
    columns = {"alpha_s": m, "beta_s_per_byte": x}
    if overhead:
        columns["overhead_s"] = np.ones_like(x)
    fit = fit_linear(columns, t)
    return AlphaBetaFit(
        overhead_s=fit.params.get("overhead_s", 0.0),
        alpha_s=fit["alpha_s"],
        beta_s_per_byte=fit["beta_s_per_byte"],
        relative_residuals=fit.relative_residuals,
        method=fit.method,
    )


__all__ = ["AlphaBetaFit", "FitResult", "fit_alpha_beta", "fit_linear", "fit_model"]
