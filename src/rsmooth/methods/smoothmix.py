"""SmoothMix (Jeong et al. 2021, arXiv 2111.09277; Algorithm 1).

Per chunk of B images and m noises delta_1..delta_m (the same noises for the adversary and
the loss):

1. adversary: T steps x~(t+1) = clamp(x~(t) + alpha * g / ||g||_2, 0, 1) from x~(0) = x, with g
   the gradient of -log F_hat_y(x~(t)), F_hat(z) = (1/m) sum_i softmax(f(z + delta_i)); no l2
   ball unless ``eps`` > 0 (Jeong et al. 2021 Table 10 ablation); model in eval mode,
   parameters frozen;
2. one-step adversary (``mix_step`` = k >= 1): the clean side x is replaced by x~(k), projected
   to an l2 ball of radius alpha * k (or ``mix_eps``) around x, warmed up;
3. lambda ~ U[0, 1/2] per example; x_mix = (1 - lambda) x + lambda x~(T),
   y_mix = (1 - lambda) F_hat(x) + lambda / K;
4. loss = mean_i CE(F(x + delta_i), y) + eta * mean_i 1[argmax F_hat(x) = y] KL(y_mix || F(x_mix +
   delta_i)), F_hat(x) from the training forward pass and **not detached**; eta warms up linearly.

Facts from the authors' code [jh-jeong/smoothmix code/train.py] that the paper does not state,
implemented here: the KL with the mask 1[argmax F_hat(x) = y] (Algorithm 1 writes a
cross-entropy to y_mix without the mask: ``variant="paper"``); eta and the one-step radius
multiplied by min(1, (epoch + 1) / warmup); the attack loss clamps F_hat_y at 1e-20 and the
normalised gradient is g / ||g|| (the code adds 1e-8 to the norm; rsmooth's
:func:`~rsmooth.attacks.pgd.l2_normalize` clamps it at 1e-12 instead, both leave a zero gradient at
zero); the clean and the mixed noisy batches go through the model in two separate forward
passes (BatchNorm statistics per pass); the mean runs over all B*m noisy copies, masked ones
included. Published settings (EXPERIMENTS.MD of that repository; Nesterov momentum per Jeong et
al. 2021 App. C): MNIST m = 4, alpha = 1.0, T = 3 / 4 / 8 at sigma = 0.25 / 0.5 / 1.0 (T = 2
with eta = 5 at sigma 0.25), eta in {1, 5}; CIFAR-10 m = 2, T = 4, alpha = 0.5 / 1.0 / 2.0,
eta = 5; ImageNet (Jeong et al. 2021 App. G) m = 1, T = 1, alpha = 8.0, one-step adversary with
mix_eps = 1.0.

Deviations from the code: with ``mix_step = T`` the clean side becomes x~(T) as in the paper (the
code silently keeps the clean x when mix_step >= T, so its ImageNet setting T = 1 with the one-step
adversary cannot be expressed there); ``mix_step > T`` is an error. The KL's entropy term uses
y log max(y, tiny), equal in value, so a target entry of exactly 0 gives a finite gradient where
``F.kl_div`` gives NaN. Noisy copies are laid out image-major (the code concatenates noise-major);
the loss is the same.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..attacks.base import frozen_eval
from ..attacks.pgd import l2_normalize, project_l2, smoothed_log_prob
from ..draws import draw
from ..errors import check
from .base import METHODS, Batch, Method, StepContext, check_radius

VARIANTS = ("code", "paper")
#: the reference attack clamps F_hat_y at 1e-20: below it the gradient is 0 and the example stops
LOG_FLOOR = math.log(1e-20)


def sample_lambda(batch_size: int, generator: Any, *, device=None,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Mixing weights lambda ~ U[0, 1/2], one per example: [B] (Jeong et al. 2021 Algorithm 1, line 1)."""
    return draw("rand", (batch_size,), generator, device=device, dtype=dtype).mul_(0.5)


