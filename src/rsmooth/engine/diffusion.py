"""Certification behind a diffusion denoiser (``rsmooth certify --diffusion``; Carlini et al. 2023,
arXiv 2206.10550): the classifier a job loads is wrapped as f(D(x)) before ``Smooth`` is built
(:func:`rsmooth.models.diffusion.diffusion_classifier`), what the run used is recorded in the
sidecar, and the run's time is estimated before it starts as every run's is (from the sampler's
timed passes of f(D(x)))."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from .checkpoint import file_sha256

if TYPE_CHECKING:
    from torch import nn


def with_diffusion(model: "nn.Module", diffusion: Optional[str], sigma: float, dataset: str, *, steps: int = 1,
                   other_dataset: bool = False) -> Tuple["nn.Module", Dict[str, Any]]:
    """(the model to smooth, the sidecar's diffusion fields): ``model`` itself and nothing without
    ``diffusion`` (a job's ``--diffusion``); else f(D(x)) with D at ``sigma`` and ``steps``, on
    ``model``'s device, checked against the certified ``dataset`` (its recorded dataset, unless
    ``other_dataset``; its image shape) (the model's path or id, its sha256 when a file, t*, the
    realised sigma, the steps)."""
    if diffusion is None:
        return model, {}
    from ..models.diffusion import diffusion_classifier
    from ..trust import check_recorded_arch

    # the user named it (--diffusion, diffusion=): their choice, as --arch is (rsmooth.trust)
    check_recorded_arch(diffusion, "--diffusion", trust_code=True)
    wrapped, record = diffusion_classifier(model, diffusion, sigma, steps=steps, dataset=dataset,
                                           other_dataset=other_dataset)
    if os.path.isfile(diffusion):
        record["diffusion_sha256"] = file_sha256(diffusion)
    return wrapped, record


def log_diffusion(record: Dict[str, Any], sigma: float, log: Callable[[str], None]) -> None:
    """Log what the denoiser does at ``sigma``: t*, the realised sigma and the passes per noise
    sample (the run's estimate line, :func:`rsmooth.engine.certify.estimate_line`, times them)."""
    log(f"diffusion: sigma {sigma:g} -> t* = {record['diffusion_t']} of {record['diffusion_schedule_steps']} "
        f"(realised sigma {record['diffusion_realised_sigma']:.4g}); {record['diffusion_steps']} UNet pass(es) + "
        f"1 classifier pass per noise sample")
