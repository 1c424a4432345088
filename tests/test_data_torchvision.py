"""Datasets where torchvision put them (issue 20 item 8): ``ROOT/MNIST/raw``, ``ROOT/FashionMNIST/raw``,
``ROOT/cifar-10-batches-py``, ``ROOT/cifar-100-python``, under ``--data-dir``, ``$RSMOOTH_DATA`` or the
default data folder; small files in the real formats are written here and must read back equal."""
from __future__ import annotations

import gzip
import hashlib
import re
import warnings

import numpy as np
import pytest
import torch

from rsmooth.cli import main
from rsmooth.data import DataIntegrityWarning, get_dataset
from rsmooth.data import cifar as cifar_mod
from rsmooth.data import mnist as mnist_mod
from rsmooth.errors import RsmoothError

from test_data import cifar_records, idx_bytes, write_cifar_python, write_mnist

TV = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No user data roots, a private default data folder, no system folder, and no download."""
    monkeypatch.delenv("RSMOOTH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setitem(mnist_mod.SYSTEM_DIRS, "fashion-mnist", [])

    def no_download(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(mnist_mod, "download_file", no_download)
    monkeypatch.setattr(cifar_mod, "download_file", no_download)


def _load(name, split, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataIntegrityWarning)  # the test files are not the published ones
        return get_dataset(name, split, **kw)


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
@pytest.mark.parametrize("gz", [True, False])
def test_mnist_family_in_torchvisions_raw_folder(tmp_path, name, gz):
    raw = tmp_path / "tv" / TV[name] / "raw"
    for split, n in (("train", 7), ("test", 5)):
        images, labels = write_mnist(raw, split, n, seed=n, gz=gz)
        ds = _load(name, split, data_dir=tmp_path / "tv")  # downloading allowed: it must not be needed
        assert ds.source == str(raw) and len(ds) == n and ds.name == name
        np.testing.assert_array_equal(ds.images.squeeze(1).numpy(), images)
        np.testing.assert_array_equal(ds.targets.numpy(), labels)


def test_rsmooths_own_folder_comes_first_and_torchvisions_keeps_both_files(tmp_path):
    """torchvision leaves the .gz next to the extracted file; rsmooth's <root>/mnist/ wins."""
    root = tmp_path / "tv"
    raw = root / "MNIST" / "raw"
    images, labels = write_mnist(raw, "test", 4, seed=1, gz=False)
    for base in mnist_mod.SPLIT_FILES["test"]:  # a different .gz beside it: the extracted file is read
        (raw / f"{base}.gz").write_bytes(gzip.compress(idx_bytes(np.zeros((2, 28, 28) if "images" in base else 2,
                                                                          np.uint8))))
    ds = _load("mnist", "test", data_dir=root)
    np.testing.assert_array_equal(ds.targets.numpy(), labels)
    write_mnist(root / "mnist", "test", 3, seed=2)
    assert _load("mnist", "test", data_dir=root).source == str(root / "mnist")


def test_torchvision_folders_in_the_default_data_folder_and_env(tmp_path, monkeypatch):
    cache = tmp_path / "xdg-cache" / "rsmooth" / "data"
    _, labels = write_mnist(cache / "FashionMNIST" / "raw", "test", 6, seed=0)
    ds = _load("fashion-mnist", "test")
    assert ds.source == str(cache / "FashionMNIST" / "raw")
    np.testing.assert_array_equal(ds.targets.numpy(), labels)
    write_cifar_python(cache, "cifar100", per_file=2, archive=False)  # <cache>/cifar-100-python
    assert _load("cifar100", "test").source == str(cache / "cifar-100-python")
    env = tmp_path / "env"
    monkeypatch.setenv("RSMOOTH_DATA", str(env))
    write_mnist(env / "MNIST" / "raw", "test", 3, seed=0)
    assert _load("mnist", "test").source == str(env / "MNIST" / "raw")


