"""simcoll.calibration.fit recovers known parameters from noisy timings: the
linear α-β fast path, TACCL's serial-vs-together pair, and the general
non-linear fitter with bounds."""

import numpy as np
import pytest

from simcoll.calibration.fit import fit_alpha_beta, fit_linear, fit_model
from simcoll.errors import ModelError


def test_alpha_beta_are_recovered_from_a_noisy_sweep():
    rng = np.random.default_rng(1)
    sizes = np.logspace(10, 30, 21, base=2)  # 1 KiB .. 1 GiB
    alpha, beta = 5e-6, 1 / 150e9
    times = (alpha + sizes * beta) * (1 + rng.normal(0, 0.02, sizes.size))
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.05)
    assert fit.bandwidth_Bps == pytest.approx(150e9, rel=0.03)
    assert fit.median_relative_error < 0.03


def test_serial_versus_together_pair_separates_overhead_from_alpha():
    rng = np.random.default_rng(2)
    sizes = np.tile(np.logspace(12, 26, 8, base=2), 3)
    messages = np.repeat([1, 4, 16], 8)
    over, alpha, beta = 8e-6, 1.5e-6, 1 / 20e9
    times = (over + messages * alpha + sizes * beta) * (1 + rng.normal(0, 0.01, sizes.size))
    fit = fit_alpha_beta(sizes, times, messages)
    assert fit.overhead_s == pytest.approx(over, rel=0.1)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.1)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.05)
    assert fit.predict(1e6, 2) == pytest.approx(over + 2 * alpha + 1e6 * beta, rel=0.05)


def test_degenerate_samples_are_refused():
    with pytest.raises(ModelError, match="determine"):
        fit_alpha_beta([1024, 1024], [1e-5, 1.1e-5])
    with pytest.raises(ModelError, match="positive times"):
        fit_alpha_beta([1024, 2048], [0.0, 1e-5])
    with pytest.raises(ModelError, match="do not determine 2 parameters"):
        fit_linear({"a": [1, 2, 3], "b": [2, 4, 6]}, [1.0, 2.0, 3.0])


def test_general_fit_recovers_a_nonlinear_min_of_two_rates_within_bounds():
    # t = launch + bytes / min(link, eff * tb): a rate that is not linear in the parameters
    rng = np.random.default_rng(3)
    sizes = np.logspace(10, 30, 15, base=2)
    protocol = np.repeat([1.0, 0.0], sizes.size)  # 1: LL (efficiency applies), 0: Simple
    x = np.tile(sizes, 2)
    launch, link, eff = 4e-6, 40e9, 0.45

    def predict(p):
        rate = np.where(protocol > 0, p[1] * p[2], p[1])
        return p[0] + x / rate

    truth = predict(np.array([launch, link, eff]))
    times = truth * (1 + rng.normal(0, 0.01, truth.size))
    fit = fit_model(predict, times, ["launch_s", "bandwidth_Bps", "ll_efficiency"], [1e-5, 10e9, 0.9],
                    [(0, 1e-3), (1e6, 1e13), (0.01, 1.0)])  # fmt: skip
    assert fit.success
    assert fit["launch_s"] == pytest.approx(launch, rel=0.1)
    assert fit["bandwidth_Bps"] == pytest.approx(link, rel=0.03)
    assert fit["ll_efficiency"] == pytest.approx(eff, rel=0.03)
    assert len(fit.relative_residuals) == times.size and fit.median_relative_error < 0.02
    summary = fit.summary()
    assert summary["samples"] == times.size and set(summary["params"]) == {"launch_s", "bandwidth_Bps", "ll_efficiency"}


def test_general_fit_refuses_bad_inputs_by_name():
    with pytest.raises(ModelError, match="outside its bounds"):
        fit_model(lambda p: p[0] + np.zeros(3), [1.0, 1.0, 1.0], ["x"], [5.0], [(0.0, 1.0)])
    with pytest.raises(ModelError, match="cannot determine 2"):
        fit_model(lambda p: np.full(1, p[0] + p[1]), [1.0], ["x", "y"], [1.0, 1.0])
    with pytest.raises(ModelError, match="returned"):
        fit_model(lambda p: np.zeros(2) + p[0], [1.0, 2.0, 3.0], ["x"], [1.0])
