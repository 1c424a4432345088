"""Tests of rsmooth.data: registry, digits, IDX and CIFAR readers, augmentation, ImageNet
folders, fingerprints and certify subsets.  Downloads are in test_data_download.py."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import tarfile
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch

from rsmooth.data import (
    DATASETS,
    DEFAULT_DATASET,
    DataIntegrityWarning,
    Dataset,
    DatasetInfo,
    certify_indices,
    check_fingerprint,
    dataset_info,
    get_dataset,
)
from rsmooth.data import cifar as cifar_mod
from rsmooth.data import mnist as mnist_mod
from rsmooth.data.idx import parse_idx, read_idx
from rsmooth.data.transforms import (
    center_crop,
    crop_flip,
    crop_flip_params,
    random_crop_flip,
    random_resized_crop_params,
    resize_shorter,
    resized_shape,
)
from rsmooth.errors import RsmoothError

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def _isolated_roots(monkeypatch, tmp_path):
    """No user data roots, and a private download cache, in every test."""
    monkeypatch.delenv("RSMOOTH_DATA", raising=False)
    monkeypatch.delenv("IMAGENET_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


# ----------------------------------------------------------------------------- helpers


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode an IDX file by the format's definition (independent of the reader)."""
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(np.int16): 0x0B,
             np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D, np.dtype(np.float64): 0x0E}
    code = codes[array.dtype]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_mnist(folder: Path, split: str, n: int, seed: int, gz: bool = True) -> tuple:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    folder.mkdir(parents=True, exist_ok=True)
    for base, arr in zip(mnist_mod.SPLIT_FILES[split], (images, labels)):
        data = idx_bytes(arr)
        if gz:
            (folder / f"{base}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / base).write_bytes(data)
    return images, labels


def cifar_records(n: int, label_bytes: int, num_classes: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    fine = rng.integers(0, num_classes, size=n, dtype=np.uint8)
    rows = []
    for i in range(n):
        head = bytes([int(fine[i]) // 5, int(fine[i])]) if label_bytes == 2 else bytes([int(fine[i])])
        # official layout: 1024 red, 1024 green, 1024 blue, each row-major
        rows.append(head + images[i, 0].tobytes() + images[i, 1].tobytes() + images[i, 2].tobytes())
    return b"".join(rows), images, fine.astype(np.int64)


def write_cifar(root: Path, name: str, per_file: int, archive: bool) -> dict:
    """A small CIFAR release in the official binary format; returns split -> (images, labels)."""
    layout = cifar_mod.LAYOUTS[name]
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    expected, members = {}, {}
    seed = 0
    for split, files in layout.files.items():
        xs, ys = [], []
        for f in files:
            raw, x, y = cifar_records(per_file, layout.label_bytes, layout.num_classes, seed)
            seed += 1
            members[f"{layout.folder}/{f}"] = raw
            xs.append(x)
            ys.append(y)
        expected[split] = (np.concatenate(xs), np.concatenate(ys))
    write_members(folder, members, folder / layout.archive if archive else None)
    return expected


def write_members(folder: Path, members: dict, archive: Optional[Path]) -> None:
    """``members`` (path in the archive -> bytes) as a .tar.gz ``archive``, or as files in ``folder``."""
    if archive is not None:
        with tarfile.open(archive, "w:gz") as tar:
            for member, raw in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(raw)
                tar.addfile(info, io.BytesIO(raw))
    else:
        for member, raw in members.items():
            (folder / member).parent.mkdir(parents=True, exist_ok=True)
            (folder / member).write_bytes(raw)


class Py2Pickler(pickle._Pickler):
    """Pickles as Python 2's cPickle wrote the official CIFAR python batches (protocol 2):
    str and bytes both as py2 ``str`` (SHORT_BINSTRING / BINSTRING), read back as bytes."""

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_py2_str(self, obj):
        data = obj.encode("latin-1") if isinstance(obj, str) else obj
        n = len(data)
        self.write((b"U" + bytes([n]) if n < 256 else b"T" + struct.pack("<i", n)) + data)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str
    dispatch[str] = _save_py2_str


def py2_pickle(obj) -> bytes:
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    # the official files were written by numpy < 2, whose _reconstruct lives in numpy.core
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def write_cifar_python(folder: Path, name: str, per_file: int, archive: bool) -> None:
    """The same images and labels as :func:`write_cifar`, in the official python layout."""
    binary, py = cifar_mod.LAYOUTS[name], cifar_mod.PYTHON_LAYOUTS[name]
    folder.mkdir(parents=True, exist_ok=True)
    members, seed = {}, 0
    for split, files in py.files.items():
        for f in files:
            _, x, y = cifar_records(per_file, binary.label_bytes, binary.num_classes, seed)
            seed += 1
            batch = {"batch_label": f"{f} of 1", "data": x.reshape(len(x), -1),
                     "filenames": [f"img_{i}.png" for i in range(len(x))]}
            if name == "cifar10":
                batch["labels"] = [int(v) for v in y]
            else:
                batch["fine_labels"] = [int(v) for v in y]
                batch["coarse_labels"] = [int(v) // 5 for v in y]
            members[f"{py.folder}/{f}"] = py2_pickle(batch)
    write_members(folder, members, folder / py.archive if archive else None)


# ----------------------------------------------------------------------------- registry


def test_registry_names_and_default():
    assert set(DATASETS.names()) == {"digits", "mnist", "fashion-mnist", "cifar10", "cifar100", "imagenet",
                                     "cifar10-c", "cifar100-c", "mnist-c"}
    assert DEFAULT_DATASET == "digits"


@pytest.mark.parametrize("name", DATASETS.names())
def test_dataset_info_needs_no_data(name):
    info = dataset_info(name)
    assert isinstance(info, DatasetInfo) and info.name == name
    assert len(info.input_shape) == 3
    if info.mean is None:
        assert info.std is None and info.input_shape[0] == 1
    else:
        assert len(info.mean) == len(info.std) == info.input_shape[0] == 3


def test_dataset_info_constants():
    assert dataset_info("cifar10") == DatasetInfo(
        "cifar10", 10, (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010), (50_000, 10_000))
    assert dataset_info("cifar100") == DatasetInfo(
        "cifar100", 100, (3, 32, 32), (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761), (50_000, 10_000))
    assert dataset_info("imagenet") == DatasetInfo(
        "imagenet", 1000, (3, 224, 224), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), (1_281_167, 50_000))
    assert dataset_info("digits") == DatasetInfo("digits", 10, (1, 8, 8), None, None, (1437, 360))
    assert dataset_info("digits").sizes == (len(get_dataset("digits", "train")), len(get_dataset("digits", "test")))
    for name in ("mnist", "fashion-mnist"):
        assert dataset_info(name) == DatasetInfo(name, 10, (1, 28, 28), None, None, (60_000, 10_000))


def test_unknown_dataset_and_split():
    with pytest.raises(RsmoothError, match="unknown dataset 'svhn'.*cifar10.*digits"):
        dataset_info("svhn")
    with pytest.raises(RsmoothError, match="unknown dataset"):
        get_dataset("svhn", "train")
    with pytest.raises(RsmoothError, match="unknown split 'val'; choose one of: train, test"):
        get_dataset("digits", "val")


# ----------------------------------------------------------------------------- digits


@pytest.fixture(scope="module")
def digits():
    return get_dataset("digits", "train"), get_dataset("digits", "test")


def test_digits_split(digits):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    train, test = digits
    assert (len(train), len(test)) == (1437, 360)
    assert isinstance(train, Dataset) and train.num_classes == 10 and train.input_shape == (1, 8, 8)
    assert train.mean is None and train.std is None
    bunch = load_digits()
    tr, te = train_test_split(np.arange(1797), test_size=360, stratify=bunch.target, random_state=0)
    for ds, idx in ((train, np.sort(tr)), (test, np.sort(te))):
        assert ds.images.dtype == torch.float32 and tuple(ds.images.shape) == (len(idx), 1, 8, 8)
        np.testing.assert_array_equal(ds.targets.numpy(), bunch.target[idx])
        np.testing.assert_allclose(ds.images[:, 0].numpy(), bunch.images[idx] / 16.0, rtol=0, atol=0)
    # stratified: each class's test share is within one image of 360/1797 of its size
    counts = np.bincount(bunch.target, minlength=10)
    test_counts = np.bincount(test.targets.numpy(), minlength=10)
    assert np.all(np.abs(test_counts - counts * 360 / 1797) < 1.0)
    assert set(tr.tolist()).isdisjoint(te.tolist())


def test_digits_load_without_importing_sklearn_and_equal_its_fallback(digits, monkeypatch):
    """The shipped CSV is read directly (importing scikit-learn costs seconds per process); a
    scikit-learn that kept it elsewhere falls back to load_digits with the same arrays."""
    import subprocess
    import sys

    code = ("import sys; from rsmooth.data import get_dataset; get_dataset('digits', 'train'); "
            "assert 'sklearn' not in sys.modules, 'sklearn imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
    from rsmooth.data import digits as module

    monkeypatch.setattr(module, "_shipped_file", lambda: None)
    for ds, split in zip(digits, ("train", "test")):
        again = get_dataset("digits", split)
        assert torch.equal(again.images, ds.images) and torch.equal(again.targets, ds.targets)
        assert again.fingerprint() == ds.fingerprint()


def test_digits_deterministic_and_unaugmented(digits):
    train, _ = digits
    again = get_dataset("digits", "train")
    assert torch.equal(train.images, again.images) and torch.equal(train.targets, again.targets)
    assert train.fingerprint() == again.fingerprint()
    idx = torch.tensor([5, 0, 1436])
    x, y = train.get_batch(idx, augment=True, generator=torch.Generator().manual_seed(1))
    x0, y0 = train.get_batch(idx)
    assert torch.equal(x, x0) and torch.equal(y, y0)
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.shape == (3, 1, 8, 8)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0


def test_dataset_item_and_index_errors(digits):
    train, _ = digits
    x, y = train[3]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and isinstance(y, int)
    assert torch.equal(train[-1][0], train[len(train) - 1][0])
    x[:] = 7.0  # ds[i] must not alias the stored images
    assert float(train[3][0].max()) <= 1.0
    with pytest.raises(IndexError):
        train[len(train)]
    with pytest.raises(IndexError):
        train.get_batch(torch.tensor([0, len(train)]))
    with pytest.raises(IndexError):
        train.get_batch(torch.tensor([-1]))
    assert train.get_batch([])[0].shape == (0, 1, 8, 8)


# ----------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_parse_idx_dtypes(dtype):
    arr = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    out = parse_idx(idx_bytes(arr), "x")
    assert out.dtype == np.dtype(dtype).newbyteorder("=") and out.flags.writeable
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_files(tmp_path, gz):
    arr = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    data = idx_bytes(arr)
    path = tmp_path / ("a.gz" if gz else "a")
    path.write_bytes(gzip.compress(data) if gz else data)
    np.testing.assert_array_equal(read_idx(path), arr)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d[:2], "not an IDX file"),
        (lambda d: b"\x01" + d[1:], "magic number"),
        (lambda d: d[:2] + b"\x07" + d[3:], "unknown data type 0x07"),
        (lambda d: d[:6], "truncated: the header"),
        (lambda d: d[:-1], "truncated: shape"),
        (lambda d: d + b"\x00\x00", "2 extra"),
    ],
)
def test_read_idx_rejects_corrupt(tmp_path, mutate, message):
    data = idx_bytes(np.zeros((3, 4, 4), np.uint8))
    path = tmp_path / "bad-idx3-ubyte"
    path.write_bytes(mutate(data))
    with pytest.raises(RsmoothError, match=message) as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_rejects_broken_gzip(tmp_path):
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.zeros((30, 28, 28), np.uint8)))[:-20])
    with pytest.raises(RsmoothError, match="not a valid gzip file") as err:
        read_idx(path)
    assert str(path) in str(err.value)


