"""Sequential certification: the confidence sequences against quadrature and brute force,
decisions on linear classifiers with known p_A, the certify driver and its command line."""
import json
import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.special import betaln
from scipy.stats import beta as beta_dist, binom, norm

from rsmooth.cli import main
from rsmooth.seeding import generator
from rsmooth.metrics import read_certify_tsv
from rsmooth.smoothing import Smooth, anytime_lower, anytime_upper
from rsmooth.smoothing.procedures import Adaptive, Sequential
from rsmooth.smoothing.sequential import (
    FIRST_LOOK, FUTILITY, Bounds, Decision, check_points, decide, log_lower_martingale, log_upper_martingale,
    radius_gain, radius_of, run_sequence, sequence_steps, settle_looks, thresholds,
)

from test_smoothing import Linear2


def _at_most(failures: int, trials: int, rate: float) -> bool:
    """One-sided binomial test: is ``failures`` of ``trials`` consistent with a rate <= ``rate`` (level 1e-3)?"""
    return binom.sf(failures - 1, trials, rate) > 1e-3


# -- the confidence sequences --------------------------------------------------------------------
@pytest.mark.parametrize("n_a,n,p", [(3, 10, 0.55), (50, 60, 0.7), (999, 1000, 0.99), (40, 40, 0.9), (7, 30, 0.6)])
def test_martingales_against_quadrature(n_a, n, p):
    """Both tests' M_t(p) from their definitions by numerical integration (likelihood ratios, so
    each integrand is (q / p)^n_a ((1 - q) / (1 - p))^(n - n_a))."""
    def ratio(q):
        if q >= 1:
            return float(n_a == n) / p ** n
        return math.exp(n_a * math.log(q / p) + (n - n_a) * (math.log1p(-q) - math.log1p(-p)))

    # Jeffreys density q^(-1/2) (1 - q)^(-1/2) / pi, its (1 - q)^(-1/2) singularity as quad's weight
    upper_tail = quad(lambda q: ratio(q) / math.sqrt(q) / math.pi, p, 1, weight="alg", wvar=(0, -0.5),
                      limit=200, epsabs=0, epsrel=1e-11)[0]
    upper_tail /= 2 / math.pi * math.acos(math.sqrt(p))  # the prior's mass above p
    assert float(log_lower_martingale(n_a, n, p)) == pytest.approx(math.log(upper_tail), abs=1e-8)
    lower_tail = quad(ratio, 0, p, limit=200, epsabs=0, epsrel=1e-11)[0] / p
    assert float(log_upper_martingale(n_a, n, p)) == pytest.approx(math.log(lower_tail), abs=1e-8)


@pytest.mark.parametrize("t", [1, 7, 60])
@pytest.mark.parametrize("p", [0.5, 0.8, 0.97])
def test_martingales_have_mean_at_most_one_under_their_nulls(t, p):
    """E_{p_A}[M_t(p)] <= 1 for every p_A on the null side (= 1 at p_A = p), summing the binomial
    pmf: with M_0 = 1 and independent draws, what Ville's inequality needs."""
    k = np.arange(t + 1)
    for p_a in (p, p - 0.1 * p, p * 0.5):  # p_A <= p: the lower bound's null
        mean = np.sum(binom.pmf(k, t, p_a) * np.exp(log_lower_martingale(k, t, p)))
        assert mean <= 1 + 1e-9 and (p_a < p or mean == pytest.approx(1.0, rel=1e-9))
    for p_a in (p, p + 0.5 * (1 - p)):  # p_A >= p: the upper bound's null
        mean = np.sum(binom.pmf(k, t, p_a) * np.exp(log_upper_martingale(k, t, p)))
        assert mean <= 1 + 1e-9 and (p_a > p or mean == pytest.approx(1.0, rel=1e-9))


@pytest.mark.parametrize("n_a,n", [(8, 10), (60, 100), (999, 1000), (12345, 15000), (40, 40), (100000, 100000),
                                   (97426, 100000)])
