"""The dataset interface, the ``DATASETS`` registry, data roots and fingerprints.

See docs/ARCHITECTURE.md ("data") for the contract; each dataset's module says what it
contains.  Every dataset yields pixels in [0, 1]; normalisation is the first layer of the
model (randomized smoothing adds its noise in pixel space, as in Cohen et al. 2019, arXiv
1902.02918), so :class:`DatasetInfo` only *reports* the mean/std the model must use.
"""
from __future__ import annotations

import hashlib
import operator
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np
import torch

from ..errors import RsmoothError, check
from ..registry import Registry

__all__ = [
    "DATASETS",
    "DEFAULT_DATASET",
    "SPLITS",
    "ENV_DATA_DIR",
    "DataIntegrityWarning",
    "DatasetInfo",
    "Dataset",
    "InMemoryDataset",
    "dataset_info",
    "published_release",
    "check_fingerprint",
    "search_roots",
    "data_dir_given",
    "cache_root",
    "download_root",
]

PathLike = Union[str, "os.PathLike[str]"]
Indices = Union[torch.Tensor, Sequence[int], np.ndarray]

#: The dataset every command uses when none is given: scikit-learn's embedded digits.
DEFAULT_DATASET = "digits"
#: The two splits every dataset has (ImageNet's "test" is its validation set).
SPLITS = ("train", "test")
#: Environment variable naming a data root, searched when no ``data_dir`` argument is given.
ENV_DATA_DIR = "RSMOOTH_DATA"
#: Fields of a fingerprint, in the order :func:`check_fingerprint` compares them
#: (``corruption`` only where one side has it: a corrupted test set).
FINGERPRINT_FIELDS = ("name", "split", "corruption", "length", "num_classes", "order")


class DataIntegrityWarning(UserWarning):
    """Local data that reads fine but differs from the published files (checksum, size)."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a dataset, without touching any data.

    ``input_shape`` is (C, H, W) of the tensors the dataset yields; ``mean``/``std``
    are the per-channel normalisation constants of the public checkpoints (Cohen et al. 2019
    and the later codebases),
    or ``None`` where no normalisation is used (digits and the MNIST family).  ``sizes`` is
    (training, test) examples of the published release (None where there is none), so that plans
    and cost estimates need no data on disk.
    """

    name: str
    num_classes: int
    input_shape: Tuple[int, int, int]
    mean: Optional[Tuple[float, ...]] = None
    std: Optional[Tuple[float, ...]] = None
    sizes: Optional[Tuple[int, int]] = None


#: Name -> :class:`Dataset` subclass (each has a class attribute ``info`` and a
#: classmethod ``load(split, data_dir, download)``).
DATASETS: Registry[Type["Dataset"]] = Registry("dataset")


