"""The smoothed classifier g(x) = argmax_c P(f(x + delta) = c), delta ~ N(0, sigma^2 I).

Cohen, Rosenfeld & Kolter (2019, arXiv 1902.02918, Sec. 3.2); Jeong & Shin 2020 (Consistency,
arXiv 2006.04062) Sec. 2.2 and 4.1.  The API is Cohen's ``core.Smooth`` (locuslab/smoothing:
same constructor, ``predict``, ``certify``, ``ABSTAIN = -1``) so existing scripts keep working,
with votes counted on the model's device and a batched ``count_votes`` for many inputs at once.
"""
from __future__ import annotations

import copy
import enum
import math
import numbers
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union, get_args

import numpy as np
import torch
from torch import nn

from ..errors import RsmoothError, check, first_line
from ..seeding import generator, validate_seed
from .noises import Noise, as_noise
from .stats import validate_count
from .packing import Item, Packer
from .procedures import ABSTAIN, Adaptive, Certify, Counts, Predict, Procedure, Sequential
from .sequential import ALPHA_SHARE, FUTILITY, SequentialCertificate


#: Noisy samples per forward pass to pass as ``batch_size`` on CPU: within ~15% of the best
#: batch size for LeNet and CIFAR ResNet-20 in every mode, where 1000 loses up to 45%
#: (``bench/certify_throughput.py --sweep``, BENCHMARKS.md).
DEFAULT_BATCH_SIZE = 256


class Precision(str, enum.Enum):
    """Arithmetic of the base classifier's forward passes during sampling."""

    FP32 = "fp32"  #: the model's own dtype (float32 for every trained checkpoint)
    BF16 = "bf16"  #: weights and noisy inputs in bfloat16 (opt-in; AMX on recent CPUs)


def validate_precision(precision: str) -> Precision:
    """``precision`` as a :class:`Precision`, or a one-line error listing the choices."""
    try:
        return Precision(precision)
    except ValueError:
        raise RsmoothError(
            f"unknown precision {precision!r}; choose one of: {', '.join(p.value for p in Precision)}"
        ) from None


def _model_device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


#: how far outside [0, 1] an input may reach (rounding of transforms) before Smooth warns
RANGE_SLACK = 1e-4


def _validate_input(x: torch.Tensor, ndim: int, what: str) -> Tuple[float, float]:
    """Check ``x`` and return its (min, max), read from the device in one copy (NaN if any is NaN)."""
    if not isinstance(x, torch.Tensor):
        raise RsmoothError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    check(x.dim() == ndim, f"{what} must have {ndim} dimensions "
          f"({'C x H x W' if ndim == 3 else 'B x C x H x W'}), got shape {tuple(x.shape)}")
    check(x.is_floating_point(), f"{what} must be a floating-point tensor in [0, 1], got {x.dtype}")
    if x.numel() == 0:
        return 0.0, 1.0
    lo, hi = torch.stack(torch.aminmax(x)).tolist()
    check(math.isfinite(lo) and math.isfinite(hi), f"{what} contains NaN or infinite values")
    return lo, hi


def _validate_generator(generator: Optional[torch.Generator], device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise RsmoothError(f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)) "
                           f"or None, got {type(generator).__name__}")
    check(generator.device.type == device.type,
          f"generator is on {generator.device} but the model is on {device}; "
          f"create it with torch.Generator(device={str(device)!r})")


def _out_of_memory(e: BaseException) -> bool:
    return (isinstance(e, (MemoryError, torch.OutOfMemoryError))
            or "can't allocate memory" in str(e) or "out of memory" in str(e))