def test_bounds_are_where_the_tests_stop_rejecting(n_a, n):
    """Ends against root finding on the definitions, always on the rejected side (conservative),
    and the rejected sets are intervals (dense grid): [1/2, LB] and [UB, 1]."""
    alpha, beta = 0.001, 0.05
    lower, upper = float(anytime_lower(n_a, n, alpha)), float(anytime_upper(n_a, n, beta))
    p_hat = n_a / n

    def excess(log_m, level):
        return lambda p: float(log_m(n_a, n, p)) - level

    lo_excess, up_excess = excess(log_lower_martingale, math.log(1 / alpha)), excess(log_upper_martingale, math.log(1 / beta))
    if lo_excess(0.5) < 0:
        assert lower == 0.0
    else:
        top = min(p_hat, 1 - 1e-16)
        assert lower == pytest.approx(brentq(lo_excess, 0.5, top, xtol=1e-15, rtol=1e-15), abs=1e-12)
        assert lo_excess(lower) >= 0 and lower < p_hat
    if n_a < n:
        assert upper == pytest.approx(brentq(up_excess, p_hat, 1 - 1e-300, xtol=1e-15, rtol=1e-15), abs=1e-12)
        assert up_excess(upper) >= 0 and upper > p_hat
    else:
        assert upper == 1.0
    grid = np.linspace(0.5, 1, 20001)[1:-1]
    rejected = np.asarray(log_lower_martingale(n_a, n, grid)) >= math.log(1 / alpha)
    assert np.array_equal(rejected, grid <= lower + 1e-12)
    rejected = np.asarray(log_upper_martingale(n_a, n, grid)) >= math.log(1 / beta)
    assert np.array_equal(rejected, grid >= upper - 1e-12)


@pytest.mark.parametrize("n_a", [70000, 99000])
def test_bounds_are_within_1e_12_of_the_exact_ones_at_t_100000(n_a):
    """The bound finder returns the float-rejected end, which at t = 100,000 can be tighter than the
    exact bound by float error (log M_t is evaluated to ~1e-10, ~1e-14 in p): 30-digit quadrature of
    the definitions puts the exact bound within 1e-12 of it on either side."""
    mp = pytest.importorskip("mpmath")
    n, alpha, beta = 100000, 0.001, 0.05

    def log_m(p, prior, lo, hi):  # log of the likelihood ratios' mean over the prior on [lo, hi] / its mass
        with mp.workdps(30):
            p = mp.mpf(p)
            ratio = lambda q: mp.exp(n_a * mp.log(q / p) + (n - n_a) * (mp.log1p(-q) - mp.log1p(-p)))  # noqa: E731
            return mp.log(mp.quad(lambda q: ratio(q) * prior(q), sorted([lo(p), mp.mpf(n_a) / n, hi(p)]))
                          / mp.quad(prior, [lo(p), hi(p)]))

    jeffreys, uniform = (lambda q: 1 / mp.sqrt(q * (1 - q))), (lambda q: 1)
    lower, upper = float(anytime_lower(n_a, n, alpha)), float(anytime_upper(n_a, n, beta))
    for p, rejected in ((lower - 1e-12, True), (lower + 1e-12, False)):
        assert (log_m(p, jeffreys, lambda p: p, lambda p: 1) >= math.log(1 / alpha)) == rejected
    for p, rejected in ((upper + 1e-12, True), (upper - 1e-12, False)):
        assert (log_m(p, uniform, lambda p: 0, lambda p: p) >= math.log(1 / beta)) == rejected


def test_lower_bound_is_zero_until_half_is_rejected():
    assert float(anytime_lower(6, 10, 0.001)) == 0.0 and float(anytime_lower(0, 0, 0.001)) == 0.0
    assert float(anytime_upper(0, 0, 0.05)) == 1.0


def test_all_votes_certify_three_sigma_after_about_six_thousand_samples():
    """With every vote for c_A the one-sided bound passes Phi(3) (radius 3 sigma) near t = 6,000;
    the two-sided Beta(1/2, 1/2) mixture (bound (alpha B(t + 1/2, 1/2) / pi)^(1/t)) needs about 9,000."""
    def first(bound):
        return next(t for t in range(4000, 12000, 50) if bound(t) > norm.cdf(3))

    one_sided = first(lambda t: float(anytime_lower(t, t, 0.001)))
    two_sided = first(lambda t: math.exp((math.log(0.001) + betaln(t + 0.5, 0.5) - math.log(math.pi)) / t))
    assert 5800 <= one_sided <= 6200 and 8800 <= two_sided <= 9200


