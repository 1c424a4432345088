"""The published corrupted test sets: CIFAR-10-C, CIFAR-100-C and MNIST-C, read from the official archives.

- ``cifar10-c`` / ``cifar100-c`` (Hendrycks & Dietterich 2019, Benchmarking Neural Network
  Robustness to Common Corruptions and Perturbations, arXiv 1903.12261, Sec. 3): the CIFAR test
  set under 19 corruptions (the 15 of the benchmark, then 4 held out), 5 severities each.
  ``CIFAR-10-C/<corruption>.npy`` is uint8 [50000, 32, 32, 3]: rows ``(s - 1) * 10000 + i`` are
  test image ``i`` at severity ``s``; ``labels.npy`` holds the labels of the same rows.
  Test split only.
- ``mnist-c`` (Mu & Gilmer 2019, MNIST-C: A Robustness Benchmark for Computer Vision, arXiv
  1906.02337, Sec. 3): MNIST under 15 corruptions plus ``identity``, one level each, as
  ``mnist_c/<corruption>/{train,test}_images.npy`` (uint8 [N, 28, 28, 1]) and ``*_labels.npy``.

Pick one copy with ``corruption`` (and ``severity`` for CIFAR); example ``i`` is the corrupted
clean example ``i``, with its label.  Models and normalisation are the clean dataset's.

A dataset is found in ``<root>/<name>/`` (``<root>/cifar10-c/``) or in ``<root>`` itself, as the
archive (``CIFAR-10-C.tar``, ``CIFAR-100-C.tar``, ``mnist_c.zip``) or its extracted folder
(``CIFAR-10-C/``, ``mnist_c/``).  Roots: ``data_dir`` alone when given, else ``$RSMOOTH_DATA``, the
download cache;
then the archive is downloaded from its Zenodo record and its published MD5 verified.  A tar is
read in place: only the rows asked for are mapped from the member's bytes, nothing is extracted.
Each CIFAR file read is checked against its published MD5 and a local archive of MNIST-C against
the archive's; a mismatch is a :class:`~rsmooth.data.base.DataIntegrityWarning`.
"""
from __future__ import annotations

import hashlib
import io
import os
import posixpath
import shutil
import sys
import tarfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, ClassVar, Dict, List, Optional, Tuple

import numpy as np
import torch

from ..corruptions import BENCHMARK, HELD_OUT
from ..errors import RsmoothError, check
from .base import (
    DATASETS,
    DataIntegrityWarning,
    InMemoryDataset,
    PathLike,
    dataset_dirs,
    download_root,
    search_roots,
)
from .cifar import CIFAR10, CIFAR100
from .download import _size, download_file, md5_file
from .mnist import MNIST

__all__ = ["CorruptedLayout", "LAYOUTS", "CIFAR10C", "CIFAR100C", "MNISTC"]


@dataclass(frozen=True)
class CorruptedLayout:
    """Where a published corrupted dataset lives and what its files are.

    ``folder`` is the archive's top folder; ``md5`` maps a corruption name (and ``"labels"``) to
    the MD5 of its extracted ``.npy`` file where published; ``counts`` is the number of examples
    of each split (per severity).
    """

    urls: Tuple[str, ...]
    archive: str
    archive_md5: str
    size: Optional[int]
    folder: str
    md5: Dict[str, str]
    counts: Dict[str, int]


def _md5s(text: str) -> Dict[str, str]:
    return dict(pair.split("=") for pair in text.split())