# ----------------------------------------------------------------------------- MNIST family


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
@pytest.mark.parametrize("gz", [True, False])
def test_mnist_family_reads_generated_files(tmp_path, monkeypatch, name, gz):
    monkeypatch.setitem(mnist_mod.SYSTEM_DIRS, name, [])
    images, labels = write_mnist(tmp_path / name, "test", 12, seed=3, gz=gz)
    with pytest.warns(DataIntegrityWarning, match="does not match the published"):
        ds = get_dataset(name, "test", data_dir=tmp_path, download=False)
    assert (len(ds), ds.num_classes, ds.input_shape, ds.name) == (12, 10, (1, 28, 28), name)
    assert ds.images.dtype == torch.uint8 and ds.source == str(tmp_path / name)
    np.testing.assert_array_equal(ds.targets.numpy(), labels)
    x, y = ds.get_batch(torch.tensor([4, 0]), augment=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, torch.from_numpy(images[[4, 0]]).unsqueeze(1).float() / 255)
    assert torch.equal(y, torch.from_numpy(labels[[4, 0]].astype(np.int64)))


def test_mnist_rejects_other_datasets_file(tmp_path, monkeypatch):
    """An MNIST-named file that is Fashion-MNIST's (same file names) is an error, not data."""
    images, labels = write_mnist(tmp_path / "mnist", "train", 6, seed=0)
    raw = {b: gzip.decompress((tmp_path / "mnist" / f"{b}.gz").read_bytes()) for b in mnist_mod.SPLIT_FILES["train"]}
    fake = {b: mnist_mod.IdxFile("0" * 32, hashlib.md5(d).hexdigest(), 1) for b, d in raw.items()}
    monkeypatch.setitem(mnist_mod.FILES, "fashion-mnist", fake)
    with pytest.raises(RsmoothError, match="is fashion-mnist's train-images-idx3-ubyte, not mnist's"):
        get_dataset("mnist", "train", data_dir=tmp_path, download=False)