class _NoisyVotes(nn.Module):
    """votes[b] = argmax f(batch[b]) for a batch of noisy inputs: the unit that compiled mode compiles.

    The noisy inputs are formed in the noise's dtype (the model's own, float32) and cast once to
    the sampling precision and memory format, so every mode classifies the same noisy points and
    the modes differ only in the arithmetic of f.

    A noisy input whose logits are not all finite votes for the extra index K (the width of
    the logits), which Smooth counts and refuses after sampling: argmax over NaN would
    otherwise vote for class 0 and certify a broken model (no host sync per batch).
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype, channels_last: bool) -> None:
        super().__init__()
        self.model = model
        self.dtype = dtype
        self.memory_format = torch.channels_last if channels_last else torch.preserve_format

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        """batch [B x C x H x W] -> votes [B] (int64)."""
        logits = self.model(batch.to(self.dtype, memory_format=self.memory_format))
        return torch.where(torch.isfinite(logits).all(dim=1), logits.argmax(dim=1), logits.shape[1])


class _Compiled:
    """A module compiled by inductor with frozen weights, once per input shape.

    ``torch.export`` captures the graph and ``torch._inductor.compile`` builds it with the
    weights folded into constants (convolutions and linear layers fused with their ReLU, on
    prepacked oneDNN weights).  Unlike ``torch.compile``, nothing lands in dynamo's caches,
    which are shared by every instance of a class and stop compiling after 8 of them (later
    Smooth objects would silently run eagerly): each graph belongs to, and is freed with,
    this object.  A graph is specialised to the strides of its first inputs (contiguous).
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.graphs: Dict[Tuple[torch.Size, ...], Callable[..., torch.Tensor]] = {}

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        key = tuple(a.shape for a in args)
        if key not in self.graphs:
            from torch._inductor import compile as inductor_compile, config

            graph = torch.export.export(self.module, args).module()
            with config.patch(freezing=True):
                self.graphs[key] = inductor_compile(graph, list(args))
        return self.graphs[key](*args)


