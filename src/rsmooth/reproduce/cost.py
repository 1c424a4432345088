"""What a reproduction costs: image passes through the base classifier of every step of its plan
(training: forward + backward, an attack step counting as one; consistency targets and
certification: forward only) and GPU-hours under a stated throughput assumption.

The passes are counted from the very commands :func:`rsmooth.reproduce.plan.plan` runs (epochs,
training-set size, each method's noise samples and attack steps, n0 + n per certified example),
so they follow the table's presets and the budget.  The GPU-hours rest on
:data:`ASSUMED_THROUGHPUT`, an assumption (not a measurement): data loading and the evaluation
after each epoch are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .spec import Budget, TableSpec, split_size

#: images per second of one A100-class GPU (TF32, large batches): (training, forward only).
#: ASSUMED, not measured by rsmooth (BENCHMARKS.md has CPU figures only): ballpark figures from
#: the architectures' size to plan a cluster allocation with, easily off by 2x either way.
ASSUMED_THROUGHPUT: Dict[str, Tuple[float, float]] = {
    "digits_cnn": (100_000, 400_000),
    "lenet": (50_000, 200_000),
    "cifar_resnet20": (20_000, 60_000),
    "cifar_resnet110": (4_000, 12_000),
    "cifar_densenet40": (3_000, 9_000),
    "resnet50": (1_000, 3_000),
}


def _copies(hp: Dict[str, Any]) -> int:
    return int(hp.get("num_noise", 1))


def _steps(hp: Dict[str, Any]) -> int:
    return int(hp.get("num_steps", 0))


#: forward + backward passes per training example of each method, from its hyperparameters (an
#: attack step is a forward and a backward pass to the input); see BENCHMARKS.md, "Training step cost"
TRAIN_PASSES: Dict[str, Callable[[Dict[str, Any]], int]] = {
    "standard": lambda hp: 1,
    "gaussian": lambda hp: 1,
    "stability": lambda hp: 2,  # clean and noisy (Li et al. 2019)
    "consistency": _copies,  # m noisy copies
    "macer": _copies,  # k noisy copies
    "smoothadv": lambda hp: _copies(hp) * (_steps(hp) + 1),  # T attack steps on m copies, then training
    "smoothmix": lambda hp: _copies(hp) * (_steps(hp) + 2),  # T attack steps, clean and mixed passes
    "catrs": lambda hp: _copies(hp) * (_steps(hp) + 2),  # M noisy passes, T steps on the noise, adversarial
    "catrs-v1": lambda hp: _copies(hp) * (_steps(hp) + 2),
    "denoise-mse": lambda hp: 1,  # the denoiser and the frozen classifier
    "denoise-stab": lambda hp: 2,
}


def train_passes(method: str, hparams: Dict[str, Any]) -> int:
    """Passes per training example of ``method`` (a method not listed: ``num_noise`` copies, each
    attacked ``num_steps`` times, then trained)."""
    from ..methods import create_method

    hp = create_method(method, **hparams).hparams()  # the method's defaults included
    return TRAIN_PASSES.get(method, lambda h: _copies(h) * (_steps(h) + 1))(hp)


@dataclass
class Work:
    """Image passes of a plan: ``train`` (forward + backward), ``targets`` and ``certify`` (forward),
    and per architecture the seconds they take under :data:`ASSUMED_THROUGHPUT`."""

    train: float = 0.0
    targets: float = 0.0
    certify: float = 0.0
    seconds: Dict[str, float] = field(default_factory=dict)
    unknown: List[str] = field(default_factory=list)  # architectures without an assumed throughput

    def add(self, kind: str, passes: float, arch: str) -> None:
        setattr(self, kind, getattr(self, kind) + passes)
        rates = ASSUMED_THROUGHPUT.get(arch)
        if rates is None:
            self.unknown = sorted({*self.unknown, arch})
            return
        self.seconds[arch] = self.seconds.get(arch, 0.0) + passes / rates[0 if kind == "train" else 1]

    @property
    def gpu_hours(self) -> Optional[float]:
        """GPU-hours at the assumed throughput (None if an architecture has no assumption)."""
        return None if self.unknown else sum(self.seconds.values()) / 3600


def estimate(spec: TableSpec, budget: Budget, seeds: Sequence[int]) -> Work:
    """The passes of every step :func:`~rsmooth.reproduce.plan.plan` makes for ``spec`` under
    ``budget`` and ``seeds`` (needs no data: the published sizes of the datasets), from the
    settings each step's command sets (:attr:`~rsmooth.reproduce.plan.Step.settings`)."""
    from ..data import certify_indices
    from .plan import plan

    work = Work()
    trained: Dict[Path, Tuple[str, str]] = {}  # checkpoint -> (dataset, arch)
    for step in plan(spec, budget, seeds, Path("OUT")):  # in dependency order
        s = step.settings
        if step.kind == "train":
            c = s["config"]
            size = c.train_subset or split_size(c.dataset, "train")
            work.add("train", c.epochs * size * train_passes(c.method, c.hparams), c.arch)
            trained[step.out] = (c.dataset, c.arch)
            continue
        dataset, arch = trained[step.deps[0]]  # the model certified, or whose targets these are
        if step.kind == "targets":
            size = s["train_subset"] or split_size(dataset, "train")
            work.add("targets", size * s["num_samples"], arch)
        else:
            examples = len(certify_indices(split_size(dataset, "test"), skip=s["skip"], max=s["max"],
                                           start=s["start"]))
            work.add("certify", examples * (s["n0"] + s["n"]), arch)
    return work


def _passes(n: float) -> str:
    return f"{n:.2g}".replace("e+0", "e").replace("e+", "e")


def describe(work: Work) -> str:
    """``training 1.9e10 image passes (forward + backward), ...; about 2,400 GPU-hours``."""
    parts = [f"training {_passes(work.train)} image passes (forward + backward)"]
    if work.targets:
        parts.append(f"consistency targets {_passes(work.targets)} forward passes")
    parts.append(f"certification {_passes(work.certify)} forward passes")
    hours = work.gpu_hours
    when = (f"about {hours:,.0f} GPU-hours" if hours is not None and hours >= 10 else
            f"about {hours:.2g} GPU-hours" if hours is not None else
            f"GPU-hours unknown (no throughput assumed for {', '.join(work.unknown)})")
    return ", ".join(parts) + f"; {when}"


def assumption() -> str:
    """The line that states what the GPU-hours assume."""
    rates = "; ".join(f"{arch} {t:,.0f} / {f:,.0f}" for arch, (t, f) in ASSUMED_THROUGHPUT.items())
    return ("GPU-hours assume one A100-class GPU (TF32, large batches) at images/s for training / forward "
            f"passes of {rates}: an ASSUMPTION, not a measurement, easily off by 2x; data loading and the "
            "evaluation after each epoch are not counted")
