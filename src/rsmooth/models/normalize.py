"""The normalisation layer that is module 0 of every rsmooth model."""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import check


def validate_normalization(mean: Sequence[float], std: Sequence[float]) -> None:
    """A one-line error unless every mean and std is a finite number and every std is > 0 (an
    infinite std makes every input constant, a NaN makes every logit NaN)."""
    def ok(v: object, low: float) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > low

    check(all(ok(m, -math.inf) for m in mean) and all(ok(s, 0.0) for s in std),
          f"--mean/--std must be finite numbers with std > 0 (per channel, in [0,1] pixel units, e.g. "
          f"--mean 0.5 --std 0.25), got mean {list(mean)} and std {list(std)}")


class Normalize(nn.Module):
    """Per-channel standardisation ``(x - mean) / std`` as the model's first layer.

    Why it is a layer and not a data transform: randomized smoothing adds the Gaussian
    noise to the input in [0, 1] pixel space, *before* normalisation, so certified radii
    are in pixel units (Cohen et al. 2019, arXiv 1902.02918; Jeong & Shin 2020, Consistency,
    arXiv 2006.04062, Sec. 2.2). Standardising inside the model keeps every caller (training,
    attacks, certification) in pixel space.

    ``mean`` and ``std`` are registered buffers of shape [1, C, 1, 1], so they are saved in
    the checkpoint (keys ``0.mean`` and ``0.std`` of the ``nn.Sequential``) and follow
    ``model.to(device)``. They stay float32 under ``model.to(torch.bfloat16)`` / ``.half()``
    (so a checkpoint keeps the exact constants) and are cast to the input's dtype on the
    fly, so bfloat16 and channels_last inputs work. ``Normalize(None, None)`` is the
    identity and has no buffers (the MNIST family and digits are not normalised, as in the public code).

    Args:
        mean: per-channel means, length C, or None.
        std: per-channel standard deviations, length C, or None.

    Shapes: x [B, C, H, W] -> [B, C, H, W].

    Example::

        norm = Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
        z = norm(torch.rand(8, 3, 32, 32))
    """

    def __init__(self, mean: Optional[Sequence[float]], std: Optional[Sequence[float]]) -> None:
        super().__init__()
        check((mean is None) == (std is None), "Normalize needs both mean and std, or neither")
        self.identity = mean is None
        if mean is None:
            return
        mean_t = torch.as_tensor(mean, dtype=torch.float32).flatten()
        std_t = torch.as_tensor(std, dtype=torch.float32).flatten()
        check(mean_t.numel() == std_t.numel() and mean_t.numel() > 0,
              f"Normalize: mean and std must have the same length > 0, got "
              f"{mean_t.numel()} and {std_t.numel()}")
        validate_normalization(mean_t.tolist(), std_t.tolist())
        self.register_buffer("mean", mean_t.view(1, -1, 1, 1))
        self.register_buffer("std", std_t.view(1, -1, 1, 1))

    @property
    def num_channels(self) -> Optional[int]:
        """C, or None for the identity."""
        return None if self.identity else self.mean.shape[1]

    def _apply(self, fn, recurse=True):  # the nn.Module hook behind .to / .cuda / .half
        if self.identity:
            return super()._apply(fn, recurse)
        exact = (self.mean.float(), self.std.float())
        super()._apply(fn, recurse)
        # device moves apply; dtype casts do not (the exact float32 constants are kept)
        self.mean = exact[0].to(device=self.mean.device)
        self.std = exact[1].to(device=self.std.device)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.identity:
            return x
        return (x - self.mean.to(dtype=x.dtype)) / self.std.to(dtype=x.dtype)

    def extra_repr(self) -> str:
        if self.identity:
            return "identity"
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"
