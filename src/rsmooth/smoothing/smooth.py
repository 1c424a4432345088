"""The smoothed classifier g(x) = argmax_c P(f(x + delta) = c), delta ~ N(0, sigma^2 I).

Cohen, Rosenfeld & Kolter (2019); papers/004 Sec. 2.2 and 4.1; SPEC.md section 1.  The API
is Cohen's ``core.Smooth`` (same constructor, ``predict``, ``certify``, ``ABSTAIN = -1``) so
existing scripts keep working, with votes counted on the model's device and a batched
``count_votes`` for many inputs at once.
"""
from __future__ import annotations

import copy
import enum
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

import numpy as np
import torch
from torch import nn

from ..errors import RsmoothError, check
from .stats import (
    binom_pvalue,
    certified_radius,
    clopper_pearson_lower,
    validate_alpha,
    validate_count,
    validate_sigma,
)


class Precision(str, enum.Enum):
    """Arithmetic of the base classifier's forward passes during sampling."""

    FP32 = "fp32"  #: the model's own dtype (float32 for every trained checkpoint)
    BF16 = "bf16"  #: weights and noisy inputs in bfloat16 (opt-in; AMX on recent CPUs)


def _model_device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def _validate_input(x: torch.Tensor, ndim: int, what: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise RsmoothError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    check(x.dim() == ndim, f"{what} must have {ndim} dimensions "
          f"({'C x H x W' if ndim == 3 else 'B x C x H x W'}), got shape {tuple(x.shape)}")
    check(x.is_floating_point(), f"{what} must be a floating-point tensor in [0, 1], got {x.dtype}")
    check(bool(torch.isfinite(x).all()), f"{what} contains NaN or infinite values")


class Smooth:
    """A smoothed classifier with Cohen et al.'s PREDICT and CERTIFY.

    Args:
        base_classifier: maps a batch [B x C x H x W] of [0, 1] pixels to logits [B x K];
            normalisation must be inside it (its first layer), so sigma is in pixel units.
        num_classes: K.
        sigma: noise level (standard deviation, [0, 1] pixel units).
        precision: ``"fp32"`` (default) or ``"bf16"`` (weights and inputs in bfloat16;
            faster on CPUs with AMX, votes can differ slightly: record it with results).
        channels_last: run convolutions in channels-last memory format.
        compile: ``torch.compile`` the forward pass (inductor, frozen weights).

    With a non-default mode the model is copied and converted; the caller's model is never
    modified.  Sampling always runs in eval mode under ``torch.inference_mode()`` and the
    model's train/eval flag is restored afterwards.
    """

    ABSTAIN = -1

    def __init__(
        self,
        base_classifier: nn.Module,
        num_classes: int,
        sigma: float,
        *,
        precision: str = "fp32",
        channels_last: bool = False,
        compile: bool = False,
    ) -> None:
        check(int(num_classes) >= 2, f"num_classes must be >= 2, got {num_classes}")
        try:
            self.precision = Precision(precision)
        except ValueError:
            raise RsmoothError(
                f"unknown precision {precision!r}; choose one of: {', '.join(p.value for p in Precision)}"
            ) from None
        self.base_classifier = base_classifier
        self.num_classes = int(num_classes)
        self.sigma = validate_sigma(sigma)
        self.channels_last = bool(channels_last)
        self.compile = bool(compile)
        self.device = _model_device(base_classifier)
        self._model = self._prepare(base_classifier)
        self._dtype = torch.bfloat16 if self.precision is Precision.BF16 else _model_dtype(base_classifier)
        self._compiled = None
        self._noise: Optional[torch.Tensor] = None  # reused noise buffer

    # -- configuration -------------------------------------------------------------------
    def _prepare(self, model: nn.Module) -> nn.Module:
        if self.precision is Precision.FP32 and not self.channels_last:
            return model
        model = copy.deepcopy(model)
        if self.precision is Precision.BF16:
            model = model.to(torch.bfloat16)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def _forward(self):
        if not self.compile:
            return self._model
        if self._compiled is None:
            self._compiled = torch.compile(self._model, mode="max-autotune-no-cudagraphs", dynamic=False)
        return self._compiled

    def mode(self) -> dict:
        """The sampling options, for recording next to results."""
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

    # -- sampling ------------------------------------------------------------------------
    def _buffer(self, rows: int, item_shape: Tuple[int, ...]) -> torch.Tensor:
        """A [rows x C x H x W] view of one reused buffer (never materialise all n copies)."""
        buf = self._noise
        if buf is None or buf.shape[1:] != torch.Size(item_shape) or buf.shape[0] < rows:
            fmt = torch.channels_last if self.channels_last and len(item_shape) == 3 else torch.contiguous_format
            buf = torch.empty((rows, *item_shape), dtype=self._dtype, device=self.device, memory_format=fmt)
            self._noise = buf
        return buf[:rows]

    def _votes(self, batch: torch.Tensor) -> torch.Tensor:
        return self._forward()(batch).argmax(dim=1)

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
        _validate_input(xs, 4, "xs")
        num = validate_count("num", num)
        batch_size = validate_count("batch_size", batch_size)
        with self._eval():
            return self._count(xs, num, batch_size, generator)

    def _count(self, xs, num, batch_size, generator) -> torch.Tensor:
        xs = xs.to(device=self.device, dtype=self._dtype)
        B, K = xs.shape[0], self.num_classes
        counts = torch.zeros(B, K, dtype=torch.long, device=self.device)
        if num >= batch_size or B == 1:
            # one image at a time, `batch_size` copies per forward pass
            for b in range(B):
                x = xs[b]
                remaining = num
                while remaining > 0:
                    m = min(batch_size, remaining)
                    noisy = self._buffer(m, tuple(x.shape))
                    noisy.normal_(0.0, self.sigma, generator=generator).add_(x)
                    counts[b] += torch.bincount(self._votes(noisy), minlength=K)
                    remaining -= m
            return counts
        # several images per forward pass: g images x num copies
        g = max(1, batch_size // num)
        for start in range(0, B, g):
            chunk = xs[start:start + g]
            gb = chunk.shape[0]
            noisy = self._buffer(gb * num, tuple(chunk.shape[1:]))
            noisy.normal_(0.0, self.sigma, generator=generator)
            noisy.view(gb, num, *chunk.shape[1:]).add_(chunk.unsqueeze(1))
            votes = self._votes(noisy).view(gb, num)
            counts[start:start + gb].scatter_add_(1, votes, torch.ones_like(votes))
        return counts

    def _count_one(self, x, num, batch_size, generator) -> np.ndarray:
        return self._count(x.unsqueeze(0), num, batch_size, generator)[0].cpu().numpy()

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
            x: one input [C x H x W] in [0, 1]; n: noisy samples; alpha: failure
            probability in (0, 1); batch_size: samples per forward pass.
        """
        _validate_input(x, 3, "x")
        n = validate_count("n", n)
        alpha = validate_alpha(alpha)
        batch_size = validate_count("batch_size", batch_size)
        with self._eval():
            counts = self._count_one(x, n, batch_size, generator)
        top2 = np.argsort(-counts, kind="stable")[:2]  # ties to the lowest index
        n_a, n_b = int(counts[top2[0]]), int(counts[top2[1]])
        if binom_pvalue(n_a, n_b) > alpha:
            return Smooth.ABSTAIN
        return int(top2[0])

    def certify(
        self,
        x: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: Optional[torch.Generator] = None,
    ) -> Tuple[int, float]:
        """CERTIFY (Cohen et al. 2019; papers/004 Sec. 2.2): (class, l2 radius) or (ABSTAIN, 0.0).

        Selects c_A from n0 samples, estimates p_A from n *fresh* samples with the one-sided
        Clopper-Pearson lower bound at level 1 - alpha, abstains if it is below 0.5, else
        returns radius sigma * Phi^-1(p_A_lower).  Guarantee: with probability >= 1 - alpha,
        g(x + d) = c_A for every ||d||_2 < radius.

        Args:
            x: one input [C x H x W] in [0, 1]; n0: selection samples (100); n: estimation
            samples (100,000); alpha: failure probability (0.001); batch_size: samples per
            forward pass; generator: optional ``torch.Generator`` on the model's device.
        """
        _validate_input(x, 3, "x")
        n0 = validate_count("n0", n0)
        n = validate_count("n", n)
        alpha = validate_alpha(alpha)
        batch_size = validate_count("batch_size", batch_size)
        with self._eval():
            counts0 = self._count_one(x, n0, batch_size, generator)
            c_a = int(np.argmax(counts0))  # first maximum: ties to the lowest index
            counts = self._count_one(x, n, batch_size, generator)
        p_lower = clopper_pearson_lower(int(counts[c_a]), n, alpha)
        if p_lower < 0.5:
            return Smooth.ABSTAIN, 0.0
        return c_a, certified_radius(p_lower, self.sigma)


def _model_dtype(model: nn.Module) -> torch.dtype:
    for t in model.parameters():
        if t.is_floating_point():
            return t.dtype
    return torch.float32