def test_the_published_checksums_still_apply_in_torchvisions_folder(tmp_path, monkeypatch):
    raw = tmp_path / "tv" / "MNIST" / "raw"
    write_mnist(raw, "test", 4, seed=0, gz=False)
    # these files posing as Fashion-MNIST's published ones: in MNIST's folder they are an error
    fake = {b: mnist_mod.IdxFile("0" * 32, hashlib.md5((raw / b).read_bytes()).hexdigest(), 1)
            for b in mnist_mod.SPLIT_FILES["test"]}
    monkeypatch.setitem(mnist_mod.FILES, "fashion-mnist", fake)
    with pytest.raises(RsmoothError, match="is fashion-mnist's t10k-images-idx3-ubyte, not mnist's"):
        get_dataset("mnist", "test", data_dir=tmp_path / "tv")
    monkeypatch.setitem(mnist_mod.FILES, "mnist", fake)  # as MNIST's published files: read silently
    monkeypatch.setitem(mnist_mod.FILES, "fashion-mnist", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(get_dataset("mnist", "test", data_dir=tmp_path / "tv")) == 4


def test_not_found_names_every_folder_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("RSMOOTH_DATA", str(tmp_path / "env"))
    with pytest.raises(RsmoothError) as e:
        get_dataset("fashion-mnist", "train", download=False)
    cache = tmp_path / "xdg-cache" / "rsmooth" / "data"
    places = [tmp_path / "env" / "fashion-mnist", tmp_path / "env" / "FashionMNIST" / "raw",
              cache / "fashion-mnist", cache / "FashionMNIST" / "raw"]
    assert f"(looked in {', '.join(map(str, places))})" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(RsmoothError) as e:  # a data_dir given is searched alone
        get_dataset("fashion-mnist", "train", data_dir=tmp_path / "given", download=False)
    places = [tmp_path / "given" / "fashion-mnist", tmp_path / "given" / "FashionMNIST" / "raw"]
    assert f"(looked in {', '.join(map(str, places))})" in str(e.value)
    with pytest.raises(RsmoothError) as e:
        get_dataset("cifar10", "test", download=False)
    places = [tmp_path / "env" / "cifar10", tmp_path / "env", cache / "cifar10", cache]
    assert f"in {', '.join(map(str, places))})" in str(e.value) and "cifar-10-batches-py/" in str(e.value)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_python_batches_in_the_root_read_back_equal(tmp_path, name):
    write_cifar_python(tmp_path / "tv", name, per_file=3, archive=False)
    py, binary = cifar_mod.PYTHON_LAYOUTS[name], cifar_mod.LAYOUTS[name]
    seed = 0
    for split, files in py.files.items():
        xs, ys = [], []
        for _ in files:  # write_cifar_python draws one seed per file, in this order
            _, x, y = cifar_records(3, binary.label_bytes, binary.num_classes, seed)
            xs.append(x)
            ys.append(y)
            seed += 1
        ds = _load(name, split, data_dir=tmp_path / "tv")
        assert ds.source == str(tmp_path / "tv" / py.folder)
        np.testing.assert_array_equal(ds.images.numpy(), np.concatenate(xs))
        np.testing.assert_array_equal(ds.targets.numpy(), np.concatenate(ys))


def test_cifar_python_batches_are_checked_against_torchvisions_md5(tmp_path, monkeypatch):
    write_cifar_python(tmp_path, "cifar10", per_file=2, archive=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_dataset("cifar10", "test", data_dir=tmp_path)
    assert any(re.search(r"test_batch does not match the published test_batch \(MD5 [0-9a-f]{32}, "
                         r"expected 40351d587109b95175f43aff81a1287e\)", str(w.message)) for w in caught)
    actual = hashlib.md5((tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes()).hexdigest()
    layout = cifar_mod.PYTHON_LAYOUTS["cifar10"]
    monkeypatch.setitem(cifar_mod.PYTHON_LAYOUTS, "cifar10", cifar_mod.CifarPythonLayout(
        **{**layout.__dict__, "file_md5": {"test_batch": actual}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_dataset("cifar10", "test", data_dir=tmp_path)
    assert [str(w.message) for w in caught if "published" in str(w.message)] == []
    assert any("the official split has 10000" in str(w.message) for w in caught)  # 2 images, not 10,000


def test_cli_trains_on_mnist_copied_to_torchvisions_folder(tmp_path):
    """The issue's report: MNIST copied to tv/MNIST/raw gave a download error."""
    raw = tmp_path / "tv" / "MNIST" / "raw"
    write_mnist(raw, "train", 16, seed=0)
    write_mnist(raw, "test", 8, seed=1)
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataIntegrityWarning)
        assert main(["train", "--dataset", "mnist", "--data-dir", str(tmp_path / "tv"), "--epochs", "1",
                     "--batch-size", "8", "--out", str(out)]) == 0
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ck["dataset"] == "mnist" and ck["epoch"] == 1