def test_mnist_rejects_bad_shapes(tmp_path):
    folder = tmp_path / "mnist"
    write_mnist(folder, "test", 4, seed=0)
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(5, np.uint8))))
    with pytest.warns(DataIntegrityWarning), pytest.raises(RsmoothError, match="4 images but .* 5 labels"):
        get_dataset("mnist", "test", data_dir=tmp_path, download=False)
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros((5, 8, 8), np.uint8))))
    with pytest.warns(DataIntegrityWarning), pytest.raises(RsmoothError, match=r"uint8 \[N, 28, 28\]"):
        get_dataset("mnist", "test", data_dir=tmp_path, download=False)


def test_mnist_missing_without_download(tmp_path):
    with pytest.raises(RsmoothError, match="mnist/test not found .*place t10k-images-idx3-ubyte.gz"):
        get_dataset("mnist", "test", data_dir=tmp_path, download=False)


@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(), reason=f"{DEBIAN_FASHION} missing (Debian package dataset-fashion-mnist not installed)")
def test_debian_fashion_mnist_matches_published_checksums():
    """Debian re-gzips the files (new gzip header: mtime, no file name), so the published
    MD5s of the .gz files cannot match; the decompressed files must match the published
    decompressed MD5s exactly."""
    for base, published in mnist_mod.FILES["fashion-mnist"].items():
        path = DEBIAN_FASHION / f"{base}.gz"
        raw = gzip.decompress(path.read_bytes())
        assert hashlib.md5(raw).hexdigest() == published.md5_raw, base
    ds = get_dataset("fashion-mnist", "train", download=False)
    assert ds.source == str(DEBIAN_FASHION)
    assert (len(ds), ds.num_classes, ds.images.shape[1:]) == (60000, 10, (1, 28, 28))
    assert torch.bincount(ds.targets).tolist() == [6000] * 10


