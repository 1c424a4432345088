"""CIFAR-10 and CIFAR-100 from the official binary or python archives (Krizhevsky 2009).

The binary version is fixed-length records, ``<label bytes><3072 pixel bytes>`` with the
pixels as 1024 red, 1024 green, 1024 blue values in row-major order.  CIFAR-10 has one label
byte and the files ``cifar-10-batches-bin/data_batch_{1..5}.bin`` and ``test_batch.bin``;
CIFAR-100 has two label bytes (coarse, then fine: rsmooth uses the fine label, 100 classes)
and ``cifar-100-binary/train.bin`` and ``test.bin``.

The python version (what torchvision and Cohen et al.'s code download) holds the same pixels
in pickled dicts, ``cifar-10-batches-py/data_batch_{1..5}`` / ``test_batch`` with
``b"data"`` (uint8 [N, 3072], same pixel order) and ``b"labels"``, and
``cifar-100-python/train`` / ``test`` with ``b"fine_labels"``.  They are read with a
restricted unpickler that builds only numpy arrays and plain containers, numbers and strings
(:func:`parse_cifar_pickle`): any other global in the file is refused, never imported.

A dataset is found in ``<root>/cifar10/`` (``<root>/cifar100/``) or in ``<root>`` itself
(where torchvision's ``root`` puts it), as an archive (``cifar-10-binary.tar.gz``,
``cifar-10-python.tar.gz``: read in place, nothing is extracted; its published MD5 is checked)
or its extracted folder, binary before python (an extracted python batch is checked against the
MD5 torchvision verifies).  Search order: ``data_dir`` alone when given, else ``$RSMOOTH_DATA``, the
download cache (``~/.cache/rsmooth/data``); then the binary archive is downloaded into the first of
them and its published MD5 verified.
Training augmentation: random crop 32 with zero padding 4 + horizontal flip (p = 0.5),
batched, from the caller's generator.
Normalisation constants (in the model, not the data) are those of the public checkpoints.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import posixpath
import tarfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import RsmoothError, check
from .base import (
    DATASETS,
    DataIntegrityWarning,
    DatasetInfo,
    InMemoryDataset,
    PathLike,
    cache_root,
    data_dir_given,
    download_root,
    search_roots,
)
from .download import download_file, md5_file
from .transforms import random_crop_flip

__all__ = ["CIFAR10", "CIFAR100", "CifarLayout", "CifarPythonLayout", "LAYOUTS", "PYTHON_LAYOUTS",
           "parse_cifar_records", "parse_cifar_pickle", "PADDING"]

#: Zero padding of the training crop (32 + 2 * 4 = 40, cropped back to 32).
PADDING = 4
_PIXELS = 3 * 32 * 32


@dataclass(frozen=True)
class CifarLayout:
    """Where a CIFAR binary release lives and how its records look."""

    urls: Tuple[str, ...]
    archive: str
    md5: str
    size: int
    folder: str
    files: Dict[str, Tuple[str, ...]]
    label_bytes: int
    num_classes: int
    counts: Dict[str, int]


#: The official binary releases (https://www.cs.toronto.edu/~kriz/cifar.html).
LAYOUTS: Dict[str, CifarLayout] = {
    "cifar10": CifarLayout(
        urls=("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",),
        archive="cifar-10-binary.tar.gz",
        md5="c32a1d4ab5d03f1284b67883e8d87530",
        size=170052171,
        folder="cifar-10-batches-bin",
        files={"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test": ("test_batch.bin",)},
        label_bytes=1,
        num_classes=10,
        counts={"train": 50000, "test": 10000},
    ),
    "cifar100": CifarLayout(
        urls=("https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",),
        archive="cifar-100-binary.tar.gz",
        md5="03b5dce01913d631647c71ecec9e9cb8",
        size=168513733,
        folder="cifar-100-binary",
        files={"train": ("train.bin",), "test": ("test.bin",)},
        label_bytes=2,
        num_classes=100,
        counts={"train": 50000, "test": 10000},
    ),
}


@dataclass(frozen=True)
class CifarPythonLayout:
    """Where a CIFAR python release lives and which key holds its labels."""

    archive: str
    md5: str
    folder: str
    files: Dict[str, Tuple[str, ...]]
    label_key: bytes
    file_md5: Dict[str, str] = field(default_factory=dict)


#: The official python releases (same page), as torchvision and Cohen et al.'s code fetch them.
PYTHON_LAYOUTS: Dict[str, CifarPythonLayout] = {
    "cifar10": CifarPythonLayout(
        archive="cifar-10-python.tar.gz",
        md5="c58f30108f718f92721af3b95e74349a",
        folder="cifar-10-batches-py",
        files={"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)},
        label_key=b"labels",
        file_md5={"data_batch_1": "c99cafc152244af753f735de768cd75f",
                  "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
                  "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
                  "data_batch_4": "634d18415352ddfa80567beed471001a",
                  "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
                  "test_batch": "40351d587109b95175f43aff81a1287e"},
    ),
    "cifar100": CifarPythonLayout(
        archive="cifar-100-python.tar.gz",
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        folder="cifar-100-python",
        files={"train": ("train",), "test": ("test",)},
        label_key=b"fine_labels",
        file_md5={"train": "16019d7e3df5f24257cddd939b257f8d", "test": "f0ef6b0ae62326f3e7ffdfab6717acfc"},
    ),
}


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle names a global outside :attr:`_ArrayUnpickler.ALLOWED`."""


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR python batch: the only globals resolved are numpy's array rebuilders."""

    _reconstruct = np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's _reconstruct, any version
    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,   # numpy < 2 (the official files)
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # numpy >= 2
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }

    def find_class(self, module: str, name: str):
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise _RefusedGlobal(f"refusing to load the global {module}.{name}") from None


