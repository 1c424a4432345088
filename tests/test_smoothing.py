"""Smooth and its statistics against independent references (closed forms, exact sums)."""
import math
from statistics import NormalDist

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import binom

from rsmooth import RsmoothError
from rsmooth.smoothing import (
    Smooth, binom_pvalue, certified_radius, clopper_pearson_lower, max_certifiable_radius,
)


# -- statistics ------------------------------------------------------------------------
def _cp_lower_reference(n_a, n, alpha):
    """Solve P_p(X >= n_a) = alpha for p by root finding on the binomial tail (float64)."""
    if n_a == 0:
        return 0.0
    return brentq(lambda p: binom.sf(n_a - 1, n, p) - alpha, 1e-15, 1 - 1e-15, xtol=1e-14)


@pytest.mark.parametrize("n_a,n,alpha", [(1, 1, 0.05), (5, 10, 0.01), (99, 100, 0.001),
                                         (100000, 100000, 0.001), (50123, 100000, 0.001), (3, 30, 0.2)])
def test_clopper_pearson_matches_tail_inversion(n_a, n, alpha):
    assert clopper_pearson_lower(n_a, n, alpha) == pytest.approx(_cp_lower_reference(n_a, n, alpha), abs=1e-9)


def test_clopper_pearson_all_successes_closed_form():
    # P_p(X = n) = p^n = alpha  =>  p_lower = alpha^(1/n)
    for n in (1, 7, 100, 100000):
        assert clopper_pearson_lower(n, n, 0.001) == pytest.approx(0.001 ** (1 / n), rel=1e-10)


def test_clopper_pearson_zero_successes_is_zero_not_nan():
    assert clopper_pearson_lower(0, 100, 0.001) == 0.0


@pytest.mark.parametrize("n", [1, 2, 5, 13, 30])
@pytest.mark.parametrize("alpha", [0.01, 0.1, 0.3])
def test_clopper_pearson_coverage_by_exact_enumeration(n, alpha):
    """For every p on a grid, P_p(p_lower(X) > p) <= alpha, summing the binomial pmf exactly."""
    bounds = [clopper_pearson_lower(k, n, alpha) for k in range(n + 1)]
    for p in np.linspace(0.001, 0.999, 199):
        miss = sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1) if bounds[k] > p)
        assert miss <= alpha + 1e-12, (n, alpha, p, miss)


def test_radius_and_max_radius():
    nd = NormalDist()
    assert certified_radius(0.9, 0.5) == pytest.approx(0.5 * nd.inv_cdf(0.9), rel=1e-12)
    for sigma, expected in [(0.25, 0.953), (0.5, 1.906), (1.0, 3.811)]:
        assert max_certifiable_radius(100000, 0.001, sigma) == pytest.approx(expected, abs=1e-3)


def _two_sided_binom_reference(k, n):
    pmf = [math.comb(n, i) / 2 ** n for i in range(n + 1)]
    return min(1.0, sum(q for q in pmf if q <= pmf[k] * (1 + 1e-7)))


@pytest.mark.parametrize("n_a,n_b", [(10, 0), (7, 3), (60, 40), (5, 5), (0, 0), (30, 12)])
def test_binom_pvalue_matches_exact_sum(n_a, n_b):
    ref = 1.0 if n_a + n_b == 0 else _two_sided_binom_reference(n_a, n_a + n_b)
    assert binom_pvalue(n_a, n_b) == pytest.approx(ref, rel=1e-9)


# -- Smooth ----------------------------------------------------------------------------
class Constant(torch.nn.Module):
    """Always answers class `c` (one parameter so the device and dtype are defined)."""

    def __init__(self, c, k=10):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.c, self.k = c, k

    def forward(self, x):
        out = torch.zeros(x.shape[0], self.k, dtype=x.dtype) + self.w.to(x.dtype)
        out[:, self.c] = 1
        return out