def _streams(p, trials, length, seed):
    rng = np.random.default_rng(seed)
    successes = np.cumsum(rng.random((trials, length)) < p, axis=1)
    return successes, np.arange(1, length + 1)


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_coverage_under_continuous_monitoring(p):
    """Stopping the first time p is outside (the worst case): misses <= alpha (binomial test).
    A miss is the test of p rejecting at some t (brute force over every t); the bounds agree with
    the tests on a random sample of (stream, t)."""
    alpha, trials, length = 0.1, 1000, 300
    s, t = _streams(p, trials, length, seed=int(p * 100))
    level = math.log(1 / alpha)
    for log_m, bound, beyond in ((log_lower_martingale, anytime_lower, np.greater),
                                 (log_upper_martingale, anytime_upper, np.less)):
        rejects = log_m(s, t, p) >= level
        pick = np.random.default_rng(1).integers(0, s.size, 2000)
        assert np.array_equal(beyond(bound(s.flat[pick], t[pick % length], alpha), p), rejects.flat[pick])
        missed = rejects.any(axis=1)
        assert _at_most(int(missed.sum()), trials, alpha), missed.mean()


def test_fixed_n_bounds_fail_under_continuous_monitoring():
    """The test above has power: Clopper-Pearson bounds recomputed at every t miss far more than alpha."""
    alpha, trials, length, p = 0.1, 1000, 300, 0.5
    s, t = _streams(p, trials, length, seed=7)
    with np.errstate(invalid="ignore"):
        lower = np.nan_to_num(beta_dist.ppf(alpha, s, t - s + 1), nan=0.0)
    missed = (lower > p).any(axis=1)
    assert not _at_most(int(missed.sum()), trials, alpha), missed.mean()


def test_lower_bound_approaches_the_rate_like_sqrt_log_t_over_t():
    """p_hat - LB_t shrinks like sqrt(log t / t): scaled by sqrt(t / log t) it stays within a factor 1.6."""
    p, alpha = 0.9, 0.001
    ts = np.array([10 ** k for k in range(4, 9)])
    gap = p - anytime_lower(np.round(p * ts), ts, alpha)
    assert np.all(np.diff(gap) < 0) and np.all(np.diff(gap * np.sqrt(ts)) > 0)
    scaled = gap * np.sqrt(ts / np.log(ts))
    assert scaled.max() / scaled.min() < 1.6


def test_check_points_are_geometric_and_end_at_the_cap():
    points = check_points(100_000)
    assert points[0] == FIRST_LOOK and points[-1] == 100_000 and len(points) < 100
    assert all(b > a for a, b in zip(points, points[1:]))
    assert all(b / a <= 1.1 + 1 / a for a, b in zip(points[:-2], points[1:-1]))
    assert check_points(10) == [10]


# -- decisions ----------------------------------------------------------------------------------
def test_decision_rule():
    levels = thresholds([0.25, 0.5, 1.0], 0.5)  # Phi(0.5), Phi(1), Phi(2)
    assert np.allclose(levels, norm.cdf([0.5, 1.0, 2.0]))
    b = Bounds(n=1000, n_a=900, lower=0.80, upper=0.95, projected=0.97)
    assert decide(b, levels) == (Decision.ROBUST, Decision.OPEN, Decision.NOT_CERTIFIABLE)
    b = Bounds(n=1000, n_a=900, lower=0.80, upper=0.99, projected=0.83)
    assert decide(b, levels) == (Decision.ROBUST, Decision.BEYOND_CAP, Decision.BEYOND_CAP)
    # the gain is what the projection to n_max still adds, clamped at radius 0
    assert radius_gain(b, 0.5) == pytest.approx(0.5 * (norm.ppf(0.83) - norm.ppf(0.80)))
    assert radius_gain(Bounds(10, 4, 0.0, 0.45, 0.3), 0.5) == 0.0
    assert radius_of(0.3, 0.5) == 0.0


def _run_together(votes, alpha, n_max, done, futility=FUTILITY):
    """run_sequence on each of ``votes`` (one callable per trial), every trial's looks settled in one
    vectorised settle_looks call, as the packer does for the images of a pass."""
    steps = [sequence_steps(alpha, n_max, done, futility) for _ in votes]
    requests, out = {i: next(s) for i, s in enumerate(steps)}, {}
    while requests:
        looks = {i: steps[i].send(votes[i](m)) for i, m in requests.items()}
        requests = {}
        for i, bounds in zip(looks, settle_looks(list(looks.values()))):
            try:
                requests[i] = steps[i].send(bounds)
            except StopIteration as stop:
                out[i] = stop.value
    return [out[i] for i in range(len(votes))]


