"""The method interface: a training method supplies a loss, the engine does the rest.

A method is a dataclass of hyperparameters with ``loss(model, batch, ctx)``; it never steps an
optimiser, writes a file or names a device: the engine owns the loop, methods are pure losses.
The engine splits each loader batch into ``num_chunks`` chunks and takes one optimiser step per
chunk (as the Jeong-family training scripts do for SmoothAdv, Consistency, SmoothMix and CAT-RS).
Under the engine's fast modes ``loss`` runs inside ``torch.autocast`` (``--precision``) and may
receive a compiled model (``--compile``): activations can be bf16 or fp16, inputs and noise stay
fp32.  Under ``torchrun`` a loss sees one process's share of the chunk and a DistributedDataParallel
model, so it must be a mean of per-example terms, draw its randomness through ``ctx`` (image-major,
first dimension over the examples) and attack ``ctx.unwrapped(model)``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ..errors import RsmoothError
from ..registry import Registry
from ..smoothing.noises import DEFAULT_NOISE, NOISES, Noise, make_noise
from ..smoothing.stats import validate_sigma

METHODS: Registry = Registry("training method")

#: the largest l2 radius or step (eps, alpha) a method accepts, in [0,1] pixel units: the papers
#: use at most 2.0, and a value in the reference scripts' 1/256 units (their --epsilon 256 is
#: 1.0 here) lands far above it
MAX_RADIUS = 10.0


def check_radius(method: str, name: str, value: float, positive: bool = False) -> None:
    """Raise RsmoothError unless ``value`` is a finite l2 radius in [0, MAX_RADIUS] (> 0 if
    ``positive``), naming the 1/256 units of the reference scripts when it is too large."""
    if not (value > 0 if positive else value >= 0) or not math.isfinite(value):
        raise RsmoothError(f"{name} must be {'> 0' if positive else '>= 0'} (an l2 radius in [0,1] "
                           f"pixel units) for {method}, got {value}")
    if value > MAX_RADIUS:
        raise RsmoothError(f"{name}={value:g} is too large for {method}: it is an l2 radius in [0,1] "
                           f"pixel units (at most {MAX_RADIUS:g}); the reference scripts' --epsilon "
                           f"counts 1/256 units, so their {value:g} is {name}={value / 256:g} here")


@dataclass
class Batch:
    """A training (chunk of a) batch.

    Attributes:
        x: images [B x C x H x W] in [0, 1].
        y: labels [B] (int64).
        idx: dataset indices [B], the stable example indices.
        extras: per-example tensors looked up by ``idx`` (e.g. CAT-RS consistency targets [B x K]).

    Example:
        ```python
        batch = Batch(*train_set.get_batch(idx), idx)
        loss, stats = method.loss(model, batch, StepContext(generator=torch.Generator().manual_seed(0)))
        ```
    """

    x: torch.Tensor
    y: torch.Tensor
    idx: torch.Tensor
    extras: Dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.x.shape[0]

    def chunks(self, n: int) -> List["Batch"]:
        """Split into ``n`` consecutive chunks (the last ones may be smaller, none empty)."""
        if n <= 1:
            return [self]
        pieces = [t.tensor_split(n) for t in (self.x, self.y, self.idx)]
        extras = {k: v.tensor_split(n) for k, v in self.extras.items()}
        out = [Batch(pieces[0][i], pieces[1][i], pieces[2][i], {k: v[i] for k, v in extras.items()})
               for i in range(n)]
        return [b for b in out if len(b)]


@dataclass
class StepContext:
    """What a loss may depend on besides the batch: randomness and the schedule.

    Attributes:
        generator: the only source of randomness for the step (on the model's device); draw from
            it with :meth:`randn` and :meth:`rand`.
        epoch: 0-based current epoch.
        num_epochs: total epochs.
        step: 0-based optimiser step within the epoch.
        lr_drop_epoch: first epoch at a reduced learning rate (MACER's deferred lambda), or None.
        rows: under torchrun, this process's share ``(lo, hi, n)`` of the step's examples.
        module: under torchrun, the unwrapped network the attacks run on.

    Under ``torchrun`` each process computes the loss of its share ``rows = (lo, hi, n)``
    (examples ``lo:hi`` of the step's ``n``) through DistributedDataParallel, and ``module`` is the
    unwrapped network that attacks run on (:meth:`unwrapped`).  :meth:`randn` and :meth:`rand`
    then draw for all ``n`` examples and keep rows ``lo:hi``, so that every example gets the
    noise it gets in one process, whichever process draws it.

    Example:
        ```python
        ctx = StepContext(generator=torch.Generator().manual_seed(0), epoch=0, num_epochs=10)
        noise = ctx.randn(x.shape)   # drawn from ctx.generator only
        ```
    """

    generator: torch.Generator
    epoch: int = 0
    num_epochs: int = 1
    step: int = 0
    lr_drop_epoch: Optional[int] = None
    rows: Optional[Tuple[int, int, int]] = None
    module: Optional[nn.Module] = None

    def warmup(self, epochs: int) -> float:
        """Linear warm-up factor in (0, 1]: min(1, (epoch + 1) / epochs); 1 if epochs <= 0."""
        return 1.0 if epochs <= 0 else min(1.0, (self.epoch + 1) / epochs)

    def unwrapped(self, model: nn.Module) -> nn.Module:
        """The network to attack: ``model`` without DistributedDataParallel (no gradient hooks,
        no all-reduce), ``model`` itself in one process."""
        return self.module if self.module is not None else model

    def randn(self, shape: Sequence[int], *, device=None, dtype=None) -> torch.Tensor:
        """Standard normal draws of ``shape``, whose leading dimension runs over this process's
        examples, image-major (``B``, ``B * m``, ...)."""
        return self._draw(torch.randn, shape, device, dtype)

    def rand(self, shape: Sequence[int], *, device=None, dtype=None) -> torch.Tensor:
        """Uniform [0, 1) draws, laid out as in :meth:`randn`."""
        return self._draw(torch.rand, shape, device, dtype)

    def _draw(self, fn, shape: Sequence[int], device, dtype) -> torch.Tensor:
        shape = tuple(shape)
        if self.rows is None:
            return fn(shape, generator=self.generator, device=device, dtype=dtype)
        lo, hi, n = self.rows
        per, rest = divmod(shape[0], hi - lo)
        if rest:
            raise RsmoothError(f"a draw of shape {shape} does not run over the {hi - lo} examples of this process")
        full = fn((n * per, *shape[1:]), generator=self.generator, device=device, dtype=dtype)
        return full[lo * per:hi * per]


@dataclass
class Method:
    """Base class: hyperparameters as dataclass fields, documented by ``metadata["help"]``."""

    sigma: float = field(default=0.25, metadata={"help": "training noise level (std, [0,1] pixel units)"})
    noise: str = field(default=DEFAULT_NOISE, metadata={
        "help": "training noise (certify's default --noise for the model): gaussian (l2 radii), uniform or "
                "laplace (l1 radii); sigma stays its std per coordinate", "choices": tuple(NOISES.names())})

    name: ClassVar[str] = ""
    #: the method's loss or radius assumes Gaussian noise (an l2 attack, a closed-form Gaussian radius)
    gaussian_only: ClassVar[bool] = False
    #: per-example extras the method needs from the engine, e.g. ("targets",) for CAT-RS
    requires: ClassVar[Tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "loss" in cls.__dict__:
            cls.loss = _detached_stats(cls.__dict__["loss"])  # type: ignore[method-assign]

    def __post_init__(self) -> None:
        self.sigma = validate_sigma(self.sigma)
        make_noise(self.noise, self.sigma)  # an unknown name: one line listing the noises
        if self.gaussian_only and self.noise != DEFAULT_NOISE:
            raise RsmoothError(f"{self.name} trains against Gaussian noise only (its attack or radius is l2 and "
                               f"Gaussian), not --noise {self.noise}: use --noise gaussian, or --method gaussian "
                               f"or consistency for {self.noise} noise")
        self.validate()

    def validate(self) -> None:
        """Raise RsmoothError for bad hyperparameters (override)."""

    @property
    def num_chunks(self) -> int:
        """Optimiser steps per loader batch (one per chunk in the authors' scripts); 1 unless chunked."""
        return 1

    def loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """Return (scalar loss to minimise, dict of scalar statistics for the log).

        Statistics are 0-dim tensors, returned detached (every subclass's ``loss`` is
        wrapped to detach them) and averaged over the epoch by the engine, so that no step
        waits for the device.
        """
        raise NotImplementedError

    @property
    def smoothing_noise(self) -> Noise:
        """The training noise (``noise`` at ``sigma``): the :class:`~rsmooth.smoothing.noises.Noise`
        certify smooths the model with by default."""
        return make_noise(self.noise, self.sigma)

    def noise_like(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """The training noise shaped like ``x`` (image-major), drawn by ``ctx``: N(0, sigma^2 I) for
        the default Gaussian, ``ctx.randn(x.shape) * sigma``."""
        return self.smoothing_noise.like(x, ctx)

    def hparams(self) -> Dict[str, Any]:
        """The hyperparameters as a plain dict (recorded in checkpoints and logs)."""
        return dataclasses.asdict(self)


def _detached_stats(loss_fn):
    """Wrap a ``loss`` so that its statistics come back detached from the graph."""

    @functools.wraps(loss_fn)
    def loss(self, model, batch, ctx):
        value, stats = loss_fn(self, model, batch, ctx)
        return value, {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in stats.items()}

    return loss


def hyperparameters(cls: type) -> List[dataclasses.Field]:
    """The dataclass fields of a method class, for building CLI flags."""
    return [f for f in dataclasses.fields(cls) if f.init]


def create_method(name: str, **hparams: Any) -> Method:
    """Instantiate a registered method; unknown hyperparameters are an error.

    Args:
        name: a registered method (``rsmooth list methods``): gaussian, consistency, smoothadv, ...
        **hparams: its hyperparameters (those of ``rsmooth train --method NAME --help``).

    Returns:
        the :class:`Method`, whose ``loss(model, batch, ctx)`` gives (loss, statistics).

    Example:
        ```python
        method = create_method("consistency", sigma=0.25, lbd=10.0)
        loss, stats = method.loss(model, Batch(x, y, idx), StepContext(generator=g))
        ```
    """
    cls = METHODS.get(name)
    known = {f.name for f in hyperparameters(cls)}
    unknown = sorted(set(hparams) - known)
    if unknown:
        raise RsmoothError(f"method {name!r} has no hyperparameter {', '.join(unknown)}; "
                           f"it takes: {', '.join(sorted(known))}")
    return cls(**hparams)
