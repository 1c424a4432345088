"""SmoothAdv: adversarial training of the soft-smoothed classifier (Salman et al. 2019).

Salman et al. 2019, arXiv 1906.04584; restated in Jeong & Shin 2020 (Consistency, arXiv
2006.04062) App. E.1 eq. 3-4.  References: Hadisalman/smoothing-adversarial
``code/train_pgd.py`` (``--adv-training --train-multi-noise``, the setting of its README) and
``code/attacks.py``; jh-jeong/smoothing-consistency ``code/train_salman.py`` and
``code/train_consistency.py --adv-training`` (SmoothAdv + Consistency, Jeong & Shin 2020 Table 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..attacks.ddn import ddn_smoothed_input
from ..attacks.pgd import pgd_smoothed_input
from ..errors import RsmoothError
from .base import METHODS, Batch, Method, StepContext, check_radius
from .consistency import consistency_regularizer

#: the closed set of attacks (``attack`` field)
ATTACKS = ("pgd", "ddn")


def smoothadv_loss(logits: torch.Tensor, y: torch.Tensor, lbd: float = 0.0,
                   eta: float = 0.5) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """SmoothAdv's outer objective on the adversarial inputs (Jeong & Shin 2020 App. E.1).

    logits: [B x m x K], F(x' + delta_i) for the m noises delta_i that the attack used;
    y: [B].  Loss = mean CE over the B*m copies (Jeong & Shin 2020: (1/m) sum_i L(F; x' + delta_i, y))
    + ``consistency_regularizer(logits, lbd, eta)`` when lbd > 0 (SmoothAdv + Consistency,
    Jeong & Shin 2020 eq. 12 and Table 1: lbd * mean_i KL(F_hat || F(x' + delta_i)) + eta * H(F_hat),
    F_hat not detached).  Returns (loss, {"loss_ce"[, "loss_con"]}).
    """
    b, m, k = logits.shape
    ce = F.cross_entropy(logits.reshape(b * m, k), y.repeat_interleave(m))
    if lbd <= 0:
        return ce, {"loss_ce": ce}
    con = consistency_regularizer(logits, lbd, eta)
    return ce + con, {"loss_ce": ce, "loss_con": con}


@METHODS.register("smoothadv")
@dataclass
class SmoothAdv(Method):
    """SmoothAdv (Salman et al. 2019; Jeong & Shin 2020 App. E.1), optionally + Consistency.

    Chunked: the engine splits each loader batch of B images into ``num_noise`` (m) chunks of
    B/m, one optimiser step each, as the reference's ``get_minibatches`` does.  Per
    chunk: m noises per image drawn once; the attack (PGD or DDN on -log F_hat_y, model in eval
    mode, parameters frozen) finds x' within the l2 ball of radius eps_t around x using those
    noises; the loss is :func:`smoothadv_loss` on F(x' + delta_i) with the *same* noises, model
    in train mode.  eps_t = eps * min(1, (epoch + 1) / warmup) (reference:
    ``min(eps, (epoch + 1) * eps / warmup)``).

    Defaults are the fixed configuration of Jeong et al. 2022 (CAT-RS first version, OpenReview
    qLqeb9AjD2o) App. B.2 and Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) App. C.5 for MNIST /
    Fashion-MNIST (T = 10, eps = 1.0, m = 4, 10 warm-up epochs; Jeong & Shin 2020 App. A.4
    likewise): the reference scripts' own defaults (eps 64/256, m 1, warm-up 1) are never what
    a paper ran.  CIFAR-10: eps 1.0, m 4 (sigma 0.25); eps 2.0, m 2 (Jeong et al. 2022) or eps 1.0,
    m 8 (Jeong et al. 2023) at sigma 0.5; eps 2.0, m 2 at sigma 1.0.

    Differences from the reference code: (a) it is ``train_pgd.py --train-multi-noise`` (its
    README's command; without the flag the script updates on one of the m noises per image, one
    step per loader batch); (b) the PGD projection is Salman's clamp-then-renorm also with
    lbd > 0, where Jeong's ``train_consistency.py`` renorms then clamps; (c) the random
    direction the reference takes where the input gradient is exactly zero is drawn from
    ``ctx.generator``; (d) log F_hat_y is exact, not clamped at 1e-20; (e) B need not be a
    multiple of m (the engine's chunks may differ in size by one); (f) with lbd > 0 the PGD step
    direction is g / ||g|| as in Salman's code, where Jeong's ``SmoothAdv_PGD`` (in
    ``train_consistency.py``) adds 1e-8 to the gradient norm: rsmooth's
    :func:`~rsmooth.attacks.pgd.l2_normalize` clamps the norm at 1e-12 instead, so a gradient of
    norm near 1e-8 or below takes a full step here and a shorter one there (an exactly zero
    gradient gets the random direction of (c) here and no step there).  DDN: see
    :func:`rsmooth.attacks.ddn_smoothed_input`.
    """

    gaussian_only = True  # Gaussian noise only (an l2 attack, an l2 radius)

    num_noise: int = field(default=4, metadata={"help": "m: noisy copies per image"})
    eps: float = field(default=1.0, metadata={
        "help": "attack radius eps, l2 norm in [0,1] pixel units. The reference code's "
                "--epsilon is in 1/256 units: its 256 is 1.0 here, 512 is 2.0"})
    num_steps: int = field(default=10, metadata={"help": "T: attack steps"})
    attack: str = field(default="pgd", metadata={"help": "the attack", "choices": ATTACKS})
    warmup: int = field(default=10, metadata={
        "help": "epochs over which the radius grows linearly from 0 (0 = none)"})
    lbd: float = field(default=0.0, metadata={
        "help": "lambda: consistency weight on top of smoothadv (0 = off; needs m >= 2)"})
    eta: float = field(default=0.5, metadata={"help": "eta: weight of the entropy term H(F_hat)"})

    name = "smoothadv"

    def validate(self) -> None:
        if self.num_noise < 1:
            raise RsmoothError(f"num_noise must be >= 1 for smoothadv, got {self.num_noise}")
        check_radius("smoothadv", "eps", self.eps)
        if self.num_steps < 1:
            raise RsmoothError(f"num_steps must be >= 1 for smoothadv, got {self.num_steps}")
        if self.attack not in ATTACKS:
            raise RsmoothError(f"attack must be one of {', '.join(ATTACKS)} for smoothadv, got {self.attack!r}")
        if self.warmup < 0:
            raise RsmoothError(f"warmup must be >= 0 epochs for smoothadv, got {self.warmup}")
        if not self.lbd >= 0:
            raise RsmoothError(f"lbd must be >= 0 for smoothadv, got {self.lbd}")
        if not self.eta >= 0:
            raise RsmoothError(f"eta must be >= 0 for smoothadv, got {self.eta}")
        if self.lbd > 0 and self.num_noise < 2:
            raise RsmoothError(f"num_noise must be >= 2 for smoothadv with consistency (lbd > 0), "
                               f"got {self.num_noise}")

    @property
    def num_chunks(self) -> int:
        return self.num_noise

    def current_eps(self, ctx: StepContext) -> float:
        """The warmed-up radius of this epoch: eps * min(1, (epoch + 1) / warmup)."""
        return self.eps * ctx.warmup(self.warmup)

    def attack_input(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, noises: torch.Tensor,
                     ctx: StepContext) -> torch.Tensor:
        """x' [B, C, H, W] for clean x [B, C, H, W] and image-major noises [B*m, C, H, W]."""
        eps = self.current_eps(ctx)
        if self.attack == "pgd":
            return pgd_smoothed_input(ctx.unwrapped(model), x, y, noises, eps=eps, num_steps=self.num_steps,
                                      generator=ctx)
        # train_pgd.py sets the DDN's initial norm to the warmed-up eps every epoch
        return ddn_smoothed_input(ctx.unwrapped(model), x, y, noises, eps=eps, num_steps=self.num_steps,
                                  init_norm=eps, generator=ctx)

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        m, b = self.num_noise, len(batch)
        noises = self.noise_like(batch.x.repeat_interleave(m, 0), ctx)   # [B*m, C, H, W]
        x_adv = self.attack_input(model, batch.x, batch.y, noises, ctx)
        logits = model(x_adv.repeat_interleave(m, 0) + noises).reshape(b, m, -1)
        loss, parts = smoothadv_loss(logits, batch.y, self.lbd, self.eta)
        acc = (logits.argmax(2) == batch.y[:, None]).float().mean()
        dist = (x_adv - batch.x).flatten(1).norm(p=2, dim=1).mean()
        return loss, {**parts, "acc_noisy": acc, "adv_l2": dist.detach()}
