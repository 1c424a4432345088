"""Cohen et al.'s PREDICT and CERTIFY and the sequential modes, as procedures on one image.

A procedure is a validated, frozen dataclass whose :meth:`steps` (given the smoothing noise,
:mod:`rsmooth.smoothing.noises`, which turns bounds into radii, and the image's label when it is
known: ``skip_wrong`` stops an image whose selected class is not its label) is a generator: it yields how
many fresh noisy samples it needs next (and receives their counts [K], numpy int64; a tuple of
numbers is drawn back to back and answered with a tuple of counts) or a
:class:`~rsmooth.smoothing.sequential.Look` (and receives its bounds), and returns the image's
result.  Written this way, one procedure runs on one image (``Smooth.certify``) or on thousands at
once (:mod:`rsmooth.smoothing.packing` fills each forward pass with samples of many images and
computes the looks of all of them together).

PREDICT and CERTIFY: Cohen, Rosenfeld & Kolter 2019, Certified Adversarial Robustness via
Randomized Smoothing, arXiv 1902.02918, Sec. 3.2.  Sequential and adaptive certification:
:mod:`rsmooth.smoothing.sequential` (Voracek 2024, arXiv 2406.17830).
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Generator, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import check
from .sequential import (ALPHA_SHARE, Decision, Look, SequentialCertificate, decide_radii, radius_gain, radius_of,
                         sequence_steps, thresholds, validate_futility, validate_radii, validate_radius_tol,
                         validate_sequential_alpha, validate_share)
from .noises import Noise
from .stats import binom_pvalue, clopper_pearson_lower, clopper_pearson_upper, validate_alpha, validate_count

#: the class a smoothed classifier returns when it abstains (Cohen et al.'s ``Smooth.ABSTAIN``)
ABSTAIN = -1
Steps = Generator[Union[int, Look], Any, Any]


def _top(counts: np.ndarray) -> int:
    """The most frequent class, ties to the lowest index."""
    return int(np.argmax(counts))


def _set(obj: Any, **values: Any) -> None:
    for key, value in values.items():
        object.__setattr__(obj, key, value)


@dataclass(frozen=True)
class Skipped:
    """The result of an image stopped after its ``samples`` (n0) selection samples because the class
    c_A they selected is not its label (``skip_wrong``): whatever more samples showed, the image
    would count at no radius in a certified-accuracy table (CERTIFY returns c_A, wrong, or
    abstains), so the table and ACR are those of running it to the end."""

    c_a: int
    samples: int


def _skip(skip_wrong: bool, label: Optional[int], c_a: int) -> bool:
    """Whether an image whose n0 samples selected ``c_a`` stops there (its label is known and another)."""
    return skip_wrong and label is not None and c_a != int(label)


@dataclass(frozen=True)
class Counts:
    """The votes of ``n`` noisy samples, nothing more (what ``Smooth.count_votes`` runs, e.g. for
    CAT-RS's consistency targets).  Its counts stay on the model's device: the packer hands back
    each image's counts row [K] without reading it to the host, and checks the non-finite votes
    of all images in one read when the stream ends.  Result: counts [K] (int64, on the device)."""

    n: int

    #: the packer returns the counts as they are on the device (no host read per image)
    on_device: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _set(self, n=validate_count("n", self.n))

    def steps(self, noise: Noise, label: Optional[int] = None) -> Steps:
        return (yield self.n)

    def samples(self, result: Any) -> int:
        return self.n

    def max_samples(self) -> int:
        return self.n


@dataclass(frozen=True)
class Predict:
    """PREDICT: the top class of ``n`` noisy votes, or ABSTAIN when the two-sided binomial test of
    the top two counts has p-value > ``alpha``.  Returns a class other than g(x) with probability
    at most alpha.  Result: the class (int)."""

    n: int
    alpha: float

    def __post_init__(self) -> None:
        _set(self, n=validate_count("n", self.n), alpha=validate_alpha(self.alpha))

    def steps(self, noise: Noise, label: Optional[int] = None) -> Steps:
        counts = yield self.n
        top2 = np.argsort(-counts, kind="stable")[:2]  # ties to the lowest index
        n_a, n_b = int(counts[top2[0]]), int(counts[top2[1]])
        return ABSTAIN if binom_pvalue(n_a, n_b) > self.alpha else int(top2[0])

    def samples(self, result: Any) -> int:
        """The noisy samples an image drew."""
        return self.n

    def max_samples(self) -> int:
        """The most noisy samples an image draws."""
        return self.n


def runner_up(counts: np.ndarray, c_a: int) -> int:
    """The largest count among the classes other than ``c_a`` (0 with one class)."""
    return int(np.delete(np.asarray(counts), c_a).max(initial=0))


def two_sided_bounds(n_a: int, n_b: int, n: int, alpha: float) -> Tuple[float, float]:
    """(p_A lower, p_B upper) of a two-sided certificate: each one-sided Clopper-Pearson at alpha/2
    (Bonferroni), p_B's capped at 1 - p_A lower (every other class has at most what c_A leaves).

    ``n_b`` is the runner-up's count among the ``n`` estimation samples, the largest count of a
    class other than c_A; that is valid although the runner-up is chosen from the same votes: the
    class c* with the largest true probability among the others has count n_c* <= n_b, and the upper
    bound grows with the count, so P(bound(n_b) < p_c*) <= P(bound(n_c*) < p_c*) <= alpha/2, and
    p_c* is every other class's bound.  With p_A's lower bound failing at most alpha/2 more, both
    hold with probability >= 1 - alpha (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Thm. 1;
    the counts-based runner-up as in Voracek's Sound-Randomized-Smoothing ``certifier.py``)."""
    p_lower = clopper_pearson_lower(n_a, n, alpha / 2)
    return p_lower, min(clopper_pearson_upper(n_b, n, alpha / 2), 1.0 - p_lower)


@dataclass(frozen=True)
class Certify:
    """CERTIFY: c_A from ``n0`` samples, the one-sided Clopper-Pearson lower bound p_A of ``n``
    fresh samples at level 1 - ``alpha``; (c_A, the noise's radius of p_A: sigma * Phi^-1(p_A) for
    Gaussian noise) if p_A >= 1/2, else (ABSTAIN, 0.0).  With probability >= 1 - alpha,
    g(x + d) = c_A for every d within the radius in the noise's norm (||d||_2 for Gaussian noise).

    ``two_sided``: p_A lower and p_B upper (the runner-up's, :func:`two_sided_bounds`), each at
    alpha/2, and the noise's radius of both (sigma/2 (Phi^-1(p_A) - Phi^-1(p_B)), Gaussian) when
    p_A > p_B, else (ABSTAIN, 0.0): larger where the other classes share the rest, slightly smaller
    where every vote is for c_A.  (Taking the larger of the one- and two-sided radii would be valid
    only at 1.5 alpha.)
    ``skip_wrong``: an image whose label is given (:meth:`steps`) and is not c_A stops after the
    n0 samples with a :class:`Skipped` result (it counts at no radius either way)."""

    n0: int
    n: int
    alpha: float
    _: KW_ONLY
    skip_wrong: bool = False
    two_sided: bool = False

    def __post_init__(self) -> None:
        _set(self, n0=validate_count("n0", self.n0), n=validate_count("n", self.n), alpha=validate_alpha(self.alpha),
             skip_wrong=bool(self.skip_wrong), two_sided=bool(self.two_sided))
        check(self.n >= self.n0, f"n ({self.n}) is below n0 ({self.n0}): the n0 samples only pick the class, the "
                                 f"n fresh ones certify it (the papers: n0 = 100, n = 100,000)")

    def steps(self, noise: Noise, label: Optional[int] = None) -> Steps:
        if self.skip_wrong and label is not None:  # the n0 samples first, read alone (the same noise drawn)
            c_a = _top((yield self.n0))
            if _skip(True, label, c_a):
                return Skipped(c_a, self.n0)
            counts = yield self.n
        else:
            counts0, counts = yield self.n0, self.n  # drawn back to back, read once
            c_a = _top(counts0)
        return self.certificate(noise, counts, c_a)

    def certificate(self, noise: Noise, counts: np.ndarray, c_a: int) -> Tuple[int, float]:
        """(c_A, radius) or (ABSTAIN, 0.0) from the estimation ``counts`` [K] of c_A = ``c_a``."""
        if self.two_sided:
            p_lower, p_upper = two_sided_bounds(int(counts[c_a]), runner_up(counts, c_a), self.n, self.alpha)
            if p_lower <= p_upper:
                return ABSTAIN, 0.0
            return c_a, float(noise.radius(p_lower, p_upper))
        p_lower = clopper_pearson_lower(int(counts[c_a]), self.n, self.alpha)
        if p_lower < 0.5:
            return ABSTAIN, 0.0
        return c_a, float(noise.radius(p_lower))

    def samples(self, result: Any) -> int:
        return result.samples if isinstance(result, Skipped) else self.n0 + self.n

    def max_samples(self) -> int:
        return self.n0 + self.n


@dataclass(frozen=True)
class _Sequence:
    """What both sequential modes share: c_A from n0 samples, then estimation samples until the
    mode's stopping rule holds or n_max (:func:`~rsmooth.smoothing.sequential.sequence_steps`);
    ``skip_wrong`` and ``two_sided`` as for :class:`Certify` (two-sided: anytime bounds on p_A
    and on the runner-up's p_B at alpha/2 each); ``alpha_share``: of alpha on the anytime bounds, the
    rest on Clopper-Pearson over all n_max samples where a radius is still open at the cap
    (:func:`~rsmooth.smoothing.sequential.split_levels`; 1: the anytime bound alone)."""

    n0: int
    alpha: float
    n_max: int
    futility: float
    _: KW_ONLY
    skip_wrong: bool = False
    two_sided: bool = False
    alpha_share: float = ALPHA_SHARE

    def __post_init__(self) -> None:
        _set(self, n0=validate_count("n0", self.n0), alpha=validate_sequential_alpha(self.alpha),
             futility=validate_futility(self.futility), n_max=validate_count("n_max", self.n_max),
             skip_wrong=bool(self.skip_wrong), two_sided=bool(self.two_sided),
             alpha_share=validate_share(self.alpha_share))
        check(self.n_max >= self.n0, f"n_max ({self.n_max}) is below n0 ({self.n0}): it caps the estimation samples, "
                                     f"as n does for certify")

    def _estimate(self, done, label: Optional[int]) -> Generator[Union[int, Look], Any, Tuple[int, Any]]:
        c_a = _top((yield self.n0))
        if _skip(self.skip_wrong, label, c_a):
            return c_a, None
        others = (lambda c: np.delete(c, c_a)) if self.two_sided else None
        bounds = yield from sequence_steps(self.alpha, self.n_max, done, self.futility, tally=lambda c: c[c_a],
                                           alpha_share=self.alpha_share, others=others)
        return c_a, bounds

    def _certificate(self, c_a: int, bounds: Any, radius: float, decisions: Tuple[Decision, ...] = ()) -> Any:
        prediction, radius = (c_a, radius) if radius is not None else (ABSTAIN, 0.0)
        two = {"n_b": bounds.n_b, "p_b_upper": min(bounds.upper_b, 1.0 - bounds.lower)} if self.two_sided else {}
        return SequentialCertificate(prediction, radius, self.n0 + bounds.n, bounds.n, bounds.n_a, c_a, bounds.lower,
                                     bounds.upper, bounds.n == self.n_max, decisions, **two)

    def samples(self, result: Union[SequentialCertificate, Skipped]) -> int:
        return result.samples

    def max_samples(self) -> int:
        return self.n0 + self.n_max


@dataclass(frozen=True)
class Sequential(_Sequence):
    """Decide robustness at each of ``radii`` (Smooth.certify_sequential says what and how).
    Result: a :class:`~rsmooth.smoothing.sequential.SequentialCertificate` with its decisions."""

    radii: Sequence[float] = ()

    def __post_init__(self) -> None:
        radii = validate_radii(self.radii)  # first: the error a user most likely needs
        super().__post_init__()
        _set(self, radii=radii)

    def steps(self, noise: Noise, label: Optional[int] = None) -> Steps:
        levels = None if self.two_sided else thresholds(self.radii, noise)

        def decisions(b):
            return decide_radii(b, self.radii, noise, self.two_sided, levels)

        c_a, bounds = yield from self._estimate(lambda b: Decision.OPEN not in decisions(b), label)
        if bounds is None:
            return Skipped(c_a, self.n0)
        final = decisions(bounds)  # none is open at n_max: the projection is the lower bound there
        robust = [r for r, d in zip(self.radii, final) if d is Decision.ROBUST]
        return self._certificate(c_a, bounds, max(robust) if robust else None, final)


@dataclass(frozen=True)
class Adaptive(_Sequence):
    """Certify the largest radius, stopping when more samples cannot raise it by ``radius_tol``
    (Smooth.certify_adaptive says what and how).  Result: a SequentialCertificate."""

    radius_tol: float = 0.05

    def __post_init__(self) -> None:
        radius_tol = validate_radius_tol(self.radius_tol)
        super().__post_init__()
        _set(self, radius_tol=radius_tol)

    def steps(self, noise: Noise, label: Optional[int] = None) -> Steps:
        c_a, bounds = yield from self._estimate(lambda b: radius_gain(b, noise, self.two_sided) <= self.radius_tol,
                                                label)
        if bounds is None:
            return Skipped(c_a, self.n0)
        if self.two_sided:
            certified = bounds.lower > min(bounds.upper_b, 1.0 - bounds.lower)
            radius = radius_of(bounds.lower, noise, bounds.upper_b) if certified else None
        else:
            radius = radius_of(bounds.lower, noise) if bounds.lower > 0.5 else None
        return self._certificate(c_a, bounds, radius)


Procedure = Union[Counts, Predict, Certify, Sequential, Adaptive]