# ----------------------------------------------------------------------------- CIFAR


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
@pytest.mark.parametrize("archive", [True, False])
def test_cifar_binary_reader(tmp_path, name, archive):
    expected = write_cifar(tmp_path, name, per_file=3, archive=archive)
    for split in ("train", "test"):
        with pytest.warns(DataIntegrityWarning):
            ds = get_dataset(name, split, data_dir=tmp_path, download=False)
        images, labels = expected[split]
        assert ds.images.dtype == torch.uint8 and ds.input_shape == (3, 32, 32)
        assert ds.num_classes == (10 if name == "cifar10" else 100)
        assert ds.mean == dataset_info(name).mean
        np.testing.assert_array_equal(ds.images.numpy(), images)
        np.testing.assert_array_equal(ds.targets.numpy(), labels)
        x, _ = ds.get_batch([1])
        assert torch.equal(x[0], torch.from_numpy(images[1]).float() / 255)


def test_cifar_rejects_corrupt(tmp_path):
    layout = cifar_mod.LAYOUTS["cifar10"]
    folder = tmp_path / "cifar10"
    folder.mkdir()
    (folder / layout.archive).write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.warns(DataIntegrityWarning), pytest.raises(RsmoothError, match="not a readable tar.gz"):
        get_dataset("cifar10", "test", data_dir=tmp_path, download=False)
    ext = folder / layout.folder
    ext.mkdir()
    raw, _, _ = cifar_records(2, 1, 10, 0)
    (ext / "test_batch.bin").write_bytes(raw[:-1])
    with pytest.raises(RsmoothError, match="test_batch.bin is corrupt or truncated"):
        get_dataset("cifar10", "test", data_dir=tmp_path, download=False)
    bad = bytearray(raw)
    bad[0] = 10
    (ext / "test_batch.bin").write_bytes(bytes(bad))
    with pytest.raises(RsmoothError, match="label 10 >= 10"):
        get_dataset("cifar10", "test", data_dir=tmp_path, download=False)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
@pytest.mark.parametrize("archive", [True, False])
def test_cifar_python_reader_matches_the_binary_one(tmp_path, name, archive):
    write_cifar(tmp_path / "bin", name, per_file=3, archive=False)
    write_cifar_python(tmp_path / "py" / name, name, per_file=3, archive=archive)
    py = cifar_mod.PYTHON_LAYOUTS[name]
    assert b"cnumpy.core.multiarray\n_reconstruct" in py2_pickle(np.zeros(1, np.uint8))  # as the official files
    for split in ("train", "test"):
        with pytest.warns(DataIntegrityWarning):
            ref = get_dataset(name, split, data_dir=tmp_path / "bin", download=False)
        with pytest.warns(DataIntegrityWarning):  # archive MD5 / split size differ from the official
            ds = get_dataset(name, split, data_dir=tmp_path / "py", download=False)
        assert ds.source.endswith(py.archive if archive else py.folder)
        assert torch.equal(ds.images, ref.images) and torch.equal(ds.targets, ref.targets)
        assert ds.images.shape[1:] == (3, 32, 32) and ds.num_classes == ref.num_classes


