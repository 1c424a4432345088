"""DDN (Rony et al. 2019, arXiv 1811.09600) on the soft-smoothed classifier, as SmoothAdv uses it.

Decoupled Direction and Norm: normalised-gradient steps on -log F_hat_y(x') with a step size on
a cosine schedule, each followed by a projection onto the sphere of a per-example radius that
shrinks by (1 - gamma) while x' is adversarial and grows by (1 + gamma) while it is not
(Salman et al. 2019, arXiv 1906.04584).  Reference: Hadisalman/smoothing-adversarial
``code/attacks.py`` ``DDN._attack_mutlinoise`` (itself from jeromerony/fast_adversarial); every
fact below comes from it unless marked as a deviation.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..errors import RsmoothError
from .base import frozen_eval
from .pgd import TINY, _num_noise, _per_example, ascent_direction, project_l2, smoothed_log_prob

__all__ = ["ddn_smoothed_input", "ddn_step_sizes", "quantize_toward_zero", "smoothed_vote"]


def ddn_step_sizes(num_steps: int, start: float = 1.0, end: float = 0.01) -> list:
    """The reference's step sizes: cosine annealing from ``start`` to ``end`` over T steps.

    The reference calls ``CosineAnnealingLR(T_max=T, eta_min=0.01).step()`` at the *start* of
    every iteration, so step i (0-based) uses epoch i + 1 of the schedule:
    end + (start - end) * (1 + cos(pi * (i + 1) / T)) / 2; the first step is slightly below 1 and
    the last one is exactly ``end``.
    """
    return [end + (start - end) * (1 + math.cos(math.pi * (i + 1) / num_steps)) / 2
            for i in range(num_steps)]


def smoothed_vote(logits: torch.Tensor) -> torch.Tensor:
    """Majority vote of the hard predictions over the m noisy copies: [B, m, K] -> [B].

    The reference takes ``argmax(1).mode()`` over the copies; ties go to the lowest class
    index here (what ``torch.mode`` returns on CPU; its tie rule is not documented).
    """
    votes = logits.argmax(2)                                                    # [B, m]
    # scatter_add_, not one_hot: one_hot reads the votes' range back to the host off CUDA
    counts = votes.new_zeros(logits.shape[0], logits.shape[2]).scatter_add_(1, votes, torch.ones_like(votes))
    return counts.argmax(1)


def ddn_smoothed_input(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noises: torch.Tensor,
    *,
    eps: Optional[float],
    num_steps: int,
    gamma: float = 0.05,
    init_norm: float = 1.0,
    quantize: bool = True,
    levels: int = 256,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """DDN on the soft-smoothed classifier with the given noises (SmoothAdv's ``--attack DDN``).

    Per step i = 0..T-1 (delta_0 = 0, radius r_0 = ``init_norm``):

    1. with the *current* delta: logits of x + delta + delta_j (j = 1..m); "adversarial" iff the
       majority vote of the m hard predictions (:func:`smoothed_vote`) is not y; if so and
       ||delta|| < best norm so far (initially ||max(x, 1 - x)||_2, the largest possible), keep
       delta as the best;
    2. delta <- delta + lr_i * g / ||g|| with g the gradient of -log F_hat_y
       (:func:`~rsmooth.attacks.pgd.smoothed_log_prob`), lr_i from :func:`ddn_step_sizes`;
    3. r <- r * (1 - gamma) if adversarial else r * (1 + gamma), capped at ||max(x, 1 - x)||;
       delta <- delta * r / ||delta||;
    4. quantise x + delta to ``levels`` levels (round), clamp to [0,1].

    The last iterate is never tested (as in the reference).  Result: the best (smallest-norm
    adversarial) delta, projected to norm <= eps and quantised; x itself when no adversarial
    was found.  The model runs under :func:`frozen_eval`.

    Deviations from the reference: (a) the final quantisation after the eps-projection touches
    only the rows the projection scaled (the others are the tested iterate, already on the grid)
    and rounds toward zero (:func:`quantize_toward_zero`) instead of to the nearest level, so the
    result stays inside the eps-ball and [0,1] (the reference's rounding can leave both by up to
    one level per pixel); (b) a delta of norm 0 in
    step 3 stays 0 (the reference divides by zero); (c) log F_hat_y is computed exactly instead
    of clamped at 1e-20.

    Args:
        x: [B, C, H, W] in [0,1]; y: [B]; noises: [B*m, C, H, W] image-major, scaled by sigma.
        eps: l2 radius of the result (the reference's ``max_norm``), or None for no projection.
        num_steps: T >= 1.  gamma: radius factor (reference default 0.05).
        init_norm: r_0 (reference default 1.0; SmoothAdv's training script sets it to the
            current, warmed-up eps every epoch).
        quantize, levels: 8-bit quantisation of the iterates (reference default: on, 256).
        generator: randomness for zero-gradient rows (see
            :func:`~rsmooth.attacks.pgd.ascent_direction`).

    Returns:
        x' [B, C, H, W], detached.
    """
    if num_steps < 1:
        raise RsmoothError(f"num_steps must be >= 1, got {num_steps}")
    if eps is not None and not eps >= 0:
        raise RsmoothError(f"eps must be >= 0, got {eps}")
    if not 0 <= gamma < 1:
        raise RsmoothError(f"DDN gamma must be in [0, 1), got {gamma}")
    m = _num_noise(x, noises)
    x = x.detach()
    noises = noises.detach()
    q = float(levels - 1)
    delta = torch.zeros_like(x)
    worst = torch.maximum(x, 1 - x).flatten(1).norm(p=2, dim=1)        # [B]
    radius = torch.full_like(worst, float(init_norm))
    best_l2 = worst.clone()
    best_delta = torch.zeros_like(x)
    with frozen_eval(model), torch.enable_grad():
        for lr in ddn_step_sizes(num_steps):
            l2 = delta.flatten(1).norm(p=2, dim=1)
            delta.requires_grad_(True)
            logits = model((x + delta).repeat_interleave(m, 0) + noises).reshape(x.shape[0], m, -1)
            loss = -smoothed_log_prob(logits, y).sum()
            (grad,) = torch.autograd.grad(loss, [delta])
            delta = delta.detach()
            is_adv = smoothed_vote(logits.detach()) != y
            better = is_adv & (l2 < best_l2)
            best_l2 = torch.where(better, l2, best_l2)
            best_delta = torch.where(_per_example(better, x), delta, best_delta)

            delta = delta + lr * ascent_direction(grad, generator)
            radius = torch.minimum(radius * (1 - (2 * is_adv.to(radius.dtype) - 1) * gamma), worst)
            norms = delta.flatten(1).norm(p=2, dim=1).clamp_min(TINY)
            delta = delta * _per_example(radius / norms, x)
            adv = x + delta
            if quantize:
                adv = (adv * q).round() / q
            delta = adv.clamp(0, 1) - x
    if eps is not None:
        scaled = best_delta.flatten(1).norm(p=2, dim=1) > eps
        best_delta = project_l2(best_delta, eps)
        if quantize:
            best_delta = torch.where(_per_example(scaled, x), quantize_toward_zero(best_delta, q), best_delta)
    return (x + best_delta).clamp(0, 1).detach()


def quantize_toward_zero(delta: torch.Tensor, q: float) -> torch.Tensor:
    """Put ``delta`` on the grid k/q, rounding toward zero except within float error of a level.

    A value within 16 machine epsilons (relative to q) of a level k/q is put on it: k/255 - j/255
    lies on the grid only up to float error, and truncating it would drop a whole level.  Every
    other value is truncated toward zero, so |result| <= |delta| elementwise up to float error,
    and x + result stays in [0,1] wherever x + delta is.
    """
    v = delta * q
    tol = 16 * torch.finfo(v.dtype).eps * q
    return (v + v.sign() * tol).trunc() / q

