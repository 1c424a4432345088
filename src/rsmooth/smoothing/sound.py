"""``sound-gaussian``: Gaussian smoothing that stays sound in floating point, on 8-bit images.

Voracek & Hein 2023, *Sound Randomized Smoothing in Floating-Point Arithmetic*, ICLR 2023, arXiv
2207.07209 (code: vvoracek/Sound-Randomized-Smoothing, ``certifier.py``).  Cohen et al.'s proof
takes ``x + eps`` in real numbers; in float32 the sum keeps bits of ``x`` below the noise's scale,
so a base classifier that reads low mantissa bits can tell which centre a sample came from and
a float Gaussian certificate can be wrong (tests/test_noise_sound.py builds such a classifier).

The fix, for images on the 8-bit grid ``x = a / 255`` (``a`` integer in 0..255):

- the noise is the Gaussian rounded to the grid: ``m`` lattice steps of 1/255 with
  ``P(m) = Phi((m + 1/2) / (255 sigma)) - Phi((m - 1/2) / (255 sigma))``, truncated at
  ``+-M``, ``M = 255 (k + 1)``, ``k = max(1, floor(6 sigma))``, the tails lumped into ``+-M``;
- the sample is formed in integers, ``y = clamp(a + m, -255 k, 255 (k + 1))``, and converted
  to a float ONCE, ``y / 255``: the float the model sees is a function of the lattice point
  ``y`` alone, never of ``a`` or ``m`` separately.

Then ``g(x) = P(f(y / 255) = c)`` is exactly Cohen's Gaussian smoothing at ``x`` of the base
classifier ``h(z) = f(clamp(round(255 z), -255 k, 255 (k + 1)) / 255)``, a fixed function on R^d
(``round(255 (x + eps)) = a + round(255 eps)`` and ``round(255 eps)`` has law ``P``; ties have
probability 0), so Cohen's l2 radius sigma/2 (Phi^-1(p_A) - Phi^-1(p_B)) holds between 8-bit
images.  Lumping the tails is exact: ``0 <= a <= 255``, so every ``m >= M`` gives
``a + m >= 255 (k + 1)`` and every ``m <= -M`` gives ``a + m <= -255 k``: both clamp to the end
point that ``m = +-M`` reaches.  The noise is centred (mean 0; Voracek & Hein's code returns
``noise/255 - k - 1``, centred at +1/255, and adds it to ``x`` in float32, where one lattice point
becomes two or three different floats: both avoided here).

Drawing exactly: a uniform integer ``u`` in [0, 2^62) (two 31-bit halves, each exactly uniform:
a power of two) is compared with a table of integer thresholds ``T_j = round(2^62 Phi((j + 1/2) /
(255 sigma)))``, ``j = -M..M-1``: the inverse CDF, integer comparisons only.  A guide table on
``u``'s top 16 bits gives the answer in one look-up; a binary search is needed only where a
threshold lies in the bucket.  The thresholds are computed with mpmath at 200 bits
(``mpmath.ncdf``, the exact value of the float ``sigma``) and cached per sigma.

Rounding the thresholds moves each ``P(m)`` by at most 2^-62, so the drawn law is within total
variation ``(2M + 1) 2^-63`` of ``P`` per coordinate (:attr:`SoundGaussian.tv`) and ``d n``
coordinates within ``d n`` times that (:meth:`SoundGaussian.alpha_slack`): a certificate at level
alpha holds with probability at least ``1 - alpha - alpha_slack(d, n)``. rsmooth states this bound
rather than lowering alpha: at sigma = 1, n = 100,000 it is 1.2e-7 for CIFAR-10 (3x32x32) and
5.8e-6 for ImageNet (3x224x224), 1/8,000 and 1/170 of alpha = 0.001.

bf16 (``--precision bf16``): the float32 sample ``y / 255`` is cast to bfloat16 afterwards, still
a function of ``y``, so the base classifier is just another ``f`` and the guarantee stands.  A
model whose parameters are bf16 or fp16 (noise drawn in that dtype) is refused: a half-precision
``x`` no longer determines its lattice point ``a``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional, Tuple

import torch

from ..errors import RsmoothError, check
from .noises import NOISES, ArrayLike, Gaussian, Noise

#: the uniform integers compared with the thresholds: [0, 2^BITS)
BITS = 62
#: ``u``'s halves on the CPU: ``hi`` and ``lo``, 31 bits each
HALF = BITS // 2
#: the top bits of ``u`` that index the guide table
GUIDE_BITS = 16
#: how far an input may be from the 8-bit grid (in units of 1/255) and still count as on it
GRID_TOLERANCE = 1e-4
#: the message's fix
QUANTISE = "x = torch.round(x * 255) / 255"


def clip_k(sigma: float) -> int:
    """``k = max(1, floor(6 sigma))``: samples are clipped to [-k, k + 1] in pixel units."""
    return max(1, math.floor(6 * sigma))


@functools.lru_cache(maxsize=32)
def thresholds(sigma: float) -> Tuple[int, ...]:
    """The 2M integers ``round(2^62 Phi((j + 1/2) / (255 sigma)))``, ``j = -M..M-1``, ``M = 255 (k + 1)``:
    the lattice offset is ``-M + #{j: T_j <= u}`` for ``u`` uniform in [0, 2^62).  Computed with
    mpmath at 200 bits (``sigma``'s float value taken exactly); cached per sigma."""
    import mpmath

    big = 255 * (clip_k(sigma) + 1)
    scale = mpmath.mpf(2) ** BITS
    with mpmath.workprec(200):
        s = 255 * mpmath.mpf(sigma)
        half = mpmath.mpf(1) / 2
        return tuple(int(mpmath.nint(scale * mpmath.ncdf((j + half) / s))) for j in range(-big, big))


#: the guide table's entry of a bucket that holds a threshold: its coordinates are searched
SEARCH = -(2 ** 31)


@functools.lru_cache(maxsize=32)
def _tables(sigma: float, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """On ``device``: the thresholds (int64) and the guide table (int32): per bucket of ``u`` (its
    top 16 bits) the offset ``m`` of all its values, or :data:`SEARCH` when a threshold lies inside
    it (at most 2M of the 2^16 buckets)."""
    table = torch.tensor(thresholds(sigma), dtype=torch.int64)
    shift = BITS - GUIDE_BITS
    starts = torch.arange(2 ** GUIDE_BITS, dtype=torch.int64) << shift
    first = torch.searchsorted(table, starts, right=True)  # thresholds <= the bucket's first u
    last = torch.searchsorted(table, starts + (1 << shift) - 1, right=True)  # ... <= its last u
    guide = torch.where(last == first, first - len(table) // 2, torch.tensor(SEARCH, dtype=torch.int64))
    return table.to(device), guide.to(torch.int32).to(device)


def lattice_offsets(shape: Tuple[int, ...], sigma: float, generator: Optional[torch.Generator],
                    device: torch.device) -> torch.Tensor:
    """Lattice offsets ``m`` (in steps of 1/255; int32 on the CPU, int64 elsewhere) of the
    truncated rounded Gaussian, exactly: ``-M + #{j: T_j <= u}`` for ``u`` uniform in [0, 2^62).

    On the CPU ``u = hi 2^31 + lo`` is drawn in halves: ``hi`` for every coordinate, whose top 16
    bits settle ``m`` through the guide table unless a threshold lies in their bucket (at most
    2M / 2^16 of the coordinates: 1.6% at sigma = 0.25); ``lo`` is drawn for those only, and they
    are searched in the whole table.  Exact: the others do not depend on ``lo``.  Elsewhere ``u`` is
    drawn whole and searched (no wait for a data-dependent count)."""
    device = torch.device(device)
    if device.type != "cpu":
        table = _tables(sigma, device)[0]
        u = torch.randint(0, 2 ** BITS, shape, dtype=torch.int64, device=device, generator=generator)
        return torch.searchsorted(table, u, right=True) - len(table) // 2
    hi = torch.empty(shape, dtype=torch.int32).random_(generator=generator)  # uniform in [0, 2^31)
    return guided(hi, sigma, lambda where: torch.randint(0, 2 ** HALF, where.shape, dtype=torch.int64,
                                                         device=device, generator=generator))


def guided(hi: torch.Tensor, sigma: float, low: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``-M + #{j: T_j <= hi 2^31 + lo}`` (int32) for ``hi`` (int32 in [0, 2^31)) on the CPU, where
    ``low(where)`` gives ``lo`` (int64 in [0, 2^31)) for the coordinates ``where`` (flat indices)
    that need it, and only for those."""
    table, guide = _tables(sigma, hi.device)
    m = guide.index_select(0, (hi >> (HALF - GUIDE_BITS)).view(-1))
    where = (m == SEARCH).nonzero().squeeze(1)
    if len(where):
        u = (hi.view(-1).index_select(0, where).to(torch.int64) << HALF) + low(where)
        m[where] = (torch.searchsorted(table, u, right=True) - len(table) // 2).to(m.dtype)
    return m.view(hi.shape)


@functools.lru_cache(maxsize=32)
def _floats(k: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The float of each ``a + m + M`` (``M = 255 (k + 1)``, ``a + m`` in [-M, 255 + M]):
    ``clamp(a + m, -255 k, 255 (k + 1)) / 255``, converted once from an exact integer."""
    big = 255 * (k + 1)
    y = torch.arange(-big, 256 + big, dtype=torch.int64).clamp_(-255 * k, 255 * (k + 1))
    return (y.to(dtype) / 255).to(device)


@NOISES.register("sound-gaussian")
@dataclass(frozen=True)
class SoundGaussian(Noise):
    """The Gaussian rounded to the 8-bit grid and added in integers (Voracek & Hein 2023, arXiv
    2207.07209; see the module's docstring): Cohen's l2 radii, sound in floating point, for
    images on the 8-bit grid (others are refused)."""

    name: ClassVar[str] = "sound-gaussian"
    norm: ClassVar[str] = "l2"

    @property
    def k(self) -> int:
        """Samples are clipped to [-k, k + 1] pixel units: ``max(1, floor(6 sigma))``."""
        return clip_k(self.sigma)

    @property
    def tv(self) -> float:
        """A bound on the total variation between the drawn and the exact law of one coordinate:
        (2M + 1) 2^-63 (each of the 2M + 1 probabilities off by at most 2^-62)."""
        return (2 * 255 * (self.k + 1) + 1) * 2.0 ** -(BITS + 1)

    def alpha_slack(self, d: int, n: int) -> float:
        """What ``n`` samples of a ``d``-pixel image add to a certificate's failure probability:
        ``d n tv`` (total variation adds up over independent coordinates)."""
        return d * n * self.tv

    def draw(self, out: torch.Tensor, x: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
        check(out.dtype in (torch.float32, torch.float64),
              f"sound-gaussian draws in float32 or float64, not {out.dtype}: keep the model's parameters in "
              f"float32 (--precision bf16 casts the noisy inputs afterwards, which stays sound)")
        m = lattice_offsets(tuple(out.shape), self.sigma, generator, out.device)
        big = 255 * (self.k + 1)
        index = m.add_(torch.round(x * 255).to(m.dtype).add_(big)).view(-1)  # a + m + M, in [0, 2M + 255]
        floats = _floats(self.k, out.dtype, out.device)  # the one conversion: a function of the lattice point
        if out.is_contiguous():
            return torch.index_select(floats, 0, index, out=out.view(-1)).view(out.shape)
        return out.copy_(floats.index_select(0, index).view(out.shape))

    def check_image(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.numel() == 0:
            return x
        v = x.detach().double()
        off = (v * 255 - torch.round(v * 255)).abs()
        bad = bool((v < 0).any() | (v > 1).any() | ~torch.isfinite(v).all() | (off > GRID_TOLERANCE).any())
        if bad:
            raise RsmoothError(
                f"sound-gaussian certifies images on the 8-bit grid (values a/255, a = 0..255) only, and this "
                f"input has values off it{_example(v)}: quantise it first ({QUANTISE}); the digits dataset "
                f"(values a/16) is not 8-bit: use fashion-mnist, mnist or cifar10, or --noise gaussian")
        return x

    def nearest_input(self, x: torch.Tensor) -> torch.Tensor:
        """The 8-bit image nearest ``x`` (its certificates hold between 8-bit images)."""
        return torch.round(x.clamp(0, 1) * 255) / 255

    def radius(self, p_lower: ArrayLike, p_upper: Optional[ArrayLike] = None) -> ArrayLike:
        return Gaussian(self.sigma).radius(p_lower, p_upper)  # Cohen's, for the base classifier h

    def level(self, radius: ArrayLike) -> ArrayLike:
        return Gaussian(self.sigma).level(radius)


def _example(v: torch.Tensor) -> str:
    """``(e.g. 0.0625)``: one value off the grid or out of [0, 1]."""
    off = ((v * 255 - torch.round(v * 255)).abs() > GRID_TOLERANCE) | (v < 0) | (v > 1) | ~torch.isfinite(v)
    return f" (e.g. {float(v[off].flatten()[0]):.6g})" if bool(off.any()) else ""