def test_cifar_python_folder_in_the_root_itself_as_torchvision_keeps_it(tmp_path):
    write_cifar(tmp_path / "bin", "cifar10", per_file=2, archive=False)
    write_cifar_python(tmp_path / "cache", "cifar10", per_file=2, archive=False)  # <root>/cifar-10-batches-py
    with pytest.warns(DataIntegrityWarning):
        ref = get_dataset("cifar10", "test", data_dir=tmp_path / "bin", download=False)
    with pytest.warns(DataIntegrityWarning):
        ds = get_dataset("cifar10", "test", data_dir=tmp_path / "cache", download=False)
    assert ds.source == str(tmp_path / "cache" / "cifar-10-batches-py")
    assert torch.equal(ds.images, ref.images)


class _Exploit:
    def __reduce__(self):
        return os.system, ("touch pwned",)


@pytest.mark.filterwarnings("ignore::rsmooth.data.DataIntegrityWarning")  # hand-made batches, not the published ones
def test_cifar_python_refuses_other_globals_and_garbage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    target = folder / "test_batch"
    target.write_bytes(py2_pickle({"data": _Exploit(), "labels": [0]}))
    with pytest.raises(RsmoothError, match=r"test_batch is not a CIFAR python batch \(refusing to load "
                                            r"the global (os|posix)\.system\)") as e:
        get_dataset("cifar10", "test", data_dir=tmp_path, download=False)
    assert "\n" not in str(e.value) and not (tmp_path / "pwned").exists()
    for raw, message in [(py2_pickle({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}), "label 10"),
                         (py2_pickle({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}), "labels is not 2"),
                         (py2_pickle({"data": np.zeros((2, 5), np.uint8), "labels": [0, 1]}), "uint8 array"),
                         (py2_pickle([1, 2]), "a list, not a dict"),
                         (py2_pickle({"data": np.zeros((2, 3072), np.uint8)})[:-40], "corrupt or truncated")]:
        target.write_bytes(raw)
        with pytest.raises(RsmoothError, match=message):
            get_dataset("cifar10", "test", data_dir=tmp_path, download=False)


def test_cifar_not_found_names_every_place_and_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("RSMOOTH_DATA", str(tmp_path / "env"))
    with pytest.raises(RsmoothError) as e:
        get_dataset("cifar100", "test", download=False)
    message = str(e.value)
    cache = tmp_path / "xdg-cache" / "rsmooth" / "data"
    places = [tmp_path / "env" / "cifar100", tmp_path / "env", cache / "cifar100", cache]
    assert f"in {', '.join(map(str, places))}); " in message
    with pytest.raises(RsmoothError) as e:  # a data_dir given is searched alone
        get_dataset("cifar100", "test", data_dir=tmp_path / "given", download=False)
    assert f"in {tmp_path / 'given' / 'cifar100'}, {tmp_path / 'given'}); " in str(e.value)
    for layout in ("cifar-100-binary/", "cifar-100-binary.tar.gz", "cifar-100-python/", "cifar-100-python.tar.gz"):
        assert layout in message


# ----------------------------------------------------------------------------- augmentation


def reference_crop_flip(images, top, left, flip, padding):
    """Per-image loop: zero-pad, slice, mirror (the definition of the transform)."""
    out = []
    h, w = images.shape[-2:]
    for b in range(images.shape[0]):
        padded = torch.zeros(images.shape[1], h + 2 * padding, w + 2 * padding, dtype=images.dtype)
        padded[:, padding:padding + h, padding:padding + w] = images[b]
        crop = padded[:, int(top[b]):int(top[b]) + h, int(left[b]):int(left[b]) + w]
        out.append(crop.flip(-1) if bool(flip[b]) else crop)
    return torch.stack(out)


