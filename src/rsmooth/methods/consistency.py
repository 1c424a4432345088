"""Consistency regularisation (Jeong & Shin 2020, arXiv 2006.04062; eq. 7, 12, 13).

Reference: jh-jeong/smoothing-consistency ``code/consistency.py``.  The regulariser is a pure
function of the logits of the m noisy copies of each image, so other methods (e.g. SmoothAdv +
Consistency, Jeong & Shin 2020 Table 1) reuse it on their own inputs.
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

#: the closed set of regulariser forms (``variant`` field / argument)
VARIANTS = ("default", "kl", "mse", "ce")


def consistency_regularizer(logits: torch.Tensor, lbd: float, eta: float,
                            variant: str = "default") -> torch.Tensor:
    """The consistency regulariser, averaged over the batch (Jeong & Shin 2020 eq. 7, 12, 13).

    logits: [B x m x K], the logits F(x + delta_i) of m >= 2 noisy copies of each of B images
    (image-major: row b holds image b's copies).  F_hat(x) = (1/m) sum_i softmax(logits_i) is
    **not detached**: the KL and entropy terms send gradient through it too (as the reference
    code does).  Per image, with KL(P || Q) = sum_k P_k (log P_k - log Q_k) and
    H(P) = -sum_k P_k log max(P_k, 1e-20):

    - ``"default"`` (eq. 12, the form behind every number in Jeong & Shin 2020):
      lbd * (1/m) sum_i KL(F_hat || F(x + delta_i)) + eta * H(F_hat);
    - ``"kl"`` (eq. 13, KL only): lbd * (1/m) sum_i KL(F_hat || F(x + delta_i));
    - ``"mse"`` (eq. 13): lbd * ||F(x + delta_1) - F(x + delta_2)||_2^2 on the softmaxes of the
      **first two** copies only, as the reference code does (further copies enter only the
      classification loss);
    - ``"ce"`` (Sec. 3, the cross-entropy form, the reference's ``"xent"``):
      lbd * (1/m) sum_i CE(F_hat, F(x + delta_i)) = lbd * (KL + H), i.e. ``"default"`` with
      eta = lbd; ``eta`` is ignored.

    ``eta`` is used only by ``"default"``.  The value equals the reference's up to rounding;
    unlike the reference, the gradient stays finite when a softmax probability underflows to 0
    (saturated logits), as log F_hat is taken by logsumexp.  Returns a 0-dim tensor (the mean
    over the B images).
    """
    if logits.dim() != 3:
        raise RsmoothError(f"consistency_regularizer wants logits [B x m x K], got shape {tuple(logits.shape)}")
    m = logits.shape[1]
    if m < 2:
        raise RsmoothError(f"consistency needs m >= 2 noisy copies per image, got {m}")
    if variant not in VARIANTS:
        raise RsmoothError(f"unknown consistency variant {variant!r}; choose from {', '.join(VARIANTS)}")
    log_prob = F.log_softmax(logits, dim=2)                      # [B, m, K]
    prob = log_prob.exp()
    if variant == "mse":
        reg = lbd * (prob[:, 1] - prob[:, 0]).pow(2).sum(1)
        return reg.mean()
    # F_hat(x) = mean_i softmax(logits_i): [B, K], not detached; log F_hat by logsumexp, so it
    # stays finite (and the gradient NaN-free) where a class's probability underflows to 0
    log_avg = torch.logsumexp(log_prob, dim=1) - math.log(m)
    avg = log_avg.exp()
    # KL(F_hat || F_i) = sum_k F_hat_k (log F_hat_k - log F_i,k)
    kl = (avg.unsqueeze(1) * (log_avg.unsqueeze(1) - log_prob)).sum(2).mean(1)          # [B]
    if variant == "kl":
        reg = lbd * kl
    else:
        ent = -(avg * avg.clamp(min=1e-20).log()).sum(1)        # H(F_hat): [B]
        reg = lbd * (kl + ent) if variant == "ce" else lbd * kl + eta * ent
    return reg.mean()


def consistency_loss(logits: torch.Tensor, y: torch.Tensor, lbd: float, eta: float,
                     variant: str = "default") -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Gaussian + consistency training objective (Jeong & Shin 2020 eq. 12).

    Args:
        logits: [B x m x K], the logits of m >= 2 noisy copies of each image (image-major).
        y: [B] labels.
        lbd: lambda, the weight of the regulariser.
        eta: the weight of the entropy term (``"default"`` only).
        variant: ``"default"``, ``"kl"``, ``"mse"`` or ``"ce"`` (:func:`consistency_regularizer`).

    Returns:
        (mean CE over all B*m noisy copies + ``consistency_regularizer(logits, lbd, eta, variant)``,
        {"loss_ce", "loss_con"}).

    Example:
        ```python
        noisy = x.repeat_interleave(2, 0)                         # m = 2 copies per image
        logits = model(noisy + sigma * torch.randn_like(noisy)).reshape(len(y), 2, -1)
        loss, parts = consistency_loss(logits, y, lbd=10.0, eta=0.5)
        ```
    """
    b, m, k = logits.shape
    ce = F.cross_entropy(logits.reshape(b * m, k), y.repeat_interleave(m))
    con = consistency_regularizer(logits, lbd, eta, variant)
    return ce + con, {"loss_ce": ce, "loss_con": con}


@METHODS.register("consistency")
@dataclass
class Consistency(Method):
    """Consistency regularisation on Gaussian noise (Jeong & Shin 2020 eq. 12).

    Chunked (as in the authors' training script): each loader batch is split into ``num_noise``
    chunks, one optimiser step each; every image of a chunk gets ``num_noise`` independent
    noises.  Defaults: m = 2 and eta = 0.5 (Jeong & Shin 2020 Sec. 3-4); lbd = 10 (the reference
    code's default; Jeong & Shin 2020 uses it for CIFAR-10 sigma = 0.5, 1.0, Jeong et al. 2022
    (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 uses 20 for CIFAR-10 sigma = 0.25 and
    10 / 5 / 5 for MNIST sigma = 0.25 / 0.5 / 1.0).
    """

    num_noise: int = field(default=2, metadata={"help": "m: noisy copies of each image per step"})
    lbd: float = field(default=10.0, metadata={"help": "lambda: weight of the regulariser"})
    eta: float = field(default=0.5, metadata={
        "help": "eta: weight of a second term (Consistency: of the entropy H(F_hat))"})
    variant: str = field(default="default", metadata={
        "help": "loss variant (Consistency: default = KL + eta*entropy, kl, mse, ce = lbd*(KL + entropy))",
        "choices": VARIANTS})

    name = "consistency"

    def validate(self) -> None:
        if self.num_noise < 2:
            raise RsmoothError(f"num_noise must be >= 2 for consistency, got {self.num_noise}")
        if not self.lbd >= 0:
            raise RsmoothError(f"lbd must be >= 0 for consistency, got {self.lbd}")
        if not self.eta >= 0:
            raise RsmoothError(f"eta must be >= 0 for consistency, got {self.eta}")
        if self.variant not in VARIANTS:
            raise RsmoothError(f"variant must be one of {', '.join(VARIANTS)} for consistency, got {self.variant!r}")

    @property
    def num_chunks(self) -> int:
        return self.num_noise

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        m = self.num_noise
        x = batch.x.repeat_interleave(m, 0)                       # [B*m, C, H, W], image-major
        logits = model(x + self.noise_like(x, ctx))
        logits = logits.reshape(len(batch), m, -1)
        loss, parts = consistency_loss(logits, batch.y, self.lbd, self.eta, self.variant)
        acc = (logits.argmax(2) == batch.y[:, None]).float().mean()
        return loss, {**parts, "acc_noisy": acc}
