"""Sequential certification: the confidence sequence against brute force, decisions on linear
classifiers with known p_A, the certify driver and its command line."""
import json
import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.special import betaln
from scipy.stats import beta as beta_dist, binom, norm

from rsmooth.cli import main
from rsmooth.engine.seeding import generator
from rsmooth.metrics import read_certify_tsv
from rsmooth.smoothing import Smooth, confidence_sequence
from rsmooth.smoothing.sequential import (
    FIRST_LOOK, Bounds, Decision, check_points, decide, log_mixture_martingale, radius_gain, radius_of,
    run_sequence, thresholds,
)

from test_smoothing import Linear2


def _at_most_alpha(failures: int, trials: int, alpha: float) -> bool:
    """One-sided binomial test: is ``failures`` of ``trials`` consistent with a rate <= alpha (level 1e-3)?"""
    return binom.sf(failures - 1, trials, alpha) > 1e-3


# -- the confidence sequence ------------------------------------------------------------------
@pytest.mark.parametrize("t", [1, 7, 60])
@pytest.mark.parametrize("p", [0.03, 0.5, 0.97])
def test_mixture_martingale_has_mean_one(t, p):
    """E_p[M_t(p)] = 1 exactly (summing the binomial pmf): what Ville's inequality needs."""
    k = np.arange(t + 1)
    mean = np.sum(binom.pmf(k, t, p) * np.exp(log_mixture_martingale(k, t, p)))
    assert mean == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("n_a,n", [(1, 1), (3, 10), (50, 100), (999, 1000), (12345, 20000), (0, 40), (40, 40)])
def test_interval_is_the_set_where_the_martingale_is_below_one_over_alpha(n_a, n):
    """Ends against root finding on the definition, and always on the outside (conservative)."""
    alpha, level = 0.001, math.log(1000)
    lower, upper = (float(v) for v in confidence_sequence(n_a, n, alpha))

    def excess(p):
        return float(log_mixture_martingale(n_a, n, p)) - level

    p_hat = n_a / n
    ref_lower = 0.0 if n_a == 0 else brentq(excess, 1e-300, p_hat, xtol=1e-15, rtol=1e-15)
    ref_upper = 1.0 if n_a == n else brentq(excess, p_hat, 1.0, xtol=1e-15, rtol=1e-15)
    assert lower == pytest.approx(ref_lower, abs=1e-12) and upper == pytest.approx(ref_upper, abs=1e-12)
    for end in (lower, upper):  # outside (to rounding), and just inside is inside
        if 0 < end < 1:
            assert excess(end) >= -1e-12 and excess(end + 1e-9 * (p_hat - end)) < 0


def test_all_successes_lower_bound_closed_form():
    # M_t(p) = B(t + 1/2, 1/2) / B(1/2, 1/2) / p^t < 1/alpha  <=>  p > (alpha B(t + 1/2, 1/2) / pi)^(1/t)
    for t in (1, 10, 1000, 100000):
        expected = math.exp((math.log(0.001) + betaln(t + 0.5, 0.5) - math.log(math.pi)) / t)
        assert float(confidence_sequence(t, t, 0.001)[0]) == pytest.approx(expected, rel=1e-12)


def _streams(p, trials, length, seed):
    rng = np.random.default_rng(seed)
    successes = np.cumsum(rng.random((trials, length)) < p, axis=1)
    return successes, np.arange(1, length + 1)


@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_coverage_under_continuous_monitoring(p):
    """Stopping the first time p is outside (the worst case): misses <= alpha (binomial test), and
    the same streams miss exactly when the martingale itself reaches 1/alpha."""
    alpha, trials, length = 0.1, 1000, 300
    s, t = _streams(p, trials, length, seed=int(p * 100))
    lower, upper = confidence_sequence(s, t, alpha)
    missed = ((lower > p) | (upper < p)).any(axis=1)
    brute = (log_mixture_martingale(s, t, p) >= math.log(1 / alpha)).any(axis=1)
    assert np.array_equal(missed, brute)
    assert _at_most_alpha(int(missed.sum()), trials, alpha), missed.mean()