def test_crop_flip_matches_per_image_loop():
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    top, left, flip = crop_flip_params(64, 4, torch.Generator().manual_seed(1))
    assert torch.equal(crop_flip(images, top, left, flip, 4), reference_crop_flip(images, top, left, flip, 4))
    # every offset in {0..8} and both flip states occur; offset 4 without flip is the identity
    assert set(top.tolist()) <= set(range(9)) and set(left.tolist()) <= set(range(9))
    ident = crop_flip(images, torch.full((64,), 4), torch.full((64,), 4), torch.zeros(64, dtype=torch.bool), 4)
    assert torch.equal(ident, images)
    mirrored = crop_flip(images, torch.full((64,), 4), torch.full((64,), 4), torch.ones(64, dtype=torch.bool), 4)
    assert torch.equal(mirrored, images.flip(-1))
    corner = crop_flip(images[:1], torch.tensor([0]), torch.tensor([0]), torch.tensor([False]), 4)
    assert corner[0, :, :4].eq(0).all() and corner[0, :, :, :4].eq(0).all()
    assert torch.equal(corner[0, :, 4:, 4:], images[0, :, :28, :28])


def test_random_crop_flip_distribution():
    top, left, flip = crop_flip_params(20000, 4, torch.Generator().manual_seed(0))
    assert torch.bincount(top, minlength=9).min() > 20000 / 9 * 0.85
    assert torch.bincount(left, minlength=9).min() > 20000 / 9 * 0.85
    assert abs(flip.float().mean().item() - 0.5) < 0.02


def test_cifar_augmentation_deterministic_and_correct(tmp_path):
    write_cifar(tmp_path, "cifar10", per_file=6, archive=False)
    with pytest.warns(DataIntegrityWarning):
        ds = get_dataset("cifar10", "train", data_dir=tmp_path, download=False)
    idx = torch.tensor([3, 29, 0, 17, 3])
    a, ya = ds.get_batch(idx, augment=True, generator=torch.Generator().manual_seed(7))
    b, yb = ds.get_batch(idx, augment=True, generator=torch.Generator().manual_seed(7))
    c, _ = ds.get_batch(idx, augment=True, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and torch.equal(ya, yb) and not torch.equal(a, c)
    top, left, flip = crop_flip_params(len(idx), 4, torch.Generator().manual_seed(7))
    ref = reference_crop_flip(ds.images[idx], top, left, flip, 4).float() / 255
    assert torch.equal(a, ref) and a.dtype == torch.float32
    plain, _ = ds.get_batch(idx, generator=torch.Generator().manual_seed(7))
    assert torch.equal(plain, ds.images[idx].float() / 255)
    # same generator state advances: two successive batches differ from a re-seeded one
    g = torch.Generator().manual_seed(7)
    first, _ = ds.get_batch(idx, augment=True, generator=g)
    second, _ = ds.get_batch(idx, augment=True, generator=g)
    assert torch.equal(first, a) and not torch.equal(second, a)
    assert torch.equal(random_crop_flip(ds.images[idx], 4, torch.Generator().manual_seed(7)).float() / 255, a)


# ----------------------------------------------------------------------------- ImageNet


def reference_rrc(height, width, scale, ratio, g):
    """torchvision 0.15+ RandomResizedCrop.get_params, transcribed draw by draw."""
    import math

    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=g).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=g)).item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,), generator=g).item()
            j = torch.randint(0, width - w + 1, size=(1,), generator=g).item()
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def test_random_resized_crop_params():
    for seed in range(200):
        h, w = [(300, 400), (50, 500), (500, 40), (224, 224)][seed % 4]
        got = random_resized_crop_params(h, w, (0.08, 1.0), (3 / 4, 4 / 3), torch.Generator().manual_seed(seed))
        want = reference_rrc(h, w, (0.08, 1.0), (3 / 4, 4 / 3), torch.Generator().manual_seed(seed))
        assert abs(got[2] - want[2]) <= 1 and abs(got[3] - want[3]) <= 1  # float32 vs float64 log-ratio bounds
        top, left, ch, cw = got
        assert 0 <= top and top + ch <= h and 0 <= left and left + cw <= w
    # impossible scale -> fallback: centre crop clamped to the ratio range
    assert random_resized_crop_params(100, 400, (2.0, 3.0), (3 / 4, 4 / 3)) == (0, 133, 100, 133)
    assert random_resized_crop_params(400, 100, (2.0, 3.0), (3 / 4, 4 / 3)) == (133, 0, 133, 100)
    assert random_resized_crop_params(100, 110, (2.0, 3.0), (3 / 4, 4 / 3)) == (0, 0, 100, 110)


def test_resize_and_center_crop():
    from PIL import Image

    assert resized_shape(512, 384, 256) == (341, 256) and resized_shape(300, 600, 256) == (256, 512)
    arr = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    img = Image.fromarray(arr)
    out = np.asarray(center_crop(resize_shorter(img, 256), 224))
    np.testing.assert_array_equal(out, arr[16:240, 16:240])
    assert resize_shorter(Image.fromarray(arr[:, :200]), 256).size == (256, 327)


