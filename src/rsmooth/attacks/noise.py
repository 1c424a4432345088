"""PGD on the Gaussian noise: CAT-RS's worst-case noise search (Jeong et al. 2023, arXiv 2212.09000).

CAT-RS keeps the clean image x fixed and moves each noise sample delta_i to a worst-case
delta_i* with ||delta_i* - delta_i||_2 <= eps (Jeong et al. 2023 Algorithm 1 line 6, App. C.4;
Jeong et al. 2022, CAT-RS first version, OpenReview qLqeb9AjD2o, eq. 8), then re-normalises
delta_i* so it keeps the first two moments of delta_i: "normalizing the mean and standard
deviation of delta* to follow those of delta" (Jeong et al. 2023 App. C.4, Jeong et al. 2022
Sec. 3.2).  Facts from the authors' attack (alinlab/smoothing-catrs
``code/train_catrs.py``, class ``KL_PGD``): no random start; T steps of size 2 * eps / T along
the per-example l2-normalised gradient; projection of delta* - delta onto the eps-ball; the
re-normalisation is applied to the noise itself after *every* step, with the RMS
sqrt(mean(d^2)) as the scale (not the standard deviation the paper text names).

Layout: noises are image-major, rows b*M .. b*M+M-1 of [B*M, ...] belong to image b; eps is
an l2 norm in [0,1] pixel units (the reference's ``--epsilon 256`` is 1.0 here).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..errors import RsmoothError
from .base import frozen_eval
from .pgd import l2_normalize, project_l2

__all__ = ["RENORM_MODES", "renormalize", "pgd_on_noise"]

#: the closed set of re-normalisation scales: ``rms`` (authors' code, default), ``std`` (paper text)
RENORM_MODES = ("rms", "std")
#: scales below this are treated as this (an all-constant d* would otherwise divide by zero)
TINY = 1e-12


def _moments(d: torch.Tensor, mode: str):
    """Per-example (mean, scale) of d [N, ...], each [N, 1, ..., 1]."""
    flat = d.flatten(1)
    mu = flat.mean(1)
    if mode == "rms":
        s = flat.pow(2).mean(1).sqrt()
    else:  # population std; the Bessel factor would cancel in s(d) / s(d*) anyway
        s = (flat - mu[:, None]).pow(2).mean(1).sqrt()
    shape = (-1,) + (1,) * (d.dim() - 1)
    return mu.reshape(shape), s.reshape(shape)


def renormalize(d_star: torch.Tensor, d: torch.Tensor, mode: str = "rms") -> torch.Tensor:
    """Give each row of ``d_star`` the mean and scale of the same row of ``d``.

    d* <- (d* - mu(d*)) / s(d*) * s(d) + mu(d), per example (dim 0), mu = mean over the
    example's coordinates; s = sqrt(mean(d^2)) for ``mode="rms"`` (authors' code, default) or
    the standard deviation sqrt(mean((d - mu)^2)) for ``mode="std"`` (Jeong et al. 2023 App. C.4 and
    Jeong et al. 2022 Sec. 3.2 text).  With ``rms`` the result has the mean of d but, when d* has a
    non-zero mean, not exactly the RMS of d; with ``std`` it has both the mean and the std of d.
    s(d*) is clamped below at 1e-12.

    Args:
        d_star: [N, ...] the moved noises; d: [N, ...] the original noises.
    Returns:
        [N, ...] re-normalised d*.
    """
    if mode not in RENORM_MODES:
        raise RsmoothError(f"renorm must be one of {', '.join(RENORM_MODES)}, got {mode!r}")
    if d_star.shape != d.shape:
        raise RsmoothError(f"renormalize wants d* and d of one shape, got {tuple(d_star.shape)} and {tuple(d.shape)}")
    mu_star, s_star = _moments(d_star, mode)
    mu, s = _moments(d, mode)
    return (d_star - mu_star) / s_star.clamp_min(TINY) * s + mu


def pgd_on_noise(
    model: nn.Module,
    x: torch.Tensor,
    noises: torch.Tensor,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    *,
    eps: float,
    num_steps: int,
    renorm: str = "rms",
) -> torch.Tensor:
    """Worst-case noises delta_i* near delta_i for a fixed clean x (Jeong et al. 2023 App. C.4).

    From delta*(0) = delta, T = ``num_steps`` steps of

        g = grad_{delta*} sum_j loss_fn(f(x + delta*))_j,
        delta* <- delta + project_eps(delta* + (2 eps / T) g / ||g||_2 - delta),
        delta* <- renormalize(delta*, delta, renorm)        (after every step)

    per noisy copy (row), with the model under :func:`frozen_eval` (eval mode, parameters
    frozen, both restored; parameters' ``.grad`` untouched).  The projection bounds the step
    before re-normalisation; the re-normalised delta* can leave the ball slightly.  A row with
    a zero gradient does not move (the reference divides by ||g|| + 1e-8; here
    :func:`l2_normalize` divides by max(||g||, 1e-12)).  x + delta* is not clamped to [0, 1]
    (the reference does not either: Gaussian noise leaves the pixel range anyway).

    Args:
        model: maps [N, C, H, W] in [0,1] (plus noise) to logits [N, K].
        x: clean images [B, C, H, W].
        noises: [B*M, C, H, W] image-major, already scaled by sigma.
        loss_fn: logits [B*M, K] -> per-copy objective [B*M] to maximise (CAT-RS:
            KL(y_hat || F(x + delta*)); CAT-RS v1: CE(F(x + delta*), y)).
        eps: l2 radius of the search around each delta_i ([0,1] pixel units), >= 0.
        num_steps: T >= 1.
        renorm: ``"rms"`` (authors' code) or ``"std"`` (paper text), see :func:`renormalize`.

    Returns:
        delta* [B*M, C, H, W], detached.
    """
    if num_steps < 1:
        raise RsmoothError(f"num_steps must be >= 1, got {num_steps}")
    if not eps >= 0:
        raise RsmoothError(f"eps must be >= 0, got {eps}")
    if renorm not in RENORM_MODES:
        raise RsmoothError(f"renorm must be one of {', '.join(RENORM_MODES)}, got {renorm!r}")
    b = x.shape[0]
    if b == 0 or noises.shape[0] % b or noises.shape[1:] != x.shape[1:]:
        raise RsmoothError(f"noises {tuple(noises.shape)} are not M noises per image of x {tuple(x.shape)}")
    m = noises.shape[0] // b
    x_rep = x.detach().repeat_interleave(m, 0)
    delta = noises.detach()
    if eps == 0:
        return delta.clone()
    step = 2.0 * eps / num_steps
    d_star = delta
    with frozen_eval(model), torch.enable_grad():
        for _ in range(num_steps):
            d_star = d_star.detach().requires_grad_(True)
            objective = loss_fn(model(x_rep + d_star))
            if objective.shape != (x_rep.shape[0],):
                raise RsmoothError(f"loss_fn must return one value per noisy copy [{x_rep.shape[0]}], "
                                   f"got {tuple(objective.shape)}")
            (grad,) = torch.autograd.grad(objective.sum(), [d_star])
            moved = d_star.detach() + step * l2_normalize(grad)
            d_star = delta + project_l2(moved - delta, eps)
            d_star = renormalize(d_star, delta, renorm)
    return d_star.detach()