class Smooth:
    """A smoothed classifier with Cohen et al.'s PREDICT and CERTIFY.

    Args:
        base_classifier: an ``nn.Module`` mapping a batch [B x C x H x W] of [0, 1] pixels
            to logits [B x K]; normalisation must be inside it (its first layer), so sigma
            is in pixel units.  A plain function is refused: wrap it in a module whose
            ``forward`` calls it (Smooth needs the module's device, eval mode and copies).
        num_classes: K, an integer equal to the width of the logits (checked on the first
            forward pass of each input shape, as is the input shape itself).
        sigma: noise level (standard deviation, [0, 1] pixel units).
        precision: ``"fp32"`` (default) or ``"bf16"`` (weights and inputs in bfloat16;
            faster on CPUs with AMX, votes can differ slightly: record it with results).
        channels_last: run convolutions in channels-last memory format (faster on CPU;
            needed for bfloat16 to pay).
        compile: compile the noisy forward pass with inductor, weights frozen into the
            graph (``torch.export``: the model must be exportable).  It compiles on first
            use (seconds, once per batch shape); every forward pass then runs at the full
            ``batch_size`` (a shorter last batch is padded and the padding's votes
            dropped), so later calls never recompile.

    With a non-default mode the model is copied (a snapshot) and converted; the caller's
    model is never modified.  Sampling always runs in eval mode under
    ``torch.inference_mode()`` and the model's train/eval flag is restored afterwards.
    Noise is drawn in the model's own dtype in every mode, so a generator seed gives the
    same noisy inputs whatever the mode.  ``DEFAULT_BATCH_SIZE`` is a good ``batch_size``
    on CPU.  Non-finite logits on any noisy input raise an error instead of voting; inputs
    outside [0, 1] (0-255 or normalised images) give one warning per object.
    Noise, votes and counts stay on the model's device and its forward passes are queued
    without waiting for it: ``certify`` and ``predict`` copy the counts to the host once per
    input, ``count_votes`` reads one number (the non-finite check) per call.

    Example:
        ```python
        smooth = Smooth(model, num_classes=10, sigma=0.25)     # model: [B, C, H, W] in [0, 1] -> [B, 10]
        label, radius = smooth.certify(x, n0=100, n=100_000, alpha=0.001, batch_size=1000)
        # with probability >= 0.999, g(x + d) = label for every ||d||_2 < radius ([0, 1] pixel units)
        ```
    """

    ABSTAIN = ABSTAIN

    def __init__(
        self,
        base_classifier: nn.Module,
        num_classes: int,
        sigma: Union[float, Noise],
        *,
        precision: str = "fp32",
        channels_last: bool = False,
        compile: bool = False,
    ) -> None:
        if not isinstance(base_classifier, nn.Module):
            raise RsmoothError(f"base_classifier must be a torch.nn.Module, got {type(base_classifier).__name__}; "
                               f"wrap a function f in a module whose forward(x) returns f(x)")
        num_classes = validate_count("num_classes", num_classes, minimum=2)
        self.precision = validate_precision(precision)
        self.base_classifier = base_classifier
        self.num_classes = num_classes
        self.noise = as_noise(sigma)
        self.sigma = self.noise.sigma
        self.channels_last = bool(channels_last)
        self.compile = bool(compile)
        self.device = _model_device(base_classifier)
        self._noise_dtype = _model_dtype(base_classifier)
        self._model = self._prepare(base_classifier)
        dtype = torch.bfloat16 if self.precision is Precision.BF16 else self._noise_dtype
        self._noisy_votes = _NoisyVotes(self._model, dtype, self.channels_last)
        self._votes = _Compiled(self._noisy_votes) if self.compile else self._noisy_votes
        self._checked_shapes: Set[Tuple[int, ...]] = set()  # input shapes the model accepted
        self._warned_range = False  # inputs outside [0, 1] are told once per object

    # -- configuration -------------------------------------------------------------------
    def _prepare(self, model: nn.Module) -> nn.Module:
        if self.precision is Precision.FP32 and not self.channels_last and not self.compile:
            return model
        model = copy.deepcopy(model)
        if self.precision is Precision.BF16:
            model = model.to(torch.bfloat16)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def mode(self) -> dict:
        """The sampling options, for recording next to results.

        Returns:
            ``{"precision": "fp32" | "bf16", "channels_last": bool, "compile": bool}``.
        """
        return {"precision": self.precision.value, "channels_last": self.channels_last,
                "compile": self.compile}

    @contextmanager
    def _eval(self) -> Iterator[None]:
        models = {id(m): m for m in (self.base_classifier, self._model)}.values()
        flags = [(m, m.training) for m in models]
        for m, _ in flags:
            m.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            for m, was_training in flags:
                m.train(was_training)

    def _check_range(self, bounds: Tuple[float, float], what: str) -> None:
        """Warn, once per object, when inputs leave [0, 1]: sigma is in [0, 1] pixel units."""
        lo, hi = bounds
        if self._warned_range or (lo >= -RANGE_SLACK and hi <= 1 + RANGE_SLACK):
            return
        self._warned_range = True
        warnings.warn(f"{what} ranges over [{lo:.4g}, {hi:.4g}], outside [0, 1]: Smooth expects pixels in [0, 1] "
                      f"because sigma ({self.sigma:g}) is in [0, 1] pixel units (on 0-255 images it is 255 times "
                      f"weaker); divide such images by 255 and put any normalisation inside the model", stacklevel=3)

    # -- sampling ------------------------------------------------------------------------
    def _check_model(self, xs: torch.Tensor) -> None:
        """One clean forward pass per input shape: the model must accept the input and
        return logits [1 x num_classes] (a clear error instead of a failure deep in sampling)."""
        shape = tuple(xs.shape[1:])
        if shape in self._checked_shapes:
            return
        v = self._noisy_votes
        try:
            out = self._model(xs[:1].to(v.dtype, memory_format=v.memory_format))
        except RuntimeError as e:
            raise RsmoothError(f"the base classifier fails on an input of shape {shape} (C x H x W): "
                               f"{first_line(e)}; pass images of the shape it expects") from e
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        check(isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == 1,
              f"the base classifier must return logits [B x K]; for an input [1 x {' x '.join(map(str, shape))}] "
              f"it returned {got}")
        check(out.shape[1] == self.num_classes,
              f"the base classifier returns {out.shape[1]} logits per input but num_classes is "
              f"{self.num_classes}; pass num_classes={out.shape[1]}")
        self._checked_shapes.add(shape)

    def count_votes(
        self,
        xs: torch.Tensor,
        num: int,
        batch_size: int,
        generator: Optional[torch.Generator] = None,
    ) -> torch.Tensor:
        """Votes of the base classifier under noise for each of B inputs.

        Args:
            xs: inputs [B x C x H x W] in [0, 1].
            num: noisy samples per input.
            batch_size: noisy samples per forward pass; inputs with ``num < batch_size``
                share a forward pass (several images per noise batch).
            generator: a ``torch.Generator`` on the model's device for reproducibility.

        Returns:
            counts [B x K] (int64, on the model's device): counts[b, c] = number of the
            ``num`` noisy copies of xs[b] classified as c.
        """
        self._check_range(_validate_input(xs, 4, "xs"), "xs")
        num = validate_count("num", num)
        batch_size = validate_count("batch_size", batch_size, maximum=None)  # too large: says what to lower
        _validate_generator(generator, self.device)
        xs = self.noise.check_image(xs).to(device=self.device, dtype=self._noise_dtype, non_blocking=True)
        self._check_model(xs)
        items = ((b, x, generator) for b, x in enumerate(xs.contiguous()))
        with self.packer(batch_size, checked=True) as packer, self._memory_says(batch_size):
            rows = {b: row for b, row, _ in packer.run(Counts(num), items)}  # one wait, at the end
        if not rows:
            return torch.zeros(0, self.num_classes, dtype=torch.long, device=self.device)
        return torch.stack([rows[b] for b in range(len(rows))])

    def _image(self, x: torch.Tensor) -> torch.Tensor:
        """One image checked (shape, range, the model on its shape) and put on the model's device."""
        self._check_range(_validate_input(x, 3, "x"), "x")
        x = self.noise.check_image(x).to(device=self.device, dtype=self._noise_dtype, non_blocking=True).contiguous()
        self._check_model(x.unsqueeze(0))
        return x

    @property
    def noise_dtype(self) -> torch.dtype:
        """The dtype noisy inputs are drawn and added in (the model's parameters')."""
        return self._noise_dtype

    @contextmanager
    def packer(self, batch_size: int, *, checked: bool = False) -> Iterator[Packer]:
        """The :class:`~rsmooth.smoothing.packing.Packer` of this smoothed classifier, its models in
        eval mode without autograd while it is used: what :meth:`stream` runs, and what the tuner
        times passes with.

        Args:
            batch_size: noisy inputs per forward pass.
            checked: the images given to it are already checked and on the model's device
                (``count_votes`` checks its whole batch at once).

        Returns:
            a context manager giving the packer.

        Example:
            ```python
            x = torch.rand(1, 8, 8)
            with smooth.packer(256) as packer:   # one pass of 256 noisy copies of x
                votes = packer.noisy_votes(x, torch.empty(256, 1, 8, 8), torch.Generator().manual_seed(0))
            ```
        """
        with self._eval():
            yield Packer(self._votes, self.noise, batch_size, self.num_classes, self.device, self._noise_dtype,
                         _refuse_nonfinite, _same if checked else self._image, full=self.compile)

    def stream(self, procedure: Procedure, items: Iterable[Item], batch_size: int) -> Iterator[Tuple[Any, Any, float]]:
        """Run ``procedure`` on each image of ``items``, packing the samples of many images into each
        forward pass of ``batch_size`` noisy inputs (:mod:`rsmooth.smoothing.packing`).

        Args:
            procedure: :class:`~rsmooth.smoothing.procedures.Predict`, ``Certify``, ``Sequential``
                or ``Adaptive`` (the settings of :meth:`predict`, :meth:`certify`,
                :meth:`certify_sequential`, :meth:`certify_adaptive`).
            items: ``(key, x, generator)`` triples: any key, one image [C x H x W] in [0, 1], and
                the ``torch.Generator`` (on the model's device) its noise is drawn from, or None;
                or ``(key, x, generator, label)``, the true class fourth (a procedure with
                ``skip_wrong`` stops an image whose n0 samples select another class:
                :class:`~rsmooth.smoothing.procedures.Skipped`).
            batch_size: noisy inputs per forward pass; results do not depend on it.
        Returns:
            an iterator of ``(key, result, seconds)``, one per image as it completes (not necessarily
            in order): the result of the procedure on that image alone (what the method of the same
            name returns for it) and the image's share of the wall time.

        Example:
            ```python
            from rsmooth.smoothing.procedures import Certify

            gens = [torch.Generator().manual_seed(i) for i in range(len(xs))]
            items = zip(range(len(xs)), xs, gens)
            for i, (pred, radius), seconds in smooth.stream(Certify(100, 10_000, 0.001), items, 1024):
                print(i, pred, radius)
            ```
        """
        batch_size = validate_count("batch_size", batch_size)
        check(isinstance(procedure, get_args(Procedure)),
              f"procedure must be a Predict, Certify, Sequential or Adaptive of rsmooth.smoothing.procedures, "
              f"got {type(procedure).__name__}")
        with self.packer(batch_size) as packer, self._memory_says(batch_size):
            yield from packer.run(procedure, self._checked_items(items))

    @contextmanager
    def _memory_says(self, batch_size: int) -> Iterator[None]:
        """Running out of memory in a forward pass says which setting to lower."""
        try:
            yield
        except (RuntimeError, MemoryError) as e:
            if not _out_of_memory(e):
                raise
            raise RsmoothError(f"out of memory classifying up to {batch_size} noisy inputs per forward pass on "
                               f"{self.device}; lower batch_size (--batch-size, now {batch_size})") from e

    def _checked_items(self, items: Iterable[Item]) -> Iterator[Item]:
        for item in items:
            check(isinstance(item, (tuple, list)) and len(item) in (3, 4), f"each item must be a (key, image "
                  f"[C x H x W], torch.Generator or None) triple (or with the label fourth), got {type(item).__name__}")
            key, x, generator, *label = item
            _validate_generator(generator, self.device)
            check(not label or label[0] is None or (isinstance(label[0], numbers.Integral)
                                                    and 0 <= int(label[0]) < self.num_classes),
                  f"an item's label must be a class in 0..{self.num_classes - 1} or None, got {label[0]!r}"
                  if label else "")
            yield (key, x, generator, *label)

    def _one(self, x: torch.Tensor, procedure: Procedure, batch_size: int,
             generator: Optional[torch.Generator]) -> Any:
        """The result of ``procedure`` on one image."""
        ((_, result, _),) = self.stream(procedure, [(0, x, generator)], batch_size)
        return result

    # -- Cohen et al.'s procedures -------------------------------------------------------
    def predict(
        self,
        x: torch.Tensor,
        n: int,
        alpha: float,
        batch_size: int,
        generator: Optional[torch.Generator] = None,
    ) -> int:
        """PREDICT (Cohen et al. 2019): the top class of n noisy votes, or ABSTAIN.

        Abstains when the two-sided binomial test of the top two counts (n_A vs n_B, p = 0.5)
        has p-value > alpha.  Guarantee: returns a class other than g(x) with probability at
        most alpha.

        Args:
            x: one input [C x H x W] in [0, 1].
            n: noisy samples.
            alpha: failure probability in (0, 1).
            batch_size: noisy samples per forward pass.
            generator: optional ``torch.Generator`` on the model's device.

        Returns:
            the predicted class (int in 0..K-1), or ``Smooth.ABSTAIN`` (-1).

        Example:
            ```python
            label = smooth.predict(x, n=1000, alpha=0.001, batch_size=1000)
            ```
        """
        return self._one(x, Predict(n, alpha), batch_size, generator)

    def certify(
        self,
        x: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: Optional[torch.Generator] = None,
        *,
        two_sided: bool = False,
    ) -> Tuple[int, float]:
        """CERTIFY (Cohen et al. 2019; Jeong & Shin 2020 Sec. 2.2): (class, l2 radius) or (ABSTAIN, 0.0).

        Selects c_A from n0 samples, estimates p_A from n *fresh* samples with the one-sided
        Clopper-Pearson lower bound at level 1 - alpha, abstains if it is below 0.5, else
        returns radius sigma * Phi^-1(p_A_lower).  Guarantee: with probability >= 1 - alpha,
        g(x + d) = c_A for every ||d||_2 < radius.

        Args:
            x: one input [C x H x W] in [0, 1].
            n0: selection samples (the papers: 100).
            n: estimation samples (the papers: 100,000).
            alpha: failure probability (the papers: 0.001).
            batch_size: noisy samples per forward pass.
            generator: optional ``torch.Generator`` on the model's device.
            two_sided: bound p_A below and the runner-up's p_B above, each at alpha/2, and
                certify sigma/2 (Phi^-1(p_A) - Phi^-1(p_B)) (the noise's radius of both; Cohen
                et al.'s Theorem 1) when p_A > p_B: larger where the other classes share the
                rest (:class:`~rsmooth.smoothing.procedures.Certify` says why the runner-up of
                the same votes is valid).  Default: Cohen et al.'s CERTIFY, p_B = 1 - p_A.

        Returns:
            ``(label, radius)``: the class c_A and the certified l2 radius in [0, 1] pixel
            units, or ``(Smooth.ABSTAIN, 0.0)``.

        Example:
            ```python
            label, radius = smooth.certify(x, n0=100, n=10_000, alpha=0.001, batch_size=1000)
            ```
        """
        return self._one(x, Certify(n0, n, alpha, two_sided=two_sided), batch_size, generator)

    def certify_sequential(
        self,
        x: torch.Tensor,
        n0: int,
        radii: Sequence[float],
        alpha: float,
        n_max: int = 100_000,
        batch_size: int = DEFAULT_BATCH_SIZE,
        generator: Optional[torch.Generator] = None,
        futility: float = FUTILITY,
        *,
        two_sided: bool = False,
        alpha_share: float = ALPHA_SHARE,
    ) -> SequentialCertificate:
        """Decide robustness at each of ``radii``, drawing samples only until every answer is known.

        Selects c_A from n0 samples as :meth:`certify` does, then draws estimation samples in
        growing batches and bounds p_A with anytime-valid confidence sequences
        (:mod:`rsmooth.smoothing.sequential`; Voracek 2024, arXiv 2406.17830).  At radius r the
        answer is "robust" once the lower bound (level alpha) exceeds Phi(r / sigma), "no" once
        the upper bound (level ``futility``) is at most Phi(r / sigma), "cap" once even the
        projected lower bound at n_max is; it stops when every radius is answered (at n_max at
        the latest).  The returned radius is the largest robust one, with prediction c_A
        (ABSTAIN and 0.0 when none is).  Guarantee: with probability >= 1 - alpha, for all radii
        at once, g(x + d) = c_A for every ||d||_2 < r at every r decided robust; ``futility`` only
        bounds (by 2 * futility) the chance of giving up a radius that this lower bound would
        certify with n_max samples (:meth:`certify` with n = n_max certifies more: its
        Clopper-Pearson bound is about 1.5x narrower; bench/futility_vs_fixed.py).

        Args:
            x: one input [C x H x W] in [0, 1].
            n0: selection samples (100).
            radii: l2 radii to decide, in [0, 1] pixel units.
            alpha: failure probability (0.001, below 1/2).
            n_max: cap on the estimation samples (100,000).
            batch_size: noisy samples per forward pass (the sample sizes at which the bounds
                are checked do not depend on it).
            generator: optional ``torch.Generator`` on the model's device.
            futility: beta in (0, 1/e) (0.05).
            two_sided: also bound the runner-up's p_B (anytime upper bound; p_A and p_B at
                alpha/2 each) and certify the noise's radius of both, as :meth:`certify` does.
            alpha_share: the share of alpha on the anytime bounds, in (0, 1]; the rest goes to
                Clopper-Pearson over all n_max samples where the answer is still open at the cap
                (:func:`~rsmooth.smoothing.sequential.split_levels`; 1: the anytime bound alone).

        Returns:
            a :class:`~rsmooth.smoothing.sequential.SequentialCertificate`: ``prediction``,
            ``radius`` (the largest radius decided robust), the samples drawn, the bounds and
            one decision per radius.

        Example:
            ```python
            cert = smooth.certify_sequential(x, n0=100, radii=[0.25, 0.5], alpha=0.001)
            cert.prediction, cert.radius, cert.decisions
            ```
        """
        procedure = Sequential(n0, alpha, n_max, futility, radii, two_sided=two_sided, alpha_share=alpha_share)
        return self._one(x, procedure, batch_size, generator)

    def certify_adaptive(
        self,
        x: torch.Tensor,
        n0: int,
        alpha: float,
        radius_tol: float = 0.05,
        n_max: int = 100_000,
        batch_size: int = DEFAULT_BATCH_SIZE,
        generator: Optional[torch.Generator] = None,
        futility: float = FUTILITY,
        *,
        two_sided: bool = False,
        alpha_share: float = ALPHA_SHARE,
    ) -> SequentialCertificate:
        """Certify the largest radius, drawing samples only until more cannot raise it by ``radius_tol``.

        Selects c_A from n0 samples as :meth:`certify` does, then draws estimation samples in
        growing batches, bounding p_A with anytime-valid confidence sequences (lower bound LB,
        level alpha; :mod:`rsmooth.smoothing.sequential`).  It stops when
        sigma * (Phi^-1(LB_proj) - Phi^-1(LB)) <= radius_tol, each term clamped at 0, where
        LB_proj is the lower bound all n_max samples would give if the remaining votes came at
        the upper ``futility``-quantile allowed by the upper bound (level ``futility``), or at
        n_max.  Returns (c_A, sigma * Phi^-1(LB)) if LB > 1/2, else (ABSTAIN, 0.0).  Guarantee:
        with probability >= 1 - alpha the returned radius is at most sigma * Phi^-1(p_A), the
        radius of Cohen et al. (arXiv 1902.02918, Thm. 1) with p_A known exactly, so
        g(x + d) = c_A for every ||d||_2 < radius; this holds for the stopping rule used and for
        any other.  The tolerance bounds what stopping early costs against drawing all n_max
        samples (with probability >= 1 - 2 * futility), not the distance to the true radius: the
        "radius decline" of Chen et al.'s input-specific sampling (Input-Specific Robustness
        Certification for Randomized Smoothing, 2022, arXiv 2112.12084), here with a bound valid
        under optional stopping.

        Args:
            x: one input [C x H x W] in [0, 1].
            n0: selection samples (100).
            alpha: failure probability (0.001, below 1/2).
            radius_tol: l2 radius in [0, 1] pixel units (>= 0; 0 draws all n_max samples
                unless the radius is already out of reach; ``inf`` stops at the first look).
            n_max: cap on the estimation samples (100,000).
            batch_size: noisy samples per forward pass.
            generator: optional ``torch.Generator`` on the model's device.
            futility: beta in (0, 1/e) (0.05).
            two_sided: also bound the runner-up's p_B (anytime upper bound; p_A and p_B at
                alpha/2 each) and certify the noise's radius of both, as :meth:`certify` does.
            alpha_share: the share of alpha on the anytime bounds, in (0, 1]; the rest goes to
                Clopper-Pearson over all n_max samples where the answer is still open at the cap
                (:func:`~rsmooth.smoothing.sequential.split_levels`; 1: the anytime bound alone).

        Returns:
            a :class:`~rsmooth.smoothing.sequential.SequentialCertificate` whose ``radius`` is
            the certified radius (0.0 with ``prediction`` ABSTAIN).

        Example:
            ```python
            cert = smooth.certify_adaptive(x, n0=100, alpha=0.001, radius_tol=0.05)
            ```
        """
        procedure = Adaptive(n0, alpha, n_max, futility, radius_tol, two_sided=two_sided, alpha_share=alpha_share)
        return self._one(x, procedure, batch_size, generator)

    def certify_batch(
        self,
        xs: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        *,
        labels: Optional[Sequence[int]] = None,
        indices: Optional[Sequence[int]] = None,
        seed: int = 0,
    ) -> List[Dict[str, object]]:
        """CERTIFY each image of a batch: one record per image (plain dicts).

        Image b is certified with noise from a generator seeded by ``(seed, indices[b])``
        exactly as ``rsmooth certify --seed`` seeds dataset example ``indices[b]``, so with the
        dataset indices of the images the records equal that command's TSV rows (time aside).
        Guarantee: each record's certificate is :meth:`certify`'s, wrong with probability at most
        alpha (over m images, about alpha * m may be wrong).

        Args:
            xs: images [B x C x H x W] in [0, 1].
            n0: selection samples per image, as in :meth:`certify`.
            n: estimation samples per image, as in :meth:`certify`.
            alpha: failure probability, as in :meth:`certify`.
            batch_size: noisy samples per forward pass.
            labels: optional true classes [B], integers in 0..K-1: adds ``label`` and ``correct``.
            indices: the images' example indices, integers >= 0 (default 0, ..., B-1).
            seed: the noise seed.
        Returns:
            ``[{"index", "predict", "radius"[, "label", "correct"]}, ...]``; predict is ABSTAIN
            (-1) with radius 0.0 when the smoothed classifier abstains.

        Example:
            ```python
            records = Smooth(model, num_classes=10, sigma=0.25).certify_batch(xs, 100, 10_000, 0.001, 1000, labels=ys)
            pandas.DataFrame(records)   # pip install pandas: not a dependency of rsmooth
            ```
        """
        self._check_range(_validate_input(xs, 4, "xs"), "xs")
        seed = validate_seed(seed, "seed")
        indices = list(range(len(xs))) if indices is None else _validate_ids("indices", indices, len(xs))
        if labels is not None:
            labels = _validate_ids("labels", labels, len(xs), self.num_classes)
        items = ((b, xs[b], generator(seed, "certify", i, device=self.device)) for b, i in enumerate(indices))
        results = {b: result for b, result, _ in self.stream(Certify(n0, n, alpha), items, batch_size)}
        records: List[Dict[str, object]] = []
        for b, i in enumerate(indices):
            pred, radius = results[b]
            record: Dict[str, object] = {"index": i, "predict": pred, "radius": radius}
            if labels is not None:
                label = labels[b]
                record.update(label=label, correct=pred == label)
            records.append(record)
        return records


