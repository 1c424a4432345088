"""Stability training (Li et al. 2019, arXiv 1809.03113) as re-implemented by the Consistency authors.

Reference: jh-jeong/smoothing-consistency ``code/train_stab.py``; Jeong & Shin 2020 (Consistency,
arXiv 2006.04062) eq. 9 writes the objective as L(F(x), y) + lambda * L(F(x), F(x + delta)).
Defaults: gamma = 2 (Jeong et al. 2022, CAT-RS first version, OpenReview qLqeb9AjD2o, App. B.2;
Jeong & Shin 2020 Sec. 4.2; 1 for CIFAR-10 sigma = 1.0).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import RsmoothError
from .base import METHODS, Batch, Method, StepContext


def soft_cross_entropy(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """Per-example soft cross-entropy -sum_k softmax(target_logits)_k log softmax(logits)_k.

    logits, target_logits: [B x K]; returns [B].  The target is **not** detached.
    """
    return -(F.softmax(target_logits, dim=1) * F.log_softmax(logits, dim=1)).sum(1)


def stability_loss(logits_clean: torch.Tensor, logits_noisy: torch.Tensor, y: torch.Tensor,
                   gamma: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """CE(f(x), y) + gamma * softCE(softmax(f(x)), f(x + delta)), both averaged over the batch.

    logits_clean: [B x K] = f(x) of the clean inputs; logits_noisy: [B x K] = f(x + delta), one
    noise per image; y: [B].  The target softmax(f(x)) is not detached, so the regulariser also
    pulls the clean prediction towards the noisy one (as the reference code does).  Returns
    (loss, {"loss_ce", "loss_stab"}).
    """
    ce = F.cross_entropy(logits_clean, y)
    stab = soft_cross_entropy(logits_noisy, logits_clean).mean()
    return ce + gamma * stab, {"loss_ce": ce, "loss_stab": stab}


@METHODS.register("stability")
@dataclass
class Stability(Method):
    """Stability training: clean CE + gamma * soft CE from the clean to the noisy prediction.

    One noise per image, one optimiser step per batch; clean and noisy inputs go through the
    model in two forward passes (as in the reference, which matters for batch-norm statistics).
    """

    gamma: float = field(default=2.0, metadata={
        "flag": "stability-gamma",
        "help": "gamma: weight of the stability regulariser (1 for CIFAR sigma=1; the Consistency "
                "authors' script calls it --lbd)"})

    name = "stability"

    def validate(self) -> None:
        if not self.gamma >= 0:
            raise RsmoothError(f"gamma must be >= 0 for stability, got {self.gamma}")

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        logits_clean = model(batch.x)
        logits_noisy = model(batch.x + self.noise_like(batch.x, ctx))
        loss, parts = stability_loss(logits_clean, logits_noisy, batch.y, self.gamma)
        return loss, {**parts, "acc_noisy": (logits_noisy.argmax(1) == batch.y).float().mean()}
