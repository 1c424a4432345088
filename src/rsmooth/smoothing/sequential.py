"""Anytime-valid statistics for sequential certification, as pure functions.

After Cohen et al.'s selection step (n0 samples pick c_A; Cohen, Rosenfeld, Kolter 2019,
Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918, Sec. 3.2), the
votes for c_A are Bernoulli(p_A) draws.  Samples are drawn in growing batches and, after each,
p_A is bounded by a *confidence sequence*: intervals that hold p_A at every sample size at
once with probability >= 1 - alpha, so the bounds stay valid however the number of samples is
chosen from the data (optional stopping; Voracek 2024, Treatment of Statistical Estimation
Problems in Randomized Smoothing for Adversarial Robustness, arXiv 2406.17830, Sec. 4).

The confidence sequence is Robbins' Beta-binomial mixture (Robbins 1970, Statistical methods
related to the law of the iterated logarithm; Howard, Ramdas, McAuliffe, Sekhon 2021,
Time-uniform, nonparametric, nonasymptotic confidence sequences, arXiv 1810.08240, Sec. 3.3):
with S_t successes in t draws and a Beta(1/2, 1/2) prior,

    M_t(p) = B(1/2 + S_t, 1/2 + t - S_t) / B(1/2, 1/2) / (p^S_t (1 - p)^(t - S_t))

is a nonnegative martingale with mean 1 when p = p_A (a likelihood ratio of the prior's mixture
to p), so by Ville's inequality P(exists t: M_t(p_A) >= 1/alpha) <= alpha, and

    CS_t = {p : M_t(p) < 1/alpha}

(an interval: log M_t is convex in p) holds p_A at all t simultaneously with probability
>= 1 - alpha.  The running intersection of the intervals is as valid and never wider.  The
Jeffreys prior Beta(1/2, 1/2) puts more mass near 0 and 1 than the uniform one: when every vote
goes to c_A (the case that decides the largest radii) the lower bound is
(alpha / sqrt(pi t))^(1/t) instead of (alpha / (t + 1))^(1/t).  Its half-width is about
sqrt(2 p (1 - p) (log(1/alpha) + log(pi t / 2) / 2) / t): the price of anytime validity over a
fixed-n Clopper-Pearson bound is the log t term.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple

import numpy as np
from scipy.special import betaln, xlog1py, xlogy
from scipy.stats import norm

from ..errors import RsmoothError, check

#: the Beta(PRIOR, PRIOR) mixing prior of the confidence sequence (Jeffreys)
PRIOR = 0.5
#: estimation samples before the first look, and the factor by which the sample size grows
#: between looks (the checks are at ceil(FIRST_LOOK * GROWTH^k), capped at n_max)
FIRST_LOOK = 32
GROWTH = 1.5
#: how the confidence sequence and the looks are described in run metadata
CONFIDENCE_SEQUENCE = (f"Beta-binomial mixture, Beta({PRIOR:g}, {PRIOR:g}) prior (Robbins 1970); "
                       f"looks at ceil({FIRST_LOOK} * {GROWTH:g}^k) estimation samples, capped at n_max")


def log_mixture_martingale(n_a, n, p, prior: float = PRIOR) -> np.ndarray:
    """log M_n(p) of the Beta(prior, prior) mixture (module docstring); broadcasts over arrays.

    ``n_a`` successes in ``n`` draws; ``p`` in [0, 1] (+inf where p is impossible given the data).
    """
    n_a, n, p = (np.asarray(v, dtype=np.float64) for v in (n_a, n, p))
    return _log_marginal(n_a, n, prior) - xlogy(n_a, p) - xlog1py(n - n_a, -p)


def _log_marginal(n_a: np.ndarray, n: np.ndarray, prior: float) -> np.ndarray:
    """log of the prior's mixture of the likelihoods q^n_a (1 - q)^(n - n_a)."""
    return betaln(prior + n_a, prior + n - n_a) - betaln(prior, prior)


def confidence_sequence(n_a, n, alpha: float, prior: float = PRIOR, iterations: int = 64
                        ) -> Tuple[np.ndarray, np.ndarray]:
    """Ends (lower, upper) of CS_n = {p : M_n(p) < 1/alpha}; broadcasts over ``n_a`` and ``n``.

    Bisection on the convex log M_n from p_hat = n_a / n (inside: log M_n(p_hat) <= 0), returning
    the outer end of the last bracket, so the interval computed contains the exact one (up to
    the rounding of log M_n, ~1e-15).
    ``n = 0`` gives (0, 1).  Guarantee: P(exists n: p_A outside) <= alpha, for any stopping rule.
    """
    n_a, n = np.broadcast_arrays(np.asarray(n_a, dtype=np.float64), np.asarray(n, dtype=np.float64))
    p_hat = np.divide(n_a, n, out=np.zeros_like(n), where=n > 0)
    level = math.log(1.0 / alpha) - _log_marginal(n_a, n, prior)  # outside: -log likelihood >= level
    # both ends at once: out starts at 0 (lower end) and 1 (upper end), inside at p_hat
    level, n_a, n_b = (np.stack([v, v]) for v in (level, n_a, n - n_a))
    out, inside = np.stack([np.zeros_like(p_hat), np.ones_like(p_hat)]), np.stack([p_hat, p_hat])
    for _ in range(iterations):
        mid = (out + inside) / 2
        if np.all((mid == out) | (mid == inside)):
            break  # adjacent floats everywhere
        far = -(xlogy(n_a, mid) + xlog1py(n_b, -mid)) >= level
        out, inside = np.where(far, mid, out), np.where(far, inside, mid)
    return out[0], out[1]