def _key(batch: dict, key: bytes):
    """``batch[key]``; files pickled by Python 3 have str keys where the official ones have bytes."""
    return batch[key] if key in batch else batch.get(key.decode())


def parse_cifar_pickle(raw: bytes, label_key: bytes, num_classes: int, source: str
                       ) -> Tuple[np.ndarray, np.ndarray]:
    """Parse one CIFAR python batch into ``(images uint8 [N,3,32,32], labels int64 [N])``.

    ``raw`` is the pickled dict of the official python release (protocol 2, written by
    Python 2); ``label_key`` is ``b"labels"`` (CIFAR-10) or ``b"fine_labels"`` (CIFAR-100).
    Only numpy arrays and plain containers, numbers and strings are built; any other global
    is refused.
    """
    try:
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except _RefusedGlobal as e:
        raise RsmoothError(f"{source} is not a CIFAR python batch ({e})") from None
    except Exception as e:  # truncated or garbled data can fail in many ways inside pickle
        raise RsmoothError(f"{source} is corrupt or truncated ({type(e).__name__}: {e})") from None
    check(isinstance(batch, dict), f"{source} is not a CIFAR python batch (a {type(batch).__name__}, not a dict)")
    data, labels = _key(batch, b"data"), _key(batch, label_key)
    check(isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
          and data.shape[1] == _PIXELS,
          f"{source} is not a CIFAR python batch: its data is not a uint8 array [N, {_PIXELS}]")
    try:
        labels = np.asarray(labels, dtype=np.int64)
        ok = labels.shape == (len(data),)
    except (TypeError, ValueError, OverflowError):
        ok = False
    check(ok, f"{source} is not a CIFAR python batch: {label_key.decode()} is not {len(data)} integer labels")
    bad = (labels < 0) | (labels >= num_classes)
    check(not bad.any(), f"{source} is corrupt: label {int(labels[bad][0]) if bad.any() else 0} "
          f"is not in [0, {num_classes})")
    return data.reshape(-1, 3, 32, 32).copy(), labels


