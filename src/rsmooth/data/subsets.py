"""Subsets: which test examples to certify (every ``skip``-th, as Cohen et al. 2019, arXiv
1902.02918, do) and reduced training sets (:class:`SubsetDataset`)."""
from __future__ import annotations

import hashlib
import operator
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..errors import check
from .base import Dataset, Indices


def _as_int(value: object, name: str) -> int:
    check(not isinstance(value, bool), f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        check(False, f"{name} must be an integer, got {value!r}")
        raise  # unreachable


def certify_indices(length: int, skip: int = 1, max: Optional[int] = None, start: int = 0) -> List[int]:
    """Indices ``start, start+skip, start+2*skip, ...`` below ``length``, at most ``max`` of them.

    Cohen et al.'s ``certify.py`` takes every ``skip``-th example and stops when the
    *dataset index* equals ``max``, so a ``max`` that is not a multiple of ``skip``
    never stops early.  Here ``max`` counts certified examples: every 20th
    CIFAR-10 test image with ``max=500`` is indices 0, 20, ..., 9980.  ``start`` is the first
    index, as the ``--start`` of the CAT-RS (Jeong, Kim, Shin 2023, arXiv 2212.09000) and MACER
    (Zhai et al. 2020, arXiv 2001.02378) certification scripts; a start at or past ``length``
    gives no indices.
    """
    length = _as_int(length, "length")
    skip = _as_int(skip, "skip")
    start = _as_int(start, "start")
    check(length >= 0, f"length must be >= 0, got {length}")
    check(skip >= 1, f"skip must be >= 1, got {skip}")
    check(start >= 0, f"start must be >= 0 (the first example's index), got {start}")
    indices = list(range(start, length, skip))
    if max is not None:
        max = _as_int(max, "max")
        check(max >= 1, f"max must be >= 1 (the number of examples to certify), got {max}")
        indices = indices[:max]
    return indices


def fixed_subset(length: int, size: int) -> torch.Tensor:
    """``size`` of the indices ``0..length-1``, sorted: the first ``size`` of a permutation drawn
    from seed 0, the same for every run, seed and process (a reduced training set)."""
    length, size = _as_int(length, "length"), _as_int(size, "size")
    check(1 <= size <= length, f"a subset of the {length} training examples must hold 1 to {length} of "
          f"them, got {size}")
    perm = torch.randperm(length, generator=torch.Generator().manual_seed(0), device="cpu")
    return perm[:size].sort().values


class SubsetDataset(Dataset):
    """Examples ``indices`` of ``base``, renumbered ``0..len-1`` (a reduced training set whose
    per-example files, e.g. consistency targets, are keyed by the new index).  The fingerprint
    records ``subset`` (its size and the full set's), so files of the full set do not match it."""

    def __init__(self, base: Dataset, indices: torch.Tensor) -> None:
        idx = base._batch_indices(indices)
        super().__init__(base.split, base.targets.index_select(0, idx), info=base.dataset_info,
                         source=f"{base.source}, {idx.numel()} of {len(base)} examples")
        self.base, self.indices = base, idx
        self.corruption = base.corruption

    def _get_image(self, index: int) -> torch.Tensor:
        return self.base._get_image(int(self.indices[index]))

    def get_batch(self, indices: Indices, augment: bool = False,
                  generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.base.get_batch(self.indices.index_select(0, self._batch_indices(indices)), augment, generator)

    def _update_digest(self, digest: "hashlib._Hash") -> None:
        digest.update(self.indices.numpy().astype("<i8").tobytes())
        self.base._update_digest(digest)

    def fingerprint(self) -> Dict[str, Any]:
        return {**super().fingerprint(), "subset": {"size": len(self), "of": len(self.base)}}
