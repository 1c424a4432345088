"""SmoothAdv's evaluation attack on a smoothed classifier: PGD or DDN on the soft-smoothed
classifier with m noises, as its ``code/predict.py`` runs it before PREDICT.

Salman, Yang, Li, Zhang, Zhang, Razenshteyn & Bubeck 2019, Provably Robust Deep Learning via
Adversarially Trained Smoothed Classifiers, arXiv 1906.04584 (Sec. 5 "empirical robustness",
App.); code: Hadisalman/smoothing-adversarial ``code/predict.py`` (the driver) and
``code/attacks.py`` (``PGD_L2._attack_mutlinoise``, ``DDN._attack_mutlinoise``).  Facts taken
from the driver, with the flag that holds them:

- the m noises are drawn **once** per image (``noise = torch.randn_like(x) * sigma`` on the image
  repeated ``--num-noise-vec`` times) and every step of the attack uses the same m;
- PGD: ``PGD_L2(steps=--num-steps, max_norm=--epsilon)``, step size 2 eps / T, no random start
  (``random_start`` is stored but never read);
- DDN: ``DDN(steps=--num-steps, max_norm=--epsilon, init_norm=--init-norm-DDN / 256,
  gamma=1 - (3/510/eps)^(1/T))`` (the driver overrides ``--gamma-DDN`` whenever eps > 0), with
  the class defaults ``quantize=True, levels=256``;
- the README's evaluation commands use ``--num-steps 20 --num-noise-vec 32`` (m_test = 32), the
  defaults here; ``--init-norm-DDN`` defaults to 256 (1.0 in [0, 1] pixel units).

eps is an l2 norm in [0, 1] pixel units (the driver divides ``--epsilon`` by 256 first).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from ..errors import RsmoothError, check
from .ddn import ddn_smoothed_input
from .pgd import pgd_smoothed_input

if TYPE_CHECKING:
    from ..smoothing.noises import Noise

__all__ = ["EVAL_ATTACKS", "EVAL_STEPS", "EVAL_NUM_NOISE", "DDN_INIT_NORM", "ddn_gamma", "validate_eps",
           "attack_smoothed", "attack_with_noises", "draw_noises"]

#: the evaluation attacks (predict.py ``--attack``)
EVAL_ATTACKS = ("pgd", "ddn")
#: T: README's evaluation commands, ``--num-steps 20``
EVAL_STEPS = 20
#: m_test: README's evaluation commands, ``--num-noise-vec 32``
EVAL_NUM_NOISE = 32
#: DDN's first radius: predict.py ``--init-norm-DDN 256`` / 256
DDN_INIT_NORM = 1.0


def ddn_gamma(eps: float, num_steps: int) -> float:
    """predict.py's DDN radius factor: gamma = 1 - (3/510/eps)^(1/T), so the radius can shrink from
    eps to 3/510 (1.5 levels of 255) over T steps; 0 for eps <= 3/510 (the formula turns negative)."""
    return max(0.0, 1.0 - (3.0 / 510.0 / eps) ** (1.0 / num_steps))


def validate_eps(eps: float) -> float:
    """An attack radius: a finite number > 0 (one-line error otherwise)."""
    ok = isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < float(eps) < float("inf")
    check(ok, f"--eps must be numbers > 0 (l2 radii in [0,1] pixel units, e.g. 0.25 0.5), got {eps!r}")
    return float(eps)


def attack_with_noises(model: nn.Module, x: torch.Tensor, y: torch.Tensor, noises: torch.Tensor, *, eps: float,
                       attack: str = "pgd", num_steps: int = EVAL_STEPS, init_norm: float = DDN_INIT_NORM,
                       generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The evaluation attack with the given noises [B*m, C, H, W] (image-major, scaled): the
    reference's settings above on :func:`~rsmooth.attacks.pgd.pgd_smoothed_input` or
    :func:`~rsmooth.attacks.ddn.ddn_smoothed_input`.  x [B, C, H, W] in [0, 1], y [B] the class
    attacked away from.  Returns x' [B, C, H, W] with ||x' - x||_2 <= eps, x' in [0, 1]."""
    check(attack in EVAL_ATTACKS, f"attack must be one of {', '.join(EVAL_ATTACKS)}, got {attack!r}")
    eps = validate_eps(eps)
    if attack == "pgd":
        return pgd_smoothed_input(model, x, y, noises, eps=eps, num_steps=num_steps, generator=generator)
    return ddn_smoothed_input(model, x, y, noises, eps=eps, num_steps=num_steps, gamma=ddn_gamma(eps, num_steps),
                              init_norm=init_norm, generator=generator)


def draw_noises(noise: "Noise", shape, generator: Optional[torch.Generator], like: torch.Tensor) -> torch.Tensor:
    """Noise alone of ``shape`` in ``like``'s dtype and device: ``noise.draw`` around a zero image (the
    reference's ``torch.randn_like(x) * sigma`` for the Gaussian)."""
    out = torch.empty(shape, device=like.device, dtype=like.dtype)
    return noise.draw(out, torch.zeros((), device=like.device, dtype=like.dtype), generator)


def attack_smoothed(model: nn.Module, x: torch.Tensor, y: torch.Tensor, noise: "Noise", *, eps: float,
                    attack: str = "pgd", num_steps: int = EVAL_STEPS, num_noise: int = EVAL_NUM_NOISE,
                    generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """SmoothAdv's evaluation attack on g = ``noise``-smoothed ``model`` at x [B, C, H, W] (labels
    y [B]): m = ``num_noise`` noises per image drawn once from ``generator`` (:func:`draw_noises`),
    then :func:`attack_with_noises`.  Returns x' [B, C, H, W], detached.

    Example:
        ```python
        from rsmooth.attacks.evaluate import attack_smoothed
        from rsmooth.smoothing.noises import make_noise

        x_adv = attack_smoothed(model, x, y, make_noise("gaussian", 0.25), eps=0.5, attack="ddn")
        ```
    """
    if isinstance(num_noise, bool) or not isinstance(num_noise, int) or num_noise < 1:
        raise RsmoothError(f"--num-noise (m, noises per attack step) must be an integer >= 1, got {num_noise!r}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise RsmoothError(f"--num-steps must be an integer >= 1, got {num_steps!r}")
    noises = draw_noises(noise, (x.shape[0] * num_noise, *x.shape[1:]), generator, x)
    return attack_with_noises(model, x, y, noises, eps=eps, attack=attack, num_steps=num_steps, generator=generator)
