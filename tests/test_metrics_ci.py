"""Confidence bounds on certified accuracy: against scipy's closed forms, exact enumeration and
Monte-Carlo simulation of certificates that fail at rate alpha."""
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import beta as beta_dist
from scipy.stats import binom, binomtest

from rsmooth.errors import RsmoothError
from rsmooth.metrics import (
    accuracy_bounds,
    certified_accuracy,
    certified_counts,
    clopper_pearson_interval,
    high_probability_count,
    population_lower_bound,
    wrong_certificates_bound,
)


def _quantile_exact(m, alpha, beta):
    """Smallest q with P(Binomial(m, alpha) <= q) >= 1 - beta, in exact rational arithmetic."""
    a, target = Fraction(alpha), 1 - Fraction(beta)
    pmf = (1 - a) ** m
    cdf = pmf
    for q in range(m + 1):
        if cdf >= target:
            return q
        pmf *= Fraction(m - q, q + 1) * a / (1 - a)
        cdf += pmf
    raise AssertionError("unreachable")


@pytest.mark.parametrize("k, m", [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (412, 500), (9000, 10000)])
@pytest.mark.parametrize("beta", [0.05, 0.01, 0.5])
def test_clopper_pearson_matches_scipy(k, m, beta):
    lo, hi = clopper_pearson_interval(k, m, beta)
    ref = binomtest(k, m).proportion_ci(confidence_level=1 - beta, method="exact")
    assert (lo, hi) == pytest.approx((ref.low, ref.high), rel=1e-9, abs=1e-12)
    assert 0.0 <= lo <= k / m <= hi <= 1.0
    # the ends are where each one-sided tail is beta/2 (the defining equations)
    if k > 0:
        assert binom.sf(k - 1, m, lo) == pytest.approx(beta / 2, rel=1e-6)
    if k < m:
        assert binom.cdf(k, m, hi) == pytest.approx(beta / 2, rel=1e-6)


@pytest.mark.parametrize("m, beta", [(20, 0.05), (57, 0.1)])
def test_clopper_pearson_coverage_exact(m, beta):
    """Exact coverage (sum of the binomial pmf over the k whose interval holds p) >= 1 - beta."""
    intervals = [clopper_pearson_interval(k, m, beta) for k in range(m + 1)]
    for p in np.linspace(0.001, 0.999, 61):
        pmf = binom.pmf(np.arange(m + 1), m, p)
        covered = np.array([lo <= p <= hi for lo, hi in intervals])
        assert pmf[covered].sum() >= 1 - beta - 1e-12


@pytest.mark.parametrize("m, alpha, beta", [(1, 0.001, 0.05), (1, 0.1, 0.05), (500, 0.001, 0.05),
                                            (500, 0.001, 0.01), (2000, 0.001, 0.05), (37, 0.2, 0.3)])
def test_wrong_certificates_bound_is_the_exact_binomial_quantile(m, alpha, beta):
    q = wrong_certificates_bound(m, alpha, beta)
    assert q == _quantile_exact(m, alpha, beta)
    assert binom.cdf(q, m, alpha) >= 1 - beta and (q == 0 or binom.cdf(q - 1, m, alpha) < 1 - beta)


@pytest.mark.parametrize("m", [100, 500, 10000, 50000])
@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.05])
@pytest.mark.parametrize("beta", [0.001, 0.05])
def test_quantile_below_bernstein(m, alpha, beta):
    """q < m alpha + sqrt(2 m alpha (1 - alpha) L) + 2 L / 3, L = log(1/beta): Bernstein's inequality
    for a sum of m Bernoulli(<= alpha <= 1/2), a valid but looser bound."""
    log = math.log(1 / beta)
    bernstein = m * alpha + math.sqrt(2 * m * alpha * (1 - alpha) * log) + 2 * log / 3
    assert wrong_certificates_bound(m, alpha, beta) < bernstein