def parse_cifar_records(
    raw: bytes, label_bytes: int, num_classes: int, source: str
) -> Tuple[np.ndarray, np.ndarray]:
    """Parse binary CIFAR records into ``(images uint8 [N,3,32,32], labels int64 [N])``.

    The label is the last label byte of each record (CIFAR-100: the fine label).
    """
    record = label_bytes + _PIXELS
    check(
        len(raw) > 0 and len(raw) % record == 0,
        f"{source} is corrupt or truncated: {len(raw)} bytes is not a whole number of "
        f"{record}-byte records",
    )
    table = np.frombuffer(raw, dtype=np.uint8).reshape(-1, record)
    labels = table[:, label_bytes - 1].astype(np.int64)
    bad = labels >= num_classes
    check(not bad.any(), f"{source} is corrupt: label {int(labels[bad][0]) if bad.any() else 0} >= {num_classes}")
    if label_bytes == 2:
        coarse = table[:, 0]
        check(bool((coarse < 20).all()), f"{source} is corrupt: coarse label >= 20")
    images = table[:, label_bytes:].reshape(-1, 3, 32, 32).copy()
    return images, labels


def _read_folder(folder: Path, names: Sequence[str]) -> List[Tuple[str, bytes]]:
    out = []
    for name in names:
        path = folder / name
        try:
            out.append((str(path), path.read_bytes()))
        except OSError as e:
            raise RsmoothError(f"cannot read {path}: {e}") from None
    return out


def _read_archive(path: Path, folder: str, names: Sequence[str]) -> List[Tuple[str, bytes]]:
    wanted = {f"{folder}/{name}": name for name in names}
    found: Dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                key = posixpath.normpath(member.name)
                if key in wanted and member.isfile():
                    handle = tar.extractfile(member)
                    assert handle is not None
                    found[key] = handle.read()
                    if len(found) == len(wanted):
                        break
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise RsmoothError(f"{path} is not a readable tar.gz archive (corrupt or truncated: {e})") from None
    missing = [key for key in wanted if key not in found]
    check(not missing, f"{path} lacks {', '.join(missing)}; is it the official archive of its name?")
    return [(f"{path}:{key}", found[key]) for key in wanted]


def _check_file_md5(parts: Sequence[Tuple[str, bytes]], names: Sequence[str], md5s: Dict[str, str]) -> None:
    """Warn (:class:`DataIntegrityWarning`) for each extracted file whose MD5 is not the published one."""
    for (where, raw), name in zip(parts, names):
        actual = hashlib.md5(raw, usedforsecurity=False).hexdigest()
        if name in md5s and actual != md5s[name]:
            warnings.warn(f"{where} does not match the published {name} (MD5 {actual}, expected {md5s[name]}); "
                          f"using it anyway", DataIntegrityWarning, stacklevel=5)