def _stream(draws):
    """votes(m) handing out the next m of the 0/1 ``draws`` in order."""
    drawn = [0]

    def votes(m):
        drawn[0] += m
        return int(draws[drawn[0] - m:drawn[0]].sum())
    return votes


def test_trials_run_together_equal_run_sequence_one_by_one():
    rng = np.random.default_rng(3)
    draws = [rng.random(2000) < p for p in (0.6, 0.85, 0.92, 0.97, 0.999)]
    done = lambda b: decide(b, [0.9])[0] is not Decision.OPEN  # noqa: E731
    alone = [run_sequence(_stream(d), 0.01, 2000, done, 0.1) for d in draws]
    assert _run_together([_stream(d) for d in draws], 0.01, 2000, done, 0.1) == alone


@pytest.mark.slow
def test_running_bounds_under_the_worst_stopping_rule():
    """run_sequence stopped the first time its lower bound exceeds p_A (an adversary's choice): rare."""
    alpha, trials, p = 0.1, 300, 0.8
    rngs = [np.random.default_rng([0, k]) for k in range(trials)]
    bounds = _run_together([lambda m, r=r: r.binomial(m, p) for r in rngs], alpha, 300, lambda b: b.lower > p)
    wrong = sum(b.lower > p for b in bounds)
    assert _at_most(wrong, trials, alpha), wrong


@pytest.mark.slow
def test_radii_given_up_are_rarely_ones_n_max_would_certify():
    """Stopped for futility ("no" or "cap" at threshold 0.9 with n_max = 2000; p_A = 0.92, where all
    n_max samples certify about half the time): continuing the same stream to n_max would have
    certified it at most 2 beta of the time (binomial test)."""
    alpha, beta, n_max, level, trials, p_a = 0.01, 0.1, 2000, 0.9, 150, 0.92
    rng = np.random.default_rng(5)
    draws = [rng.random(n_max) < p_a for _ in range(trials)]
    bounds = _run_together([_stream(d) for d in draws], alpha, n_max,
                           lambda b: decide(b, [level])[0] is not Decision.OPEN, beta)
    gave_up = [d for d, b in zip(draws, bounds)
               if decide(b, [level])[0] in (Decision.NOT_CERTIFIABLE, Decision.BEYOND_CAP) and b.n < n_max]
    wrong = sum(float(anytime_lower(d.sum(), n_max, alpha)) > level for d in gave_up)
    assert len(gave_up) > 20 and _at_most(wrong, len(gave_up), 2 * beta), (wrong, len(gave_up))


def _linear(v, sigma):
    """A two-class linear classifier and an input with p_A = P(class 1) = Phi(v / sigma): true radius v."""
    return Smooth(Linear2(torch.tensor([1.0, 0.0, 0.0, 0.0]), 0.0), 2, sigma), torch.tensor([v, 0.0, 0.0, 0.0]).view(1, 2, 2)


def _trials(smooth, x, procedure, trials):
    """The procedure's result on ``x`` with the noise of seed k, for k < trials: each is what the
    method of the same name returns with that generator (Smooth.stream packs them in one pass)."""
    items = [(k, x, torch.Generator().manual_seed(k)) for k in range(trials)]
    return [r for _, r, _ in sorted(smooth.stream(procedure, items, 8192), key=lambda kr: kr[0])]


def test_trials_equal_the_method_on_each_seed():
    smooth, x = _linear(0.5, 0.5)
    certs = _trials(smooth, x, Sequential(20, 0.1, 1000, FUTILITY, radii=(0.25, 0.5, 0.75)), 3)
    assert certs == [smooth.certify_sequential(x, 20, [0.25, 0.5, 0.75], 0.1, n_max=1000, batch_size=1000,
                                               generator=torch.Generator().manual_seed(k)) for k in range(3)]


@pytest.mark.slow
def test_sequential_wrong_robust_decisions_are_rare():
    """p_A = Phi(r / sigma) exactly at the middle radius: deciding "robust" there (or beyond) is wrong.
    The sequential rule stops as soon as a lower bound exceeds a threshold, the worst case for this error."""
    sigma, alpha, trials = 0.5, 0.1, 150
    smooth, x = _linear(0.5, sigma)
    certs = _trials(smooth, x, Sequential(20, alpha, 1000, FUTILITY, radii=(0.25, 0.5, 0.75)), trials)
    wrong = sum(c.radius >= 0.5 or (c.prediction not in (1, Smooth.ABSTAIN)) for c in certs)
    assert _at_most(wrong, trials, alpha), wrong


