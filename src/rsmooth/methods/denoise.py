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
from typing import Any, ClassVar, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

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


#: What Salman et al. 2020 (arXiv 2003.01908) ran, read from the authors' code
#: (microsoft/denoised-smoothing): ``code/train_denoiser.py`` defaults and the run names in
#: ``code/analyze.py``.  ``init`` is where D starts: fresh weights, or the MSE denoiser of the
#: same sigma ("Stab+MSE" in the paper).  The classifier is frozen throughout.
PAPER_HYPERPARAMETERS: Dict[str, Dict[str, Dict[str, Any]]] = {
    "denoise-mse": {
        # cifar_dncnn, defaults of train_denoiser.py: Adam lr 1e-3, wd 1e-4, batch 256,
        # 90 epochs, lr x0.1 every 30 (run name "dncnn/epochs_90")
        "cifar10": dict(denoiser="dncnn", init="fresh", optimizer="adam", lr=1e-3,
                        weight_decay=1e-4, batch_size=256, epochs=90, lr_step=30, lr_gamma=0.1),
        # run name "imagenet_dncnn_5epoch_lr1e-4"; the rest (fresh start included) assumed
        # from the script's defaults, not confirmed in the paper
        "imagenet": dict(denoiser="dncnn", init="fresh", optimizer="adam", lr=1e-4,
                         weight_decay=1e-4, batch_size=256, epochs=5, lr_step=30, lr_gamma=0.1),
    },
    "denoise-stab": {
        # "Stab+MSE": fine-tune the MSE denoiser, grid {adam, sgd} x lr {1e-4, 1e-5}, 20 epochs,
        # best of the grid reported (run names "finetune_smoothness_obj_{adam,sgd}_{1e-4,1e-5}_20epochs").
        # The paper's "Stab" denoisers trained from scratch (Adam then SGD, five settings in its
        # appendix, not read here) are left out.  Adam 1e-5 is rsmooth's pick from the grid (the
        # code does not say which point won); batch size and weight decay are the defaults.
        "cifar10": dict(denoiser="dncnn", init="denoise-mse", optimizer="adam", lr=1e-5,
                        weight_decay=1e-4, batch_size=256, epochs=20, lr_step=30, lr_gamma=0.1),
        # run name "imagenet_smoothness_obj_adam_1e-5_20epochs", labelled Stab+MSE in the plots
        "imagenet": dict(denoiser="dncnn", init="denoise-mse", optimizer="adam", lr=1e-5,
                         weight_decay=1e-4, batch_size=256, epochs=20, lr_step=30, lr_gamma=0.1),
    },
}

#: the noise levels of every table and figure of Salman et al. 2020 (arXiv 2003.01908)
PAPER_SIGMAS = (0.12, 0.25, 0.5, 1.0)