class _Cifar(InMemoryDataset):
    """Common reader of the CIFAR binary and python releases; subclasses set ``info``."""

    @classmethod
    def _layout(cls) -> CifarLayout:
        return LAYOUTS[cls.info.name]

    @staticmethod
    def _roots(data_dir: Optional[PathLike]) -> List[Path]:
        """``data_dir`` alone when given, else ``$RSMOOTH_DATA`` and the download cache (each may hold
        torchvision's folders)."""
        return list(dict.fromkeys(search_roots(data_dir) + ([] if data_dir_given(data_dir) else [cache_root()])))

    @classmethod
    def _places(cls, data_dir: Optional[PathLike]) -> List[Path]:
        """Folders searched, in order: ``<root>/<name>`` and ``<root>`` for each root of :meth:`_roots`."""
        return list(dict.fromkeys(p for root in cls._roots(data_dir) for p in (root / cls.info.name, root)))

    @classmethod
    def _check_md5(cls, archive: Path, name: str, md5: str) -> None:
        actual = md5_file(archive)
        if actual != md5:
            warnings.warn(f"{archive} does not match the published {name} (MD5 {actual}, expected {md5}); "
                          f"using it anyway", DataIntegrityWarning, stacklevel=5)

    @classmethod
    def _load_parts(
        cls, split: str, data_dir: Optional[PathLike], download: bool
    ) -> Tuple[List[Tuple[str, bytes]], str, bool]:
        """(parts as (where, bytes), source, whether they are python batches)."""
        name, layout, py = cls.info.name, cls._layout(), PYTHON_LAYOUTS[cls.info.name]
        names, py_names = layout.files[split], py.files[split]
        searched = cls._places(data_dir)
        roots = set(cls._roots(data_dir))
        for d in searched:
            for lay, files, pickled in ((layout, names, False), (py, py_names, True)):
                # the binary folder may also be the data folder itself (as torchvision keeps it)
                extra = () if pickled or d in roots else (d,)
                for folder in (d / lay.folder,) + extra:
                    if all((folder / n).is_file() for n in files):
                        parts = _read_folder(folder, files)
                        if pickled:
                            _check_file_md5(parts, files, py.file_md5)
                        return parts, str(folder), pickled
                archive = d / lay.archive
                if archive.is_file():
                    cls._check_md5(archive, lay.archive, lay.md5)
                    return _read_archive(archive, lay.folder, files), str(archive), pickled
        target = download_root(data_dir) / name / layout.archive
        manual = f"download {layout.urls[0]} (MD5 {layout.md5}) to {target}"
        if not download:
            looked_for = f"{layout.folder}/, {layout.archive}, {py.folder}/ or {py.archive}"
            raise RsmoothError(
                f"{name}/{split} not found (looked for {looked_for} in {', '.join(map(str, searched))}); "
                f"allow downloading or {manual}"
            )
        try:
            download_file(layout.urls, target, layout.md5, size_hint=layout.size)
        except RsmoothError as e:
            raise RsmoothError(f"{e}; to install {name} by hand, {manual}") from None
        return _read_archive(target, layout.folder, names), str(target), False

    @classmethod
    def load(cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True) -> "_Cifar":
        layout = cls._layout()
        parts, source, python = cls._load_parts(split, data_dir, download)
        images, labels = [], []
        for where, raw in parts:
            if python:
                x, y = parse_cifar_pickle(raw, PYTHON_LAYOUTS[cls.info.name].label_key, layout.num_classes, where)
            else:
                x, y = parse_cifar_records(raw, layout.label_bytes, layout.num_classes, where)
            images.append(x)
            labels.append(y)
        x = torch.from_numpy(np.concatenate(images))
        y = torch.from_numpy(np.concatenate(labels))
        expected = layout.counts[split]
        if len(y) != expected:
            warnings.warn(
                f"{source}: {cls.info.name}/{split} has {len(y)} images, the official split has {expected}",
                DataIntegrityWarning,
                stacklevel=3,
            )
        return cls(split, x, y, source=source)

    def augment_batch(
        self, images: torch.Tensor, generator: Optional[torch.Generator] = None
    ) -> torch.Tensor:
        """Random crop 32 with zero padding 4, then horizontal flip with p = 0.5."""
        return random_crop_flip(images, PADDING, generator)


@DATASETS.register("cifar10")
class CIFAR10(_Cifar):
    """CIFAR-10: 50,000 / 10,000 colour images, 3x32x32, 10 classes."""

    info = DatasetInfo("cifar10", 10, (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010),
                       sizes=(50_000, 10_000))


@DATASETS.register("cifar100")
class CIFAR100(_Cifar):
    """CIFAR-100: 50,000 / 10,000 colour images, 3x32x32, 100 fine classes."""

    info = DatasetInfo("cifar100", 100, (3, 32, 32), (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761),
                       sizes=(50_000, 10_000))
