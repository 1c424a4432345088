"""Certification behind a diffusion denoiser (``rsmooth certify --diffusion``; Carlini et al. 2023,
arXiv 2206.10550): the classifier a job loads is wrapped as f(D(x)) before ``Smooth`` is built
(:func:`rsmooth.models.diffusion.diffusion_classifier`), what the run used is recorded in the
sidecar, and the cost per noise sample is measured and the run's time estimated before it starts."""
from __future__ import annotations

import datetime
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple

from .checkpoint import file_sha256

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .certify import CertifyJob


def with_diffusion(model: "nn.Module", job: "CertifyJob", sigma: float,
                   dataset: str) -> Tuple["nn.Module", Dict[str, Any]]:
    """(the model to smooth, the sidecar's diffusion fields): ``model`` itself and nothing without
    ``job.diffusion``; else f(D(x)) with D at ``sigma`` and ``job.diffusion_steps``, on ``model``'s
    device, checked against the certified ``dataset`` (its recorded dataset, unless
    ``job.diffusion_other_dataset``; its image shape) (the model's path or id, its sha256 when a file,
    t*, the realised sigma, the steps)."""
    if job.diffusion is None:
        return model, {}
    from ..models.diffusion import diffusion_classifier
    from ..trust import check_recorded_arch

    # the user named it (--diffusion, diffusion=): their choice, as --arch is (rsmooth.trust)
    check_recorded_arch(job.diffusion, "--diffusion", trust_code=True)
    wrapped, record = diffusion_classifier(model, job.diffusion, sigma, steps=job.diffusion_steps, dataset=dataset,
                                           other_dataset=job.diffusion_other_dataset)
    if os.path.isfile(job.diffusion):
        record["diffusion_sha256"] = file_sha256(job.diffusion)
    return wrapped, record


def log_cost(model: "nn.Module", x: "torch.Tensor", sigma: float, record: Dict[str, Any],
             log: Callable[[str], None], *, batch_size: int, samples: int, examples: int, at_most: bool) -> float:
    """Time one batch of noisy copies of ``x`` [C, H, W] through ``model`` (after a warm-up pass),
    log the seconds per noise sample and the estimate for ``examples`` examples of at most
    ``samples`` samples each; returns the seconds per sample."""
    import torch

    batch = min(batch_size, samples)
    param = next(model.parameters(), None)
    xs = x.to(param.device if param is not None else "cpu").unsqueeze(0).expand(batch, *x.shape)
    with torch.no_grad():
        model(xs[:1])
        start = time.perf_counter()
        model(xs)
        if xs.is_cuda:
            torch.cuda.synchronize()
        per_sample = (time.perf_counter() - start) / batch
    total = per_sample * samples * examples
    log(f"diffusion: sigma {sigma:g} -> t* = {record['diffusion_t']} of {record['diffusion_schedule_steps']} "
        f"(realised sigma {record['diffusion_realised_sigma']:.4g}); {record['diffusion_steps']} UNet pass(es) + "
        f"1 classifier pass per noise sample: {per_sample * 1e3:.3g} ms per sample (measured in fp32, batch "
        f"{batch}); {examples} example(s) x {samples:,} samples: about "
        f"{datetime.timedelta(seconds=round(total))}{' at most' if at_most else ''}")
    return per_sample