def test_fixed_n_bounds_fail_under_continuous_monitoring():
    """The test above has power: Clopper-Pearson intervals recomputed at every t miss far more than alpha."""
    alpha, trials, length, p = 0.1, 1000, 300, 0.5
    s, t = _streams(p, trials, length, seed=7)
    with np.errstate(invalid="ignore"):
        lower = np.nan_to_num(beta_dist.ppf(alpha / 2, s, t - s + 1), nan=0.0)
        upper = np.nan_to_num(beta_dist.ppf(1 - alpha / 2, s + 1, t - s), nan=1.0)
    missed = ((lower > p) | (upper < p)).any(axis=1)
    assert not _at_most_alpha(int(missed.sum()), trials, alpha), missed.mean()


def test_interval_shrinks_like_sqrt_log_t_over_t():
    """Half-width -> sqrt(2 p (1 - p) (log(1/alpha) + log(pi t / 2) / 2) / t) (Laplace's method on
    the mixture), so width * sqrt(t) grows like sqrt(log t) and width * sqrt(t / log t) stays bounded."""
    p, alpha = 0.9, 0.001
    ts = np.array([10 ** k for k in range(2, 8)])
    lower, upper = confidence_sequence(np.round(p * ts), ts, alpha)
    half = (upper - lower) / 2
    reference = np.sqrt(2 * p * (1 - p) * (math.log(1 / alpha) + 0.5 * np.log(math.pi * ts / 2)) / ts)
    assert np.allclose(half[1:], reference[1:], rtol=2e-3)
    assert np.all(np.diff(half * np.sqrt(ts)) > 0)
    scaled = 2 * half * np.sqrt(ts / np.log(ts))
    assert scaled.max() / scaled.min() < 1.6


def test_check_points_are_geometric_and_end_at_the_cap():
    points = check_points(100_000)
    assert points[0] == FIRST_LOOK and points[-1] == 100_000 and len(points) < 25
    assert all(b > a for a, b in zip(points, points[1:]))
    assert check_points(10) == [10]


# -- decisions ----------------------------------------------------------------------------------
def test_decision_rule():
    levels = thresholds([0.25, 0.5, 1.0], sigma=0.5)  # Phi(0.5), Phi(1), Phi(2)
    assert np.allclose(levels, norm.cdf([0.5, 1.0, 2.0]))
    b = Bounds(n=1000, n_a=900, lower=0.80, upper=0.95, reachable=0.97)
    assert decide(b, levels) == (Decision.ROBUST, Decision.OPEN, Decision.NOT_CERTIFIABLE)
    b = Bounds(n=1000, n_a=900, lower=0.80, upper=0.99, reachable=0.83)
    assert decide(b, levels) == (Decision.ROBUST, Decision.BEYOND_CAP, Decision.BEYOND_CAP)
    # the gain is capped by what n_max can still reach, and clamped at radius 0
    assert radius_gain(b, 0.5) == pytest.approx(0.5 * (norm.ppf(0.83) - norm.ppf(0.80)))
    assert radius_gain(Bounds(10, 4, 0.1, 0.45, 0.6), 0.5) == 0.0
    assert radius_of(0.3, 0.5) == 0.0


def test_running_intersection_under_the_worst_stopping_rule():
    """run_sequence stopped the first time its lower bound exceeds p_A (an adversary's choice): rare."""
    alpha, trials, p = 0.1, 300, 0.8
    rng = np.random.default_rng(0)
    wrong = sum(run_sequence(lambda m: rng.binomial(m, p), alpha, 1000, lambda b: b.lower > p).lower > p
                for _ in range(trials))
    assert _at_most_alpha(wrong, trials, alpha), wrong


def _linear(v, sigma):
    """A two-class linear classifier and an input with p_A = P(class 1) = Phi(v / sigma): true radius v."""
    return Smooth(Linear2(torch.tensor([1.0, 0.0, 0.0, 0.0]), 0.0), 2, sigma), torch.tensor([v, 0.0, 0.0, 0.0]).view(1, 2, 2)


def test_sequential_wrong_robust_decisions_are_rare():
    """p_A = Phi(r / sigma) exactly at the middle radius: deciding "robust" there (or beyond) is wrong.
    The sequential rule stops as soon as a lower bound exceeds a threshold, the worst case for this error."""
    sigma, alpha, trials = 0.5, 0.1, 150
    smooth, x = _linear(0.5, sigma)
    wrong = 0
    for k in range(trials):
        cert = smooth.certify_sequential(x, 20, [0.25, 0.5, 0.75], alpha, n_max=1000, batch_size=1000,
                                         generator=torch.Generator().manual_seed(k))
        wrong += cert.radius >= 0.5 or (cert.prediction not in (1, Smooth.ABSTAIN))
    assert _at_most_alpha(wrong, trials, alpha), wrong


