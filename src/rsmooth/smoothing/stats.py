"""The statistics of Cohen et al.'s PREDICT and CERTIFY, as pure functions.

Cohen, Rosenfeld & Kolter (2019), "Certified adversarial robustness via randomized
smoothing", arXiv 1902.02918, Sec. 3.2; restated in Jeong & Shin 2020 (Consistency,
arXiv 2006.04062) Sec. 2.2 (eq. 3-4).
"""
from __future__ import annotations

import math


from ..counts import MAX_COUNT, MAX_COUNT_TEXT, validate_count  # noqa: F401 (re-exported)
from ..errors import RsmoothError, check


def check_probability(name: str, value: float, example: str, below: float = 1.0, why: str = "") -> float:
    """``value`` as a float in the open interval (0, ``below``), else a one-line RsmoothError
    (``why``: what needs the limit, e.g. " for sequential certification")."""
    interval = f"(0, {below:.4g})"
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise RsmoothError(f"{name} must be a number in {interval}{why} (e.g. {example}), got {value!r}") from None
    check(0.0 < v < below, f"{name} must be in {interval}{why} (e.g. {example}), got {value!r}")
    return v


def validate_alpha(alpha: float) -> float:
    """Return ``alpha`` as a float, or raise if it is not in the open interval (0, 1)."""
    return check_probability("alpha", alpha, "0.001")


def clopper_pearson_lower(n_a: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson lower confidence bound on a binomial proportion.

    ``Beta.ppf(alpha, n_a, n - n_a + 1)`` (Cohen et al. 2019, ``lowerConfBound``), which is
    the lower end of ``proportion_confint(n_a, n, alpha=2 * alpha, method="beta")``.
    ``n_a = 0`` gives 0 (``Beta.ppf`` is NaN there, while the exact bound is 0).

    Args:
        n_a: successes, ``0 <= n_a <= n``.
        n: trials, ``>= 1``.
        alpha: failure probability in (0, 1).
    Guarantee: P(bound > p) <= alpha for every true proportion p.
    """
    n = validate_count("n", n)
    alpha = validate_alpha(alpha)
    check(0 <= n_a <= n, f"n_a must be in [0, n={n}], got {n_a}")
    if n_a == 0:
        return 0.0
    from scipy.stats import beta

    return float(beta.ppf(alpha, n_a, n - n_a + 1))


def clopper_pearson_upper(n_b: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper confidence bound on a binomial proportion.

    ``Beta.ppf(1 - alpha, n_b + 1, n - n_b)``: ``1 - clopper_pearson_lower(n - n_b, n, alpha)``
    (the same bound on the other outcome's rate), 1 at ``n_b = n``.  The p_B bound of a two-sided
    certificate (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Thm. 1 with p_B bounded too).
    Guarantee: P(bound < p) <= alpha for every true proportion p.
    """
    n = validate_count("n", n)
    check(0 <= n_b <= n, f"n_b must be in [0, n={n}], got {n_b}")
    return 1.0 - clopper_pearson_lower(n - n_b, n, alpha) if n_b < n else 1.0


def certified_radius(p_lower: float, sigma: float) -> float:
    """l2 radius ``sigma * Phi^-1(p_lower)`` (Jeong & Shin 2020 eq. 4, with p_B = 1 - p_A).

    Meaningful for ``p_lower > 0.5``; the radius is in the units of the noise (pixels in
    [0, 1]).  ``p_lower = 1`` cannot occur for a Clopper-Pearson bound with alpha > 0.
    """
    from scipy.stats import norm

    return float(sigma * norm.ppf(p_lower))


def binom_pvalue(n_a: int, n_b: int) -> float:
    """Two-sided p-value of the test that ``n_a`` of ``n_a + n_b`` draws come from p = 0.5.

    PREDICT abstains when it exceeds alpha (Cohen et al. 2019, Alg. PREDICT).  Uses
    ``scipy.stats.binomtest`` (``binom_test`` was removed in SciPy 1.12).
    """
    check(n_a >= 0 and n_b >= 0, f"counts must be >= 0, got {n_a}, {n_b}")
    if n_a + n_b == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(int(n_a), int(n_a + n_b), 0.5).pvalue)


def max_certifiable_radius(n: int, alpha: float, sigma: float) -> float:
    """The largest radius CERTIFY can return: every one of the n samples votes for c_A.

    ``sigma * Phi^-1(alpha^(1/n))``: the Clopper-Pearson lower bound with n_A = n is
    ``alpha^(1/n)`` (Cohen, Rosenfeld, Kolter 2019, Certified Adversarial Robustness via
    Randomized Smoothing, arXiv 1902.02918, Sec. 3.2).  3.8115 * sigma at n = 100,000 and
    alpha = 0.001; negative (every example abstains) when ``alpha^(1/n) < 0.5``.
    """
    return certified_radius(clopper_pearson_lower(n, n, alpha), sigma)


#: the largest sigma accepted: images are in [0, 1], so noise of std 10 already drowns them
MAX_SIGMA = 10.0
#: the largest radius a certificate can have: sigma <= MAX_SIGMA times Phi^-1 of a float64
#: probability below 1, which is at most 8.3 (so at most 83; the papers' radii stay below 5)
MAX_RADIUS = 100.0


def validate_sigma(sigma: float) -> float:
    """Return sigma as a float, or raise unless it is a number in (0, MAX_SIGMA]."""
    check(not isinstance(sigma, (str, bytes, bool)), f"sigma must be a number > 0, got {sigma!r}")
    try:
        s = float(sigma)
    except (TypeError, ValueError):
        raise RsmoothError(f"sigma must be a number > 0, got {sigma!r}") from None
    check(math.isfinite(s) and s > 0, f"sigma must be > 0 (noise std in [0,1] pixel units, e.g. 0.25), got {sigma!r}")
    check(s <= MAX_SIGMA, f"sigma must be <= {MAX_SIGMA:g}: it is the noise std in [0,1] pixel units "
          f"(e.g. 0.25, 0.5, 1.0), got {sigma!r}")
    return s
