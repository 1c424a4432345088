"""MACER: maximise a soft certified radius (Zhai et al. 2020, arXiv 2001.02378).

Restated in Jeong & Shin 2020 (Consistency, arXiv 2006.04062) App. E.2 eq. 6, 8.  Implemented as
the authors' code does it (RuntianZ/macer ``macer.py``), which differs from Jeong & Shin 2020
eq. 8 in where sigma sits: the code's robustness term is the hinge (sigma / 2) *
max(gamma - xi, 0) on the *unscaled* gap xi = Phi^-1(p1) - Phi^-1(p2), as in the MACER paper,
while Jeong & Shin 2020 eq. 8 writes max(gamma - CR, 0) with CR = (sigma / 2) * xi inside the
hinge.  Examples with xi > gamma (or a non-finite xi) get no robustness gradient at all.

Defaults (Jeong et al. 2022, CAT-RS first version, OpenReview qLqeb9AjD2o, App. B.2; Jeong et al.
2023, CAT-RS, arXiv 2212.09000, App. C.5): k = 16, gamma = 8, beta = 16; lambda = 12
(the MACER code's default and the CIFAR-10 sigma = 0.25 setting; CIFAR-10 sigma = 0.5 uses 4,
sigma = 1.0 uses 12 with lambda = 0 until the first LR drop, i.e. ``deferred``; MNIST uses 16 for
sigma = 0.25, 0.5 and 6 for sigma = 1.0; Fashion-MNIST 16 / 8 / 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import RsmoothError
from .base import METHODS, Batch, Method, StepContext


def normal_icdf(p: torch.Tensor) -> torch.Tensor:
    """Phi^-1(p) = sqrt(2) * erfinv(2p - 1), with no clamping, as ``torch.distributions.Normal``
    computes it in the reference: p = 0 or 1 (or 2p - 1 rounding to +-1) gives -+inf."""
    return torch.erfinv(2 * p - 1) * math.sqrt(2)


def macer_loss(logits: torch.Tensor, y: torch.Tensor, sigma: float, lbd: float, gamma: float,
               beta: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """The MACER objective of one batch, in the reference code's form (RuntianZ/macer ``macer.py``).

    logits: [B x k x K], f(x + delta_j) of k noisy copies per image; y: [B] labels.

    - L_cls = sum_b -log(mean_j softmax(logits_bj)_y + 1e-10)                (natural error)
    - G = mean_j softmax(beta * logits_bj) (beta only here); p1 >= p2 its top two values;
      keep the examples whose top-1 class is y; d = Phi^-1(p2) - Phi^-1(p1) (= -xi); keep the
      finite d with |d| <= gamma; L_R = sum (d + gamma) * sigma / 2             (robust error)
    - loss = (L_cls + lbd * L_R) / B.

    The robustness term is computed for the statistics even when lbd = 0 (it then adds exactly
    zero to the loss and its gradient).  Returns (loss, {"loss_cls": L_cls / B, "loss_rob":
    L_R / B, "frac_hinge": fraction of the batch inside the hinge}).
    """
    b = logits.shape[0]
    probs = F.softmax(logits, dim=2).mean(1)                                    # [B, K]
    loss_cls = F.nll_loss(torch.log(probs + 1e-10), y, reduction="sum")
    probs_beta = F.softmax(beta * logits, dim=2).mean(1)                        # [B, K]
    top = probs_beta.topk(2, dim=1)
    p1, p2 = top.values[:, 0], top.values[:, 1]
    with torch.no_grad():
        d = normal_icdf(p2) - normal_icdf(p1)
        keep = (top.indices[:, 0] == y) & torch.isfinite(d) & (d.abs() <= gamma)
    # recompute with the dropped examples at p = 1/2, so that no inf/nan enters the backward pass;
    # masks instead of boolean indexing keep every shape fixed (no wait for the device)
    half = p1.new_full((), 0.5)
    d_kept = normal_icdf(torch.where(keep, p2, half)) - normal_icdf(torch.where(keep, p1, half))
    loss_rob = torch.where(keep, d_kept + gamma, 0.0).sum() * sigma / 2
    loss = (loss_cls + lbd * loss_rob) / b
    return loss, {"loss_cls": loss_cls.detach() / b, "loss_rob": loss_rob.detach() / b,
                  "frac_hinge": keep.sum().to(logits.dtype) / b}


@METHODS.register("macer")
@dataclass
class Macer(Method):
    """MACER training: k noisy copies per image, one optimiser step per batch (no chunking).

    ``deferred``: lambda = 0 for the epochs before the first learning-rate drop
    (``ctx.lr_drop_epoch``; Jeong et al. 2022 App. B.2 does this for CIFAR-10 sigma = 1.0); a run whose
    schedule has no drop (lr_drop_epoch None) keeps lambda = 0 throughout.
    """

    gaussian_only = True  # Gaussian noise only (an l2 attack, an l2 radius)

    num_noise: int = field(default=16, metadata={"help": "m (MACER's k): noisy copies of each image per step"})
    lbd: float = field(default=12.0, metadata={"help": "lambda: weight of the regulariser"})
    gamma: float = field(default=8.0, metadata={
        "flag": "macer-gamma",
        "help": "gamma: hinge threshold on the gap Phi^-1(p1) - Phi^-1(p2) (MACER's --gamma, the CAT-RS "
                "scripts' --margin)"})
    beta: float = field(default=16.0, metadata={"help": "beta: inverse temperature of the soft smoothed classifier"})
    deferred: bool = field(default=False, metadata={"help": "lambda = 0 until the first learning-rate drop"})

    name = "macer"

    def validate(self) -> None:
        if self.num_noise < 1:
            raise RsmoothError(f"num_noise must be >= 1 for macer, got {self.num_noise}")
        for key in ("lbd", "gamma", "beta"):
            v = getattr(self, key)
            if not (v >= 0 and math.isfinite(v)):
                raise RsmoothError(f"{key} must be a finite number >= 0 for macer, got {v}")
        if not self.beta > 0:
            raise RsmoothError(f"beta must be > 0 for macer, got {self.beta}")

    def effective_lbd(self, ctx: StepContext) -> float:
        """lambda at this step: 0 before the first LR drop when ``deferred``, else ``lbd``."""
        if self.deferred and (ctx.lr_drop_epoch is None or ctx.epoch < ctx.lr_drop_epoch):
            return 0.0
        return self.lbd

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        k = self.num_noise
        x = batch.x.repeat_interleave(k, 0)                                     # [B*k, ...], image-major
        logits = model(x + self.noise_like(x, ctx)).reshape(len(batch), k, -1)
        loss, parts = macer_loss(logits, batch.y, self.sigma, self.effective_lbd(ctx), self.gamma, self.beta)
        return loss, {**parts, "acc_noisy": (logits.argmax(2) == batch.y[:, None]).float().mean()}