def test_adaptive_radii_above_the_truth_are_rare():
    sigma, alpha, trials, truth = 0.5, 0.1, 150, 0.4
    smooth, x = _linear(truth, sigma)
    certs = [smooth.certify_adaptive(x, 20, alpha, radius_tol=0.05, n_max=1000, batch_size=1000,
                                     generator=torch.Generator().manual_seed(k)) for k in range(trials)]
    wrong = sum(c.radius > truth or c.prediction not in (1, Smooth.ABSTAIN) for c in certs)
    assert _at_most_alpha(wrong, trials, alpha), wrong
    assert np.mean([c.radius for c in certs]) > truth - 0.15  # and not vacuous


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
    (lambda s, x: s.certify_adaptive(x, 10, 1.5), r"alpha must be in \(0, 1\)"),
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


def test_cli_sequential_writes_tsv_and_samples_and_resumes(trained, tmp_path, capsys):
    full = tmp_path / "full.tsv"
    code, out, _ = _run(capsys, "certify", "--checkpoint", trained, *SEQ, "--out", full)
    assert code == 0 and "results:" in out
    res = read_certify_tsv(full)
    seq = [ln.split("\t") for ln in (tmp_path / "full.tsv.seq.tsv").read_text().splitlines()]
    assert seq[0] == ["idx", "c_a", "samples", "n", "n_a", "p_lower", "p_upper", "capped", "decisions"]
    assert [int(r[0]) for r in seq[1:]] == res.idx.tolist() == [0, 1, 2, 3, 4]
    meta = json.loads((tmp_path / "full.tsv.json").read_text())
    assert meta["mode"] == "sequential" and meta["radii"] == [0.25, 0.5] and meta["n_max"] == 1500
    assert "Beta-binomial" in meta["confidence_sequence"] and meta["n"] is None and meta["complete"]
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
    seq_lines = (tmp_path / "full.tsv.seq.tsv").read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:3]) + lines[3][:5])
    (tmp_path / "part.tsv.seq.tsv").write_text("".join(seq_lines[:4]) + seq_lines[4][:6])
    (tmp_path / "part.tsv.json").write_text(json.dumps({**meta, "complete": False}))
    code, out, _ = _run(capsys, "certify", "--checkpoint", trained, *SEQ, "--out", part)
    assert code == 0 and "2 of 5 examples done" in out

    def rows(p):
        return [ln.split("\t")[:5] for ln in p.read_text().splitlines()]  # all but time

    assert rows(part) == rows(full)
    assert (tmp_path / "part.tsv.seq.tsv").read_text() == (tmp_path / "full.tsv.seq.tsv").read_text()
    code, _, err = _run(capsys, "certify", "--checkpoint", trained, *SEQ[:2], "0.5", *SEQ[4:], "--out", part)
    assert code == 2 and "holds a run with radii=[0.25, 0.5], not [0.5]" in err


def test_cli_adaptive(trained, tmp_path, capsys):
    out = tmp_path / "a.tsv"
    code, _, _ = _run(capsys, "certify", "--checkpoint", trained, "--adaptive", "--radius-tol", "0.1",
                      "--n-max", "2000", "--max", "3", "--out", out)
    assert code == 0
    res = read_certify_tsv(out)
    meta = json.loads((tmp_path / "a.tsv.json").read_text())
    assert meta["mode"] == "adaptive" and meta["radius_tol"] == 0.1 and meta["radii"] is None
    seq = [ln.split("\t") for ln in (tmp_path / "a.tsv.seq.tsv").read_text().splitlines()[1:]]
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
    (["--sequential", "--radii", "0.5", "--shard", "0/2"], "--sequential cannot be split into shards"),
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
    _warn_small_n_max(200, 0.001, 0.25, [0.25, 0.75], logs.append)
    # all 200 votes for c_A: lower bound (alpha B(200.5, 1/2) / pi)^(1/200) certifies 0.25 Phi^-1 of it
    r_max = 0.25 * norm.ppf(math.exp((math.log(0.001) + betaln(200.5, 0.5) - math.log(math.pi)) / 200))
    assert len(logs) == 1 and f"{r_max:.4g}" in logs[0] and "radii 0.75 are never certified" in logs[0]
    _warn_small_n_max(100_000, 0.001, 0.25, [0.25, 0.75], logs.append)
    assert len(logs) == 1