@pytest.mark.slow
def test_adaptive_radii_above_the_truth_are_rare():
    sigma, alpha, trials, truth = 0.5, 0.1, 150, 0.4
    smooth, x = _linear(truth, sigma)
    certs = _trials(smooth, x, Adaptive(20, alpha, 1000, FUTILITY, radius_tol=0.05), trials)
    wrong = sum(c.radius > truth or c.prediction not in (1, Smooth.ABSTAIN) for c in certs)
    assert _at_most(wrong, trials, alpha), wrong
    assert np.mean([c.radius for c in certs]) > truth - 0.15  # and not vacuous


@pytest.mark.filterwarnings("ignore:x ranges over:UserWarning")  # v = 2 leaves [0, 1] on purpose
@pytest.mark.parametrize("v", [0.05, 0.6, 1.0, 2.0])
def test_sequential_agrees_with_certify_where_both_are_decisive(v):
    """Thresholds Phi(0.5), Phi(1), Phi(1.5) against p_A = Phi(v / 0.5): far from each (no radius within 0.1 of v)."""
    sigma, radii = 0.5, [0.25, 0.5, 0.75]
    smooth, x = _linear(v, sigma)
    cert = smooth.certify_sequential(x, 100, radii, 0.001, generator=torch.Generator().manual_seed(1))
    pred, radius = smooth.certify(x, 100, 100_000, 0.001, 10_000, generator=torch.Generator().manual_seed(2))
    assert cert.decisions == tuple(Decision.ROBUST if radius >= r else Decision.NOT_CERTIFIABLE for r in radii)
    assert cert.prediction == (pred if radius >= radii[0] else Smooth.ABSTAIN)
    assert cert.samples == 100 + cert.n and cert.n < 100_000 and not cert.capped
    if v >= 1.0:  # a clear case is decided with a few hundred samples
        assert cert.n < 1000


@pytest.mark.parametrize("v,tol", [(0.3, 0.1), (1.0, 0.2)])
def test_adaptive_is_within_the_tolerance_of_certify_at_a_fraction_of_the_samples(v, tol):
    """The stop leaves at most ``tol`` of radius to gain by n_max, so the radius is within about
    ``tol`` of CERTIFY's with n = n_max (a little more: the anytime bound is wider than Clopper-Pearson's)."""
    smooth, x = _linear(v, 0.5)
    cert = smooth.certify_adaptive(x, 100, 0.001, radius_tol=tol, generator=torch.Generator().manual_seed(3))
    _, radius = smooth.certify(x, 100, 100_000, 0.001, 10_000, generator=torch.Generator().manual_seed(4))
    assert cert.prediction == 1 and radius - tol - 0.02 < cert.radius <= v and cert.n < 30_000 and not cert.capped


def test_same_seed_same_result_whatever_the_batch_size():
    smooth, x = _linear(0.7, 0.5)
    a, b = (smooth.certify_sequential(x, 50, [0.5], 0.01, 5000, bs, torch.Generator().manual_seed(5)) for bs in (64, 5000))
    assert a == b


@pytest.mark.parametrize("call,match", [
    (lambda s, x: s.certify_sequential(x, 10, [], 0.01), "at least one radius"),
    (lambda s, x: s.certify_sequential(x, 10, [-0.5], 0.01), "finite and >= 0"),
    (lambda s, x: s.certify_sequential(x, 10, [0.5], 0.01, n_max=0), "n_max must be >= 1"),
    (lambda s, x: s.certify_adaptive(x, 10, 0.01, radius_tol=-0.1), "radius_tol must be >= 0"),
    (lambda s, x: s.certify_adaptive(x, 10, 1.5), r"alpha must be in \(0, 0.5\)"),
    (lambda s, x: s.certify_adaptive(x, 10, 0.5), r"alpha must be in \(0, 0.5\) for sequential"),
    (lambda s, x: s.certify_sequential(x, 10, [0.5], 0.01, futility=0.4), r"futility must be in \(0, 0.3679\)"),
    (lambda s, x: s.certify_sequential(x, 10, [0.5], 0.01, futility="x"), r"futility must be a number in \(0, 0.3679\)"),
])
def test_api_errors(call, match):
    from rsmooth import RsmoothError

    smooth, x = _linear(0.5, 0.5)
    with pytest.raises(RsmoothError, match=match):
        call(smooth, x)