def test_cohen_released_high_prob_formula_is_not_valid_everywhere():
    """locuslab/smoothing code/analyze.py HighProbAccuracy deducts m alpha + sqrt(m alpha (1 - alpha) L)
    + L / 3 wrong certificates (Bernstein with halved constants): at m = 10,000, alpha = beta = 0.001
    more wrong certificates than that occur with probability > beta, while q holds."""
    m, alpha, beta = 10000, 0.001, 0.001
    log = math.log(1 / beta)
    deducted = m * alpha + math.sqrt(m * alpha * (1 - alpha) * log) + log / 3
    assert binom.sf(math.floor(deducted), m, alpha) > beta
    assert binom.sf(wrong_certificates_bound(m, alpha, beta), m, alpha) <= beta


def test_cohen_protocol_numbers():
    """500 examples (Cohen et al.'s CIFAR-10 subset) at alpha 0.001: P(Bin <= 2) = 0.9856 >= 0.95 >
    P(Bin <= 1) = 0.9098, so at most 2 wrong certificates at 95%."""
    assert wrong_certificates_bound(500, 0.001, 0.05) == 2
    assert high_probability_count(412, 500, 0.001, 0.05) == 410
    b = accuracy_bounds(412, 500, level=0.95, alpha=0.001)
    assert (b.count, b.num_examples, b.wrong_certificates, b.hp) == (412, 500, 2, 410 / 500)
    assert (b.lo, b.hi) == clopper_pearson_interval(412, 500, 0.05)
    c = 412 - wrong_certificates_bound(500, 0.001, 0.025)  # beta/2 for each part of the union bound
    assert b.hp_population == pytest.approx(beta_dist.ppf(0.025, c, 500 - c + 1), rel=1e-12)
    assert b.hp_population < min(b.lo, b.hp) and b.hp < 412 / 500


def test_edge_cases():
    assert high_probability_count(0, 100, 0.01, 0.05) == 0                     # k = 0
    q = wrong_certificates_bound(100, 0.01, 0.05)
    assert high_probability_count(100, 100, 0.01, 0.05) == 100 - q             # k = m
    assert clopper_pearson_interval(0, 100, 0.05)[0] == 0.0
    assert clopper_pearson_interval(100, 100, 0.05)[1] == 1.0
    # m = 1: one certificate; wrong with probability alpha, so the bound keeps it iff alpha <= beta
    assert high_probability_count(1, 1, 0.01, 0.05) == 1
    assert high_probability_count(1, 1, 0.1, 0.05) == 0
    assert clopper_pearson_interval(1, 1, 0.05) == pytest.approx((0.025, 1.0))
    assert population_lower_bound(0, 10, 0.001, 0.05) == 0.0
    assert accuracy_bounds(3, 10).hp is None  # alpha unknown: no high-probability bound
    assert accuracy_bounds(3, 10).alpha is None
    # numpy and integer-valued float counts are counts
    assert high_probability_count(np.int64(5), 10.0, 0.001, 0.05) == 5


