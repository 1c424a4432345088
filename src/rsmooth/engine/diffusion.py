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
                   other_dataset: bool = False, rounding: str = "up", noise: str = "step",
                   classifier_input: Optional[str] = None) -> Tuple["nn.Module", Dict[str, Any]]:
    """(the model to smooth, the sidecar's fields): ``model`` behind ``classifier_input``'s resizing
    and normalisation (:func:`rsmooth.models.adapter.parse_classifier_input`) when given; then,
    with ``diffusion`` (a job's ``--diffusion``), f(D(x)) with D at ``sigma``, ``steps``,
    ``rounding`` and ``noise``, on ``model``'s device, checked against the certified ``dataset``
    (its recorded dataset, unless ``other_dataset``; its image shape) (the model's path or id, its
    sha256 when a file, t*, the realised sigma, the steps, the rounding, the noise)."""
    record: Dict[str, Any] = {}
    if classifier_input is not None:
        from torch import nn

        from ..models.adapter import parse_classifier_input

        adapter = parse_classifier_input(classifier_input)
        model = nn.Sequential(adapter, model).eval()
        record["classifier_input"] = adapter.spec()
    if diffusion is None:
        return model, record
    from ..models.diffusion import diffusion_classifier
    from ..trust import check_recorded_arch

    # the user named it (--diffusion, diffusion=): their choice, as --arch is (rsmooth.trust)
    check_recorded_arch(diffusion, "--diffusion", trust_code=True)
    wrapped, found = diffusion_classifier(model, diffusion, sigma, steps=steps, dataset=dataset,
                                          other_dataset=other_dataset, rounding=rounding, noise=noise)
    record.update(found)
    path = diffusion.partition("=")[2] if found.get("diffusion_format") == "openai" else diffusion
    if os.path.isfile(path):
        record["diffusion_sha256"] = file_sha256(path)
    return wrapped, record


def check_compilable(record: Dict[str, Any], sigma: float) -> None:
    """``--compile`` (torch.export) cannot trace the denoiser's seeded noise draws: the top-up to the
    step's level (``diffusion_noise`` step with a step above sigma) and the reverse process's steps;
    a one-line error says which flags export."""
    from ..errors import check

    top_up = record.get("diffusion_noise") == "step" and record["diffusion_realised_sigma"] > sigma * (1 + 1e-9)
    check(not (top_up or record["diffusion_steps"] > 1), "--compile cannot export the diffusion denoiser's "
          "seeded noise draws (the top-up of --diffusion-noise step, the steps of --diffusion-steps > 1): drop "
          "--compile, or pass --diffusion-noise sigma --diffusion-steps 1")


def log_diffusion(record: Dict[str, Any], sigma: float, log: Callable[[str], None]) -> None:
    """Log what the denoiser does at ``sigma``: t*, the realised sigma and the passes per noise
    sample (the run's estimate line, :func:`rsmooth.engine.certify.estimate_line`, times them)."""
    noise = record.get("diffusion_noise")
    at = (f"; D's input topped up to the step's level {record['diffusion_realised_sigma']:.4g} (the radius "
          f"stays at sigma {sigma:g})" if noise == "step" else "; D's input at sigma")
    log(f"diffusion: sigma {sigma:g} -> t* = {record['diffusion_t']} of {record['diffusion_schedule_steps']} "
        f"(rounding {record.get('diffusion_rounding')}, realised sigma {record['diffusion_realised_sigma']:.4g})"
        f"{at}; {record['diffusion_steps']} UNet pass(es) + 1 classifier pass per noise sample")
