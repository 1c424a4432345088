"""``digits``: scikit-learn's embedded 8x8 handwritten digits, the default dataset.

1,797 images, 1x8x8, pixel values 0-16 divided by 16, 10 classes, no normalisation and
no augmentation.  The split is fixed: ``train_test_split(test_size=360, stratify=y,
random_state=0)`` gives 1,437 training and 360 test images; each split keeps the
images in scikit-learn's original order (sorted indices).  The split is stored here
(:data:`TEST_MASK`) and the images are read from the file scikit-learn ships
(``sklearn/datasets/data/digits.csv.gz``, what ``load_digits`` reads) without importing
scikit-learn, which costs seconds in every process that loads the data; neither the split
nor the images change with scikit-learn's version.  Needs no download.
"""
from __future__ import annotations

import base64
import gzip
import importlib.util
import warnings
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import torch

from ..errors import setting
from .base import DATASETS, DatasetInfo, InMemoryDataset, PathLike, data_dir_given

__all__ = ["Digits", "TEST_SIZE", "SPLIT_SEED", "TEST_MASK"]

TEST_SIZE = 360
SPLIT_SEED = 0
NUM_IMAGES = 1797
#: the test images among the 1,797, a bitmask (``np.packbits``, base64): the split that
#: ``train_test_split(np.arange(1797), test_size=TEST_SIZE, stratify=target, random_state=SPLIT_SEED)``
#: gives (scikit-learn 1.x; a test checks it against the installed scikit-learn)
TEST_MASK = (
    "AAAEiDUkEEAABkEAk0IFABoACAEAJAAoBiwSABAAlAoAkBkSBCD4oAKBEKAACAqIIEQVJElCQKAKAAAAQATYAACBgCAASAXE"
    "ABBACKAQAAVASAAwEAACDsQJAAIkhACDqAE8IKaYCgAAAAsIQAgEoBhIAgJAQcEAgARARoQ3aoECFgBEgABAQqCkGApQAIQLh"
    "WHGCBCACABMgMAgBAaOAAEIggCBADgIA8AIGQAAEA4BAIQQoCEAMygpBMBEwIBoDgECgwCCAIgipkAsJAQhCKhggJCBoAwCggJ"
    "CEgE4pBUA")


def _split_indices(split: str) -> np.ndarray:
    """The sorted indices of ``split`` ("train" or "test") among the 1,797 images."""
    mask = np.unpackbits(np.frombuffer(base64.b64decode(TEST_MASK), dtype=np.uint8))[:NUM_IMAGES].astype(bool)
    return np.flatnonzero(mask if split == "test" else ~mask)


def _shipped_file() -> Optional[Path]:
    """scikit-learn's ``datasets/data/digits.csv.gz``, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None


def _images_and_labels() -> Tuple[np.ndarray, np.ndarray]:
    """The 1,797 images (float64 [N, 8, 8], 0-16) and labels, as ``load_digits`` gives them."""
    path = _shipped_file()
    if path is not None:
        with gzip.open(path, "rt") as fh:
            data = np.loadtxt(fh, delimiter=",")
        if data.shape == (NUM_IMAGES, 65):
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits  # a scikit-learn that keeps the file elsewhere

    bunch = load_digits()
    return np.asarray(bunch.images), np.asarray(bunch.target, dtype=np.int64)


@DATASETS.register("digits")
class Digits(InMemoryDataset):
    """scikit-learn's ``load_digits`` as a 1x8x8 dataset in [0, 1] (float32 in memory)."""

    info = DatasetInfo("digits", 10, (1, 8, 8), None, None, sizes=(1437, 360))

    @classmethod
    def load(cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True) -> "Digits":
        """The data ship with scikit-learn: ``download`` is ignored, and a ``data_dir`` given is not
        read (a warning says so)."""
        if data_dir_given(data_dir):
            warnings.warn(f"digits ships with scikit-learn and is read from its copy; "
                          f"{setting('data_dir', str(data_dir))} is not used", stacklevel=2)
        images, labels = _images_and_labels()
        images = np.asarray(images, dtype=np.float32)
        idx = _split_indices(split)
        x = torch.from_numpy(images[idx] / np.float32(16.0)).unsqueeze(1).contiguous()
        y = torch.from_numpy(labels[idx])
        return cls(split, x, y, source="sklearn.datasets.load_digits")