def make_imagenet(root: Path, per_class=(3, 2)) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in zip(("train", "val"), per_class):
        for c, wnid in enumerate(["n02", "n01", "n03"]):  # not sorted on purpose
            d = root / split / wnid
            d.mkdir(parents=True)
            for k in range(n):
                size = (40 + 7 * k, 30 + 5 * c)
                arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
                ext, fmt = (".JPEG", "JPEG") if k % 2 == 0 else (".png", "PNG")
                Image.fromarray(arr).save(d / f"img{k}{ext}", fmt)
            (d / "notes.txt").write_text("not an image")


def test_imagenet_folders(tmp_path):
    make_imagenet(tmp_path / "imagenet")
    train = get_dataset("imagenet", "train", data_dir=tmp_path)
    test = get_dataset("imagenet", "test", data_dir=tmp_path / "imagenet")  # root = the folder itself
    assert train.classes == ["n01", "n02", "n03"] and test.classes == train.classes
    assert (len(train), len(test), train.num_classes, train.input_shape) == (9, 6, 3, (3, 224, 224))
    assert train.targets.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert train.files[:3] == ["n01/img0.JPEG", "n01/img1.png", "n01/img2.JPEG"]
    assert train.mean == (0.485, 0.456, 0.406)
    x, y = train[4]
    assert x.shape == (3, 224, 224) and x.dtype == torch.float32 and y == 1
    xb, yb = train.get_batch(torch.tensor([4, 0]))
    assert torch.equal(xb[0], x) and yb.tolist() == [1, 0]
    a, _ = train.get_batch(torch.arange(9), augment=True, generator=torch.Generator().manual_seed(0))
    b, _ = train.get_batch(torch.arange(9), augment=True, generator=torch.Generator().manual_seed(0))
    c, _ = train.get_batch(torch.arange(9), augment=True, generator=torch.Generator().manual_seed(1))
    assert a.shape == (9, 3, 224, 224) and torch.equal(a, b) and not torch.equal(a, c)
    assert 0.0 <= float(a.min()) and float(a.max()) <= 1.0
    fp = train.fingerprint()
    assert fp["length"] == 9 and fp == get_dataset("imagenet", "train", data_dir=tmp_path).fingerprint()


def test_imagenet_from_the_imagenet_dir_variable(tmp_path, monkeypatch):
    make_imagenet(tmp_path / "ILSVRC")  # Cohen et al.'s $IMAGENET_DIR holds train/ and val/
    monkeypatch.setenv("IMAGENET_DIR", str(tmp_path / "ILSVRC"))
    test = get_dataset("imagenet", "test")
    assert test.source == str(tmp_path / "ILSVRC" / "val") and len(test) == 6
    make_imagenet(tmp_path / "given" / "imagenet")  # data_dir comes first
    assert get_dataset("imagenet", "test", data_dir=tmp_path / "given").source == \
        str(tmp_path / "given" / "imagenet" / "val")


def test_imagenet_not_found_names_every_place(tmp_path, monkeypatch):
    cache = tmp_path / "xdg-cache" / "rsmooth" / "data" / "imagenet"
    with pytest.raises(RsmoothError, match=f"looked in {cache}; data_dir, \\$RSMOOTH_DATA, \\$IMAGENET_DIR "
                                           f"not set\\).*\\$IMAGENET_DIR"):
        get_dataset("imagenet", "test")
    monkeypatch.setenv("IMAGENET_DIR", str(tmp_path / "inet"))
    monkeypatch.setenv("RSMOOTH_DATA", str(tmp_path / "env"))
    places = [tmp_path / "env" / "imagenet", tmp_path / "env", tmp_path / "inet", cache]
    with pytest.raises(RsmoothError) as e:
        get_dataset("imagenet", "test")
    assert f"(looked in {', '.join(map(str, places))}; data_dir not set); " in str(e.value)
    with pytest.raises(RsmoothError) as e:  # a data_dir given is searched alone
        get_dataset("imagenet", "test", data_dir=tmp_path / "d")
    assert f"(looked in {tmp_path / 'd' / 'imagenet'}, {tmp_path / 'd'}); " in str(e.value)


