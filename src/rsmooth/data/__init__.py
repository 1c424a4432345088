"""Datasets for rsmooth: readers, checksummed downloads, batched augmentation, fingerprints.

Owns the dataset interface and the ``DATASETS`` registry (:mod:`~rsmooth.data.base`, at the
bottom), the readers that register in it, subsets, corrupted copies made on the fly
(:mod:`~rsmooth.data.generated`), and :func:`get_dataset` (:mod:`~rsmooth.data.get`, on top).
``get_dataset(name, split)`` returns a :class:`Dataset` of [0, 1] images; names are in
``DATASETS`` (digits, mnist, fashion-mnist, cifar10, cifar100, imagenet, and the published
corrupted test sets cifar10-c, cifar100-c, mnist-c, which take ``corruption=`` and, for CIFAR,
``severity=``) and ``dataset_info(name)`` tells a model its shape, classes and normalisation
without any data.  See docs/ARCHITECTURE.md ("data").

Example::

    from rsmooth.data import get_dataset, certify_indices
    train = get_dataset("digits", "train")
    g = torch.Generator().manual_seed(0)
    x, y = train.get_batch(torch.arange(64), augment=True, generator=g)
    subset = certify_indices(len(get_dataset("digits", "test")), skip=20, max=500)
"""
from .base import (
    DATASETS,
    DEFAULT_DATASET,
    ENV_DATA_DIR,
    SPLITS,
    DataIntegrityWarning,
    Dataset,
    DatasetInfo,
    InMemoryDataset,
    check_fingerprint,
    dataset_info,
    published_release,
)
from .download import download_file
from .get import get_dataset
from .subsets import SubsetDataset, certify_indices, fixed_subset

# Importing the readers registers them in DATASETS.
from . import digits, mnist, cifar, imagenet, corrupted  # noqa: E402,F401  isort: skip

__all__ = [
    "DATASETS",
    "DEFAULT_DATASET",
    "ENV_DATA_DIR",
    "SPLITS",
    "DataIntegrityWarning",
    "Dataset",
    "DatasetInfo",
    "InMemoryDataset",
    "SubsetDataset",
    "certify_indices",
    "check_fingerprint",
    "dataset_info",
    "download_file",
    "fixed_subset",
    "get_dataset",
    "published_release",
]
