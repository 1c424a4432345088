"""Honest certified-accuracy figures: a confidence interval over the test sample, and a lower bound
that accounts for the certificates that are wrong.

At a radius r, ``k`` of the ``m`` certified test examples are counted (correct with radius >= r;
:func:`rsmooth.metrics.certified_counts`).  Two different uncertainties sit in ``k / m``:

1. **Sampling of the test examples** (:func:`clopper_pearson_interval`).  The m examples are a
   sample from the test distribution, so ``k ~ Binomial(m, p)`` where ``p`` is the probability
   that this certification procedure (same n0, n, alpha, seed scheme) counts an example drawn from
   the distribution: the population value of the "approximate certified accuracy" of Cohen,
   Rosenfeld, Kolter 2019 (Certified Adversarial Robustness via Randomized Smoothing, arXiv
   1902.02918, Sec. 4).  The exact two-sided Clopper-Pearson interval (Clopper & Pearson 1934)
   covers ``p`` with probability >= 1 - beta.  It does **not** cover the Monte-Carlo error of each
   certificate: ``p`` counts a wrong certificate as a success.
2. **Wrong certificates** (:func:`wrong_certificates_bound`, :func:`high_probability_count`).
   CERTIFY's guarantee (Cohen et al. 2019, Sec. 3.2, Proposition 2) is per example: with
   probability >= 1 - alpha over its noise, the class and radius it returns are right for the
   smoothed classifier g.  So the reported count may include examples on which g is not in fact
   correct and robust at r; Cohen et al. 2019 (Sec. 4) call ``k / m`` *approximate* certified
   accuracy for this reason.  Every such example has a wrong certificate; the certificates of the
   m examples fail independently (each image's noise is drawn independently), each with
   probability <= alpha, so the number of wrong certificates among **all m** is stochastically
   dominated by ``Binomial(m, alpha)``, and with probability >= 1 - beta it is <= q, the
   (1 - beta) quantile of ``Binomial(m, alpha)``.  Hence, with probability >= 1 - beta over the
   certification noise, at least ``k - q`` of the m test examples are truly classified correctly
   and robustly at r, and this holds at every radius at once (the same q bounds the wrong
   certificates whatever r is).

   ``Binomial(k, alpha)`` (wrong certificates among the k counted only) would not be valid:
   being counted is not independent of being wrong.  If g is robust at r on none of the m
   examples, the counted ones are exactly the wrong certificates, ``k ~ Binomial(m, alpha)``, and
   the (1 - beta) quantile of ``Binomial(k, alpha)`` is 0 for every ``k < log(1 - beta) /
   log(1 - alpha)``, so ``k - q = k > 0`` whenever a certificate is wrong (probability
   ``1 - (1 - alpha)^m``, near 1 for m = 10,000 and alpha = 0.001).

   Cohen et al.'s released code (locuslab/smoothing, ``code/analyze.py``, ``HighProbAccuracy``,
   their "Approximate vs. High-Probability" plot) subtracts ``alpha + sqrt(alpha (1 - alpha)
   log(1/beta) / m) + log(1/beta) / (3m)`` from ``k / m``: Bernstein's inequality with its
   constants halved (the valid deduction is ``sqrt(2 alpha (1 - alpha) log(1/beta) / m) +
   2 log(1/beta) / (3m)``), which misses more often than beta for many m and small beta (m =
   10,000, alpha = beta = 0.001: 0.0016).  rsmooth subtracts the exact quantile q instead: valid,
   and always below the valid Bernstein deduction.

:func:`population_lower_bound` joins the two by a union bound (beta/2 for each): a lower bound on
the certified accuracy of g itself on the test distribution.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional, Tuple

from ..errors import check
from ..smoothing.stats import check_probability


def _counts(k: int, m: int) -> Tuple[int, int]:
    """``(k, m)`` as ints with ``m >= 1`` and ``0 <= k <= m``, else a one-line RsmoothError."""
    for name, value in (("k", k), ("m", m)):
        integral = isinstance(value, numbers.Integral) or (
            isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer())
        check(integral and not isinstance(value, bool), f"{name} must be an integer count, got {value!r}")
    k, m = int(k), int(m)
    check(m >= 1, f"m (the number of certified examples) must be >= 1, got {m}")
    check(0 <= k <= m, f"k (examples counted) must be in [0, m={m}], got {k}")
    return k, m


def clopper_pearson_interval(k: int, m: int, beta: float = 0.05) -> Tuple[float, float]:
    """Exact two-sided (1 - beta) Clopper-Pearson interval for a binomial proportion.

    ``(Beta.ppf(beta/2, k, m-k+1), Beta.ppf(1-beta/2, k+1, m-k))``, with 0 for ``k = 0`` and 1 for
    ``k = m`` (Clopper & Pearson 1934; ``scipy.stats.binomtest(k, m).proportion_ci(1 - beta,
    "exact")``).  For certified accuracy, ``k`` of ``m`` test examples counted at a radius: it covers
    the population approximate certified accuracy with probability >= 1 - beta over the sampling
    of the test examples, not the error of each certificate (see the module docstring).

    Args:
        k: successes, ``0 <= k <= m``.
        m: trials (test examples), ``>= 1``.
        beta: total miss probability in (0, 1), beta/2 on each side.
    """
    from scipy.stats import beta as beta_dist

    k, m = _counts(k, m)
    beta = check_probability("beta", beta, "0.05")
    lo = 0.0 if k == 0 else float(beta_dist.ppf(beta / 2, k, m - k + 1))
    hi = 1.0 if k == m else float(beta_dist.ppf(1 - beta / 2, k + 1, m - k))
    return lo, hi


def wrong_certificates_bound(m: int, alpha: float, beta: float = 0.05) -> int:
    """q: the (1 - beta) quantile of ``Binomial(m, alpha)``, the smallest q with
    ``P(Binomial(m, alpha) <= q) >= 1 - beta``.

    With m certificates, each wrong with probability <= alpha and independently of the others,
    the number of wrong ones is <= q with probability >= 1 - beta (stochastic dominance by
    ``Binomial(m, alpha)``; Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Sec. 3.2 and 4).

    Args:
        m: certificates (test examples), ``>= 1``.
        alpha: each certificate's failure probability (CERTIFY's ``alpha``), in (0, 1).
        beta: miss probability of the bound, in (0, 1).
    """
    from scipy.stats import binom

    _, m = _counts(0, m)
    alpha = check_probability("alpha", alpha, "0.001")
    beta = check_probability("beta", beta, "0.05")
    q = int(binom.ppf(1 - beta, m, alpha))
    # ppf works in floating point: step to the exact smallest q with cdf(q) >= 1 - beta
    while q > 0 and binom.cdf(q - 1, m, alpha) >= 1 - beta:
        q -= 1
    while binom.cdf(q, m, alpha) < 1 - beta:
        q += 1
    return q


def high_probability_count(k: int, m: int, alpha: float, beta: float = 0.05) -> int:
    """``max(k - q, 0)`` with q = :func:`wrong_certificates_bound` ``(m, alpha, beta)``.

    With probability >= 1 - beta over the certification noise, at least this many of the m test
    examples are truly classified correctly and robustly at r by the smoothed classifier, at every
    radius at once: Cohen et al.'s high-probability certified accuracy (Cohen, Rosenfeld, Kolter
    2019, arXiv 1902.02918, Sec. 4) times m.  It is about these m examples, not the test
    distribution (:func:`population_lower_bound`); why ``Binomial(m, alpha)`` and not
    ``Binomial(k, alpha)``: the module docstring.
    """
    k, m = _counts(k, m)
    return max(k - wrong_certificates_bound(m, alpha, beta), 0)


def population_lower_bound(k: int, m: int, alpha: float, beta: float = 0.05) -> float:
    """Lower bound on the smoothed classifier's certified accuracy at r on the test distribution,
    holding with probability >= 1 - beta over both the test sample and the certification noise.

    Union bound, beta/2 each: with probability >= 1 - beta/2 the true count T of the m examples is
    >= c = :func:`high_probability_count` ``(k, m, alpha, beta/2)``; T ~ Binomial(m, p_true) over
    the sampling, and the one-sided Clopper-Pearson lower bound at level 1 - beta/2 is
    non-decreasing in the count, so ``Beta.ppf(beta/2, c, m-c+1)`` (0 for c = 0) exceeds p_true
    with probability <= beta/2 + beta/2.
    """
    from scipy.stats import beta as beta_dist

    k, m = _counts(k, m)
    beta = check_probability("beta", beta, "0.05")
    c = high_probability_count(k, m, alpha, beta / 2)
    return 0.0 if c == 0 else float(beta_dist.ppf(beta / 2, c, m - c + 1))


@dataclass(frozen=True)
class AccuracyBounds:
    """The honest figures for one radius: ``count`` of ``num_examples`` counted; ``lo``/``hi``
    the (``level``) Clopper-Pearson interval; with the certificates' ``alpha`` known, ``hp`` =
    :func:`high_probability_count` / m, ``hp_population`` = :func:`population_lower_bound` and
    ``wrong_certificates`` = q (else None).  Fractions in [0, 1]."""

    count: int
    num_examples: int
    level: float
    lo: float
    hi: float
    alpha: Optional[float] = None
    wrong_certificates: Optional[int] = None
    hp: Optional[float] = None
    hp_population: Optional[float] = None


def accuracy_bounds(k: int, m: int, level: float = 0.95, alpha: Optional[float] = None) -> AccuracyBounds:
    """:class:`AccuracyBounds` of ``k`` counted of ``m`` at confidence ``level`` (beta = 1 - level);
    ``alpha``: the certificates' failure probability, None when unknown (no ``hp`` then)."""
    k, m = _counts(k, m)
    level = check_probability("the confidence level", level, "0.95")
    beta = 1.0 - level
    lo, hi = clopper_pearson_interval(k, m, beta)
    if alpha is None:
        return AccuracyBounds(k, m, level, lo, hi)
    q = wrong_certificates_bound(m, alpha, beta)
    return AccuracyBounds(k, m, level, lo, hi, float(alpha), q, max(k - q, 0) / m,
                          population_lower_bound(k, m, alpha, beta))


__all__ = ["check_probability", "clopper_pearson_interval", "wrong_certificates_bound", "high_probability_count",
           "population_lower_bound", "AccuracyBounds", "accuracy_bounds"]
