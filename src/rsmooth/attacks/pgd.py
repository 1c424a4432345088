"""l2 PGD on the input of the soft-smoothed classifier, and the primitives it is made of.

SmoothAdv (Salman et al. 2019, arXiv 1906.04584; Jeong & Shin 2020, Consistency, arXiv
2006.04062, App. E.1 eq. 3-4) attacks the *soft-smoothed* classifier F_hat(x) =
E_delta[F(x + delta)], approximated with m fixed noises delta_1..delta_m, by normalised-gradient
ascent on -log F_hat_y(x').  SmoothMix (Jeong et al. 2021, arXiv 2111.09277, Algorithm 1) runs
the same ascent without an l2 ball.  Reference: Hadisalman/smoothing-adversarial
``code/attacks.py`` ``PGD_L2._attack_mutlinoise``; facts taken from it are named below.

All tensors are in [0,1] pixel space; eps and step sizes are l2 norms in [0,1] pixel units
(the reference code's ``--epsilon`` is in 1/256 units: its 256 is 1.0 here).  Noisy copies are
laid out image-major: rows b*m .. b*m+m-1 of [B*m, ...] belong to image b.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..draws import draw
from ..errors import RsmoothError
from .base import frozen_eval

__all__ = ["l2_normalize", "project_l2", "smoothed_log_prob", "ascent_direction",
           "pgd_smoothed_input"]

#: norms below this count as zero in :func:`l2_normalize`
TINY = 1e-12


def _per_example(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape [B] to [B, 1, ..., 1] to broadcast against ``like`` [B, ...]."""
    return v.reshape(-1, *([1] * (like.dim() - 1)))


def l2_normalize(g: torch.Tensor, tiny: float = TINY) -> torch.Tensor:
    """g / ||g||_2 per example (row of dim 0), [B, ...] -> [B, ...].

    Rows with norm <= ``tiny`` are divided by ``tiny`` instead (so an all-zero row stays zero,
    never NaN).
    """
    norms = g.flatten(1).norm(p=2, dim=1)
    return g / _per_example(norms.clamp_min(tiny), g)


def project_l2(delta: torch.Tensor, eps: Union[float, torch.Tensor]) -> torch.Tensor:
    """Project each example of ``delta`` [B, ...] onto the l2 ball of radius ``eps``.

    eps: a float or a tensor [B].  Rows with norm > eps are scaled by eps / (norm + 1e-7), the
    rule of ``torch.renorm`` that the reference code uses (``delta.renorm_(2, 0, max_norm)``),
    so the result's norm is <= eps; other rows are unchanged.
    """
    norms = delta.flatten(1).norm(p=2, dim=1)
    # a float is filled in on the device: torch.as_tensor(float, device=...) copies from the host and waits
    eps_t = eps.to(norms) if isinstance(eps, torch.Tensor) else norms.new_full((), eps)
    scale = torch.where(norms > eps_t, eps_t / (norms + 1e-7), torch.ones_like(norms))
    return delta * _per_example(scale, delta)


