"""Denoised smoothing (Salman, Sun, Yang, Kapoor, Kolter 2020, Denoised Smoothing: A Provable
Defense for Pretrained Classifiers, arXiv 2003.01908): the losses that train a denoiser D in
front of a frozen classifier f, the two training methods, and the composition f(D(x)) that
randomized smoothing certifies.

``rsmooth train --method denoise-mse|denoise-stab --classifier CKPT_OR_RUN`` trains D only: the
engine loads f with ``load_model``, hands it to the method (``method.classifier``, frozen, in
eval mode) and optimises and checkpoints D, recording f's path and sha256; ``certify RUN``
reloads f (refusing a changed file) and certifies ``DenoisedClassifier(D, f)``.  ``--init RUN``
starts D from another denoiser's weights ("Stab+MSE": the stability objective fine-tunes the
MSE denoiser).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..presets_table import PAPER_HYPERPARAMETERS, PAPER_SIGMAS  # noqa: F401 (the paper's settings, with the presets)
from .base import METHODS, Batch, Method, StepContext


def denoise_mse_loss(denoised: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """The MSE objective ||D(x + delta) - x||^2, averaged over every element.

    denoised: D(x + delta) [B, C, H, W]; clean: x [B, C, H, W]; returns a scalar.  The paper
    writes the expectation of the squared l2 norm per image; the authors' code
    (microsoft/denoised-smoothing ``code/train_denoiser.py``, ``MSELoss(reduction='mean')``)
    divides by C*H*W as well, which is what this computes.
    """
    return F.mse_loss(denoised, clean)


def denoise_stab_loss(logits_denoised: torch.Tensor, logits_clean: torch.Tensor) -> torch.Tensor:
    """The stability objective CE(f(D(x + delta)), argmax f(x)), averaged over the batch.

    logits_denoised: f(D(x + delta)) [B, K]; logits_clean: f(x) [B, K].  The target is the
    classifier's hard prediction on the clean image (no gradient), not the label y and not
    its soft output, as in the authors' ``code/train_denoiser.py``.  Returns a scalar.
    """
    return F.cross_entropy(logits_denoised, logits_clean.detach().argmax(1))


class DenoisedClassifier(nn.Module):
    """x -> classifier(denoiser(x)) with the classifier frozen.

    The classifier's parameters have ``requires_grad = False`` and it stays in eval mode
    through ``.train()`` and ``.requires_grad_()`` on the composition (its BatchNorm statistics
    never move); gradients still flow through it to the denoiser.  Inputs are [0, 1] pixels
    [B, C, H, W] (the denoiser sees them unnormalised, the classifier normalises its own
    input); returns logits [B, K].
    """

    def __init__(self, denoiser: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.denoiser = denoiser
        self.classifier = classifier.requires_grad_(False).eval()

    def train(self, mode: bool = True) -> "DenoisedClassifier":
        super().train(mode)
        self.classifier.eval()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "DenoisedClassifier":
        self.denoiser.requires_grad_(requires_grad)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.denoiser(x))



class _Denoise(Method):
    """What both denoiser methods share: D is the model trained, f the frozen ``classifier``."""

    #: the engine trains a denoiser in front of ``classifier`` (``--classifier``), not a classifier
    denoiser: ClassVar[bool] = True
    classifier: Optional[nn.Module] = None  # set by the engine (not a hyperparameter)

    def frozen_classifier(self) -> nn.Module:
        if self.classifier is None:
            raise RuntimeError(f"{self.name}: the engine sets method.classifier before training")
        return self.classifier


@METHODS.register("denoise-mse")
@dataclass
class DenoiseMSE(_Denoise):
    """D trained to reconstruct x from x + delta, delta ~ N(0, sigma^2 I): :func:`denoise_mse_loss`
    (Salman et al. 2020, arXiv 2003.01908, Sec. 3.2, the MSE objective).  f takes no part in a
    step (the per-epoch evaluation scores f(D(x))); the log's ``psnr`` is -10 log10(MSE) in dB."""

    name = "denoise-mse"

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        loss = denoise_mse_loss(model(batch.x + self.noise_like(batch.x, ctx)), batch.x)
        return loss, {"psnr": -10 * torch.log10(loss.detach())}


@METHODS.register("denoise-stab")
@dataclass
class DenoiseStab(_Denoise):
    """D trained so that f(D(x + delta)) predicts what f(x) predicts: :func:`denoise_stab_loss`
    (Salman et al. 2020, arXiv 2003.01908, Sec. 3.2, the stability objective); with ``--init`` an
    MSE denoiser's run, the paper's "Stab+MSE"."""

    name = "denoise-stab"

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        f = self.frozen_classifier()
        with torch.no_grad():
            clean = f(batch.x)
        logits = f(model(batch.x + self.noise_like(batch.x, ctx)))
        stats = {"acc_noisy": (logits.argmax(1) == batch.y).float().mean(),
                 "agree": (logits.argmax(1) == clean.argmax(1)).float().mean()}
        return denoise_stab_loss(logits, clean), stats
