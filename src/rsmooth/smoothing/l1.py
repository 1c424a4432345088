"""l1 certificates: uniform and Laplace smoothing noise.

``sigma`` is the standard deviation per coordinate, as for every noise (and as rs4a's ``sigma``):

- ``uniform``: U[-lambda, lambda]^d with lambda = sigma * sqrt(3); l1 radius 2 lambda (p_A - 1/2)
  one-sided (Yang, Duan, Hu, Salman, Razenshteyn & Li 2020, Randomized Smoothing of All Shapes
  and Sizes, arXiv 2002.08118, Table 1 and rs4a's ``Uniform.certify_l1``).
- ``laplace``: i.i.d. Laplace(0, lambda) with lambda = sigma / sqrt(2); l1 radius
  -lambda log(2 (1 - p_A)) one-sided (Teng, Lee & Yuan 2020, l1 Adversarial Robustness
  Certificates: a Randomized Smoothing Approach, ICLR 2020 submission on OpenReview; Yang et al. 2020,
  Table 1; rs4a's ``Laplace.certify_l1``).

One-sided, both radii are Q(p_A) with Q the quantile function of one coordinate's noise: the
worst l1 shift of a product of these noises moves one coordinate (Yang et al. 2020 for uniform
noise, Teng et al. 2020 for Laplace noise), and along it the Neyman-Pearson set of p_A is a tail.
Two-sided, uniform noise certifies lambda (p_A - p_B), exactly: a shift d leaves the cube's overlap
with its translate at least 1 - ||d||_1 / (2 lambda) of its volume, so P(c_A) drops and P(c_B)
rises by at most ||d||_1 / (2 lambda) each; Laplace noise certifies Teng et al.'s published
two-sided bound (:meth:`Laplace.radius`), checked against shifts split over two coordinates by a
brute-force Neyman-Pearson evaluation (tests/test_noise_l1.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
import torch

from .noises import NOISES, ArrayLike, Noise, _like


@dataclass(frozen=True)
class _Separable(Noise):
    """i.i.d. noise per coordinate of scale ``lam``, whose l1 radius is half the difference of its
    one-coordinate quantiles at p_A and p_B (:meth:`quantile`); :meth:`level` is its CDF."""

    norm: ClassVar[str] = "l1"

    @property
    def lam(self) -> float:
        """The noise's scale lambda (rs4a's ``lambd``)."""
        raise NotImplementedError

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """Q(p) of one coordinate's noise (float64)."""
        raise NotImplementedError

    def cdf(self, t: np.ndarray) -> np.ndarray:
        """F(t) of one coordinate's noise (float64)."""
        raise NotImplementedError

    def radius(self, p_lower: ArrayLike, p_upper: Optional[ArrayLike] = None) -> ArrayLike:
        p_a = np.asarray(p_lower, dtype=np.float64)
        if p_upper is None:
            return _like(p_lower, self.quantile(p_a))
        return _like(p_lower, (self.quantile(p_a) - self.quantile(np.asarray(p_upper, dtype=np.float64))) / 2)

    def level(self, radius: ArrayLike) -> ArrayLike:
        return _like(radius, self.cdf(np.asarray(radius, dtype=np.float64)))


@NOISES.register("uniform")
@dataclass(frozen=True)
class Uniform(_Separable):
    """U[-lambda, lambda]^d, lambda = sigma sqrt(3) (Yang et al. 2020, arXiv 2002.08118): l1 radius
    lambda (p_A - p_B), 2 lambda (p_A - 1/2) one-sided; at most lambda, whatever n."""

    name: ClassVar[str] = "uniform"

    @property
    def lam(self) -> float:
        return self.sigma * math.sqrt(3.0)

    def draw(self, out: torch.Tensor, x: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
        return out.uniform_(-self.lam, self.lam, generator=generator).add_(x)

    def like(self, x: torch.Tensor, ctx) -> torch.Tensor:
        return ctx.rand(x.shape, device=x.device, dtype=x.dtype).mul_(2 * self.lam).sub_(self.lam)

    def quantile(self, p: np.ndarray) -> np.ndarray:
        return self.lam * (2 * p - 1)

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return np.clip(0.5 + t / (2 * self.lam), 0.0, 1.0)


@NOISES.register("laplace")
@dataclass(frozen=True)
class Laplace(_Separable):
    """i.i.d. Laplace(0, lambda), lambda = sigma / sqrt(2) (Teng et al. 2020; Yang et al. 2020,
    arXiv 2002.08118): l1 radius -lambda log(2 (1 - p_A)) one-sided, Teng et al.'s
    max(lambda/2 log(p_A / p_B), -lambda log(1 - p_A + p_B)) two-sided (:meth:`radius`).  Drawn by the inverse CDF of a
    uniform on (-1, 1), as torch.distributions.Laplace (and rs4a through it) draws, with one
    temporary the size of ``out``."""

    name: ClassVar[str] = "laplace"

    @property
    def lam(self) -> float:
        return self.sigma / math.sqrt(2.0)

    def draw(self, out: torch.Tensor, x: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
        u = torch.empty_like(out).uniform_(-1.0, 1.0, generator=generator)
        return _laplace(u, self.lam, out).add_(x)

    def like(self, x: torch.Tensor, ctx) -> torch.Tensor:
        u = ctx.rand(x.shape, device=x.device, dtype=x.dtype).mul_(2).sub_(1)
        return _laplace(u, self.lam, torch.empty_like(u))

    def radius(self, p_lower: ArrayLike, p_upper: Optional[ArrayLike] = None) -> ArrayLike:
        """One-sided: -lambda log(2 (1 - p_A)).  Two-sided: Teng et al.'s published bound
        max(lambda/2 log(p_A / p_B), -lambda log(1 - p_A + p_B)), which is the one-sided one at
        p_B = 1 - p_A; the Neyman-Pearson limit of a one-coordinate shift, (Q(p_A) - Q(p_B)) / 2, is
        larger where p_A + p_B < 1, but that a split shift is never worse is not proven for two
        classes, so it is not used."""
        if p_upper is None:
            return super().radius(p_lower)
        p_a, p_b = np.asarray(p_lower, dtype=np.float64), np.asarray(p_upper, dtype=np.float64)
        with np.errstate(divide="ignore"):
            r = np.maximum(self.lam / 2 * np.log(p_a / p_b), -self.lam * np.log1p(-(p_a - p_b)))
        return _like(p_lower, r)

    def quantile(self, p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.where(p < 0.5, self.lam * np.log(2 * p), -self.lam * np.log(2 * (1 - p)))

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return np.where(t < 0, 0.5 * np.exp(np.minimum(t, 0) / self.lam), 1 - 0.5 * np.exp(-np.maximum(t, 0) / self.lam))


def _laplace(u: torch.Tensor, lam: float, out: torch.Tensor) -> torch.Tensor:
    """``out`` = -lam sign(u) log(1 - |u|): Laplace(0, lam) from ``u`` uniform on [-1, 1) (|u| kept
    below 1, so every draw is finite)."""
    top = 1.0 - torch.finfo(u.dtype).eps
    return torch.abs(u, out=out).clamp_(max=top).neg_().log1p_().mul_(-lam).copysign_(u)
