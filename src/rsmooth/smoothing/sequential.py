"""Anytime-valid statistics for sequential certification, as pure functions.

After Cohen et al.'s selection step (n0 samples pick c_A; Cohen, Rosenfeld, Kolter 2019,
Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918, Sec. 3.2), the
votes for c_A are Bernoulli(p_A) draws.  Samples are drawn in growing batches and, after each,
p_A is bounded by *confidence sequences*: bounds that hold at every sample size at once, so they
stay valid however the number of samples is chosen from the data (optional stopping; Voracek
2024, Treatment of Statistical Estimation Problems in Randomized Smoothing for Adversarial
Robustness, arXiv 2406.17830, Sec. 4).

**Lower bound (the certificate).**  With S_t votes for c_A in t draws, L_t(q) = q^S_t
(1 - q)^(t - S_t), and the Beta(1/2, 1/2) (Jeffreys) prior pi truncated to (p, 1],

    M_t(p) = int_p^1 L_t(q) pi(q) dq / (pi((p, 1]) L_t(p))

is a nonnegative supermartingale with M_0 = 1 whenever p_A <= p (a mixture of likelihood ratios
of alternatives q > p to p; each factor has mean <= 1), so by Ville's inequality
P(exists t: M_t(p) >= 1/alpha) <= alpha: Robbins' one-sided mixture test (Robbins 1970,
Statistical methods related to the law of the iterated logarithm; Howard, Ramdas, McAuliffe,
Sekhon 2021, Time-uniform, nonparametric, nonasymptotic confidence sequences, arXiv 1810.08240,
Sec. 3).  The lower bound LB_t is the largest p in [1/2, 1) such that every p' in [1/2, p] is
rejected (M_t(p') >= 1/alpha), and 0 when 1/2 is not: only bounds above 1/2 certify a radius.
LB_t > p_A (with p_A >= 1/2) means the test of p_A rejected, so P(exists t: LB_t > p_A) <= alpha
and the running maximum of LB_t is as valid.  The rejected set is an interval: log L_t is
concave, so M_t(p) <= exp(d/dp log L_t(p) (1 - p)); where M_t(p) >= 1/alpha > e^(2/pi) this forces
d/dp log L_t(p) >= h(p), the prior's hazard pi(p) / pi((p, 1]) (h(p)(1 - p) <= 2/pi on [1/2, 1)),
and then d/dp log M_t(p) = h(p)(1 - 1/M_t(p)) - d/dp log L_t(p) < 0, so M_t can only cross
1/alpha downwards (alpha < 1/2 suffices).  Truncating the prior to the alternatives is what makes
the bound one-sided and tight where certificates are decided: with every vote for c_A it exceeds
Phi(3) (radius 3 sigma) after about 6,000 samples, against 9,000 for the two-sided mixture.

**Upper bound (only to stop early).**  The same test with the uniform prior truncated to [0, p)
gives UB_t, the smallest p such that every p' in [p, 1] is rejected at level beta (here the
hazard argument needs beta < 1/e).  It never enters a certificate; it decides that a radius is
not worth more samples ("futility"): no at r once UB_t <= Phi(r / sigma), and beyond the cap
once even the projected lower bound LB(S_t + Q, n_max), with Q the upper beta-quantile of
Binomial(n_max - t, UB_t) for the votes still to come, is at most Phi(r / sigma).  So the
probability that a radius is given up although LB with all n_max samples would have certified it
is at most 2 beta (p_A above UB_t at some look, or the remaining votes above their quantile).
Fixed-n Clopper-Pearson with n = n_max certifies more (LB is about 1.5x wider at n = 100,000):
bench/futility_vs_fixed.py measures how often a radius it certifies is given up.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Callable, Generator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import RsmoothError, check
from .noises import Noise, as_noise
from .stats import MAX_RADIUS, check_probability

#: a noise, or a sigma (Cohen et al.'s Gaussian)
NoiseLike = Union[float, Noise]

#: default beta: the level of the upper bound that decides when a radius is not worth more samples
FUTILITY = 0.05
#: default share of alpha on the anytime bounds (the rest: Clopper-Pearson over all n_max samples
#: where a radius is still open at the cap; :func:`split_levels`).  Measured (bench/alpha_split.py,
#: BENCHMARKS.md; n_max 100,000, alpha 0.001): where fixed CERTIFY certifies a radius 90% of the
#: time the sequence gives up 5% of those (63% with the anytime bound alone; 2.4% at share 0.25),
#: and with every vote for c_A it certifies 3 sigma after 1.10x the samples (1.21x at 0.25)
ALPHA_SHARE = 0.5
#: the share of runs made before the split (sidecars without ``alpha_share``)
LEGACY_SHARE = 1.0
#: estimation samples before the first look, and the factor by which the sample size grows
#: between looks (the checks are at ceil(FIRST_LOOK * GROWTH^k), capped at n_max); looking more
#: often costs no validity, only the few milliseconds of computing the bounds
FIRST_LOOK = 32
GROWTH = 1.1
#: how the confidence sequences and the looks are described in run metadata
CONFIDENCE_SEQUENCE = (f"one-sided Beta-binomial mixtures (Robbins 1970): lower bound with the Beta(1/2, 1/2) "
                       f"prior, upper bound (stopping only) with the uniform prior, each truncated to the "
                       f"alternatives; looks at ceil({FIRST_LOOK} * {GROWTH:g}^k) estimation samples, capped at n_max")
_TOLERANCE = 1e-13  # the bounds are found to this (absolute), conservatively up to float error


def _log_likelihood(n_a, n, p):
    from scipy.special import xlog1py, xlogy  # here: scipy is imported when a bound is first needed

    return xlogy(n_a, p) + xlog1py(n - n_a, -p)


def _slope_of_log_likelihood(n_a, n, p):
    return n_a / p - (n - n_a) / (1 - p)


def _lower_terms(n_a, n, p) -> Tuple[np.ndarray, np.ndarray]:
    """(log M_t(p), its derivative in p) of the lower bound's test; broadcasts."""
    from scipy.special import betaincc, betaln

    a, b = n_a + 0.5, n - n_a + 0.5
    mass = 2 / math.pi * np.arcsin(np.sqrt(1 - p))  # the Jeffreys prior's mass above p
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_m = (betaln(a, b) - betaln(0.5, 0.5) + np.log(betaincc(a, b, p)) - np.log(mass)
                 - _log_likelihood(n_a, n, p))
        hazard = 1 / (math.pi * np.sqrt(p * (1 - p)) * mass)
        return log_m, hazard * -np.expm1(-log_m) - _slope_of_log_likelihood(n_a, n, p)


