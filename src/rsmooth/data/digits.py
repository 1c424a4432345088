"""``digits``: scikit-learn's embedded 8x8 handwritten digits, the default dataset.

1,797 images, 1x8x8, pixel values 0-16 divided by 16, 10 classes, no normalisation and
no augmentation.  The split is fixed: ``train_test_split(test_size=360, stratify=y,
random_state=0)`` gives 1,437 training and 360 test images; each split keeps the
images in scikit-learn's original order (sorted indices), so only the split's
membership, not its shuffle, depends on scikit-learn.  Needs no download.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .base import DATASETS, DatasetInfo, InMemoryDataset, PathLike

__all__ = ["Digits", "TEST_SIZE", "SPLIT_SEED"]

TEST_SIZE = 360
SPLIT_SEED = 0


def _split_indices(labels: np.ndarray, split: str) -> np.ndarray:
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(
        np.arange(len(labels)), test_size=TEST_SIZE, stratify=labels, random_state=SPLIT_SEED
    )
    return np.sort(train if split == "train" else test)


@DATASETS.register("digits")
class Digits(InMemoryDataset):
    """scikit-learn's ``load_digits`` as a 1x8x8 dataset in [0, 1] (float32 in memory)."""

    info = DatasetInfo("digits", 10, (1, 8, 8), None, None, sizes=(1437, 360))

    @classmethod
    def load(cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True) -> "Digits":
        """``data_dir`` and ``download`` are ignored: the data ship with scikit-learn."""
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = np.asarray(bunch.images, dtype=np.float32)
        labels = np.asarray(bunch.target, dtype=np.int64)
        idx = _split_indices(labels, split)
        x = torch.from_numpy(images[idx] / np.float32(16.0)).unsqueeze(1).contiguous()
        y = torch.from_numpy(labels[idx])
        return cls(split, x, y, source="sklearn.datasets.load_digits")
