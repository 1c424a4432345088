"""Random draws from a generator or from a training step's context.

Pure pieces of the methods and attacks take a ``source`` of randomness: a ``torch.Generator``
(``None``: torch's default), or the :class:`~rsmooth.methods.StepContext` of a training step,
which under ``torchrun`` draws for the step's whole batch and keeps this process's examples, so
that an example's noise does not depend on the number of processes.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch


def draw(kind: str, shape: Sequence[int], source: Any = None, *, device: Optional[torch.device] = None,
         dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``torch.randn`` (``kind="randn"``) or ``torch.rand`` (``"rand"``) of ``shape`` from ``source``;
    a step context's draws run over its examples along the first dimension, image-major."""
    if source is None or isinstance(source, torch.Generator):
        return getattr(torch, kind)(tuple(shape), generator=source, device=device, dtype=dtype)
    return getattr(source, kind)(shape, device=device, dtype=dtype)