#: The Zenodo records (the archives' MD5s are those the records publish).
LAYOUTS: Dict[str, CorruptedLayout] = {
    "cifar10-c": CorruptedLayout(
        urls=("https://zenodo.org/records/2535967/files/CIFAR-10-C.tar?download=1",),
        archive="CIFAR-10-C.tar",
        archive_md5="56bf5dcef84df0e2308c6dcbcbbd8499",
        size=2918471680,
        folder="CIFAR-10-C",
        md5=_md5s(
            "fog=7b397314b5670f825465fbcd1f6e9ccd jpeg_compression=2b9cc4c864e0193bb64db8d7728f8187 "
            "zoom_blur=6ea8e63f1c5cdee1517533840641641b speckle_noise=ef00b87611792b00df09c0b0237a1e30 "
            "glass_blur=7361fb4019269e02dbf6925f083e8629 spatter=8a5a3903a7f8f65b59501a6093b4311e "
            "shot_noise=3a7239bb118894f013d9bf1984be7f11 defocus_blur=7d1322666342a0702b1957e92f6254bc "
            "elastic_transform=9421657c6cd452429cf6ce96cc412b5f gaussian_blur=c33370155bc9b055fb4a89113d3c559d "
            "frost=31f6ab3bce1d9934abfb0cc13656f141 saturate=1cfae0964219c5102abbb883e538cc56 "
            "brightness=0a81ef75e0b523c3383219c330a85d48 snow=bb238de8555123da9c282dea23bd6e55 "
            "gaussian_noise=ecaf8b9a2399ffeda7680934c33405fd motion_blur=fffa5f852ff7ad299cfe8a7643f090f4 "
            "contrast=3c8262171c51307f916c30a3308235a8 impulse_noise=2090e01c83519ec51427e65116af6b1a "
            "labels=c439b113295ed5254878798ffe28fd54 pixelate=0f14f7e2db14288304e1de10df16832f"),
        counts={"test": 10000},
    ),
    "cifar100-c": CorruptedLayout(
        urls=("https://zenodo.org/records/3555552/files/CIFAR-100-C.tar?download=1",),
        archive="CIFAR-100-C.tar",
        archive_md5="11f0ed0f1191edbf9fa23466ae6021d3",
        size=2918473216,
        folder="CIFAR-100-C",
        md5=_md5s(
            "fog=4efc7ebd5e82b028bdbe13048e3ea564 jpeg_compression=c851b7f1324e1d2ffddeb76920576d11 "
            "zoom_blur=0204613400c034a81c4830d5df81cb82 speckle_noise=e3f215b1a0f9fd9fd6f0d1cf94a7ce99 "
            "glass_blur=0bf384f38e5ccbf8dd479d9059b913e1 spatter=12ccf41d62564d36e1f6a6ada5022728 "
            "shot_noise=b0a1fa6e1e465a747c1b204b1914048a defocus_blur=d923e3d9c585a27f0956e2f2ad832564 "
            "elastic_transform=a0792bd6581f6810878be71acedfc65a gaussian_blur=5204ba0d557839772ef5a4196a052c3e "
            "frost=3a39c6823bdfaa0bf8b12fe7004b8117 saturate=c0697e9fdd646916a61e9c312c77bf6b "
            "brightness=f22d7195aecd6abb541e27fca230c171 snow=0237be164583af146b7b144e73b43465 "
            "gaussian_noise=ecc4d366eac432bdf25c024086f5e97d motion_blur=732a7e2e54152ff97c742d4c388c5516 "
            "contrast=322bb385f1d05154ee197ca16535f71e impulse_noise=3b3c210ddfa0b5cb918ff4537a429fef "
            "labels=bb4026e9ce52996b95f439544568cdb2 pixelate=96c00c60f144539e14cffb02ddbd0640"),
        counts={"test": 10000},
    ),
    "mnist-c": CorruptedLayout(
        urls=("https://zenodo.org/records/3239543/files/mnist_c.zip?download=1",
              "https://zenodo.org/record/3239543/files/mnist_c.zip"),
        archive="mnist_c.zip",
        archive_md5="4b34b33045869ee6d424616cd3a65da3",
        size=None,  # not published
        folder="mnist_c",
        md5={},  # only the archive's is published
        counts={"train": 60000, "test": 10000},
    ),
}


# ----------------------------------------------------------------------------- .npy files


@dataclass(frozen=True)
class _Npy:
    """One ``.npy`` file: ``size`` bytes at ``offset`` of ``path`` (a file, or a member of an
    uncompressed tar), or ``raw`` bytes (a member of a zip); ``where`` names it in messages."""

    where: str
    path: Optional[Path] = None
    offset: int = 0
    size: int = 0
    raw: Optional[bytes] = None

    def open(self) -> BinaryIO:
        if self.raw is not None:
            return io.BytesIO(self.raw)
        f = open(self.path, "rb")  # type: ignore[arg-type]
        f.seek(self.offset)
        return f


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _header(npy: _Npy) -> Tuple[Tuple[int, ...], np.dtype, int]:
    """(shape, dtype, offset of the data from the file's start); checks the file holds all of it."""
    try:
        with npy.open() as f:
            version = np.lib.format.read_magic(f)
            read = _HEADER_READERS.get(version)
            shape, fortran, dtype = read(f) if read else ((), False, np.dtype(np.uint8))
            start = f.tell() - (0 if npy.raw is not None else npy.offset)
    except OSError as e:
        raise RsmoothError(f"cannot read {npy.where}: {e}") from None
    except ValueError as e:
        raise RsmoothError(f"{npy.where} is not a .npy file ({e})") from None
    check(read is not None, f"{npy.where} is a .npy file of version {version}, not 1.0 or 2.0 as published")
    check(not fortran and not dtype.hasobject,
          f"{npy.where} holds {'Fortran-ordered' if fortran else 'object'} data; "
          f"the published files are plain C-ordered arrays")
    expected = start + int(np.prod(shape)) * dtype.itemsize
    check(expected == npy.size, f"{npy.where} is corrupt or truncated: {npy.size} bytes, its header "
          f"announces {expected}")
    return shape, dtype, start