@pytest.mark.parametrize("call, match", [
    (lambda: clopper_pearson_interval(3, 10, 0.0), r"beta must be in \(0, 1\)"),
    (lambda: clopper_pearson_interval(3, 10, 1.0), r"beta must be in \(0, 1\)"),
    (lambda: high_probability_count(3, 10, 0.001, -0.1), r"beta must be in \(0, 1\)"),
    (lambda: clopper_pearson_interval(11, 10), r"k \(examples counted\) must be in \[0, m=10\], got 11"),
    (lambda: high_probability_count(-1, 10, 0.001), r"must be in \[0, m=10\]"),
    (lambda: clopper_pearson_interval(0, 0), r"m \(the number of certified examples\) must be >= 1"),
    (lambda: clopper_pearson_interval(2.5, 10), "k must be an integer count"),
    (lambda: wrong_certificates_bound(10, 0.0), r"alpha must be in \(0, 1\)"),
    (lambda: wrong_certificates_bound(10, "x"), "alpha must be a number"),
    (lambda: accuracy_bounds(3, 10, level=95), r"confidence level must be in \(0, 1\) \(e.g. 0.95\)"),
])
def test_bad_input_is_one_line(call, match):
    with pytest.raises(RsmoothError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


def _simulate_certification(rng, robust, alpha, trials, counted_if_robust=0.9):
    """Counts k over ``trials`` certification runs of m examples whose truly robust-and-correct
    set is ``robust`` ([m], or [trials, m] for fresh examples per run): a robust example is counted w.p. ``counted_if_robust`` (abstentions and
    small radii), a non-robust one exactly when its certificate is wrong (w.p. alpha): the worst
    case of CERTIFY's guarantee."""
    m = robust.shape[-1]
    wrong = rng.random((trials, m)) < alpha
    counted = np.where(robust, rng.random((trials, m)) < counted_if_robust, wrong)
    return counted.sum(axis=1)


@pytest.mark.parametrize("m, n_robust, alpha, beta", [(200, 0, 0.05, 0.05), (200, 120, 0.05, 0.1),
                                                      (50, 10, 0.2, 0.05), (1000, 700, 0.001, 0.05)])
def test_high_probability_bound_holds_in_simulation(m, n_robust, alpha, beta):
    """The bound k - q exceeds the true robust count in at most beta of the trials (one-sided
    binomial test at 0.001 against a miss rate of beta)."""
    rng = np.random.default_rng(m + n_robust)
    robust = np.zeros(m, dtype=bool)
    robust[:n_robust] = True
    trials = 10000
    k = _simulate_certification(rng, robust, alpha, trials)
    bound = {x: high_probability_count(x, m, alpha, beta) for x in np.unique(k).tolist()}
    misses = sum(bound[x] > n_robust for x in k.tolist())
    assert binomtest(misses, trials, beta, alternative="greater").pvalue > 1e-3, (misses, trials)


def test_binomial_of_k_would_not_hold():
    """The reason for Binomial(m, alpha): with nothing robust, the counted examples are exactly the
    wrong certificates, and the quantile of Binomial(k, alpha) is 0 for small k, so k - q_k > 0 =
    the truth whenever a certificate is wrong (here in ~1 - 0.95^200 of the runs)."""
    rng = np.random.default_rng(1)
    m, alpha, beta = 200, 0.05, 0.05
    k = _simulate_certification(rng, np.zeros(m, dtype=bool), alpha, 2000)
    assert np.mean(k - binom.ppf(1 - beta, k, alpha) > 0) > 0.5
    assert np.mean(k - wrong_certificates_bound(m, alpha, beta) > 0) <= beta


@pytest.mark.parametrize("p_robust, alpha", [(0.6, 0.05), (0.3, 0.1)])
def test_population_lower_bound_holds_in_simulation(p_robust, alpha):
    """Examples drawn from a distribution where g is robust with probability p_robust, then
    certified with failures at rate alpha: the bound exceeds p_robust in <= beta of the trials."""
    rng = np.random.default_rng(7)
    m, beta, trials = 150, 0.1, 10000
    k = _simulate_certification(rng, rng.random((trials, m)) < p_robust, alpha, trials, counted_if_robust=1.0)
    bound = {x: population_lower_bound(x, m, alpha, beta) for x in np.unique(k).tolist()}
    misses = sum(bound[x] > p_robust for x in k.tolist())
    assert binomtest(misses, trials, beta, alternative="greater").pvalue > 1e-3, misses


def test_certified_counts_are_the_numerator():
    radius = np.array([0.1, 0.3, 0.6, 1.2, 0.9, 0.0])
    correct = np.array([1, 1, 1, 1, 0, 0])
    radii = [0.0, 0.3, 1.0, 2.0]
    k = certified_counts(radius, correct, radii)
    assert k.dtype == np.int64 and k.tolist() == [4, 3, 1, 0]
    assert np.array_equal(certified_accuracy(radius, correct, radii), k / 6)