# -- the driver and the command line -----------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "--dataset", "digits", "--sigma", "0.25", "--epochs", "2", "--out", str(out)]) == 0
    return out


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


SEQ = ["--sequential", "--radii", "0.5", "0.25", "--n-max", "1500", "--max", "5", "--batch-size", "500"]


@pytest.mark.slow
def test_cli_sequential_writes_tsv_and_samples_and_resumes(trained, tmp_path, capsys):
    full = tmp_path / "full.tsv"
    code, out, _ = _run(capsys, "certify", "--checkpoint", trained, *SEQ, "--out", full)
    assert code == 0 and "results:" in out
    code, out, _ = _run(capsys, "analyze", full)  # says what its figures mean
    assert code == 0 and "decided only radii 0.25, 0.5: certified accuracy is exact there" in out
    code, out, _ = _run(capsys, "analyze", full, "--json")
    assert "ACR is a lower bound" in json.loads(out)["notes"][0]
    res = read_certify_tsv(full)
    seq = [ln.split("\t") for ln in (tmp_path / "full.tsv.seq").read_text().splitlines()]
    assert seq[0] == ["idx", "c_a", "samples", "n", "n_a", "p_lower", "p_upper", "capped", "decisions"]
    assert [int(r[0]) for r in seq[1:]] == res.idx.tolist() == [0, 1, 2, 3, 4]
    meta = json.loads((tmp_path / "full.tsv.json").read_text())
    assert meta["mode"] == "sequential" and meta["radii"] == [0.25, 0.5] and meta["n_max"] == 1500
    assert "Beta-binomial" in meta["confidence_sequence"] and meta["n"] is None and meta["complete"]
    assert meta["futility"] == 0.05
    # each row is the API's certificate for example i with the generator of (seed, mode, i)
    from rsmooth.data import get_dataset
    from rsmooth.engine import load_model

    loaded = load_model(str(trained))
    smooth, data = Smooth(loaded.model, 10, 0.25), get_dataset("digits", "test")
    for i, row in zip(res.idx, seq[1:]):
        cert = smooth.certify_sequential(data[i][0], 100, [0.25, 0.5], 0.001, 1500, 500,
                                         generator=generator(0, "sequential", int(i)))
        assert (res.predict[i], res.radius[i]) == (cert.prediction, cert.radius)
        assert row[2:5] == [str(cert.samples), str(cert.n), str(cert.n_a)]
        assert row[8] == ",".join(d.value for d in cert.decisions)
        assert res.radius[i] in (0.0, 0.25, 0.5) and (res.predict[i] == -1) == (res.radius[i] == 0.0)
    # killed after 2 rows of OUT, with the 3rd example's samples row written and a torn line
    part = tmp_path / "part.tsv"
    lines = full.read_text().splitlines(keepends=True)
    seq_lines = (tmp_path / "full.tsv.seq").read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:3]) + lines[3][:5])
    # ... by an earlier version, which named the samples file OUT.seq.tsv: resuming renames it
    (tmp_path / "part.tsv.seq.tsv").write_text("".join(seq_lines[:4]) + seq_lines[4][:6])
    (tmp_path / "part.tsv.json").write_text(json.dumps({**meta, "complete": False}))
    code, out, _ = _run(capsys, "certify", "--checkpoint", trained, *SEQ, "--out", part)
    assert code == 0 and "2 of 5 examples done" in out

    def rows(p):
        return [ln.split("\t")[:5] for ln in p.read_text().splitlines()]  # all but time

    assert rows(part) == rows(full)
    assert (tmp_path / "part.tsv.seq").read_text() == (tmp_path / "full.tsv.seq").read_text()
    assert not (tmp_path / "part.tsv.seq.tsv").exists()
    code, _, err = _run(capsys, "certify", "--checkpoint", trained, *SEQ[:2], "0.5", *SEQ[4:], "--out", part)
    assert code == 2 and "holds a run with radii=[0.25, 0.5], not [0.5]" in err