def _rows(npy: _Npy, shape: Tuple[int, ...], dtype: np.dtype, start: int, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` of the array, read into memory (from a file: only those rows are mapped)."""
    row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    if npy.raw is not None:
        flat = np.frombuffer(npy.raw, dtype=dtype, count=(hi - lo) * row // dtype.itemsize, offset=start + lo * row)
        return flat.reshape((hi - lo,) + tuple(shape[1:])).copy()
    if hi == lo:
        return np.empty((0,) + tuple(shape[1:]), dtype=dtype)
    return np.array(np.memmap(npy.path, dtype=dtype, mode="r", offset=npy.offset + start + lo * row,
                              shape=(hi - lo,) + tuple(shape[1:])))


_MD5_MEMO: Dict[Tuple[str, int, int, int], str] = {}


def _md5(npy: _Npy) -> str:
    """MD5 of the file's bytes (remembered per file, offset, size and mtime: a 150 MB member is
    hashed once per process)."""
    if npy.raw is not None:
        return hashlib.md5(npy.raw, usedforsecurity=False).hexdigest()
    key = (str(npy.path), npy.offset, npy.size, os.stat(npy.path).st_mtime_ns)  # type: ignore[arg-type]
    if key not in _MD5_MEMO:
        _MD5_MEMO[key] = md5_file(npy.path, offset=npy.offset, size=npy.size)  # type: ignore[arg-type]
    return _MD5_MEMO[key]


def _check_md5(npy: _Npy, published: Optional[str], what: str, stacklevel: int) -> None:
    """Warn (:class:`DataIntegrityWarning`) when the file is not the published one."""
    if published is not None and (actual := _md5(npy)) != published:
        warnings.warn(f"{npy.where} does not match the published {what} (MD5 {actual}, expected {published}); "
                      f"using it anyway", DataIntegrityWarning, stacklevel=stacklevel + 1)


# ----------------------------------------------------------------------------- where the files are


def _in_folder(folder: Path, rel: str) -> _Npy:
    path = folder / rel
    return _Npy(str(path), path=path, size=path.stat().st_size)


def _in_tar(archive: Path, names: List[str]) -> List[_Npy]:
    """The members ``names`` of an uncompressed tar, located in place (nothing is extracted)."""
    found: Dict[str, tarfile.TarInfo] = {}
    try:
        with tarfile.open(archive, "r:") as tar:
            for member in tar:
                key = posixpath.normpath(member.name)
                if key in names and member.isreg():
                    found[key] = member
                    if len(found) == len(names):
                        break
    except (tarfile.TarError, OSError, EOFError) as e:
        raise RsmoothError(f"{archive} is not a readable uncompressed tar archive "
                           f"(corrupt or truncated: {e})") from None
    missing = [n for n in names if n not in found]
    check(not missing, f"{archive} lacks {', '.join(missing)}; is it the official archive of its name?")
    return [_Npy(f"{archive}:{n}", path=archive, offset=found[n].offset_data, size=found[n].size) for n in names]


def _in_zip(archive: Path, names: List[str]) -> List[_Npy]:
    out = []
    try:
        with zipfile.ZipFile(archive) as z:
            for n in names:
                try:
                    raw = z.read(n)
                except KeyError:
                    raise RsmoothError(f"{archive} lacks {n}; is it the official archive of its name?") from None
                out.append(_Npy(f"{archive}:{n}", raw=raw, size=len(raw)))
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as e:
        raise RsmoothError(f"{archive} is not a readable zip archive (corrupt or truncated: {e})") from None
    return out


# ----------------------------------------------------------------------------- datasets


class _Corrupted(InMemoryDataset):
    """Common reader of the published corrupted datasets; subclasses set the class attributes."""

    #: The corruption file names published, in the authors' order.
    published_corruptions: ClassVar[Tuple[str, ...]]
    #: The severities published (``()``: one level per corruption).
    severities: ClassVar[Tuple[int, ...]]
    #: The clean dataset (its models and normalisation apply).
    clean: ClassVar[str]
    #: Whose benchmark it is (:data:`rsmooth.corruptions.BENCHMARK`): ``cifar10-c`` or ``mnist-c``.
    suite: ClassVar[str]

    @classmethod
    def _layout(cls) -> CorruptedLayout:
        return LAYOUTS[cls.info.name]

    @classmethod
    def _files(cls, corruption: str, split: str) -> Tuple[str, str]:
        """Images and labels, relative to the top folder."""
        raise NotImplementedError

    @classmethod
    def _check_choice(cls, split: str, corruption: Optional[str], severity: Optional[int]) -> None:
        name, choices = cls.info.name, ", ".join(cls.published_corruptions)
        levels = f"{cls.severities[0]}-{cls.severities[-1]}" if cls.severities else ""
        check(split in cls._layout().counts, f"{name} has only a test split (the corrupted {cls.clean} test "
              f"set); train on {cls.clean} and use --split test")
        if corruption is None:
            raise RsmoothError(f"{name} needs a corruption (--corruption NAME, one of {choices})"
                               + (f" and a severity (--severity {levels})" if levels else ""))
        check(corruption in cls.published_corruptions,
              f"unknown corruption {corruption!r} for {name}; choose one of: {choices}")
        if not cls.severities:
            check(severity is None, f"{name} has one published level per corruption; drop --severity")
        else:
            check(severity is not None, f"{name} needs a severity (--severity {levels}) for {corruption}")
            check(severity in cls.severities, f"{name} has severities {', '.join(map(str, cls.severities))}, "
                  f"not {severity!r}")

    @classmethod
    def _places(cls, data_dir: Optional[PathLike]) -> List[Path]:
        """``<root>/<name>`` and ``<root>`` for each data root, then (without ``data_dir``) the download
        cache's ``<name>``."""
        places = [p for root in search_roots(data_dir) for p in (root / cls.info.name, root)]
        return list(dict.fromkeys(places + dataset_dirs(cls.info.name, data_dir)))

    @classmethod
    def _locate(cls, split: str, corruption: str, data_dir: Optional[PathLike], download: bool
                ) -> Tuple[_Npy, _Npy, str]:
        """(images, labels, source): the first extracted folder or archive holding them, else the
        downloaded archive."""
        name, layout = cls.info.name, cls._layout()
        rel = cls._files(corruption, split)
        members = [f"{layout.folder}/{r}" for r in rel]
        roots = set(search_roots(data_dir))
        searched = cls._places(data_dir)
        for d in searched:
            # the files may also lie in the dataset's own folder (<root>/cifar10-c/fog.npy)
            for folder in (d / layout.folder,) + (() if d in roots else (d,)):
                if all((folder / r).is_file() for r in rel):
                    images, labels = (_in_folder(folder, r) for r in rel)
                    return images, labels, str(folder)
            archive = d / layout.archive
            if archive.is_file():
                return (*cls._read_archive(archive, members, verify=True), str(archive))
        target = download_root(data_dir) / name / layout.archive
        manual = f"download {layout.urls[0]} (MD5 {layout.archive_md5}) to {target}"
        if not download:
            raise RsmoothError(
                f"{name}/{split} not found (looked for {layout.folder}/{rel[0]} and {posixpath.basename(rel[1])}, "
                f"or {layout.archive}, in "
                f"{', '.join(map(str, searched))}); allow downloading or {manual}")
        if layout.size is not None:
            have = shutil.disk_usage(next(p for p in (target, *target.parents) if p.exists())).free
            check(have >= layout.size, f"{target.parent} has {_size(have)} free but {layout.archive} needs "
                  f"{_size(layout.size)}; free some space, pass --data-dir elsewhere or {manual}")
        print(f"rsmooth: {name}: fetching {layout.archive} (all corruptions, {_size(layout.size)}) into "
              f"{target.parent}; later loads read it in place", file=sys.stderr)
        try:
            download_file(layout.urls, target, layout.archive_md5, size_hint=layout.size)
        except RsmoothError as e:
            raise RsmoothError(f"{e}; to install {name} by hand, {manual}") from None
        return (*cls._read_archive(target, members, verify=False), str(target))

    @classmethod
    def _read_archive(cls, archive: Path, members: List[str], verify: bool) -> List[_Npy]:
        layout = cls._layout()
        if archive.suffix == ".zip":
            if verify:  # its members' MD5s are not published
                whole = _Npy(str(archive), path=archive, size=archive.stat().st_size)
                _check_md5(whole, layout.archive_md5, layout.archive, stacklevel=5)
            return _in_zip(archive, members)
        return _in_tar(archive, members)

    @classmethod
    def load(cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True, *,
             corruption: Optional[str] = None, severity: Optional[int] = None) -> "_Corrupted":
        """Corruption ``corruption`` (at ``severity``, CIFAR) of split ``split``."""
        cls._check_choice(split, corruption, severity)
        assert corruption is not None
        severity = None if severity is None else int(severity)
        name, layout = cls.info.name, cls._layout()
        images, labels, source = cls._locate(split, corruption, data_dir, download)
        _check_md5(images, layout.md5.get(corruption), f"{name} file {corruption}.npy", stacklevel=3)
        _check_md5(labels, layout.md5.get("labels"), f"{name} file labels.npy", stacklevel=3)
        y_shape, y_dtype, y_start = _header(labels)
        check(len(y_shape) == 1 and y_dtype.kind in "iu",
              f"{labels.where} holds {y_dtype} data of shape {y_shape}; labels are integers [N]")
        x_shape, x_dtype, x_start = _header(images)
        c, h, w = cls.info.input_shape
        check(x_dtype == np.uint8 and len(x_shape) == 4 and tuple(x_shape[1:]) == (h, w, c),
              f"{images.where} holds {x_dtype} data of shape {x_shape}; {name} images are uint8 [N, {h}, {w}, {c}]")
        n = y_shape[0]
        check(x_shape[0] == n, f"{images.where} has {x_shape[0]} images but {labels.where} has {n} labels")
        blocks = len(cls.severities) or 1
        check(n % blocks == 0, f"{images.where} is corrupt: {n} rows are not {blocks} equal severity blocks")
        per = n // blocks
        lo = (severity - 1) * per if severity is not None else 0
        if per != layout.counts[split]:
            warnings.warn(f"{source}: {name}/{split} has {per} images{' per severity' if blocks > 1 else ''}, "
                          f"the official set has "
                          f"{layout.counts[split]}", DataIntegrityWarning, stacklevel=3)
        x = _rows(images, x_shape, x_dtype, x_start, lo, lo + per)
        y = _rows(labels, y_shape, y_dtype, y_start, lo, lo + per).astype(np.int64)
        rows = f" rows {lo}-{lo + per - 1}" if blocks > 1 else ""
        ds = cls(split, torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(y),
                 source=f"{images.where}{rows}")
        ds.corruption = {"name": corruption, "severity": severity, "source": "published"}
        return ds


class _CifarC(_Corrupted):
    """CIFAR-10-C and CIFAR-100-C: ``<corruption>.npy`` holds the five severities one after another."""

    severities = (1, 2, 3, 4, 5)
    suite = "cifar10-c"
    published_corruptions = BENCHMARK["cifar10-c"] + HELD_OUT["cifar10-c"]

    @classmethod
    def _files(cls, corruption: str, split: str) -> Tuple[str, str]:
        return f"{corruption}.npy", "labels.npy"


@DATASETS.register("cifar10-c")
class CIFAR10C(_CifarC):
    """CIFAR-10-C: the 10,000 CIFAR-10 test images under 19 corruptions x 5 severities."""

    clean = "cifar10"
    info = replace(CIFAR10.info, name="cifar10-c")


@DATASETS.register("cifar100-c")
class CIFAR100C(_CifarC):
    """CIFAR-100-C: the 10,000 CIFAR-100 test images under 19 corruptions x 5 severities."""

    clean = "cifar100"
    info = replace(CIFAR100.info, name="cifar100-c")


@DATASETS.register("mnist-c")
class MNISTC(_Corrupted):
    """MNIST-C: MNIST's 60,000 / 10,000 digits under 15 corruptions (and ``identity``), one level each."""

    clean = "mnist"
    info = replace(MNIST.info, name="mnist-c")
    severities = ()
    suite = "mnist-c"
    published_corruptions = BENCHMARK["mnist-c"] + ("identity",)

    @classmethod
    def _files(cls, corruption: str, split: str) -> Tuple[str, str]:
        return f"{corruption}/{split}_images.npy", f"{corruption}/{split}_labels.npy"

