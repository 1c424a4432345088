"""Gaussian data augmentation (Cohen et al. 2019, arXiv 1902.02918).

As written in Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) eq. 5.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .base import METHODS, Batch, Method, StepContext


def gaussian_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy CE(F(x + delta), y) over one noisy copy per image.

    Jeong et al. 2022 eq. 5 (Cohen et al. 2019's training objective).

    Args:
        logits: [B x K], f(x + delta) of one noisy copy of each image.
        y: [B] labels.

    Returns:
        the mean cross-entropy (0-dim).

    Example:
        ```python
        loss = gaussian_loss(model(x + sigma * torch.randn_like(x)), y)
        ```
    """
    return F.cross_entropy(logits, y)


@METHODS.register("gaussian")
@dataclass
class Gaussian(Method):
    """Train on x + delta, delta ~ N(0, sigma^2 I), one noise per image, one step per batch."""

    name = "gaussian"

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        logits = model(batch.x + self.noise_like(batch.x, ctx))
        loss = gaussian_loss(logits, batch.y)
        return loss, {"acc_noisy": (logits.argmax(1) == batch.y).float().mean()}