def _validate_ids(name: str, values: Sequence[int], count: int, num_classes: Optional[int] = None) -> List[int]:
    """``values`` (a sequence, array or tensor) as ``count`` integers >= 0, below ``num_classes`` if
    given: a string, a fraction (``0.5`` is never truncated) or a negative value is an error."""
    if isinstance(values, (torch.Tensor, np.ndarray)):
        values = values.tolist()
    check(not isinstance(values, (str, bytes)) and hasattr(values, "__len__"),
          f"{name} must be a sequence of {count} integers, got {type(values).__name__}")
    check(len(values) == count, f"{name} has {len(values)} entries for {count} images")
    what = (f"a class in 0..{num_classes - 1} (num_classes={num_classes}): pass class indices, not names"
            if num_classes else "a dataset index (an integer >= 0): pass the images' positions in the dataset")
    out = []
    for b, v in enumerate(values):
        try:
            out.append(validate_count(name, v, minimum=0))
        except RsmoothError:
            out.append(-1)
        check(0 <= out[-1] < (num_classes or math.inf), f"{name}[{b}] is {v!r}, not {what}")
    return out


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


def _refuse_nonfinite(bad: int, total: int) -> None:
    check(bad == 0, f"the base classifier returned NaN/inf logits for {bad} of {total} noisy inputs; "
                    f"check the checkpoint / model (are its weights finite?)")


def _model_dtype(model: nn.Module) -> torch.dtype:
    for t in model.parameters():
        if t.is_floating_point():
            return t.dtype
    return torch.float32