def _upper_terms(n_a, n, p) -> Tuple[np.ndarray, np.ndarray]:
    """(log M_t(p), its derivative in p) of the upper bound's test; broadcasts."""
    from scipy.special import betainc, betaln

    a, b = n_a + 1.0, n - n_a + 1.0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_m = betaln(a, b) + np.log(betainc(a, b, p)) - np.log(p) - _log_likelihood(n_a, n, p)
        return log_m, np.expm1(-log_m) / p - _slope_of_log_likelihood(n_a, n, p)


def log_lower_martingale(n_a, n, p) -> np.ndarray:
    """log M_t(p) of the lower bound's test (Jeffreys prior truncated to (p, 1]); broadcasts.

    ``n_a`` votes for c_A in ``n`` draws; ``p`` in (0, 1).  ``-inf`` where it underflows (p far
    above n_a / n: never rejected).
    """
    return _lower_terms(*(np.asarray(v, dtype=np.float64) for v in (n_a, n, p)))[0]


def log_upper_martingale(n_a, n, p) -> np.ndarray:
    """log M_t(p) of the upper bound's test (uniform prior truncated to [0, p)); broadcasts."""
    return _upper_terms(*(np.asarray(v, dtype=np.float64) for v in (n_a, n, p)))[0]


def _boundary(terms, n_a, n, level: float, rejected: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """Where log M_t crosses ``level`` between ``rejected`` (log M >= level there) and ``inside``:
    Newton steps from the rejected end (each 0.1% short, so that near the root they stay on the
    rejected side), bisection when a step leaves the bracket or falls short, returning the
    rejected end of the last bracket, so a bound computed is never tighter than the exact one but
    for the float error of log M_t itself (rejected as computed, ~1e-10 off in log M_t at
    t = 100,000): about 1e-14 in p there (the lower bound measured 1.3e-14 above the exact one
    by 30-digit quadrature; test_sequential.py checks < 1e-12)."""
    f, slope = terms(n_a, n, rejected)
    f, moved = f - level, np.ones(f.shape, dtype=bool)
    active = np.abs(inside - rejected) > _TOLERANCE
    for _ in range(200):
        with np.errstate(divide="ignore", invalid="ignore"):
            step = -f / slope
        # a Newton step, unless it leaves the bracket or the last one fell short (then bisect)
        newton = moved & (step * (inside - rejected) > 0) & (np.abs(step) < np.abs(inside - rejected))
        active &= (np.abs(inside - rejected) > _TOLERANCE) & ~(newton & (np.abs(step) <= _TOLERANCE))
        if not active.any():
            break
        candidate = np.where(newton, rejected + 0.999 * step, (rejected + inside) / 2)
        f_c, slope_c = terms(n_a, n, candidate)
        f_c = f_c - level
        moved = active & (f_c >= 0)
        rejected, f, slope = (np.where(moved, new, old) for new, old in ((candidate, rejected), (f_c, f),
                                                                        (slope_c, slope)))
        inside = np.where(active & ~moved, candidate, inside)
    return rejected


def anytime_lower(n_a, n, alpha: float) -> np.ndarray:
    """LB_t (module docstring): P(exists t: LB_t > p_A) <= alpha for any stopping rule; broadcasts
    over ``n_a`` and ``n`` (reals allowed).  0 where p_A > 1/2 is not established; needs alpha < 1/2."""
    n_a, n = np.broadcast_arrays(np.asarray(n_a, dtype=np.float64), np.asarray(n, dtype=np.float64))
    level = math.log(1.0 / alpha)
    p_hat = np.divide(n_a, n, out=np.zeros_like(n), where=n > 0)
    start = np.full_like(p_hat, 0.5)
    some = (p_hat > 0.5) & (_lower_terms(n_a, n, start)[0] >= level)
    bound = _boundary(_lower_terms, n_a, n, level, start, np.where(some, p_hat, start))
    return np.where(some, bound, 0.0)


def anytime_upper(n_a, n, beta: float) -> np.ndarray:
    """UB_t (module docstring): P(exists t: UB_t < p_A) <= beta for any stopping rule; broadcasts.
    1 after no draws; needs beta < 1/e."""
    n_a, n = np.broadcast_arrays(np.asarray(n_a, dtype=np.float64), np.asarray(n, dtype=np.float64))
    p_hat = np.divide(n_a, n, out=np.zeros_like(n), where=n > 0)
    return _boundary(_upper_terms, n_a, n, math.log(1.0 / beta), np.ones_like(p_hat), p_hat)


def check_points(n_max: int) -> List[int]:
    """The estimation sample sizes at which the bounds are computed: ceil(FIRST_LOOK * GROWTH^k)
    while below ``n_max``, then ``n_max`` (fixed in advance, so results do not depend on batch_size)."""
    points, t = [], float(FIRST_LOOK)
    while math.ceil(t) < n_max:
        if not points or math.ceil(t) > points[-1]:
            points.append(math.ceil(t))
        t *= GROWTH
    return points + [n_max]


@dataclass(frozen=True)
class Bounds:
    """Where a sequence stands after ``n`` estimation samples, ``n_a`` of them votes for c_A.

    ``lower``: the running maximum of LB_t (level alpha; the certificate), with the alpha split
    (``share`` < 1, :func:`split_levels`) also the Clopper-Pearson bound of all n_max samples once
    they are drawn; ``upper``: the running minimum of UB_t (level beta); ``projected``: the lower
    bound n_max samples would give if the remaining votes came at the upper beta-quantile of
    Binomial(n_max - n, upper) (by the test used at the cap).  ``upper`` and ``projected`` only
    steer stopping.  Two-sided (:func:`two_sided_bounds` of procedures): ``n_b`` the runner-up's
    votes and ``upper_b`` its upper bound (running minimum, level alpha/2 like the lower bound's,
    at most 1 - ``lower``); one-sided: 0 and 1 - ``lower``'s complement is used instead (1 here).
    """

    n: int
    n_a: int
    lower: float
    upper: float
    projected: float
    n_b: int = 0
    upper_b: float = 1.0


@dataclass(frozen=True)
class Look:
    """A request for the bounds after ``n`` estimation samples, ``n_a`` of them votes for c_A, given
    the running ``lower`` and ``upper`` of the earlier looks (:func:`settle_looks` answers it);
    ``share`` of alpha on the anytime bounds (the rest at the cap, :func:`split_levels`) and, when
    ``two_sided``, the runner-up's ``n_b`` votes and running ``upper_b``."""

    n: int
    n_a: int
    lower: float
    upper: float
    alpha: float
    n_max: int
    futility: float
    share: float = 1.0
    two_sided: bool = False
    n_b: int = 0
    upper_b: float = 1.0


def split_levels(alpha: float, share: float, two_sided: bool) -> Tuple[float, float]:
    """(level of each anytime bound, level of each Clopper-Pearson bound at n_max): alpha is split
    between p_A's lower bound and, two-sided, p_B's upper bound (alpha/2 each), and each half (or
    the whole) between the anytime bound (``share``) and the fixed-n bound on all n_max samples
    (1 - ``share``; 0 when ``share`` = 1, the rule before issue 39).  Valid by the union bound
    whatever the stopping rule: the fixed-n bound of the first n_max votes errs with probability
    <= its level whether or not they are all drawn, and is used only when they are."""
    half = alpha / 2 if two_sided else alpha
    return share * half, (1.0 - share) * half


def _cp_lower(k, n, level):
    """Clopper-Pearson lower bounds (vectorised, real k allowed; 0 at k = 0)."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(k > 0, beta.ppf(level, np.maximum(k, 1e-300), n - k + 1), 0.0)


def settle_looks(looks: Sequence[Look]) -> List[Bounds]:
    """The :class:`Bounds` of each look, computed for all of them at once (vectorised; every bound is
    computed elementwise, so a look's bounds do not depend on the others)."""
    from scipy.stats import binom

    out: List[Bounds] = [None] * len(looks)  # type: ignore[list-item]
    groups: dict = {}
    for k, look in enumerate(looks):
        groups.setdefault((look.alpha, look.n_max, look.futility, look.share, look.two_sided), []).append(k)
    for (alpha, n_max, futility, share, two_sided), ks in groups.items():
        any_level, cap_level = split_levels(alpha, share, two_sided)
        n = np.array([looks[k].n for k in ks], dtype=np.float64)
        n_a = np.array([looks[k].n_a for k in ks], dtype=np.float64)
        upper = np.minimum([looks[k].upper for k in ks], anytime_upper(n_a, n, futility))
        future = np.where(n < n_max, binom.ppf(1 - futility, n_max - n, upper), 0.0)
        both = anytime_lower(np.concatenate([n_a, n_a + future]), np.concatenate([n, np.full_like(n, n_max)]),
                             any_level)
        lower = np.maximum([looks[k].lower for k in ks], both[:len(ks)])
        projected = both[len(ks):]
        if cap_level > 0:  # the fixed-n bound at the cap: used there, and what the projection aims at
            lower = np.where(n >= n_max, np.maximum(lower, _cp_lower(n_a, n_max, cap_level)), lower)
            projected = np.maximum(projected, _cp_lower(n_a + future, n_max, cap_level))
        projected = np.maximum(lower, projected)
        n_b = np.array([looks[k].n_b for k in ks], dtype=np.float64)
        upper_b = np.ones_like(n)
        if two_sided:
            upper_b = np.minimum([looks[k].upper_b for k in ks], anytime_upper(n_b, n, any_level))
            if cap_level > 0:
                upper_b = np.where(n >= n_max, np.minimum(upper_b, 1 - _cp_lower(n_max - n_b, n_max, cap_level)),
                                   upper_b)
        for j, k in enumerate(ks):
            out[k] = Bounds(looks[k].n, looks[k].n_a, float(lower[j]), float(upper[j]), float(projected[j]),
                            looks[k].n_b, float(upper_b[j]))
    return out


def sequence_steps(alpha: float, n_max: int, done: Callable[[Bounds], bool], futility: float = FUTILITY,
                   tally: Callable[[Any], int] = int, *, alpha_share: float = 1.0,
                   others: Optional[Callable[[Any], np.ndarray]] = None) -> Generator[Union[int, Look], Any, Bounds]:
    """The estimation samples of a sequence, as a generator: it yields how many fresh samples it
    needs (and receives what ``tally`` turns into the number of votes for c_A among them), then a
    :class:`Look` (and receives its :class:`Bounds`), until ``done(bounds)`` or ``n_max`` samples;
    it returns the last bounds.  Any ``done`` keeps the guarantee of :func:`anytime_lower` (it may
    look at everything drawn so far).  ``alpha_share``: of alpha on the anytime bounds
    (:func:`split_levels`); ``others``: two-sided, turns the reply into the votes of every other
    class (their running sums give the runner-up's ``n_b``)."""
    n = n_a = 0
    lower, upper, upper_b = 0.0, 1.0, 1.0
    rest: Any = 0
    for t in check_points(n_max):
        reply = yield t - n
        n_a += int(tally(reply))
        if others is not None:
            rest = rest + np.asarray(others(reply), dtype=np.int64)
        n = t
        n_b = int(np.max(rest, initial=0)) if others is not None else 0
        bounds = yield Look(n, n_a, lower, upper, alpha, n_max, futility, alpha_share, others is not None, n_b, upper_b)
        lower, upper, upper_b = bounds.lower, bounds.upper, bounds.upper_b
        if done(bounds):
            break
    return bounds


def run_sequence(votes: Callable[[int], int], alpha: float, n_max: int, done: Callable[[Bounds], bool],
                 futility: float = FUTILITY) -> Bounds:
    """Draw samples in batches until ``done(bounds)`` or ``n_max`` samples; the last bounds.

    ``votes(m)``: the number of votes for c_A among m fresh samples; ``futility``: beta
    (:func:`sequence_steps`, driven one request at a time).
    """
    steps = sequence_steps(alpha, n_max, done, futility)
    request = next(steps)
    try:
        while True:
            request = steps.send(settle_looks([request])[0] if isinstance(request, Look) else votes(request))
    except StopIteration as stop:
        return stop.value


class Decision(str, enum.Enum):
    """The state of the question "is g certifiably robust at radius r?" (threshold Phi(r / sigma))."""

    ROBUST = "robust"  #: lower bound > threshold: certified at r (level alpha)
    NOT_CERTIFIABLE = "no"  #: upper bound <= threshold: p_A is below it (level beta)
    BEYOND_CAP = "cap"  #: the projected lower bound at n_max is <= threshold: not certifiable by the cap
    OPEN = "open"  #: still undecided (never in a final result)


def thresholds(radii: Sequence[float], noise: NoiseLike) -> np.ndarray:
    """The p_A each radius needs (Phi(r / sigma) for Gaussian noise): g is certifiably robust at r
    when p_A > its threshold (:meth:`~rsmooth.smoothing.noises.Noise.level`)."""
    return np.asarray(as_noise(noise).level(np.asarray(radii, dtype=np.float64)), dtype=np.float64)


def decide(bounds: Bounds, thresholds: Sequence[float]) -> Tuple[Decision, ...]:
    """The decision at each threshold Phi(r / sigma) (:class:`Decision`)."""
    return tuple(Decision.ROBUST if bounds.lower > th else Decision.NOT_CERTIFIABLE if bounds.upper <= th
                 else Decision.BEYOND_CAP if bounds.projected <= th else Decision.OPEN for th in thresholds)


def radius_of(p: float, noise: NoiseLike, p_upper: Optional[float] = None) -> float:
    """The radius a lower bound p certifies (sigma * Phi^-1(p) for Gaussian noise), clamped at 0;
    two-sided, with ``p_upper`` an upper bound on every other class (capped at 1 - p): the noise's
    radius of both (sigma/2 (Phi^-1(p) - Phi^-1(p_upper)), Gaussian), 0 unless p > p_upper."""
    noise = as_noise(noise)
    if p_upper is None:
        return float(max(noise.radius(p), 0.0))
    q = min(p_upper, 1.0 - p)
    return float(max(noise.radius(p, q), 0.0)) if p > q else 0.0


def largest_radius(n_max: int, alpha: float, noise: NoiseLike, share: float = 1.0, two_sided: bool = False) -> float:
    """The largest radius the sequential modes can certify with ``n_max`` estimation samples: that
    of their lower bound at n_max (the anytime one, or with ``share`` < 1 Clopper-Pearson's) when
    every sample is a vote for c_A (two-sided: and none for another class)."""
    any_level, cap_level = split_levels(alpha, share, two_sided)
    at_cap = float(_cp_lower(n_max, n_max, cap_level)) if cap_level else 0.0
    p = max(float(anytime_lower(n_max, n_max, any_level)), at_cap)
    if not two_sided:
        return radius_of(p, noise)
    q = min(float(anytime_upper(0, n_max, any_level)), 1 - at_cap if cap_level else 1.0)
    return radius_of(p, noise, q)


def radius_gain(bounds: Bounds, noise: NoiseLike, two_sided: bool = False) -> float:
    """How much the samples up to n_max could still raise the certified radius (with probability
    >= 1 - 2 beta): the radius of the projected lower bound minus that of the lower bound (two-sided:
    both with the runner-up's current upper bound, which only steers stopping here)."""
    q = bounds.upper_b if two_sided else None
    return radius_of(bounds.projected, noise, q) - radius_of(bounds.lower, noise, q)


def decide_radii(bounds: Bounds, radii: Sequence[float], noise: NoiseLike, two_sided: bool = False,
                 levels: Optional[Sequence[float]] = None) -> Tuple[Decision, ...]:
    """The decision at each radius: one-sided, :func:`decide` at the thresholds (``levels``, else
    computed); two-sided, by the radius of (lower, upper_b): robust where it exceeds r, "no" where
    that of (upper, upper_b) is at most r, "cap" where that of (projected, upper_b) is (the futility
    decisions use the runner-up's current bound as if final: they only steer stopping)."""
    if not two_sided:
        return decide(bounds, thresholds(radii, noise) if levels is None else levels)
    q = bounds.upper_b
    low, up, proj = (radius_of(p, noise, q) for p in (bounds.lower, bounds.upper, bounds.projected))
    return tuple(Decision.ROBUST if low > r else Decision.NOT_CERTIFIABLE if up <= r
                 else Decision.BEYOND_CAP if proj <= r else Decision.OPEN for r in radii)


@dataclass(frozen=True)
class SequentialCertificate:
    """What :meth:`Smooth.certify_sequential` and :meth:`Smooth.certify_adaptive` return.

    ``prediction``: c_A, or ``Smooth.ABSTAIN`` (-1) when no radius is certified; ``radius``: the
    certified l2 radius (0.0 when abstaining); ``samples``: noisy samples drawn in all (n0 + n);
    ``n``, ``n_a``: estimation samples and the votes for c_A among them; ``c_a``: the class the n0
    samples selected; ``p_lower``: the lower bound on p_A at the stop (level alpha, 0 when p_A > 1/2
    is not established); ``p_upper``: the upper bound (level futility, which only steers
    stopping); ``capped``: all n_max estimation samples were drawn; ``decisions``: one per radius
    (certify_sequential), empty for certify_adaptive; two-sided: ``n_b`` the runner-up's votes
    among the n and ``p_b_upper`` its upper bound (level alpha/2, capped at 1 - p_lower; None
    one-sided).
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
    n_b: Optional[int] = None
    p_b_upper: Optional[float] = None


def validate_radii(radii: Sequence[float]) -> Tuple[float, ...]:
    """The radii as floats, or a one-line error unless they are one or more numbers in [0, MAX_RADIUS]."""
    try:
        values = tuple(float(r) for r in radii)
    except (TypeError, ValueError):
        raise RsmoothError(f"radii must be numbers (l2 radii in [0,1] pixel units, e.g. 0.25 0.5), "
                           f"got {radii!r}") from None
    check(len(values) > 0, "give at least one radius to decide (e.g. --radii 0.25 0.5 0.75)")
    check(all(math.isfinite(r) and r >= 0 for r in values), f"radii must be finite and >= 0, got {list(radii)}")
    check(max(values) <= MAX_RADIUS, f"radii must be at most {MAX_RADIUS:g} (sigma <= 10 certifies at most 83), "
                                     f"got {max(values)!r}")
    return values


def validate_sequential_alpha(alpha: float) -> float:
    """alpha as a float, or a one-line error unless 0 < alpha < 1/2 (the lower bound's test needs it)."""
    return check_probability("alpha", alpha, "0.001", below=0.5, why=" for sequential certification")


def validate_share(share: float) -> float:
    """The share of alpha on the anytime bounds as a float, or a one-line error unless 0 < share <= 1
    (1: the anytime bound alone, the rule before issue 39)."""
    try:
        value = float(share)
    except (TypeError, ValueError):
        raise RsmoothError(f"alpha_share must be a number in (0, 1] (e.g. {ALPHA_SHARE}), got {share!r}") from None
    check(0 < value <= 1, f"alpha_share must be in (0, 1] (e.g. {ALPHA_SHARE}; 1: the anytime bound alone), "
                          f"got {share!r}")
    return value


def validate_futility(beta: float) -> float:
    """beta as a float, or a one-line error unless 0 < beta < 1/e (the upper bound's test needs it)."""
    return check_probability("futility", beta, "0.05", below=1 / math.e, why=" for sequential certification")


def validate_radius_tol(tol: float) -> float:
    """The radius tolerance as a float, or a one-line error unless it is a number >= 0 (``inf``: stop
    at the first look, FIRST_LOOK samples; the certificate holds for any stop)."""
    try:
        value = float(tol)
    except (TypeError, ValueError):
        raise RsmoothError(f"radius_tol must be a number >= 0 (e.g. 0.05), got {tol!r}") from None
    check(value >= 0, f"radius_tol must be >= 0 (e.g. 0.05; inf stops at the first look), got {tol!r}")
    return value
