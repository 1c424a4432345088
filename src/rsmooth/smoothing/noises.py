"""Smoothing noises: how a noise is drawn, which norm it certifies, and the radius of a bound.

A smoothed classifier's guarantee is about its noise distribution; everything rsmooth draws and
every radius it computes goes through one :class:`Noise` object.  ``--sigma`` is the noise's
standard deviation per coordinate in [0, 1] pixel units for every noise, so models and commands
compare at the same noise power.

- ``gaussian``: N(0, sigma^2 I), l2 radius sigma * Phi^-1(p_A) (Cohen, Rosenfeld & Kolter 2019,
  Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918, Thm. 1).
- ``uniform``, ``laplace``: l1 radii (:mod:`rsmooth.smoothing.l1`).

A new noise is one subclass registered in :data:`NOISES`; :func:`make_noise` builds one from a
name and sigma, :func:`noise_from_spec` from what a sidecar or checkpoint recorded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Union

import numpy as np
import torch

from ..errors import RsmoothError, check
from ..registry import Registry
from .stats import validate_sigma

ArrayLike = Union[float, np.ndarray]

#: every noise by name: ``--noise NAME``
NOISES: "Registry[type]" = Registry("noise")
#: the noise of Cohen et al. and of every checkpoint and file that names none
DEFAULT_NOISE = "gaussian"


@dataclass(frozen=True)
class Noise:
    """A smoothing noise of standard deviation ``sigma`` per coordinate ([0, 1] pixel units).

    Subclasses set ``name`` and ``norm`` and implement :meth:`draw`, :meth:`radius` and
    :meth:`level`; a noise that certifies only some inputs (the 8-bit grid) overrides
    :meth:`check_image`.
    """

    sigma: float

    #: the registry name (``--noise``), recorded in sidecars and checkpoints
    name: ClassVar[str] = ""
    #: the norm of the perturbations its radii bound: "l2" or "l1"
    norm: ClassVar[str] = "l2"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", validate_sigma(self.sigma))

    def draw(self, out: torch.Tensor, x: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
        """``out`` filled with noisy copies of ``x`` (broadcast to it), drawn from ``generator`` in
        ``out``'s layout; returns ``out``.  The one place smoothing noise is drawn."""
        raise NotImplementedError

    def like(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Noise shaped like ``x`` (image-major) drawn by a training step's
        :class:`~rsmooth.methods.StepContext` ``ctx`` (its ``randn``/``rand``): what the training
        methods add (:meth:`rsmooth.methods.Method.noise_like`)."""
        raise NotImplementedError

    def radius(self, p_lower: ArrayLike, p_upper: Optional[ArrayLike] = None) -> ArrayLike:
        """The radius certified when P(f = c_A) >= ``p_lower`` and every other class has
        probability <= ``p_upper`` (default ``1 - p_lower``: Cohen et al.'s one-sided form).
        Meaningful when ``p_lower > p_upper``; floats or numpy arrays."""
        raise NotImplementedError

    def level(self, radius: ArrayLike) -> ArrayLike:
        """The p_A lower bound that certifies ``radius`` one-sided (the inverse of :meth:`radius`
        with ``p_upper = 1 - p_lower``): what the sequential modes test against."""
        raise NotImplementedError

    def check_image(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` if this noise can certify it, else a one-line error saying how to fix it."""
        return x

    def nearest_input(self, x: torch.Tensor) -> torch.Tensor:
        """The input nearest ``x`` that this noise's certificates speak about (``x`` itself for most;
        the 8-bit image for the sound Gaussian): where an audit checks a candidate point."""
        return x

    def params(self) -> Dict[str, Any]:
        """The noise's own parameters besides sigma (none for most)."""
        return {}

    def spec(self) -> Dict[str, Any]:
        """What identifies the noise in a sidecar, checkpoint or run identity: ``noise`` (the name),
        ``sigma`` and, when it has any, ``noise_params``."""
        params = self.params()
        return {"noise": self.name, "sigma": self.sigma, **({"noise_params": params} if params else {})}

    def describe(self) -> str:
        """A short human label, e.g. ``gaussian sigma=0.25 (l2)``."""
        return f"{self.name} sigma={self.sigma:g} ({self.norm})"


@NOISES.register("gaussian")
@dataclass(frozen=True)
class Gaussian(Noise):
    """N(0, sigma^2 I) in the model's float dtype (Cohen et al. 2019, arXiv 1902.02918): l2 radius
    sigma/2 (Phi^-1(p_A) - Phi^-1(p_B)), sigma * Phi^-1(p_A) one-sided (their Theorem 1)."""

    name: ClassVar[str] = "gaussian"
    norm: ClassVar[str] = "l2"

    def draw(self, out: torch.Tensor, x: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
        return out.normal_(0.0, self.sigma, generator=generator).add_(x)

    def like(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        return ctx.randn(x.shape, device=x.device, dtype=x.dtype).mul_(self.sigma)

    def radius(self, p_lower: ArrayLike, p_upper: Optional[ArrayLike] = None) -> ArrayLike:
        from scipy.stats import norm

        if p_upper is None:
            return _like(p_lower, self.sigma * norm.ppf(p_lower))
        return _like(p_lower, self.sigma / 2 * (norm.ppf(p_lower) - norm.ppf(p_upper)))

    def level(self, radius: ArrayLike) -> ArrayLike:
        from scipy.stats import norm

        return _like(radius, norm.cdf(np.asarray(radius, dtype=np.float64) / self.sigma))


def _like(template: ArrayLike, value: Any) -> ArrayLike:
    """``value`` as a Python float when ``template`` is a scalar, else as a numpy array."""
    return float(value) if np.ndim(template) == 0 else np.asarray(value, dtype=np.float64)


def make_noise(name: str, sigma: float, **params: Any) -> Noise:
    """The registered noise ``name`` at ``sigma`` (and its own parameters), checked.

    Args:
        name: a name of :data:`NOISES` (gaussian, sound-gaussian, uniform, laplace: ``--noise``).
        sigma: the noise's standard deviation per coordinate, in [0, 1] pixel units.
        **params: the noise's own parameters, if it has any.

    Returns:
        the :class:`Noise`, to pass to ``Smooth`` in place of sigma.

    Example:
        ```python
        smooth = Smooth(model, num_classes=10, sigma=make_noise("uniform", 0.5))  # l1 radii
        ```
    """
    check(isinstance(name, str), f"noise must be a name ({', '.join(NOISES.names())}), got {name!r}")
    return NOISES.get(name)(sigma, **params)


def noise_from_spec(spec: Dict[str, Any]) -> Noise:
    """The noise a sidecar or checkpoint recorded (its ``noise``, ``sigma`` and ``noise_params``
    fields, :meth:`Noise.spec`; other fields are ignored, so a whole sidecar will do).  A record
    without a noise name is Cohen et al.'s Gaussian (files written before noises had names)."""
    check(isinstance(spec, dict), f"a noise record must be a mapping, got {type(spec).__name__}")
    params = spec.get("noise_params") or {}
    check(isinstance(params, dict), f"noise_params must be a mapping, got {params!r}")
    try:
        return make_noise(spec.get("noise") or DEFAULT_NOISE, spec.get("sigma"), **params)
    except TypeError as e:
        raise RsmoothError(f"the noise record {spec!r} has parameters this version does not know: {e}") from None


def as_noise(noise: Union[float, Noise]) -> Noise:
    """``noise`` itself, or Cohen et al.'s Gaussian when given a sigma (a number)."""
    if isinstance(noise, Noise):
        return noise
    return Gaussian(noise)  # a string is refused by validate_sigma
