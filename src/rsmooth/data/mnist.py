"""MNIST and Fashion-MNIST (LeCun et al. 1998; Xiao et al. 2017, arXiv 1708.07747) from the IDX files.

1x28x28 uint8 images scaled to [0, 1], 10 classes, no normalisation, no augmentation.
Both datasets use the *same file names*, so each lives in its own folder,
``<root>/mnist/`` and ``<root>/fashion-mnist/``, holding ``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``,
each gzipped (``.gz``) or not.

Search order: ``<data_dir>/<name>/`` and torchvision's ``<data_dir>/MNIST/raw/``
(``FashionMNIST/raw/``) alone when ``data_dir`` is given; else the same in ``$RSMOOTH_DATA``, for
Fashion-MNIST Debian's ``/usr/share/datasets/fashion-mnist/`` (package ``dataset-fashion-mnist``),
then the same two in the download cache.  If the files are still missing they are downloaded from
the official mirrors into the first root (``data_dir``, ``$RSMOOTH_DATA``, the cache), verifying
the published MD5 of each ``.gz`` file.

Local files are checked against the MD5 of the *decompressed* official files (Debian
re-compresses the ``.gz`` files, so their own MD5s differ from the published ones):
a file that is another dataset's (an MNIST file in the Fashion-MNIST folder) is an
error; any other mismatch is a :class:`~rsmooth.data.base.DataIntegrityWarning`.
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from ..errors import RsmoothError
from .base import DATASETS, DataIntegrityWarning, DatasetInfo, InMemoryDataset, PathLike, dataset_dirs, download_root
from .download import download_file
from .idx import parse_idx, read_idx_bytes

__all__ = ["MNIST", "FashionMNIST", "IdxFile", "FILES", "MIRRORS", "SYSTEM_DIRS", "SPLIT_FILES", "TORCHVISION_DIRS"]


@dataclass(frozen=True)
class IdxFile:
    """Published identity of one IDX file: MD5 of the ``.gz``, MD5 and size decompressed."""

    md5_gz: str
    md5_raw: str
    size_gz: int


#: Image and label file of each split (names without ``.gz``).
SPLIT_FILES: Dict[str, Tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

#: Published checksums.  ``.gz`` MD5s: the datasets' pages and torchvision's resources;
#: decompressed MD5s: as listed by several independent public loaders (and verified
#: here against Debian's Fashion-MNIST files).
FILES: Dict[str, Dict[str, IdxFile]] = {
    "mnist": {
        "train-images-idx3-ubyte": IdxFile("f68b3c2dcbeaaa9fbdd348bbdeb94873", "6bbc9ace898e44ae57da46a324031adb", 9912422),
        "train-labels-idx1-ubyte": IdxFile("d53e105ee54ea40749a09fcbcd1e9432", "a25bea736e30d166cdddb491f175f624", 28881),
        "t10k-images-idx3-ubyte": IdxFile("9fb629c4189551a2d022fa330f9573f3", "2646ac647ad5339dbf082846283269ea", 1648877),
        "t10k-labels-idx1-ubyte": IdxFile("ec29112dd5afa0611ce80d1b7f02629c", "27ae3e4e09519cfbb04c329615203637", 4542),
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte": IdxFile("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "f4a8712d7a061bf5bd6d2ca38dc4d50a", 26421880),
        "train-labels-idx1-ubyte": IdxFile("25c81989df183df01b3e8a0aad5dffbe", "9018921c3c673c538a1fc5bad174d6f9", 29515),
        "t10k-images-idx3-ubyte": IdxFile("bef4ecab320f06d8554ea6380940ec79", "8181f5470baa50b63fa0f6fddb340f0a", 4422102),
        "t10k-labels-idx1-ubyte": IdxFile("bb300cfdad3c16e7a12a480ee83cd310", "15d484375f8d13e6eb1aabb0c3f46965", 5148),
    },
}

#: Mirrors, tried in order (each URL is ``mirror + file + ".gz"``).
MIRRORS: Dict[str, List[str]] = {
    "mnist": [
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ],
    "fashion-mnist": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"],
}

#: System folders searched after ``data_dir`` and ``$RSMOOTH_DATA`` (files directly inside).
SYSTEM_DIRS: Dict[str, List[Path]] = {
    "mnist": [],
    "fashion-mnist": [Path("/usr/share/datasets/fashion-mnist")],
}


#: Where torchvision's ``MNIST(root)`` / ``FashionMNIST(root)`` keep the IDX files, under each data root.
TORCHVISION_DIRS: Dict[str, str] = {"mnist": "MNIST/raw", "fashion-mnist": "FashionMNIST/raw"}


def _find(folder: Path, base: str) -> Optional[Path]:
    for candidate in (folder / base, folder / f"{base}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _identify(md5_raw: str) -> Optional[Tuple[str, str]]:
    for name, files in FILES.items():
        for base, published in files.items():
            if published.md5_raw == md5_raw:
                return name, base
    return None


class _MnistFamily(InMemoryDataset):
    """Common reader of the MNIST-format datasets; subclasses set ``info``."""

    @classmethod
    def _locate(cls, split: str, data_dir: Optional[PathLike], download: bool) -> Path:
        name = cls.info.name
        wanted = SPLIT_FILES[split]
        searched = dataset_dirs(name, data_dir, SYSTEM_DIRS.get(name, []), aliases=(TORCHVISION_DIRS[name],))
        for folder in searched:
            if all(_find(folder, base) is not None for base in wanted):
                return folder
        target = download_root(data_dir) / name
        manual = (
            f"place {' and '.join(b + '.gz' for b in wanted)} (from {MIRRORS[name][0]}) in {target}/"
        )
        if not download:
            raise RsmoothError(
                f"{name}/{split} not found (looked in {', '.join(map(str, searched))}); "
                f"allow downloading or {manual}"
            )
        for base in wanted:
            if _find(target, base) is not None:
                continue
            published = FILES[name][base]
            urls = [mirror + base + ".gz" for mirror in MIRRORS[name]]
            try:
                download_file(urls, target / f"{base}.gz", published.md5_gz, size_hint=published.size_gz)
            except RsmoothError as e:
                raise RsmoothError(f"{e}; to install {name} by hand, {manual}") from None
        return target

    @classmethod
    def _read(cls, path: Path, base: str):
        name = cls.info.name
        data = read_idx_bytes(path)
        md5_raw = hashlib.md5(data, usedforsecurity=False).hexdigest()
        published = FILES[name].get(base)
        if published is None or md5_raw != published.md5_raw:
            found = _identify(md5_raw)
            if found is not None:
                raise RsmoothError(
                    f"{path} is {found[0]}'s {found[1]}, not {name}'s {base}: "
                    f"keep each dataset in its own folder (<root>/mnist/, <root>/fashion-mnist/)"
                )
            warnings.warn(
                f"{path} does not match the published {name} file {base} "
                f"(MD5 of the decompressed file {md5_raw}); using it anyway",
                DataIntegrityWarning,
                stacklevel=4,
            )
        return parse_idx(data, str(path))

    @classmethod
    def load(cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True) -> "_MnistFamily":
        name = cls.info.name
        folder = cls._locate(split, data_dir, download)
        image_base, label_base = SPLIT_FILES[split]
        image_path, label_path = _find(folder, image_base), _find(folder, label_base)
        assert image_path is not None and label_path is not None
        images = cls._read(image_path, image_base)
        labels = cls._read(label_path, label_base)
        _, h, w = cls.info.input_shape
        if images.dtype.name != "uint8" or images.ndim != 3 or images.shape[1:] != (h, w):
            raise RsmoothError(
                f"{image_path} holds {images.dtype.name} data of shape {images.shape}; "
                f"{name} images are uint8 [N, {h}, {w}]"
            )
        if labels.dtype.name != "uint8" or labels.ndim != 1:
            raise RsmoothError(f"{label_path} holds {labels.dtype.name} data of shape {labels.shape}; labels are uint8 [N]")
        if labels.shape[0] != images.shape[0]:
            raise RsmoothError(
                f"{image_path} has {images.shape[0]} images but {label_path} has {labels.shape[0]} labels"
            )
        x = torch.from_numpy(images).unsqueeze(1)
        y = torch.from_numpy(labels.astype("int64"))
        return cls(split, x, y, source=str(folder))


@DATASETS.register("mnist")
class MNIST(_MnistFamily):
    """MNIST (LeCun et al. 1998): 60,000 / 10,000 handwritten digits, 1x28x28."""

    info = DatasetInfo("mnist", 10, (1, 28, 28), None, None, sizes=(60_000, 10_000))


@DATASETS.register("fashion-mnist")
class FashionMNIST(_MnistFamily):
    """Fashion-MNIST (Xiao et al. 2017): 60,000 / 10,000 Zalando articles, 1x28x28."""

    info = DatasetInfo("fashion-mnist", 10, (1, 28, 28), None, None, sizes=(60_000, 10_000))