def test_imagenet_errors(tmp_path):
    with pytest.raises(RsmoothError, match="ImageNet not found .*<root>/imagenet/train/<wnid>"):
        get_dataset("imagenet", "train", data_dir=tmp_path)
    make_imagenet(tmp_path / "imagenet")
    (tmp_path / "imagenet" / "val" / "n04").mkdir()
    with pytest.raises(RsmoothError, match="different class folders"):
        get_dataset("imagenet", "test", data_dir=tmp_path)
    bad = tmp_path / "imagenet" / "train" / "n01" / "img9.JPEG"
    bad.write_bytes(b"not a jpeg")
    (tmp_path / "imagenet" / "val" / "n04").rmdir()
    train = get_dataset("imagenet", "train", data_dir=tmp_path)
    with pytest.raises(RsmoothError, match="cannot decode image .*img9.JPEG"):
        train[3]


# ----------------------------------------------------------------------------- fingerprints


def test_fingerprint_and_check(digits):
    train, test = digits
    fp = train.fingerprint()
    assert fp["name"] == "digits" and fp["split"] == "train" and fp["length"] == 1437
    assert fp["num_classes"] == 10 and len(fp["order"]) == 64
    check_fingerprint(fp, dict(fp), "targets file")
    other = {"name": "fashion-mnist", "split": "train", "length": 60000, "num_classes": 10, "order": "ab" * 32}
    with pytest.raises(RsmoothError, match=r"^targets file was made for fashion-mnist/train \(60000 examples\) "
                                           r"but the dataset is digits/train \(1437 examples\): name differs"):
        check_fingerprint(other, fp, "targets file")
    with pytest.raises(RsmoothError, match="split differs"):
        check_fingerprint(test.fingerprint() | {"name": "digits", "split": "test", "length": 1437}, fp, "x")
    # same everything but the label order
    shuffled = type(train)("train", train.images, train.targets.roll(1))
    with pytest.raises(RsmoothError, match="different labels or example order"):
        check_fingerprint(fp, shuffled.fingerprint(), "certify TSV")
    # same labels, different images
    altered = type(train)("train", train.images.flip(-1).contiguous(), train.targets)
    assert altered.fingerprint()["order"] != fp["order"]
    with pytest.raises(RsmoothError, match="no dataset 'order' recorded"):
        check_fingerprint({k: v for k, v in fp.items() if k != "order"}, fp, "old file")


# ----------------------------------------------------------------------------- subsets


def test_certify_indices():
    assert certify_indices(10) == list(range(10))
    assert certify_indices(10, skip=3) == [0, 3, 6, 9]
    assert certify_indices(10, skip=3, max=2) == [0, 3]
    assert certify_indices(10, skip=3, max=100) == [0, 3, 6, 9]
    assert certify_indices(0) == []
    cohen = certify_indices(10000, skip=20, max=500)  # Cohen et al.'s CIFAR-10 subset
    assert len(cohen) == 500 and cohen[-1] == 9980
    # max counts examples: skip 20, max 30 certifies 30 examples (the reference code, which
    # stops when the dataset index equals max, would never stop here)
    assert len(certify_indices(10000, skip=20, max=30)) == 30
    for bad in [dict(skip=0), dict(skip=-1), dict(max=0), dict(skip=1.5), dict(max=True)]:
        with pytest.raises(RsmoothError):
            certify_indices(10, **bad)
    with pytest.raises(RsmoothError):
        certify_indices(-1)


# ----------------------------------------------------------------------------- issue 37


def test_i37_a_data_dir_given_is_never_replaced_by_another_folder(tmp_path, monkeypatch, capsys):
    """The cache holds mnist; a data_dir named without it is searched alone: refused (naming where
    it looked) or downloaded into, never silently read from the cache."""
    from rsmooth.cli import main

    monkeypatch.setitem(mnist_mod.MIRRORS, "mnist", ["http://127.0.0.1:9/"])  # a download fails at once
    cache = tmp_path / "xdg-cache" / "rsmooth" / "data" / "mnist"
    write_mnist(cache, "test", 4, seed=0)
    with pytest.warns(DataIntegrityWarning):
        assert get_dataset("mnist", "test", download=False).source == str(cache)  # no data_dir: the cache
    empty = tmp_path / "empty"
    with pytest.raises(RsmoothError) as e:
        get_dataset("mnist", "test", data_dir=empty, download=False)
    assert f"(looked in {empty / 'mnist'}, {empty / 'MNIST' / 'raw'}); " in str(e.value) and "xdg-cache" not in str(e.value)
    assert main(["train", "--dataset", "mnist", "--data-dir", str(empty), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("rsmooth: error: could not download") and f"in {empty / 'mnist'}/" in err


def test_i37_digits_says_a_data_dir_is_not_used():
    with pytest.warns(UserWarning, match="digits ships with scikit-learn and is read from its copy; "
                                         "data_dir='/nowhere' is not used"):
        get_dataset("digits", "test", data_dir="/nowhere")
