"""Certified accuracy and average certified radius (ACR): pure NumPy functions.

Both are computed over **all** certified examples, as in the papers' tables:
an abstention (``predict = -1``, ``radius = 0``, ``correct = 0``) counts as wrong.

- approximate certified accuracy at r (Cohen et al. 2019, arXiv 1902.02918; their
  ``analyze.py``): ``mean(correct and radius >= r)``;
- ACR (Zhai et al. 2020, arXiv 2001.02378, as defined in Jeong et al. 2022 (CAT-RS first
  version, OpenReview qLqeb9AjD2o) Sec. 4 "Evaluation metrics" and Jeong & Shin 2020
  (Consistency, arXiv 2006.04062) Sec. 4.1): ``(1/|D_test|) sum CR(f, sigma, x) * 1[f_hat(x) = y]``,
  i.e. ``mean(radius * correct)``.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple, Union

import numpy as np

from ..errors import RsmoothError

ArrayLike = Union[np.ndarray, Sequence[float]]


def _check_inputs(radius: ArrayLike, correct: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
    """Validate and convert to (float64 radius [N], bool correct [N]), N >= 1."""
    r = np.asarray(radius, dtype=np.float64)
    c = np.asarray(correct)
    if r.ndim != 1 or c.ndim != 1:
        raise RsmoothError(f"radius and correct must be 1-D, got shapes {r.shape} and {c.shape}")
    if r.shape != c.shape:
        raise RsmoothError(f"radius and correct differ in length: {r.shape[0]} vs {c.shape[0]}")
    if r.shape[0] == 0:
        raise RsmoothError("no certified examples: certified accuracy and ACR are undefined")
    if not np.all(np.isfinite(r)):
        raise RsmoothError("radius contains NaN or infinite values")
    if c.dtype != bool:
        if not np.all((c == 0) | (c == 1)):
            raise RsmoothError("correct must hold only 0/1 (or bool) values")
        c = c.astype(bool)
    return r, c


def certified_accuracy(radius: ArrayLike, correct: ArrayLike, radii: ArrayLike) -> np.ndarray:
    """Approximate certified accuracy at each radius in ``radii``.

    ``acc(r) = mean(correct & (radius >= r))`` over all N certified examples
    (abstentions count as wrong; Cohen et al. 2019; Jeong et al. 2022 Sec. 4).

    Args:
        radius: [N] certified l2 radii (0 for abstentions).
        correct: [N] bool or 0/1, prediction == label.
        radii: [R] (or a scalar) radii at which to evaluate.

    Returns:
        float64 array of the shape of ``radii``: fractions in [0, 1].
    """
    count = certified_counts(radius, correct, radii)
    return count / float(np.asarray(radius).shape[0])


def certified_counts(radius: ArrayLike, correct: ArrayLike, radii: ArrayLike) -> np.ndarray:
    """``k(r) = #{correct & (radius >= r)}`` at each radius in ``radii``: int64 of the shape of
    ``radii`` (the numerator of :func:`certified_accuracy`; N = ``len(radius)``)."""
    r, c = _check_inputs(radius, correct)
    q = np.asarray(radii, dtype=np.float64)
    if np.any(np.isnan(q)):
        raise RsmoothError("radii contain NaN")
    certified = np.sort(r[c])  # radii of the correctly classified examples
    # number of correct examples with radius >= q: those not strictly below q
    return (certified.shape[0] - np.searchsorted(certified, q, side="left")).astype(np.int64)


def acr(radius: ArrayLike, correct: ArrayLike) -> float:
    """Average certified radius ``mean(radius * correct)`` over all N examples.

    Zhai et al. 2020, as defined in Jeong et al. 2022 Sec. 4 and Jeong & Shin 2020 Sec. 4.1;
    wrong predictions and abstentions contribute 0.

    Args:
        radius: [N] certified l2 radii.
        correct: [N] bool or 0/1.
    """
    r, c = _check_inputs(radius, correct)
    return float(np.mean(np.where(c, r, 0.0)))


def default_radii(max_radius: float, step: float = 0.25) -> np.ndarray:
    """``0, step, 2*step, ...`` up to the last multiple of ``step`` that is <= ``max_radius``.

    >>> default_radii(0.953).tolist()
    [0.0, 0.25, 0.5, 0.75]
    """
    max_radius, step = float(max_radius), float(step)
    if not (math.isfinite(step) and step > 0):
        raise RsmoothError(f"radius step must be a finite number > 0, got {step!r}")
    if not (math.isfinite(max_radius) and max_radius >= 0):
        raise RsmoothError(f"max radius must be a finite number >= 0, got {max_radius!r}")
    k = int(math.floor(max_radius / step * (1 + 1e-12) + 1e-12))
    return np.round(step * np.arange(k + 1, dtype=np.float64), 12)
