"""What defines a training run: :class:`TrainConfig` (every setting, checked and resolved to the
dataset's defaults), the rules of resuming a run (the fields fixed on resume), the learning-rate
schedule as a function of the epoch, and :class:`TrainResult`.  The loop that runs a config is
:mod:`rsmooth.engine.train`.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import torch
from torch import nn

from ..errors import RsmoothError, check, setting
from ..methods import METHODS
from ..presets_table import SCHEDULES
from ..seeding import validate_seed
from ..smoothing.stats import validate_count
from .preempt import parse_checkpoint_every

#: learning rate and schedule when none is given: each dataset's paper schedule, the one its
#: Gaussian preset trains with (presets_table.SCHEDULES); digits, rsmooth's own, trains in seconds
DATASET_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "digits": {"lr": 0.05, "epochs": 30, "lr_step": 20},
    **{d: {k: s[k] for k in ("lr", "epochs", "lr_step")} for d, s in SCHEDULES.items()},
}

#: config fields that must not change when a run is resumed
_FIXED_ON_RESUME = ("dataset", "arch", "arch_kwargs", "num_classes", "input_size", "mean", "std",
                    "method", "hparams", "batch_size", "lr", "momentum", "weight_decay", "nesterov",
                    "lr_step", "milestones", "lr_gamma", "lr_timing", "seed", "train_subset", "targets", "precision",
                    "channels_last", "compile", "optimizer", "classifier", "init")
LR_TIMINGS = ("catrs", "cohen")
OPTIMIZERS = ("sgd", "adam")
#: the largest learning rate accepted: the papers train with 0.01-0.1 (Adam 1e-3), and SGD diverges
#: at once far below 10; a larger value is a typo (1e300 would overflow the optimiser's arithmetic)
MAX_LR = 10.0
#: the most data-loading worker processes (--workers): more than the cores of any one machine
MAX_WORKERS = 256
#: the most logits (--num-classes): ImageNet-21k has 21,841 classes; a million is beyond any dataset
MAX_CLASSES = 2 ** 20
#: autocast dtype of each --precision (fp32: no autocast)
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def _number(name: str, value: Any) -> float:
    """``value`` as a float, or a one-line error naming the flag ``name``."""
    check(isinstance(value, numbers.Real) and not isinstance(value, bool), f"{name} must be a number, got {value!r}")
    return float(value)


def _as_list(values: Optional[Any]) -> Optional[List[Any]]:
    """A sequence as a list (as the checkpoint's JSON-like config holds it, compared on resume)."""
    return None if values is None else list(values)


@dataclass
class TrainConfig:
    """Everything that defines a training run (saved, resolved, in every checkpoint).

    Each field is a key of a ``--config`` file and, but for ``num_workers`` and
    ``eval_batch_size``, a flag of ``rsmooth train`` (``epochs`` is ``--epochs``; ``hparams`` are
    the method's flags, ``--sigma``, ...); fields left None get the dataset's defaults in
    :meth:`resolved`.

    Attributes:
        dataset: a registered dataset name (``rsmooth list datasets``).
        arch: the model: a registered name, ``package.module:factory`` or an ``rsmooth.models``
            entry point (default: the dataset's, e.g. ``lenet`` for Fashion-MNIST).
        arch_kwargs: keyword arguments of a ``module:factory`` architecture (JSON-like data).
        num_classes: the model's logits (default: the dataset's classes).
        input_size: (C, H, W) handed to a factory (default: the dataset's).
        mean: per-channel normalisation in [0, 1] pixel units (default: the dataset's for built-in
            archs, none for a factory).
        std: per-channel standard deviation, with ``mean``.
        method: the training method (``rsmooth list methods``): gaussian, stability, smoothadv,
            macer, consistency, smoothmix, catrs, standard, denoise-mse, denoise-stab.
        hparams: the method's hyperparameters, sigma included (e.g. ``{"sigma": 0.25}``).
        epochs: epochs to train (default per dataset: digits 30, ImageNet 90, others 150).
        batch_size: examples per optimiser step.
        lr: initial learning rate (default per dataset: digits 0.05, (Fashion-)MNIST 0.01, else 0.1).
        momentum: SGD momentum, in [0, 1).
        weight_decay: L2 weight decay, >= 0.
        nesterov: Nesterov momentum (SGD; needs momentum > 0).
        lr_step: step schedule: the learning rate times ``lr_gamma`` every ``lr_step`` epochs.
        milestones: multistep schedule: increasing epochs at which it drops (overrides ``lr_step``).
        lr_gamma: the factor of each drop, in (0, 1].
        lr_timing: when the learning rate drops: ``"catrs"`` (the authors' scripts) or
            ``"cohen"`` (one epoch earlier).
        seed: the run's seed (initialisation, batches, noise); the same seed gives the same weights.
        train_subset: train on this many training examples (a fixed subset), None for all.
        data_dir: where datasets are read from or downloaded to (default: ``$RSMOOTH_DATA``, else
            a cache folder).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...; None: CUDA when available, else the CPU.
        num_workers: DataLoader worker processes.
        eval_batch_size: batch size of the test-set evaluation after epochs.
        targets: CAT-RS's consistency-targets file (``rsmooth targets``).
        precision: autocast of each step: ``"fp32"`` (none), ``"bf16"``, ``"fp16"`` (CUDA, with a
            gradient scaler).
        channels_last: model and batches in channels-last memory format.
        compile: train through ``torch.compile(model)``.
        sync_bn: under torchrun, SyncBatchNorm (default: per-rank batch-norm statistics).
        optimizer: ``"sgd"`` (momentum, nesterov) or ``"adam"`` (the denoiser papers').
        classifier: denoiser methods: the frozen classifier (a checkpoint or run folder).
        init: denoiser methods: start from this denoiser run's weights.
        checkpoint_every: mid-epoch checkpoints every N optimiser steps (``"500"``) or time
            (``"10m"``, ``"600s"``, ``"1h"``).
        eval_every: evaluate after every E-th epoch and the last (0: never).
        eval_examples: evaluate on this fixed subset of the test set (None: all; 0: never).
        tensorboard: write ``OUT/tensorboard/`` (rank 0; needs the tensorboard package).

    Example:
        ```python
        from rsmooth.engine import TrainConfig, train

        config = TrainConfig(dataset="digits", method="gaussian", hparams={"sigma": 0.25}, epochs=5)
        result = train(config, "runs/digits025")
        same = TrainConfig.from_run("runs/digits025")   # what the run recorded
        ```
    """

    dataset: str = "digits"
    arch: Optional[str] = None  # a registered name, package.module:factory or an rsmooth.models entry point
    arch_kwargs: Optional[Dict[str, Any]] = None  # keyword arguments of a module:factory architecture
    num_classes: Optional[int] = None  # logits of the model (default: the dataset's classes)
    input_size: Optional[List[int]] = None  # (C, H, W) passed to a factory (default: the dataset's)
    mean: Optional[List[float]] = None  # per-channel normalisation in [0,1] pixel units (default: the
    std: Optional[List[float]] = None   # dataset's for built-in archs, none for a factory)
    method: str = "gaussian"
    hparams: Dict[str, Any] = field(default_factory=dict)  # method hyperparameters, sigma included
    epochs: Optional[int] = None
    batch_size: int = 256
    lr: Optional[float] = None
    momentum: float = 0.9
    weight_decay: float = 1e-4
    nesterov: bool = False
    lr_step: Optional[int] = None  # step schedule: x lr_gamma every lr_step epochs
    milestones: Optional[List[int]] = None  # multistep schedule (overrides lr_step)
    lr_gamma: float = 0.1
    lr_timing: str = "catrs"  # when the lr drops: "catrs" (authors' scripts) or "cohen" (one epoch earlier)
    seed: int = 0
    train_subset: Optional[int] = None  # train on this many training examples (data.fixed_subset)
    data_dir: Optional[str] = None
    device: Optional[str] = None
    num_workers: int = 0
    eval_batch_size: int = 500
    targets: Optional[str] = None  # CAT-RS consistency targets file ('rsmooth targets')
    precision: str = "fp32"  # autocast of each step: fp32 (none), bf16, fp16 (CUDA, gradient scaler)
    channels_last: bool = False  # model and batches in channels-last memory format
    compile: bool = False  # train through torch.compile(model)
    sync_bn: bool = False  # under torchrun: SyncBatchNorm (default: per-rank batch-norm statistics)
    optimizer: str = "sgd"  # sgd (momentum, nesterov) or adam (the denoiser papers')
    classifier: Optional[str] = None  # denoiser methods: the frozen classifier (checkpoint or run folder)
    init: Optional[str] = None  # denoiser methods: start from this denoiser run's weights
    checkpoint_every: Optional[str] = None  # mid-epoch checkpoints: every N optimiser steps ("500") or time ("10m")
    eval_every: int = 1  # evaluate after every E-th epoch and the last (0: never)
    eval_examples: Optional[int] = None  # evaluate on this fixed subset of the test set (None: all; 0: never)
    tensorboard: bool = False  # write OUT/tensorboard/ (rank 0; needs the tensorboard package)

    def resolved(self) -> "TrainConfig":
        """Fill dataset-dependent defaults (arch, lr, epochs, lr_step) and validate."""
        from ..data import dataset_info
        from ..models import arch_ref, default_arch
        from ..models.normalize import validate_normalization

        info = dataset_info(self.dataset)  # unknown dataset -> error listing the valid ones
        check(isinstance(self.hparams, Mapping), f"hparams must be a mapping of the method's hyperparameters "
                                                  f"(e.g. {{'sigma': 0.25}}), got {self.hparams!r}")
        d = DATASET_DEFAULTS.get(self.dataset, DATASET_DEFAULTS["cifar10"])
        denoiser = is_denoiser(self.method)
        _check_not_a_denoiser(self.arch, self.method, denoiser)
        c = dataclasses.replace(
            self,
            arch=(self.arch or ("dncnn" if info.input_shape[0] == 3 else "dncnn_small")) if denoiser
            else arch_ref(self.arch or default_arch(self.dataset)),
            arch_kwargs=dict(self.arch_kwargs) if self.arch_kwargs else None,
            input_size=_as_list(self.input_size), mean=_as_list(self.mean), std=_as_list(self.std),
            lr=d["lr"] if self.lr is None else self.lr,
            epochs=d["epochs"] if self.epochs is None else self.epochs,
            lr_step=d["lr_step"] if self.lr_step is None else self.lr_step,
            hparams=dict(self.hparams),
            seed=validate_seed(self.seed),
        )
        check(c.num_classes is None or (isinstance(c.num_classes, int) and
                                        info.num_classes <= c.num_classes <= MAX_CLASSES),
              f"--num-classes must be at least the {info.num_classes} classes of {c.dataset} and at most "
              f"{MAX_CLASSES:,}, got {c.num_classes!r}")
        validate_normalization(c.mean or [], c.std or [])  # before any data is read
        c.epochs, c.batch_size = validate_count("--epochs", c.epochs), validate_count("--batch-size", c.batch_size)
        c.lr_step = validate_count("--lr-step", c.lr_step)  # epochs
        c.eval_batch_size = validate_count("eval_batch_size", c.eval_batch_size)
        c.lr, c.momentum, c.weight_decay, c.lr_gamma = (_number(f"--{k.replace('_', '-')}", getattr(c, k))
                                                         for k in ("lr", "momentum", "weight_decay", "lr_gamma"))
        check(0 < c.lr <= MAX_LR, f"--lr must be in (0, {MAX_LR:g}] (the papers use 0.01-0.1), got {c.lr!r}")
        check(0 <= c.momentum < 1, f"--momentum must be in [0, 1), got {c.momentum}")
        check(0 <= c.weight_decay <= 1, f"--weight-decay must be in [0, 1] (e.g. 1e-4), got {c.weight_decay}")
        check(0 < c.lr_gamma <= 1, f"--lr-gamma must be in (0, 1], got {c.lr_gamma}")
        check(not c.nesterov or c.momentum > 0, "--nesterov needs --momentum > 0")
        check(c.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}, got {c.precision!r}")
        check(c.lr_timing in LR_TIMINGS, f"--lr-timing must be one of {', '.join(LR_TIMINGS)}, got {c.lr_timing!r}")
        if c.milestones is not None:
            check(not isinstance(c.milestones, (str, bytes, Mapping))
                  and all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in c.milestones)
                  and list(c.milestones) == sorted(c.milestones),
                  f"--milestones must be increasing epochs >= 1, got {c.milestones!r}")
        if c.train_subset is not None:
            c.train_subset = validate_count("--train-subset", c.train_subset)
        check(c.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {c.optimizer!r}")
        c.num_workers = validate_count("--workers", c.num_workers, minimum=0, maximum=MAX_WORKERS)
        check(denoiser or (c.classifier is None and c.init is None),
              "--classifier and --init are for the denoiser methods (denoise-mse, denoise-stab)")
        parse_checkpoint_every(c.checkpoint_every)
        if c.checkpoint_every is not None:
            c.checkpoint_every = str(c.checkpoint_every).strip()
        check(isinstance(c.eval_every, int) and not isinstance(c.eval_every, bool) and c.eval_every >= 0,
              f"--eval-every must be a number of epochs >= 0 (0: no evaluation), got {c.eval_every!r}")
        check(c.eval_examples is None or (isinstance(c.eval_examples, int) and c.eval_examples >= 0),
              f"--eval-examples must be a number of test examples >= 0 (0: no evaluation), got {c.eval_examples!r}")
        return c

    def evaluates(self, epoch: int) -> bool:
        """Whether 0-based ``epoch`` ends with an evaluation (``eval_every``, and always the last)."""
        if self.eval_every == 0 or self.eval_examples == 0:
            return False
        return (epoch + 1) % self.eval_every == 0 or epoch + 1 == self.epochs

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_file(cls, path: Union[str, Path], *, trust_code: bool = False) -> "TrainConfig":
        """The config in a JSON or YAML file of these fields (``hparams``: the method's
        hyperparameters), such as a run's ``config.json`` or ``rsmooth show-preset NAME --format
        yaml``; unknown keys and wrong types are errors.  A ``module:factory`` arch it names is
        refused unless ``trust_code`` (:mod:`rsmooth.trust`): config files travel like checkpoints."""
        from .runconfig import read_config_fields

        return cls(**read_config_fields(path, cls, trust_code=trust_code))

    @classmethod
    def from_run(cls, out: Union[str, Path], *, trust_code: bool = False, **overrides: Any) -> "TrainConfig":
        """The config recorded in run folder ``out`` (its config.json's, else its checkpoint's), with
        ``overrides`` (fields; ``hparams`` merged per hyperparameter).  Overrides may change what
        may change on resume (``epochs`` to extend, ``device``, ``num_workers``, ``data_dir``, ...);
        the others must equal the recorded values: all differences are refused in one error.
        A recorded ``module:factory`` arch is refused unless ``overrides`` name an arch or
        ``trust_code`` (:mod:`rsmooth.trust`), as is one in a config file (:meth:`from_file`)."""
        from ..trust import check_recorded_arch
        from .runconfig import config_fields, conflicts, merge, recorded_fields, recorded_file

        recorded = recorded_fields(out, cls)
        check_recorded_arch(recorded.get("arch"), f"run folder {out} ({recorded_file(out).name})",
                            trust_code=trust_code or overrides.get("arch") is not None)
        merged = cls(**merge(recorded, config_fields(overrides, cls, "overrides")))
        bad = conflicts(recorded, merged.resolved(), _FIXED_ON_RESUME)
        if bad:
            raise RsmoothError(f"{out} was trained with {' '.join(old for old, _ in bad)}; you passed "
                               f"{' '.join(new for _, new in bad)}: drop {'them' if len(bad) > 1 else 'it'} "
                               f"to continue the run with its recorded settings, or use a new --out")
        return merged

    def model_options(self) -> Dict[str, Any]:
        """The keyword arguments of ``create_model(arch, dataset, ...)`` that build this run's model."""
        from ..models import MODEL_OPTIONS

        return {k: getattr(self, k) for k in MODEL_OPTIONS}


@dataclass
class TrainResult:
    """What :func:`train` returns: where the run wrote its checkpoint, one dict of figures per
    epoch, and the trained model.

    Attributes:
        checkpoint: ``out/checkpoint.pt``.
        history: one dict per epoch: ``epoch``, ``lr``, ``loss``, the method's figures (e.g.
            ``acc_noisy``, on the training batches), ``time`` (seconds) and, after an evaluation,
            ``test_acc`` (clean), ``test_acc_noisy`` (under the noise) and ``eval_examples``.
        model: the trained ``nn.Module`` (its normalisation layer first; on [0, 1] pixels; call
            ``.eval()`` before certifying).

    Example:
        ```python
        result = train(TrainConfig(dataset="digits", epochs=5), "runs/digits")
        print(result.checkpoint, result.history[-1]["loss"])
        smooth = Smooth(result.model.eval(), num_classes=10, sigma=0.25)
        ```
    """

    checkpoint: Path
    history: List[Dict[str, Any]]
    model: nn.Module


def is_denoiser(method: str) -> bool:
    """Whether ``method`` trains a denoiser in front of a frozen classifier (denoised smoothing)."""
    return bool(getattr(METHODS.get(method), "denoiser", False))


def _check_not_a_denoiser(arch: Optional[str], method: str, denoiser: bool) -> None:
    """A denoiser architecture (``DENOISERS``) with a method that trains a classifier is refused,
    naming the methods that train one."""
    from ..models import DENOISERS

    if arch in DENOISERS and not denoiser:
        methods = " or ".join(m for m in METHODS.names() if is_denoiser(m))
        raise RsmoothError(f"{arch} is a denoiser architecture (images to images, no classes) and "
                           f"{setting('method', method)} trains a classifier: train {arch} with "
                           f"{setting('method')} {methods} (in front of a {setting('classifier')}), or "
                           f"choose a classifier architecture ('rsmooth list architectures')")


def lr_factor(epoch: int, c: "TrainConfig") -> float:
    """Multiplier of ``c.lr`` during 0-based ``epoch`` (step or multistep, see ``lr_timing``)."""
    e = max(epoch - 1, 0) if c.lr_timing == "catrs" else epoch
    drops = sum(m <= e for m in c.milestones) if c.milestones else e // c.lr_step
    return c.lr_gamma ** drops


def first_lr_drop(c: "TrainConfig") -> int:
    """The first 0-based epoch trained at a reduced learning rate (MACER's deferred lambda)."""
    first = c.milestones[0] if c.milestones else c.lr_step
    return first + 1 if c.lr_timing == "catrs" else first


def _check_resume(saved: Dict[str, Any], c: TrainConfig, path: Path) -> None:
    from .runconfig import conflicts

    bad = conflicts(saved, c, _FIXED_ON_RESUME)  # a field newer than the checkpoint had its default
    if bad:
        raise RsmoothError(f"cannot resume {path}: it was trained with {' '.join(old for old, _ in bad)}, "
                           f"not {' '.join(new for _, new in bad)}; continue with the recorded settings "
                           f"(train(None, out, resume=True) or TrainConfig.from_run(out, ...)) or use a new --out")