def mix_inputs(x: torch.Tensor, x_adv: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """x_mix = (1 - lambda) x + lambda x_adv (Jeong et al. 2021 Algorithm 1, line 11).

    x, x_adv: [B x ...]; lam: [B].  Returns [B x ...].
    """
    lam = lam.view(-1, *([1] * (x.dim() - 1))).to(x.dtype)
    return (1 - lam) * x + lam * x_adv


def mixed_target(probs: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """y_mix = (1 - lambda) F_hat(x) + lambda * uniform (Jeong et al. 2021 Algorithm 1, line 11).

    probs: F_hat(x), [B x K] (rows sum to 1); lam: [B].  Returns [B x K]; gradients flow into
    ``probs`` (the target is not detached in the reference code).
    """
    lam = lam.to(probs.dtype).unsqueeze(1)
    return (1 - lam) * probs + lam / probs.shape[1]


def smoothmix_terms(logits_clean: torch.Tensor, logits_mix: torch.Tensor, y: torch.Tensor,
                    lam: torch.Tensor, variant: str = "code") -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two SmoothMix loss terms and the mask (Jeong et al. 2021 Algorithm 1, lines 11-15).

    Args:
        logits_clean: f(x + delta_i), [B x m x K] (image-major: row b holds image b's m copies).
        logits_mix: f(x_mix + delta_i) with the same noises, [B x m x K].
        y: labels [B]; lam: mixing weights [B] in [0, 1/2].
        variant: ``"code"`` (default, the authors' code): mix term = mean over (b, i) of
            1[argmax F_hat(x_b) = y_b] * KL(y_mix_b || F(x_mix_b + delta_i));
            ``"paper"``: mean over (b, i) of the cross-entropy -sum_k y_mix_bk log F_k(x_mix_b +
            delta_i), no mask.  F_hat(x) = mean_i softmax(logits_clean) is not detached in
            either, so the two differ in gradient by the entropy of y_mix and the mask.

    Returns:
        (ce, mix, mask): ce = mean cross-entropy of the m*B clean noisy copies (0-dim), mix the
        regulariser before eta (0-dim), mask = 1[argmax F_hat(x) = y] as float [B].
    """
    check(variant in VARIANTS, f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    b, m, k = logits_clean.shape
    ce = F.cross_entropy(logits_clean.reshape(b * m, k), y.repeat_interleave(m))
    probs = logits_clean.softmax(-1).mean(1)
    mask = (probs.argmax(1) == y).to(probs.dtype)
    target = mixed_target(probs, lam).unsqueeze(1)  # [B x 1 x K]
    log_pred = logits_mix.log_softmax(-1)
    cross = -(target * log_pred).sum(-1)  # [B x m]
    if variant == "paper":
        return ce, cross.mean(), mask
    tiny = torch.finfo(target.dtype).tiny
    neg_entropy = (target * target.clamp_min(tiny).log()).sum(-1)  # [B x 1]
    kl = neg_entropy + cross
    return ce, (mask.unsqueeze(1) * kl).mean(), mask


def smoothmix_loss(logits_clean: torch.Tensor, logits_mix: torch.Tensor, y: torch.Tensor,
                   lam: torch.Tensor, eta: float, variant: str = "code") -> torch.Tensor:
    """SmoothMix loss ce + eta * mix of :func:`smoothmix_terms` (Jeong et al. 2021 Algorithm 1, line 15).

    ``eta`` is the already warmed-up weight.  Shapes as in :func:`smoothmix_terms`.
    """
    ce, mix, _ = smoothmix_terms(logits_clean, logits_mix, y, lam, variant)
    return ce + eta * mix


def _noisy(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """x [B x C x H x W] + noise [B x m x C x H x W] -> [B*m x C x H x W], image-major."""
    return (x.unsqueeze(1) + noise).flatten(0, 1)


def smoothmix_adversary(model: nn.Module, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor, *,
                        alpha: float, num_steps: int, eps: Optional[float] = None, mix_step: int = 0,
                        mix_radius: Optional[float] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """SmoothMix's adversarial search on the soft smoothed classifier (Jeong et al. 2021 Algorithm 1, 2-9).

    T = ``num_steps`` steps x~(t+1) = x~(t) + alpha * g / ||g||_2 (per example) with g the
    gradient of -log max(F_hat_y(x~(t)), 1e-20) (the reference's clamp: an example whose F_hat_y
    is below 1e-20 stops moving), F_hat over the given noises; after each step the iterate is
    projected to the l2 ball of radius ``eps`` around x (only when eps is set and > 0) and
    clamped to [0, 1].  Runs under :func:`frozen_eval`: eval mode, parameters untouched.

    Args:
        x: clean images [B x C x H x W] in [0, 1]; y: labels [B];
        noise: the training noises [B x m x C x H x W] (the same as in the loss);
        mix_step: k = 0: the clean side is x; k in 1..T: it is x~(k) (the one-step adversary for
            k = 1), projected to an l2 ball of radius ``mix_radius`` around x and clamped.

    Returns:
        (x_side, x_adv): the clean side of the mixup [B x C x H x W] (``x`` itself when
        mix_step = 0) and x~(T) [B x C x H x W], both detached.
    """
    b, m = noise.shape[:2]
    x, noise = x.detach(), noise.detach()
    adv, side = x, x
    with frozen_eval(model), torch.enable_grad():
        for t in range(num_steps):
            adv = adv.clone().requires_grad_(True)
            logits = model(_noisy(adv, noise)).view(b, m, -1)
            loss = -smoothed_log_prob(logits, y).clamp_min(LOG_FLOOR).sum()
            grad, = torch.autograd.grad(loss, [adv])
            adv = adv.detach() + alpha * l2_normalize(grad)
            if eps:
                adv = x + project_l2(adv - x, eps)
            adv = adv.clamp(0, 1)
            if t + 1 == mix_step:
                side = adv
    if mix_step > 0 and mix_radius is not None:
        side = (x + project_l2(side - x, mix_radius)).clamp(0, 1)
    return side.detach(), adv.detach()


@METHODS.register("smoothmix")
@dataclass
class SmoothMix(Method):
    """SmoothMix: self-mixup with the smoothed classifier's adversary (Jeong et al. 2021 Algorithm 1).

    Chunked: each loader batch is split into ``num_noise`` chunks, one optimiser step each (as
    in the authors' training script).  Defaults are the authors' script defaults (alpha 1.0,
    T 8, eta 1.0, warm-up 10) with m = 4, i.e. their MNIST sigma = 1.0 setting (Jeong et al.
    2021 Tables 8-11 base row).
    """

    gaussian_only = True  # Gaussian noise only (an l2 attack, an l2 radius)

    num_noise: int = field(default=4, metadata={"help": "noises m per image, shared by the adversary and the loss; "
                                                        "chunks per batch (SmoothMix: 4 MNIST, 2 CIFAR-10)"})
    num_steps: int = field(default=8, metadata={"help": "attack steps T"})
    alpha_step: float = field(default=1.0, metadata={"help": "SmoothMix attack step size alpha (l2, [0,1] pixel units)"})
    eta: float = field(default=1.0, metadata={"help": "weight of the regulariser (warmed up over --warmup epochs)"})
    mix_step: int = field(default=0, metadata={"help": "SmoothMix clean side: 0 = x, k >= 1 = the k-step adversary "
                                                       "x~(k) (1 = 'one-step adversary')"})
    mix_eps: float = field(default=0.0, metadata={"help": "l2 radius of the mix-step adversary around x "
                                                          "(0 = alpha * mix_step; warmed up)"})
    eps: float = field(default=0.0, metadata={"help": "l2 radius of the adversary ([0,1] pixel units; SmoothMix: "
                                                      "0 = unrestricted)"})
    warmup: int = field(default=10, metadata={"help": "epochs of linear warm-up (0 = none)"})
    variant: str = field(default="code", metadata={"help": "loss variant (SmoothMix: code = KL + correctness mask, "
                                                           "paper = cross-entropy to y_mix, no mask)",
                                                   "choices": VARIANTS})

    name = "smoothmix"

    def validate(self) -> None:
        check(self.num_noise >= 1, f"num_noise must be >= 1, got {self.num_noise}")
        check(self.num_steps >= 1, f"num_steps must be >= 1, got {self.num_steps}")
        check_radius("smoothmix", "alpha_step", self.alpha_step, positive=True)
        check(self.eta >= 0 and math.isfinite(self.eta), f"eta must be >= 0, got {self.eta}")
        check(0 <= self.mix_step <= self.num_steps,
              f"mix_step must be in [0, num_steps={self.num_steps}], got {self.mix_step}")
        check_radius("smoothmix", "mix_eps", self.mix_eps)
        check_radius("smoothmix", "eps", self.eps)
        check(self.warmup >= 0, f"warmup must be >= 0 epochs, got {self.warmup}")
        check(self.variant in VARIANTS, f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")

    @property
    def num_chunks(self) -> int:
        return self.num_noise

    def schedule(self, ctx: StepContext) -> Dict[str, float]:
        """Warmed-up eta and one-step radius at ``ctx.epoch``: values * min(1, (epoch+1)/warmup)."""
        w = ctx.warmup(self.warmup)
        radius = self.mix_eps or self.alpha_step * self.mix_step
        return {"eta": self.eta * w, "mix_radius": radius * w}

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        x, y = batch.x, batch.y
        b, m = len(x), self.num_noise
        noise = self.noise_like(x.unsqueeze(1).expand(b, m, *x.shape[1:]), ctx)  # [B x m x C x H x W]
        sched = self.schedule(ctx)
        x_side, x_adv = smoothmix_adversary(
            ctx.unwrapped(model), x, y, noise, alpha=self.alpha_step, num_steps=self.num_steps, eps=self.eps or None,
            mix_step=self.mix_step, mix_radius=sched["mix_radius"])
        lam = sample_lambda(b, ctx, device=x.device, dtype=x.dtype)
        logits_clean = model(_noisy(x_side, noise)).view(b, m, -1)
        logits_mix = model(_noisy(mix_inputs(x_side, x_adv, lam), noise)).view(b, m, -1)
        ce, mix, mask = smoothmix_terms(logits_clean, logits_mix, y, lam, self.variant)
        loss = ce + sched["eta"] * mix
        with torch.no_grad():
            stats = {
                "ce": ce.detach(), "mix": mix.detach(), "mask": mask.mean(),
                "acc_noisy": (logits_clean.argmax(-1) == y.unsqueeze(1)).float().mean(),
                "adv_norm": (x_adv - x).flatten(1).norm(dim=1).mean(),
            }
        return loss, stats
