"""simcoll.gpu.fit recovers known α, β and overheads from noisy timings."""

import numpy as np
import pytest
from simcoll.gpu.fit import fit_alpha_beta

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