def smoothed_log_prob(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log F_hat_y = log((1/m) sum_i softmax(logits_i)_y) per image (Jeong & Shin 2020 eq. 4).

    logits: [B, m, K], or [B*m, K] image-major (m = B*m / len(y)); y: [B] labels.  Returns [B].
    Computed as logsumexp_i(log_softmax_i[y]) - log m, which is exact where the reference's
    ``log(mean softmax).clamp(min=1e-20)`` clips (and has a zero gradient) below 1e-20.
    """
    if logits.dim() == 2:
        b = y.shape[0]
        if b == 0 or logits.shape[0] % b:
            raise RsmoothError(f"logits [{logits.shape[0]} x K] are not m noisy copies of {b} images")
        logits = logits.reshape(b, logits.shape[0] // b, logits.shape[1])
    if logits.dim() != 3 or logits.shape[0] != y.shape[0]:
        raise RsmoothError(f"smoothed_log_prob wants logits [B x m x K] and y [B], got "
                           f"{tuple(logits.shape)} and {tuple(y.shape)}")
    m = logits.shape[1]
    logp_y = F.log_softmax(logits, dim=2).gather(2, y.reshape(-1, 1, 1).expand(-1, m, 1)).squeeze(2)
    return torch.logsumexp(logp_y, dim=1) - logp_y.new_full((), m).log()  # filled on the device: no host copy


def ascent_direction(grad: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The step direction of the reference attacks: grad / ||grad||_2 per example.

    Where a row's gradient is exactly zero the reference code steps along an (unnormalised)
    standard normal draw instead; with a ``generator`` (a ``torch.Generator`` or a training step's
    context, see :func:`rsmooth.draws.draw`) this does the same (the draw is made for every row, so
    the stream advances the same way whatever the gradients are, and no device synchronisation is
    needed); without one such rows do not move.
    """
    d = l2_normalize(grad)
    if generator is None:
        return d
    z = draw("randn", grad.shape, generator, device=grad.device, dtype=grad.dtype)
    zero = _per_example(grad.flatten(1).norm(p=2, dim=1) == 0, grad)
    return torch.where(zero, z, d)


def _num_noise(x: torch.Tensor, noises: torch.Tensor) -> int:
    b = x.shape[0]
    if b == 0 or noises.shape[0] % b or noises.shape[1:] != x.shape[1:]:
        raise RsmoothError(f"noises {tuple(noises.shape)} are not m noises per image of x {tuple(x.shape)}")
    return noises.shape[0] // b


def pgd_smoothed_input(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noises: torch.Tensor,
    *,
    eps: Optional[float],
    num_steps: int,
    step_size: Optional[float] = None,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """l2 PGD on the soft-smoothed classifier (SmoothAdv; Jeong & Shin 2020 App. E.1 eq. 4).

    Finds x' with ||x' - x||_2 <= eps, x' in [0,1], that maximises
    -log((1/m) sum_i F_y(x' + delta_i)) for the *given* noises (shared by the attack and the
    training step that follows).  From delta = 0, ``num_steps`` (T) steps
    delta <- delta + step_size * g / ||g||_2 (per example; g the gradient of the objective,
    see :func:`ascent_direction` for g = 0), each followed by the reference's projection:
    clamp x + delta to [0,1], then rescale delta to norm <= eps (:func:`project_l2`).
    step_size defaults to 2 * eps / T.  The model runs under :func:`frozen_eval` (eval mode,
    frozen parameters, both restored; parameters' ``.grad`` untouched).

    Args:
        model: maps [N, C, H, W] in [0,1] to logits [N, K].
        x: clean images [B, C, H, W] in [0,1]; y: labels [B].
        noises: [B*m, C, H, W], image-major, already scaled by sigma.
        eps: l2 radius in [0,1] pixel units, or None for no ball (only the clamp to [0,1];
            SmoothMix's adversary), which needs an explicit ``step_size``.
        num_steps: T >= 1.
        generator: randomness for zero-gradient rows (the reference's random direction).

    Returns:
        x' [B, C, H, W], detached.
    """
    if num_steps < 1:
        raise RsmoothError(f"num_steps must be >= 1, got {num_steps}")
    if eps is None and step_size is None:
        raise RsmoothError("pgd_smoothed_input without an eps-ball (eps=None) needs a step_size")
    if eps is not None and not eps >= 0:
        raise RsmoothError(f"eps must be >= 0, got {eps}")
    m = _num_noise(x, noises)
    x = x.detach()
    noises = noises.detach()
    step = 2.0 * eps / num_steps if step_size is None else float(step_size)
    if step == 0 or eps == 0:
        return x.clone()
    delta = torch.zeros_like(x)
    with frozen_eval(model), torch.enable_grad():
        for _ in range(num_steps):
            delta.requires_grad_(True)
            logits = model((x + delta).repeat_interleave(m, 0) + noises)
            loss = -smoothed_log_prob(logits, y).sum()  # per-example objectives, summed
            (grad,) = torch.autograd.grad(loss, [delta])
            delta = delta.detach() + step * ascent_direction(grad, generator)
            delta = (x + delta).clamp(0, 1) - x
            if eps is not None:
                delta = project_l2(delta, eps)
    return (x + delta).clamp(0, 1).detach()
