"""Corrupted copies of any dataset, generated on the fly (:mod:`rsmooth.corruptions`).

``GeneratedCorruption(clean, "fog", 3, seed=0)`` is the test set ``clean`` with every image
corrupted as the chosen suite defines it (MNIST-C's definitions for grey images, CIFAR-10-C's for
colour ones, unless ``suite`` says otherwise).  Example ``i`` keeps clean example ``i``'s index and
label; its corruption is drawn from ``(seed, suite, corruption, severity, i)`` only, so certifying
a subset, resuming or sharding sees the same images.  Images are made when first asked for and
kept (uint8, as the published corrupted datasets store them).
"""
from __future__ import annotations

import hashlib
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from ..corruptions import corrupt, default_suite, get_suite, resolve_severity
from ..seeding import validate_seed
from .base import Dataset, Indices

__all__ = ["GeneratedCorruption"]


class GeneratedCorruption(Dataset):
    """Dataset ``clean`` with corruption ``name`` at ``severity`` (``None``: the suite's default)."""

    def __init__(self, clean: Dataset, name: str, severity: Optional[int] = None, *, seed: int = 0,
                 suite: Optional[str] = None) -> None:
        suite = suite or default_suite(clean.input_shape[0])
        c = get_suite(suite).get(name)
        level = resolve_severity(c, severity, suite)
        super().__init__(clean.split, clean.targets, info=clean.dataset_info,
                         source=f"{clean.source} + {name} generated on the fly")
        self.clean = clean
        self.corruption = {"name": name, "severity": level, "source": "generated", "suite": suite,
                           "seed": validate_seed(seed, "--corruption-seed")}
        self._cache: Dict[int, np.ndarray] = {}

    def _corrupted(self, idx: torch.Tensor) -> torch.Tensor:
        todo = [int(i) for i in idx.tolist() if int(i) not in self._cache]
        if todo:
            x, _ = self.clean.get_batch(torch.tensor(todo, dtype=torch.int64))
            c = self.corruption
            made = corrupt(x.numpy(), c["name"], c["severity"], suite=c["suite"], seed=c["seed"], indices=todo)
            self._cache.update(zip(todo, made))
        return torch.from_numpy(np.stack([self._cache[int(i)] for i in idx.tolist()]))

    def _get_image(self, index: int) -> torch.Tensor:
        return self._corrupted(torch.tensor([index])).to(torch.float32).div_(255.0)[0]

    def get_batch(self, indices: Indices, augment: bool = False,
                  generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Corrupted examples ``indices``; a corrupted test set has no training augmentation."""
        idx = self._batch_indices(indices)
        if idx.numel() == 0:
            return torch.empty(0, *self.input_shape), torch.empty(0, dtype=torch.int64)
        return self._corrupted(idx).to(torch.float32).div_(255.0), self.targets.index_select(0, idx)

    def _update_digest(self, digest: "hashlib._Hash") -> None:
        self.clean._update_digest(digest)
        if len(self):
            digest.update(self._corrupted(torch.tensor([0, len(self) - 1])).numpy().tobytes())
