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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from ..errors import check
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
    ``dataset/catrs/sigma`` preset when there is one; ``certify_options`` are further
    :class:`CertifyJob` fields (precision, device, ...).  The same as ``PipelineJob(...).run()``.

    Example:
        ```python
        from rsmooth.engine.pipeline import run_pipeline

        table = run_pipeline("runs/pipe", dataset="digits", sigma=0.25, train_overrides={"epochs": 5})
        print(table)   # Gaussian and CAT-RS side by side: ACR and certified accuracy
        ```
    """
    return PipelineJob(**locals()).run()


@dataclass(frozen=True)
class PipelineJob:
    """Every setting of one pipeline run: the keywords of :func:`run_pipeline`, all checked when
    the job is made (the three training configurations and the certification included), so a
    typo fails in a second.  :meth:`run` runs or continues it."""

    out: str  # the run folder
    method: str = "catrs"
    dataset: str = "digits"
    sigma: float = 0.25  # training and certification noise level of the CAT-RS (and compared) model
    hparams: Optional[Dict[str, Any]] = None  # CAT-RS hyperparameters over the preset's
    train_overrides: Optional[Dict[str, Any]] = None  # TrainConfig fields of every model trained
    target_samples: int = 10_000  # noises per training image for the targets
    target_augment: bool = True
    n0: int = 100
    n: int = 100_000
    alpha: float = 0.001
    skip: int = 1
    max: Optional[int] = None
    seed: int = 0  # of every training and certification stream
    compare_gaussian: bool = True  # also train and certify a Gaussian model at sigma
    certify_options: Optional[Dict[str, Any]] = None  # further CertifyJob fields
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        check(self.method == "catrs", f"the pipeline is defined for catrs, got {self.method!r}")
        object.__setattr__(self, "sigma", validate_sigma(self.sigma))
        object.__setattr__(self, "target_samples", validate_count("target_samples", self.target_samples))
        copts = dict(self.certify_options or {})
        _check_options("certify option", copts, [f.name for f in dataclasses.fields(CertifyJob)
                                                 if f.name not in _CERTIFY_SET])
        # how every model is certified (each gets its checkpoint and out)
        certify = CertifyJob("", "", n0=self.n0, n=self.n, alpha=self.alpha, skip=self.skip, max=self.max,
                             seed=self.seed, log=self.log, **copts)
        object.__setattr__(self, "seed", certify.seed)
        overrides = {**(self.train_overrides or {}), "seed": self.seed}
        _check_options("training setting", overrides, [f.name for f in dataclasses.fields(TrainConfig)
                                                       if f.name not in ("dataset", "method", "hparams")])
        resolve_device(certify.device)
        gauss = _config(self.dataset, "gaussian", self.sigma, overrides, {}) if self.compare_gaussian else None
        object.__setattr__(self, "_plan", _Plan(
            certify, _config(self.dataset, "gaussian", SIGMA0, overrides, {}),
            _config(self.dataset, self.method, self.sigma, overrides, dict(self.hparams or {})), gauss))

    def run(self) -> str:
        """Run (or continue) every step; the results table (rank 0; "" on the other ranks)."""
        from ..report import analyze

        w = distributed.world()
        steps = _Steps(check_output_dir(self.out), self.log if w.main else distributed.quiet, self._plan.certify)
        # under torchrun one process group serves every step (each step's would reuse stale addresses)
        with distributed.process_group(distributed.rank_device(resolve_device(self._plan.base.device), w)):
            self._steps(steps)
        if not w.main:
            return ""
        table = analyze([str(p) for p in steps.certified], labels=steps.labels,
                        plot=str(steps.root / "certified_accuracy.png"))
        atomic_write_text(steps.root / "table.md", table + "\n")
        return table

    def _steps(self, steps: "_Steps") -> None:
        """Gaussian sigma0 -> its targets -> (Gaussian sigma) -> CAT-RS sigma, each certified."""
        from .targets import compute_targets

        plan = self._plan
        base = steps.trained(f"gaussian_{SIGMA0:.2f}", plan.base)
        targets = steps.root / f"targets_{SIGMA0:.2f}.npy"
        steps.log(f"== targets from {base.name} ({self.target_samples} noises per training image)")
        compute_targets(str(base), str(targets), num_samples=self.target_samples, augment=self.target_augment,
                        seed=self.seed, log=steps.log, train_subset=plan.base.train_subset)
        if plan.gauss is not None:
            gauss = base if self.sigma == SIGMA0 else steps.trained(f"gaussian_{self.sigma:.2f}", plan.gauss)
            steps.certify(gauss, f"Gaussian sigma={self.sigma}")
        cat = dataclasses.replace(plan.cat, targets=str(targets))
        steps.certify(steps.trained(f"{self.method}_{self.sigma:.2f}", cat), f"CAT-RS sigma={self.sigma}")


class _Plan(NamedTuple):
    """What a PipelineJob's settings resolve to, checked when it is made."""

    certify: CertifyJob  # without checkpoint and out
    base: TrainConfig  # the sigma0 Gaussian model (the targets' teacher)
    cat: TrainConfig  # the CAT-RS model, without its targets
    gauss: Optional[TrainConfig]  # the compared Gaussian model at sigma, or None


@dataclass
class _Steps:
    """The run folder's training and certification steps, and the certified runs so far."""

    root: Path
    log: Callable[[str], None]
    certify_job: CertifyJob
    certified: List[Path] = dataclasses.field(default_factory=list)
    labels: List[str] = dataclasses.field(default_factory=list)

    def trained(self, name: str, config: TrainConfig) -> Path:
        self.log(f"== train {name}")
        train(config, str(self.root / name), resume=True, log=self.log)
        return self.root / name

    def certify(self, run: Path, label: str) -> None:
        self.log(f"== certify {run.name}")
        job = dataclasses.replace(self.certify_job, checkpoint=str(run), out=str(run / "certify.tsv"), log=self.log)
        self.certified.append(job.run())
        self.labels.append(label)
