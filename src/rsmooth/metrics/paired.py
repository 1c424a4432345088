"""Two certifications of the same test images compared image by image.

A certified accuracy from m test images carries the sampling error of those images (a
Clopper-Pearson interval of several points for m = 1,000), so two models, or a model and a
published row, compared figure against figure cannot tell a small difference from a lucky
subset.  Certified on the *same* images, they can: the images both models certify cancel, and
only the images certified by one model alone (the discordant pairs) carry information.

- Certified accuracy at a radius: the exact McNemar test (McNemar 1947, *Note on the sampling
  error of the difference between correlated proportions or percentages*, Psychometrika 12(2)) of
  "each model certifies as often": under it the discordant images split Binomial(b + c, 1/2), and
  the two-sided p-value is the binomial test's.
- ACR: the paired differences ``radius_a * correct_a - radius_b * correct_b`` per image, their mean
  and its normal (1 - beta) interval (the central limit theorem over images; the differences are
  bounded by the largest certifiable radius).

Public codebases write radii with 3 significant digits (``{:.3}``), rsmooth at full precision:
:func:`printed_radii` rounds rsmooth's as theirs are, for a comparison of like with like.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from ..errors import RsmoothError, check
from ..smoothing.stats import check_probability
from .certify_io import CertifyResult


@dataclass(frozen=True)
class RadiusComparison:
    """Certified accuracy at ``radius`` of models A and B on the shared images (fractions), the
    images certified by A only and by B only, and the exact McNemar p-value."""

    radius: float
    accuracy_a: float
    accuracy_b: float
    only_a: int
    only_b: int
    p_value: float


@dataclass(frozen=True)
class PairedComparison:
    """A and B on the ``images`` test images both certified (of ``images_a`` and ``images_b``):
    per radius, and ACR with the paired difference A - B and its ``level`` interval."""

    images: int
    images_a: int
    images_b: int
    radii: Tuple[RadiusComparison, ...]
    acr_a: float
    acr_b: float
    acr_difference: float
    acr_interval: Tuple[float, float]
    level: float


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of ``only_a`` of ``only_a + only_b`` at 1/2."""
    from scipy.stats import binomtest

    n = only_a + only_b
    return 1.0 if n == 0 else float(binomtest(only_a, n, 0.5).pvalue)


def printed_radii(radius: np.ndarray, digits: int = 3) -> np.ndarray:
    """``radius`` as the public codebases' certify scripts print it (``'{:.3}'``: 3 significant
    digits; 1.7496 -> 1.75), for comparing rsmooth's full-precision files with theirs."""
    return np.array([float(f"{r:.{digits}}") for r in np.asarray(radius, dtype=float)])


def compare_paired(a: CertifyResult, b: CertifyResult, radii: Sequence[float], level: float = 0.95) -> PairedComparison:
    """Compare certifications ``a`` and ``b`` on the test images (idx) both hold, at ``radii``.

    A one-line error when they share no image or give one image different labels (not the same
    test set)."""
    level = check_probability("level", level, "0.95")
    common = np.intersect1d(a.idx, b.idx)
    check(common.size > 0, f"{_name(a)} and {_name(b)} certify no test image in common (their idx columns do "
                           f"not overlap); compare certifications of the same test set")
    ia, ib = _positions(a, common), _positions(b, common)
    wrong = np.flatnonzero(a.label[ia] != b.label[ib])
    if wrong.size:
        i = int(common[wrong[0]])
        raise RsmoothError(f"{_name(a)} and {_name(b)} give test image {i} the labels {int(a.label[ia][wrong[0]])} "
                           f"and {int(b.label[ib][wrong[0]])}: not the same test set (or not the same order)")
    ra, rb = a.radius[ia] * a.correct[ia], b.radius[ib] * b.correct[ib]
    rows: List[RadiusComparison] = []
    for r in radii:
        ca, cb = a.correct[ia] & (a.radius[ia] >= r), b.correct[ib] & (b.radius[ib] >= r)
        only_a, only_b = int((ca & ~cb).sum()), int((cb & ~ca).sum())
        rows.append(RadiusComparison(float(r), float(ca.mean()), float(cb.mean()), only_a, only_b,
                                     mcnemar_p(only_a, only_b)))
    d = ra - rb
    half = _normal_quantile(level) * (d.std(ddof=1) / math.sqrt(d.size) if d.size > 1 else math.inf)
    return PairedComparison(int(common.size), a.n, b.n, tuple(rows), float(ra.mean()), float(rb.mean()),
                            float(d.mean()), (float(d.mean() - half), float(d.mean() + half)), level)


def _positions(res: CertifyResult, idx: np.ndarray) -> np.ndarray:
    """Where each of the sorted ``idx`` sits in ``res`` (whose rows may be in any order)."""
    order = np.argsort(res.idx, kind="stable")
    return order[np.searchsorted(res.idx[order], idx)]


def _normal_quantile(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


def _name(res: CertifyResult) -> str:
    return str(res.path) if res.path is not None else "a certification"