def dataset_info(name: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a registered dataset; needs no data on disk."""
    return DATASETS.get(name).info


def published_release(name: str) -> Optional[Type["Dataset"]]:
    """The class of ``name`` when it is a published corrupted test set (``cifar10-c``, ...:
    attributes ``published_corruptions``, ``severities``, ``suite``, ``clean``), else None."""
    cls = DATASETS.get(name)
    return cls if getattr(cls, "published_corruptions", None) else None


# ----------------------------------------------------------------------------- roots


def data_dir_given(data_dir: Optional[PathLike]) -> bool:
    """Whether the user named a data folder: then readers search it alone (a folder named
    explicitly is never replaced by another: its data are found there, downloaded there, or
    refused); else ``$RSMOOTH_DATA``, system folders and the download cache, in that order."""
    return data_dir is not None and str(data_dir) != ""


def search_roots(data_dir: Optional[PathLike] = None) -> List[Path]:
    """The data root given by the user: ``data_dir`` when given, else ``$RSMOOTH_DATA`` when set."""
    if data_dir_given(data_dir):
        return [Path(data_dir).expanduser()]
    env = os.environ.get(ENV_DATA_DIR)
    return [Path(env).expanduser()] if env else []


def cache_root() -> Path:
    """The default download root, ``~/.cache/rsmooth/data`` (honours ``$XDG_CACHE_HOME``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "rsmooth" / "data"


def download_root(data_dir: Optional[PathLike] = None) -> Path:
    """Where downloads go: ``data_dir``, else ``$RSMOOTH_DATA``, else :func:`cache_root`."""
    return (search_roots(data_dir) + [cache_root()])[0]


def dataset_dirs(
    name: str, data_dir: Optional[PathLike] = None, extra: Sequence[Path] = (), aliases: Sequence[str] = ()
) -> List[Path]:
    """Folders to search for dataset ``name``, in order, without duplicates.

    ``<data_dir>/<name>`` alone when ``data_dir`` is given; else ``<$RSMOOTH_DATA>/<name>``,
    ``extra`` (system folders such as Debian's), then ``<cache_root>/<name>``
    (:func:`data_dir_given`).  After each ``<root>/<name>``, ``<root>/<alias>`` for each of
    ``aliases`` (where other tools keep the dataset, e.g. torchvision's ``MNIST/raw``).
    """
    subs = (name, *aliases)
    dirs = [root / sub for root in search_roots(data_dir) for sub in subs]
    if not data_dir_given(data_dir):
        dirs += [*extra, *(cache_root() / sub for sub in subs)]
    return list(dict.fromkeys(dirs))


# ----------------------------------------------------------------------------- datasets


class Dataset(torch.utils.data.Dataset):
    """Map-style dataset of images in [0, 1] with int64 labels (docs/ARCHITECTURE.md).

    Attributes: ``name``, ``split``, ``num_classes``, ``input_shape`` (C, H, W), ``mean``,
    ``std`` (tuples or ``None``), ``targets`` (int64 [N]) and ``source`` (where the data
    came from, for run records).

    ``ds[i]`` is example ``i`` (a stable index) without augmentation: ``(x float32
    [C,H,W], y int)``.  :meth:`get_batch` is the batched training path; augmentation
    randomness comes only from the ``generator`` passed to it, so a batch is a pure
    function of (indices, generator state).
    """

    info: ClassVar[DatasetInfo]

    def __init__(
        self,
        split: str,
        targets: torch.Tensor,
        *,
        info: Optional[DatasetInfo] = None,
        source: str = "",
    ) -> None:
        info = info if info is not None else type(self).info
        check(split in SPLITS, f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
        self.name: str = info.name
        self.split: str = split
        self.num_classes: int = int(info.num_classes)
        self.input_shape: Tuple[int, int, int] = tuple(info.input_shape)  # type: ignore[assignment]
        self.mean = info.mean
        self.std = info.std
        self.targets: torch.Tensor = torch.as_tensor(targets, dtype=torch.int64).reshape(-1).contiguous()
        self.source: str = source
        #: ``None``, or what corrupted this copy: ``{"name", "severity", "source": "published" or
        #: "generated", ...}`` (a generated one also records ``suite`` and ``seed``).
        self.corruption: Optional[Dict[str, Any]] = None

    # -- to implement in subclasses ------------------------------------------------
    @classmethod
    def load(
        cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True
    ) -> "Dataset":
        """Find (or download) the files of ``split`` and return the dataset."""
        raise NotImplementedError

    def _get_image(self, index: int) -> torch.Tensor:
        """Image ``index`` as float32 [C,H,W] in [0, 1], no augmentation."""
        raise NotImplementedError

    def _update_digest(self, digest: "hashlib._Hash") -> None:
        """Feed a cheap digest of the images (in index order) to ``digest``."""
        raise NotImplementedError

    # -- shared behaviour ------------------------------------------------------------
    @property
    def dataset_info(self) -> DatasetInfo:
        """This instance's :class:`DatasetInfo` (``num_classes`` as found on disk)."""
        return DatasetInfo(self.name, self.num_classes, self.input_shape, self.mean, self.std)

    def __len__(self) -> int:
        return int(self.targets.numel())

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        i = self._check_index(index)
        return self._get_image(i), int(self.targets[i])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, split={self.split!r}, "
            f"length={len(self)}, num_classes={self.num_classes}, input_shape={self.input_shape})"
        )

    def get_batch(
        self,
        indices: Indices,
        augment: bool = False,
        generator: Optional[torch.Generator] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Examples ``indices`` as ``(x float32 [B,C,H,W] in [0,1], y int64 [B])``.

        With ``augment`` the dataset's training augmentation (that of the public training
        scripts) is applied,
        drawing all randomness from ``generator`` (torch's default generator if ``None``).
        """
        raise NotImplementedError

    def fingerprint(self) -> Dict[str, Any]:
        """``dict(name, split, length, num_classes, order)`` identifying this data.

        ``order`` is the sha256 (hex) of the labels as int64 little-endian bytes in index
        order, followed by a cheap digest of the images; a corrupted copy adds ``corruption``
        (:attr:`corruption`); files keyed by example index
        (certify TSVs, per-example targets) store it and :func:`check_fingerprint` it.
        """
        digest = hashlib.sha256()
        digest.update(self.targets.numpy().astype("<i8").tobytes())
        self._update_digest(digest)
        out: Dict[str, Any] = {"name": self.name, "split": self.split}
        if self.corruption is not None:
            out["corruption"] = dict(self.corruption)
        return {
            **out,
            "length": len(self),
            "num_classes": self.num_classes,
            "order": digest.hexdigest(),
        }

    def _check_index(self, index: int) -> int:
        i = operator.index(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {self.name}/{self.split} ({n} examples)")
        return i

    def _batch_indices(self, indices: Indices) -> torch.Tensor:
        idx = torch.as_tensor(indices)
        if idx.numel() == 0:
            return torch.empty(0, dtype=torch.int64)
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"batch indices must be integers, got {idx.dtype}")
        idx = idx.to(device="cpu", dtype=torch.int64).reshape(-1)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise IndexError(
                f"batch indices must lie in [0, {len(self)}) for {self.name}/{self.split}; "
                f"got min {int(idx.min())}, max {int(idx.max())}"
            )
        return idx


class InMemoryDataset(Dataset):
    """A dataset held as one tensor ``images`` [N,C,H,W].

    ``uint8`` images (MNIST family, CIFAR) are converted to float32 / 255 batch by batch;
    ``float32`` images (digits, already in [0, 1]) are used as they are.  Augmentation in
    :meth:`augment_batch` works on the stored tensor, vectorised over the batch.
    """

    def __init__(
        self,
        split: str,
        images: torch.Tensor,
        targets: torch.Tensor,
        *,
        info: Optional[DatasetInfo] = None,
        source: str = "",
    ) -> None:
        super().__init__(split, targets, info=info, source=source)
        check(
            images.dtype in (torch.uint8, torch.float32),
            f"{self.name}: images must be uint8 or float32, got {images.dtype}",
        )
        check(
            images.dim() == 4 and tuple(images.shape[1:]) == self.input_shape,
            f"{self.name}: images have shape {tuple(images.shape)}, expected [N, "
            f"{', '.join(map(str, self.input_shape))}] ({source})",
        )
        check(
            images.shape[0] == len(self),
            f"{self.name}: {images.shape[0]} images but {len(self)} labels ({source})",
        )
        if len(self):
            lo, hi = int(self.targets.min()), int(self.targets.max())
            check(
                lo >= 0 and hi < self.num_classes,
                f"{self.name}: labels must lie in [0, {self.num_classes}), found [{lo}, {hi}] ({source})",
            )
        self.images: torch.Tensor = images.contiguous()

    @staticmethod
    def _to_float(x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            return x.to(torch.float32).div_(255.0)
        return x.to(torch.float32)

    def _get_image(self, index: int) -> torch.Tensor:
        return self._to_float(self.images[index].clone())

    def augment_batch(
        self, images: torch.Tensor, generator: Optional[torch.Generator] = None
    ) -> torch.Tensor:
        """Training augmentation of a batch of stored images; identity by default."""
        return images

    def get_batch(
        self,
        indices: Indices,
        augment: bool = False,
        generator: Optional[torch.Generator] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        idx = self._batch_indices(indices)
        x = self.images.index_select(0, idx)
        if augment:
            x = self.augment_batch(x, generator)
        return self._to_float(x), self.targets.index_select(0, idx)

    def _update_digest(self, digest: "hashlib._Hash") -> None:
        n = len(self)
        if n == 0:
            return
        picks = np.unique(np.linspace(0, n - 1, num=min(8, n)).round().astype(np.int64))
        sample = self.images[torch.from_numpy(picks)].numpy()
        if sample.dtype == np.float32:
            sample = sample.astype("<f4")
        digest.update(np.ascontiguousarray(sample).tobytes())


# ----------------------------------------------------------------------------- fingerprints


def _describe(fp: Mapping[str, Any]) -> str:
    c = fp.get("corruption")
    what = "" if not c else f" corrupted by {describe_corruption(c)}"
    return f"{fp.get('name', '?')}/{fp.get('split', '?')}{what} ({fp.get('length', '?')} examples)"


def describe_corruption(c: Mapping[str, Any]) -> str:
    """``fog, severity 3`` (``generated`` and the seed when it was generated)."""
    text = str(c.get("name"))
    if c.get("severity") is not None:
        text += f", severity {c['severity']}"
    if c.get("source") == "generated":
        text += f", generated ({c.get('suite')} definitions, seed {c.get('seed')})"
    return text


def check_fingerprint(expected: Mapping[str, Any], actual: Mapping[str, Any], what: str) -> None:
    """Raise :class:`RsmoothError` unless ``actual`` matches ``expected`` field by field.

    ``what`` names the file the expected fingerprint came from ("targets file"); the
    message names the first mismatching field of name, split, length, num_classes, order.
    """
    for field in FINGERPRINT_FIELDS:
        exp, act = expected.get(field), actual.get(field)
        if exp == act:
            continue
        if field == "corruption":
            raise RsmoothError(f"{what} was made for {_describe(expected)} but the dataset is {_describe(actual)}; "
                               f"pass the same --corruption/--severity or another output file")
        prefix = f"{what} was made for {_describe(expected)} but the dataset is {_describe(actual)}"
        if exp is None:
            raise RsmoothError(f"{what} has no dataset {field!r} recorded; cannot check it against {_describe(actual)}")
        if field == "order":
            raise RsmoothError(
                f"{prefix}: same size but different labels or example order "
                f"(order {str(exp)[:12]}... vs {str(act)[:12]}...)"
            )
        raise RsmoothError(f"{prefix}: {field} differs ({exp!r} vs {act!r})")
