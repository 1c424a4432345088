"""Standard training: cross-entropy on the clean images, no noise.

The baseline the randomized-smoothing papers contrast with Gaussian training: Cohen, Rosenfeld,
Kolter 2019 (Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918, Sec. 4)
train the base classifier under the noise it will be smoothed with, because a classifier trained
on clean images is mostly wrong on noisy ones and its smoothed classifier certifies little.  Such
off-the-shelf classifiers are what Denoised Smoothing (Salman, Sun, Yang, Kapoor, Kolter 2020,
Denoised Smoothing: A Provable Defense for Pretrained Classifiers, arXiv 2003.01908) makes
certifiable, by putting a denoiser in front of them; this method trains one here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .base import METHODS, Batch, Method, StepContext


@METHODS.register("standard")
@dataclass
class Standard(Method):
    """Train on the clean images (cross-entropy, one step per batch); sigma adds no noise.

    sigma only sets the smoothing level recorded in the checkpoint, which ``certify`` uses when
    no ``--sigma`` is given, and the noisy accuracy of the per-epoch evaluation.
    """

    sigma: float = field(default=0.25, metadata={
        "help": "no noise in training; recorded as certify's default smoothing level"})

    name = "standard"

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        logits = model(batch.x)
        return F.cross_entropy(logits, batch.y), {"acc": (logits.argmax(1) == batch.y).float().mean()}
