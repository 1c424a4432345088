"""``rsmooth pipeline catrs``: the whole CAT-RS recipe from nothing.

Jeong, Kim, Shin 2023, Confidence-Aware Training of Smoothed Classifiers for Certified
Robustness (CAT-RS, arXiv 2212.09000), App. C.5:

1. train the sigma0 = 0.25 Gaussian model, 2. compute its consistency targets, 3. train CAT-RS
at sigma, 4. certify, 5. analyze (optionally beside a Gaussian baseline at sigma trained and
certified under the same budget, seeds and protocol).  Each step is skipped when its output
already exists and matches, and continues when it was interrupted; a step whose output exists
with other settings is an error (nothing is overwritten).  Every argument is checked before
the first step starts, so a typo fails in a second, not after hours of training.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..errors import RsmoothError, check
from ..fileio import atomic_write_text
from ..methods import create_method
from ..paths import check_output_dir
from ..smoothing import validate_count, validate_sigma
from . import distributed
from .certify import CertifyJob
from .checkpoint import resolve_device
from .train import TrainConfig, train

#: the noise level of the model whose smoothed predictions are the targets (Jeong et al. 2023 App. C.5)
SIGMA0 = 0.25
#: CertifyJob fields the pipeline sets itself
_CERTIFY_SET = ("checkpoint", "out", "mode", "dataset", "split", "sigma", "n0", "n", "alpha", "skip", "max", "seed",
                "log", "overwrite")


def _config(dataset: str, method: str, sigma: float, overrides: Dict[str, Any],
            hparams: Dict[str, Any]) -> TrainConfig:
    """The run's TrainConfig, checked now (dataset, schedule, method hyperparameters)."""
    from ..presets import preset_config

    fields = preset_config(dataset, method, sigma)[1]
    fields.update({k: v for k, v in overrides.items() if v is not None})
    fields["hparams"] = {**fields.get("hparams", {}), **hparams, "sigma": sigma}
    config = TrainConfig(**fields)
    resolved = config.resolved()
    create_method(resolved.method, **resolved.hparams)
    resolve_device(resolved.device)
    return config


def _check_options(what: str, given: Dict[str, Any], allowed: List[str]) -> None:
    unknown = sorted(set(given) - set(allowed))
    check(not unknown, f"unknown {what} {', '.join(unknown)}; use some of: {', '.join(sorted(allowed))}")


def run_pipeline(
    out: str,
    *,
    method: str = "catrs",
    dataset: str = "digits",
    sigma: float = 0.25,
    hparams: Optional[Dict[str, Any]] = None,
    train_overrides: Optional[Dict[str, Any]] = None,
    target_samples: int = 10_000,
    target_augment: bool = True,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    skip: int = 1,
    max: Optional[int] = None,
    seed: int = 0,
    compare_gaussian: bool = True,
    certify_options: Optional[Dict[str, Any]] = None,
    log: Callable[[str], None] = print,
) -> str:
    """Run (or continue) the recipe into ``out``; return the results table (markdown; under
    torchrun each step runs on every rank and rank 0 returns the table, the others "").

    ``train_overrides`` (epochs, batch_size, lr, ...) apply to every model trained, so the
    comparison is under one budget; ``hparams`` are the CAT-RS hyperparameters on top of the
    ``dataset/catrs/sigma`` preset when there is one.
    """
    from ..report import analyze
    from .targets import compute_targets

    if method != "catrs":
        raise RsmoothError(f"the pipeline is defined for catrs, got {method!r}")
    sigma = validate_sigma(sigma)
    copts = dict(certify_options or {})
    _check_options("certify option", copts, [f.name for f in dataclasses.fields(CertifyJob)
                                             if f.name not in _CERTIFY_SET])
    # how every model is certified (each gets its checkpoint and out): checked before any work
    certify_job = CertifyJob("", "", n0=n0, n=n, alpha=alpha, skip=skip, max=max, seed=seed, log=log, **copts)
    target_samples = validate_count("target_samples", target_samples)
    seed = certify_job.seed
    overrides = {**(train_overrides or {}), "seed": seed}
    _check_options("training setting", overrides, [f.name for f in dataclasses.fields(TrainConfig)
                                                   if f.name not in ("dataset", "method", "hparams")])
    resolve_device(certify_job.device)
    w = distributed.world()
    if not w.main:
        log = distributed.quiet
    base_config = _config(dataset, "gaussian", SIGMA0, overrides, {})
    cat = _config(dataset, method, sigma, overrides, dict(hparams or {}))
    gauss_config = _config(dataset, "gaussian", sigma, overrides, {}) if compare_gaussian else None
    root = check_output_dir(out)
    runs: List[Path] = []
    labels: List[str] = []

    def trained(name: str, config: TrainConfig) -> Path:
        log(f"== train {name}")
        train(config, str(root / name), resume=True, log=log)
        return root / name

    def certified(run: Path, label: str) -> None:
        log(f"== certify {run.name}")
        runs.append(dataclasses.replace(certify_job, checkpoint=str(run), out=str(run / "certify.tsv")).run())
        labels.append(label)

    # under torchrun one process group serves every step (each step's would reuse stale addresses)
    with distributed.process_group(distributed.rank_device(resolve_device(base_config.device), w)):
        base = trained(f"gaussian_{SIGMA0:.2f}", base_config)
        targets = root / f"targets_{SIGMA0:.2f}.npy"
        log(f"== targets from {base.name} ({target_samples} noises per training image)")
        compute_targets(str(base), str(targets), num_samples=target_samples, augment=target_augment,
                        seed=seed, log=log, train_subset=base_config.train_subset)
        cat = dataclasses.replace(cat, targets=str(targets))
        if gauss_config is not None:
            gauss = base if sigma == SIGMA0 else trained(f"gaussian_{sigma:.2f}", gauss_config)
            certified(gauss, f"Gaussian sigma={sigma}")
        certified(trained(f"{method}_{sigma:.2f}", cat), f"CAT-RS sigma={sigma}")
    if not w.main:
        return ""
    table = analyze([str(p) for p in runs], labels=labels, plot=str(root / "certified_accuracy.png"))
    atomic_write_text(root / "table.md", table + "\n")
    return table