def test_cli_resume_with_a_lost_or_foreign_seq_file_is_a_one_line_error(trained, tmp_path, capsys):
    out = tmp_path / "s.tsv"
    argv = ["certify", "--checkpoint", trained, *SEQ[:-4], "--max", "2", "--out", out]
    assert _run(capsys, *argv)[0] == 0
    seq, meta = tmp_path / "s.tsv.seq", json.loads((tmp_path / "s.tsv.json").read_text())
    (tmp_path / "s.tsv.json").write_text(json.dumps({**meta, "complete": False}))  # killed after one row
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:2]))
    for damage, message in ((lambda: seq.unlink(), "s.tsv.seq (the samples and decisions of the examples "
                                                   "in the TSV) is missing"),
                            (lambda: seq.write_text("idx\tradius\n0\t0.5\n"), "is not a sequential-certification file")):
        damage()
        code, _, err = _run(capsys, *argv)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_cli_adaptive(trained, tmp_path, capsys):
    out = tmp_path / "a.tsv"
    code, _, _ = _run(capsys, "certify", "--checkpoint", trained, "--adaptive", "--radius-tol", "0.1",
                      "--n-max", "2000", "--max", "3", "--futility", "0.01", "--out", out)
    assert code == 0
    res = read_certify_tsv(out)
    meta = json.loads((tmp_path / "a.tsv.json").read_text())
    assert meta["mode"] == "adaptive" and meta["radius_tol"] == 0.1 and meta["radii"] is None
    assert meta["futility"] == 0.01
    seq = [ln.split("\t") for ln in (tmp_path / "a.tsv.seq").read_text().splitlines()[1:]]
    for r, row in zip(res.radius, seq):
        lower = float(row[5])
        assert r == pytest.approx(radius_of(lower, 0.25)) and int(row[3]) <= 2000 and row[8] == "-"


@pytest.mark.parametrize("argv,message", [
    (["--sequential"], "--sequential needs the radii to decide"),
    (["--radii", "0.5"], "--radii goes with --sequential or --adaptive"),
    (["--n-max", "500"], "--n-max goes with --sequential or --adaptive"),
    (["--sequential", "--adaptive", "--radii", "0.5"], "--sequential and --adaptive exclude each other"),
    (["--adaptive", "--radius-tol", "-0.1"], "radius_tol must be >= 0"),
    (["--adaptive", "--n-max", "50"], "--n-max 50 is below --n0 100"),
    (["--adaptive", "--radii", "0.5"], "--radii goes with --sequential"),
    (["--sequential", "--radii", "0.5", "--radius-tol", "0.1"], "--radius-tol goes with --adaptive"),
    (["--sequential", "--radii", "0.5", "-1"], "radii must be finite and >= 0"),
    (["--futility", "0.1"], "--futility goes with --sequential or --adaptive"),
    (["--adaptive", "--futility", "0.5"], "futility must be in (0, 0.3679) for sequential certification"),
    (["--adaptive", "--alpha", "0.6"], "alpha must be in (0, 0.5) for sequential certification"),
])
def test_cli_errors_are_one_line(trained, tmp_path, capsys, argv, message):
    try:
        code = main(["certify", "--checkpoint", str(trained), *argv, "--out", str(tmp_path / "x.tsv")])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_warns_of_radii_beyond_reach():
    from rsmooth.engine.certify import _warn_small_n_max

    logs = []
    _warn_small_n_max(200, 0.001, 0.25, [0.25, 0.75], logs.append, alpha_share=1.0)
    # all 200 votes for c_A: the lower bound is where the test of p stops rejecting
    lower = brentq(lambda p: float(log_lower_martingale(200, 200, p)) - math.log(1000), 0.5, 1 - 1e-12)
    r_max = 0.25 * norm.ppf(lower)
    assert len(logs) == 1 and f"{r_max:.4g}" in logs[0] and "radii 0.75 are never certified" in logs[0]
    _warn_small_n_max(100_000, 0.001, 0.25, [0.25, 0.75], logs.append)
    assert len(logs) == 1
    # the default alpha split: the larger of the anytime bound at half of alpha and Clopper-Pearson's
    # at the other half, (alpha / 2)^(1/n) with every vote for c_A
    _warn_small_n_max(200, 0.001, 0.25, [0.25, 0.75], logs.append, alpha_share=0.5)
    r_max = 0.25 * norm.ppf(max(float(anytime_lower(200, 200, 0.0005)), 0.0005 ** (1 / 200)))
    assert len(logs) == 2 and f"{r_max:.4g}" in logs[1]
