"""``get_dataset``: a split of a registered dataset, corrupted or reduced on request.

Sits above :mod:`~rsmooth.data.base` (the interface and registry), :mod:`~rsmooth.data.subsets`
and :mod:`~rsmooth.data.generated`, which it combines; none of them imports it.
"""
from __future__ import annotations

from typing import Optional

from ..errors import RsmoothError, check
from .base import DATASETS, SPLITS, Dataset, PathLike, published_release
from .subsets import SubsetDataset, fixed_subset


def get_dataset(
    name: str,
    split: str,
    data_dir: Optional[PathLike] = None,
    download: bool = True,
    *,
    corruption: Optional[str] = None,
    severity: Optional[int] = None,
    corruption_seed: int = 0,
    corruption_suite: Optional[str] = None,
    subset: Optional[int] = None,
) -> Dataset:
    """Load split ``"train"`` or ``"test"`` of dataset ``name``.

    Files are searched in ``data_dir``, then ``$RSMOOTH_DATA``, then dataset-specific
    system folders, then the download cache; missing downloadable files are fetched
    (with checksum verification) into the first of ``data_dir``, ``$RSMOOTH_DATA`` and
    ``~/.cache/rsmooth/data`` when ``download`` is true.

    ``corruption`` (and ``severity``) pick one corrupted copy: of a published corrupted
    dataset (``cifar10-c``, ``cifar100-c``, ``mnist-c``, which need it), or of any other
    dataset, generated on the fly from ``corruption_seed`` with the definitions of
    ``corruption_suite`` (default: MNIST-C's for grey images, CIFAR-10-C's for colour ones; see
    :mod:`rsmooth.corruptions`).
    Example ``i`` of a corrupted copy is the corrupted example ``i`` of the clean one.

    ``subset`` keeps that many examples (:func:`rsmooth.data.fixed_subset`: the same ones for
    every run and seed), renumbered from 0: a reduced training set.

    Args:
        name: a dataset name (``rsmooth list datasets``: digits, mnist, fashion-mnist, cifar10,
            cifar100, imagenet, the corrupted sets).
        split: ``"train"`` or ``"test"``.
        data_dir: the folder searched first (and downloaded into); default ``$RSMOOTH_DATA``,
            then the cache.
        download: fetch missing files from the official mirrors (checksums verified).
        corruption: a corruption name (``rsmooth list corruptions``), or None for clean data.
        severity: the corruption's level (1-5 for the CIFAR-C suites).
        corruption_seed: the seed of generated corruptions.
        corruption_suite: whose definitions generate the corruptions (MNIST-C's or CIFAR-10-C's).
        subset: keep this many examples (a fixed subset), or None for all.

    Returns:
        a map-style dataset: ``data[i]`` is ``(image, label)`` with the image a float tensor
        [C, H, W] in [0, 1] and the label an int; ``data.get_batch(indices)`` gives
        ``(images [B, C, H, W], labels [B])``.

    Example:
        ```python
        test = rsmooth.get_dataset("digits", "test")          # 360 images [1, 8, 8], offline
        xs, ys = test.get_batch(torch.arange(8))
        ```
    """
    if subset is not None:
        data = get_dataset(name, split, data_dir, download, corruption=corruption, severity=severity,
                           corruption_seed=corruption_seed, corruption_suite=corruption_suite)
        return SubsetDataset(data, fixed_subset(len(data), subset))
    cls = DATASETS.get(name)
    check(split in SPLITS, f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    if published_release(name):
        return cls.load(split, data_dir=data_dir, download=download, corruption=corruption, severity=severity)
    if corruption is None and (severity is not None or corruption_suite is not None):
        raise RsmoothError("a corruption severity or suite without a corruption: pass a corruption name as well")
    data = cls.load(split, data_dir=data_dir, download=download)
    if corruption is None:
        return data
    from .generated import GeneratedCorruption  # imports rsmooth.corruptions: only when asked for

    return GeneratedCorruption(data, corruption, severity, seed=corruption_seed, suite=corruption_suite)