class CoinFlip(torch.nn.Module):
    """Class 0 or 1 by the sign of the noise on pixel 0 of a zero-centred input: p = 1/2."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        s = (x.flatten(1)[:, 0] - 0.5 > 0).to(x.dtype)
        return torch.stack([1 - s, s], 1) + self.w


class Linear2(torch.nn.Module):
    """Binary linear classifier: P(class 1 | x) under noise = Phi((w.x + b) / (sigma ||w||))."""

    def __init__(self, w, b):
        super().__init__()
        self.w = torch.nn.Parameter(w.clone())
        self.b = b

    def forward(self, x):
        z = x.flatten(1) @ self.w.to(x.dtype) + self.b
        return torch.stack([-z, z], 1)


def test_constant_classifier_radius_closed_form():
    sigma, n, alpha = 0.5, 1000, 0.001
    cls, radius = Smooth(Constant(3), 10, sigma).certify(torch.rand(1, 4, 4), 100, n, alpha, 128)
    assert cls == 3
    assert radius == pytest.approx(sigma * NormalDist().inv_cdf(alpha ** (1 / n)), rel=1e-9)


def test_fifty_fifty_classifier_abstains():
    s = Smooth(CoinFlip(), 2, 0.25)
    x = torch.full((1, 3, 3), 0.5)
    g = torch.Generator().manual_seed(0)
    assert s.certify(x, 100, 10000, 0.001, 500, generator=g) == (Smooth.ABSTAIN, 0.0)
    assert s.predict(x, 10000, 0.001, 500, generator=g) == Smooth.ABSTAIN


def test_same_seed_same_certificate_and_different_seed_differs():
    torch.manual_seed(0)
    w = torch.randn(16)
    s = Smooth(Linear2(w, 0.1), 2, 0.5)
    x = torch.rand(1, 4, 4)
    runs = [s.certify(x, 100, 2000, 0.001, 300, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert runs[0] == runs[1]
    other = s.certify(x, 100, 2000, 0.001, 300, generator=torch.Generator().manual_seed(8))
    assert other != runs[0]


@pytest.mark.parametrize("num,batch_size", [(1000, 256), (50, 400), (3, 7)])
def test_count_votes_matches_closed_form_probability(num, batch_size):
    """Both paths (one image per forward pass, several per pass) against Phi(margin / sigma ||w||)."""
    torch.manual_seed(1)
    sigma, w, b = 0.5, torch.randn(16), 0.0
    xs = torch.rand(40, 1, 4, 4)
    counts = Smooth(Linear2(w, b), 2, sigma).count_votes(xs, num, batch_size,
                                                         generator=torch.Generator().manual_seed(0))
    assert counts.shape == (40, 2) and bool((counts.sum(1) == num).all())
    margin = (xs.flatten(1).double() @ w.double() + b) / (sigma * w.double().norm())
    p1 = torch.tensor([NormalDist().cdf(float(m)) for m in margin], dtype=torch.float64)
    # aggregate over the 40 inputs: sum of counts vs its expectation, within 5 standard deviations
    mean, var = float((num * p1).sum()), float((num * p1 * (1 - p1)).sum())
    assert abs(float(counts[:, 1].sum()) - mean) <= 5 * math.sqrt(var) + 1


def test_model_left_unchanged_and_mode_restored():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    s = Smooth(model, 3, 0.25, precision="bf16", channels_last=True)
    s.certify(torch.rand(1, 4, 4), 10, 100, 0.01, 64)
    assert model.training
    assert all(torch.equal(before[k], v) and v.dtype == torch.float32 for k, v in model.state_dict().items())
    assert s.mode() == {"precision": "bf16", "channels_last": True, "compile": False}


def test_bf16_agrees_on_a_confident_model():
    s32 = Smooth(Constant(2), 10, 0.25)
    s16 = Smooth(Constant(2), 10, 0.25, precision="bf16", channels_last=True)
    x = torch.rand(3, 5, 5)
    assert s16.certify(x, 10, 500, 0.001, 100)[0] == s32.certify(x, 10, 500, 0.001, 100)[0] == 2


@pytest.mark.parametrize("kwargs,match", [
    (dict(sigma=0.0), "sigma must be > 0"),
    (dict(sigma=-1.0), "sigma must be > 0"),
    (dict(sigma=float("nan")), "sigma must be > 0"),
    (dict(precision="fp8"), "unknown precision"),
])
def test_constructor_errors(kwargs, match):
    args = dict(base_classifier=Constant(0), num_classes=10, sigma=0.25)
    args.update(kwargs)
    with pytest.raises(RsmoothError, match=match):
        Smooth(**args)


@pytest.mark.parametrize("call,match", [
    (lambda s, x: s.certify(x, 0, 100, 0.001, 10), "n0 must be >= 1"),
    (lambda s, x: s.certify(x, 10, 0, 0.001, 10), "n must be >= 1"),
    (lambda s, x: s.certify(x, 10, 100, 0.0, 10), r"alpha must be in \(0, 1\)"),
    (lambda s, x: s.certify(x, 10, 100, 1.0, 10), r"alpha must be in \(0, 1\)"),
    (lambda s, x: s.predict(x, 100, 1.5, 10), r"alpha must be in \(0, 1\)"),
    (lambda s, x: s.certify(x, 10, 100, 0.001, 0), "batch_size must be >= 1"),
    (lambda s, x: s.certify(x[0], 10, 100, 0.001, 10), "must have 3 dimensions"),
    (lambda s, x: s.certify(x * float("nan"), 10, 100, 0.001, 10), "NaN"),
    (lambda s, x: s.count_votes(x, 10, 10), "must have 4 dimensions"),
])
def test_input_errors(call, match):
    with pytest.raises(RsmoothError, match=match):
        call(Smooth(Constant(0), 10, 0.25), torch.rand(1, 4, 4))