def check_points(n_max: int) -> List[int]:
    """The estimation sample sizes at which the bounds are computed: ceil(FIRST_LOOK * GROWTH^k)
    while below ``n_max``, then ``n_max`` (fixed in advance, so results do not depend on batch_size)."""
    points, t = [], float(FIRST_LOOK)
    while math.ceil(t) < n_max:
        points.append(math.ceil(t))
        t *= GROWTH
    return points + [n_max]


@dataclass(frozen=True)
class Bounds:
    """Where a sequence stands after ``n`` estimation samples, ``n_a`` of them votes for c_A.

    ``lower``, ``upper``: the running intersection of the confidence sequence (p_A is inside
    at every n with probability >= 1 - alpha); ``reachable``: the largest lower bound still
    possible by ``n_max`` (every later sample a vote for c_A), which only steers stopping.
    """

    n: int
    n_a: int
    lower: float
    upper: float
    reachable: float


def run_sequence(votes: Callable[[int], int], alpha: float, n_max: int,
                 done: Callable[[Bounds], bool]) -> Bounds:
    """Draw samples in batches until ``done(bounds)`` or ``n_max`` samples; the last bounds.

    ``votes(m)``: the number of votes for c_A among m fresh samples.  Any ``done`` keeps the
    guarantee of :func:`confidence_sequence` (it may look at everything drawn so far).
    """
    n = n_a = 0
    lower, upper = 0.0, 1.0
    for t in check_points(n_max):
        n_a += int(votes(t - n))
        n = t
        lo, up = confidence_sequence([n_a, n_a + n_max - n], [n, n_max], alpha)
        lower, upper = max(lower, float(lo[0])), min(upper, float(up[0]))
        bounds = Bounds(n, n_a, lower, upper, max(lower, float(lo[1])))
        if done(bounds):
            break
    return bounds


class Decision(str, enum.Enum):
    """The state of the question "is g certifiably robust at radius r?" (threshold Phi(r / sigma))."""

    ROBUST = "robust"  #: lower bound > threshold: certified at r
    NOT_CERTIFIABLE = "no"  #: upper bound <= threshold: no number of samples certifies r
    BEYOND_CAP = "cap"  #: not certifiable within n_max samples even if every later one votes c_A
    OPEN = "open"  #: still undecided (never in a final result)


def thresholds(radii: Sequence[float], sigma: float) -> np.ndarray:
    """Phi(r / sigma) for each radius: g is certifiably robust at r when p_A > Phi(r / sigma)."""
    return norm.cdf(np.asarray(radii, dtype=np.float64) / sigma)


def decide(bounds: Bounds, thresholds: Sequence[float]) -> Tuple[Decision, ...]:
    """The decision at each threshold Phi(r / sigma) (:class:`Decision`)."""
    return tuple(Decision.ROBUST if bounds.lower > th else Decision.NOT_CERTIFIABLE if bounds.upper <= th
                 else Decision.BEYOND_CAP if bounds.reachable <= th else Decision.OPEN for th in thresholds)


def radius_of(p: float, sigma: float) -> float:
    """sigma * Phi^-1(p), clamped at 0 (the radius a lower bound p certifies)."""
    return float(sigma * max(norm.ppf(p), 0.0))


def radius_gain(bounds: Bounds, sigma: float) -> float:
    """How much more samples could still raise the certified radius: the radius of
    min(upper, reachable) minus that of the lower bound (both clamped at 0)."""
    return radius_of(min(bounds.upper, bounds.reachable), sigma) - radius_of(bounds.lower, sigma)


@dataclass(frozen=True)
class SequentialCertificate:
    """What :meth:`Smooth.certify_sequential` and :meth:`Smooth.certify_adaptive` return.

    ``prediction``: c_A, or ``Smooth.ABSTAIN`` (-1) when no radius is certified; ``radius``: the
    certified l2 radius (0.0 when abstaining); ``samples``: noisy samples drawn in all (n0 + n);
    ``n``, ``n_a``: estimation samples and the votes for c_A among them; ``c_a``: the class the n0
    samples selected; ``p_lower``, ``p_upper``: the confidence sequence's bounds on p_A at the
    stop; ``capped``: all n_max estimation samples were drawn; ``decisions``: one per radius
    (certify_sequential), empty for certify_adaptive.
    """

    prediction: int
    radius: float
    samples: int
    n: int
    n_a: int
    c_a: int
    p_lower: float
    p_upper: float
    capped: bool
    decisions: Tuple[Decision, ...] = ()


def validate_radii(radii: Sequence[float]) -> Tuple[float, ...]:
    """The radii as floats, or a one-line error unless they are one or more finite numbers >= 0."""
    try:
        values = tuple(float(r) for r in radii)
    except (TypeError, ValueError):
        raise RsmoothError(f"radii must be numbers (l2 radii in [0,1] pixel units, e.g. 0.25 0.5), "
                           f"got {radii!r}") from None
    check(len(values) > 0, "give at least one radius to decide (e.g. --radii 0.25 0.5 0.75)")
    check(all(math.isfinite(r) and r >= 0 for r in values), f"radii must be finite and >= 0, got {list(radii)}")
    return values


def validate_radius_tol(tol: float) -> float:
    """The radius tolerance as a float, or a one-line error unless it is a finite number >= 0."""
    try:
        value = float(tol)
    except (TypeError, ValueError):
        raise RsmoothError(f"radius_tol must be a number >= 0 (e.g. 0.05), got {tol!r}") from None
    check(math.isfinite(value) and value >= 0, f"radius_tol must be >= 0 (e.g. 0.05), got {tol!r}")
    return value
