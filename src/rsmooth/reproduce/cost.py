"""What a reproduction costs: image passes through the base classifier of every step of its plan
(training: forward + backward, an attack step counting as one; consistency targets and
certification: forward only), GPU-hours under a stated throughput assumption, and the wall time
on a 2-core CPU from measured rates.

The passes are counted from the very commands :func:`rsmooth.reproduce.plan.plan` runs (epochs,
training-set size, each method's noise samples and attack steps, n0 + n per certified example),
so they follow the table's presets and the budget.  The GPU-hours rest on
:data:`ASSUMED_THROUGHPUT`, an assumption (not a measurement): data loading and the evaluation
after each epoch are not counted.  The CPU time rests on :data:`CPU_THROUGHPUT` and
:data:`CPU_STEP_SECONDS`, fitted to a smoke reproduction's step times
(``bench/reproduce_cpu_cost.py``; BENCHMARKS.md, "Costs told before they are paid").
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
    # Carlini et al. 2023's pipelines, one forward pass = a diffusion UNet pass + the classifier's
    # (not trained: the training figure repeats the forward one): guided-diffusion 256x256 + BEiT-large
    # at 512, improved-diffusion CIFAR-10 + ViT-B/16 at 224 (docs/guide/diffusion-denoised-smoothing.md)
    "guided-diffusion-256+beit-large-512": (20, 20),
    "improved-diffusion-cifar10+vit-b16-224": (2_000, 2_000),
}


#: images per second on this project's 2-core CPU, idle (AMD EPYC, no AVX512-BF16; torch 2.13, fp32,
#: the steps run by ``rsmooth reproduce`` one after another, in one process): (training, forward
#: only).  MEASURED for lenet: training a least-squares fit of the 21 train steps of ``reproduce
#: catrs:table4 --budget smoke`` (every method, so an average over their pass costs; small steps, so
#: easily off by 2x for long ones), forward the median samples/s of its 21 certifications
#: (bench/reproduce_cpu_cost.py; BENCHMARKS.md).  Another architecture gets lenet's scaled by its
#: :data:`ASSUMED_THROUGHPUT` relative to lenet's (an extrapolation, not a measurement).  A machine
#: shared with other jobs is several times slower.
CPU_THROUGHPUT: Dict[str, Tuple[float, float]] = {"lenet": (6_237.0, 7_315.0)}
#: seconds a step takes besides its passes (reading the data, building the model, evaluating,
#: writing the run), by kind: fitted with CPU_THROUGHPUT
CPU_STEP_SECONDS: Dict[str, float] = {"train": 1.2, "targets": 0.8, "certify": 0.5}


def cpu_rate(arch: str, kind: str) -> float:
    """Images/s of ``kind`` (train: forward + backward; targets, certify: forward) of ``arch`` on
    the reference CPU (:data:`CPU_THROUGHPUT`, else lenet's scaled by the assumed GPU throughputs)."""
    col = 0 if kind == "train" else 1
    if arch in CPU_THROUGHPUT:
        return CPU_THROUGHPUT[arch][col]
    ratio = ASSUMED_THROUGHPUT.get(arch, ASSUMED_THROUGHPUT["resnet50"])[col] / ASSUMED_THROUGHPUT["lenet"][col]
    return CPU_THROUGHPUT["lenet"][col] * ratio


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
    cpu_seconds: float = 0.0  # on the reference CPU (:func:`cpu_seconds`), every step one after another
    steps: int = 0

    def add(self, kind: str, passes: float, arch: str) -> None:
        setattr(self, kind, getattr(self, kind) + passes)
        self.cpu_seconds += cpu_seconds(kind, passes, arch)
        self.steps += 1
        rates = ASSUMED_THROUGHPUT.get(arch)
        if rates is None:
            self.unknown = sorted({*self.unknown, arch})
            return
        self.seconds[arch] = self.seconds.get(arch, 0.0) + passes / rates[0 if kind == "train" else 1]

    @property
    def gpu_hours(self) -> Optional[float]:
        """GPU-hours at the assumed throughput (None if an architecture has no assumption)."""
        return None if self.unknown else sum(self.seconds.values()) / 3600


def cpu_seconds(kind: str, passes: float, arch: str) -> float:
    """Seconds one step of ``kind`` with ``passes`` image passes of ``arch`` takes on the reference CPU."""
    return CPU_STEP_SECONDS[kind] + passes / cpu_rate(arch, kind)


def estimate(spec: TableSpec, budget: Budget, seeds: Sequence[int]) -> Work:
    """The passes of every step :func:`~rsmooth.reproduce.plan.plan` makes for ``spec`` under
    ``budget`` and ``seeds`` (needs no data: the published sizes of the datasets), from the
    settings each step's command sets (:attr:`~rsmooth.reproduce.plan.Step.settings`)."""
    from .plan import plan

    work = Work()
    for _, kind, passes, arch in step_passes(plan(spec, budget, seeds, Path("OUT"))):
        work.add(kind, passes, arch)
    return work


def step_passes(steps: Sequence[Any]) -> List[Tuple[Any, str, float, str]]:
    """(step, kind, image passes, architecture) of each of ``steps`` (a plan, in dependency order),
    from the settings each step's command sets (:attr:`~rsmooth.reproduce.plan.Step.settings`)."""
    from ..data import certify_indices

    out = []
    trained: Dict[Path, Tuple[str, str]] = {}  # checkpoint -> (dataset, arch)
    for step in steps:
        s = step.settings
        if step.kind == "train":
            c = s["config"]
            size = c.train_subset or split_size(c.dataset, "train")
            out.append((step, "train", c.epochs * size * train_passes(c.method, c.hparams), c.arch))
            trained[step.out] = (c.dataset, c.arch)
            continue
        # the model certified, or whose targets these are (a released model's: in the step's settings)
        dataset, arch = trained[step.deps[0]] if step.deps else (s["dataset"], s["arch"])
        if step.kind == "targets":
            size = s["train_subset"] or split_size(dataset, "train")
            out.append((step, "targets", size * s["num_samples"], arch))
        else:
            examples = len(certify_indices(split_size(dataset, "test"), skip=s["skip"], max=s["max"],
                                           start=s["start"]))
            out.append((step, "certify", examples * (s["n0"] + s["n"]), arch))
    return out


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


def describe_cpu(work: Work, budget: Budget) -> str:
    """``at --budget smoke on a 2-core CPU: 43 steps, about 54s one after another (...)``."""
    from ..progress import format_duration

    return (f"at --budget {budget.name} on a 2-core CPU: {work.steps} steps, about "
            f"{format_duration(work.cpu_seconds)} one after another (rates measured on lenet on "
            f"2 idle cores, BENCHMARKS.md; other architectures extrapolated; a shared machine is slower)")


def assumption() -> str:
    """The line that states what the GPU-hours assume."""
    rates = "; ".join(f"{arch} {t:,.0f} / {f:,.0f}" for arch, (t, f) in ASSUMED_THROUGHPUT.items())
    return ("GPU-hours assume one A100-class GPU (TF32, large batches) at images/s for training / forward "
            f"passes of {rates}: an ASSUMPTION, not a measurement, easily off by 2x; data loading and the "
            "evaluation after each epoch are not counted")
