"""Downloads and the data search order, against a real HTTP server on 127.0.0.1.

The server serves small generated IDX ``.gz`` files (and a small CIFAR archive); the
mirror URLs and published checksums are monkeypatched to point at it.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import struct
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from rsmooth.data import DataIntegrityWarning, download_file, get_dataset
from rsmooth.data import cifar as cifar_mod
from rsmooth.data import mnist as mnist_mod
from rsmooth.errors import RsmoothError
from rsmooth.fileio import umask


@pytest.fixture(autouse=True)
def _isolated_roots(monkeypatch, tmp_path):
    monkeypatch.delenv("RSMOOTH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        _QuietHandler.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """(base_url, served_folder): an HTTP server on an ephemeral port."""
    root = tmp_path / "www"
    root.mkdir()
    _QuietHandler.requests = []
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    finally:
        httpd.shutdown()
        httpd.server_close()


def idx_gz(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes(), mtime=0)


def publish_mnist(folder: Path, n: int, seed: int) -> tuple:
    """Write the four .gz files of a tiny MNIST-format release; return (FILES entry, arrays)."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n // 2, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n // 2, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for base, arr in arrays.items():
        data = idx_gz(arr)
        (folder / f"{base}.gz").write_bytes(data)
        files[base] = mnist_mod.IdxFile(
            hashlib.md5(data).hexdigest(), hashlib.md5(gzip.decompress(data)).hexdigest(), len(data)
        )
    return files, arrays


def no_temp_files(folder: Path) -> bool:
    return not folder.exists() or not any(p.name.endswith(".part") for p in folder.iterdir())


# ----------------------------------------------------------------------------- download_file


def test_download_success(server, tmp_path, capsys):
    base, www = server
    payload = bytes(range(256)) * 1000
    (www / "blob.bin").write_bytes(payload)
    dest = tmp_path / "out" / "sub" / "blob.bin"
    got = download_file(f"{base}/blob.bin", dest, hashlib.md5(payload).hexdigest())
    assert got == dest and dest.read_bytes() == payload and no_temp_files(dest.parent)
    assert dest.stat().st_mode & 0o777 == 0o666 & ~umask()  # not mkstemp's 0600
    err = capsys.readouterr().err
    assert f"{base}/blob.bin" in err and str(dest) in err and "250.0 KB" in err
    # already there with the right checksum: nothing is fetched
    n = len(_QuietHandler.requests)
    download_file(["http://127.0.0.1:9/never"], dest, hashlib.md5(payload).hexdigest())
    assert len(_QuietHandler.requests) == n


def test_download_progress_only_on_tty(server, tmp_path, monkeypatch):
    base, www = server
    (www / "blob.bin").write_bytes(b"x" * 5000)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    fake = Tty()
    monkeypatch.setattr("sys.stderr", fake)
    download_file(f"{base}/blob.bin", tmp_path / "a.bin", hashlib.md5(b"x" * 5000).hexdigest())
    assert "\r" in fake.getvalue() and "100%" in fake.getvalue()  # the shared bar (rsmooth.progress)
    plain = io.StringIO()
    monkeypatch.setattr("sys.stderr", plain)
    download_file(f"{base}/blob.bin", tmp_path / "b.bin", hashlib.md5(b"x" * 5000).hexdigest())
    assert "\r" not in plain.getvalue() and "downloading" in plain.getvalue()


def test_download_checksum_mismatch_leaves_nothing(server, tmp_path):
    base, www = server
    (www / "blob.bin").write_bytes(b"tampered" * 100)
    dest = tmp_path / "out" / "blob.bin"
    with pytest.raises(RsmoothError, match="checksum mismatch .*expected 0123"):
        download_file([f"{base}/blob.bin", f"{base}/never-tried"], dest, "0123" + "0" * 28)
    assert not dest.exists() and no_temp_files(dest.parent)
    assert _QuietHandler.requests == ["/blob.bin"]  # a bad checksum is not retried elsewhere


def test_download_falls_back_to_next_mirror(server, tmp_path, capsys):
    base, www = server
    (www / "m2").mkdir()
    (www / "m2" / "f.gz").write_bytes(b"payload")
    dest = tmp_path / "f.gz"
    download_file([f"{base}/m1/f.gz", f"{base}/m2/f.gz"], dest, hashlib.md5(b"payload").hexdigest(), size_hint=7)
    assert dest.read_bytes() == b"payload"
    assert _QuietHandler.requests == ["/m1/f.gz", "/m2/f.gz"]
    assert "HTTP 404" in capsys.readouterr().err


def test_download_all_mirrors_fail(server, tmp_path):
    base, _ = server
    with pytest.raises(RsmoothError, match=r"could not download f.gz from any mirror .*HTTP 404.*127\.0\.0\.1:9"):
        download_file([f"{base}/nope/f.gz", "http://127.0.0.1:9/f.gz"], tmp_path / "f.gz", "0" * 32)
    assert not (tmp_path / "f.gz").exists() and no_temp_files(tmp_path)


# ----------------------------------------------------------------------------- MNIST download


def test_mnist_download_from_mirrors(server, tmp_path, monkeypatch):
    base, www = server
    files, arrays = publish_mnist(www / "mirror2", 20, seed=0)
    monkeypatch.setitem(mnist_mod.FILES, "mnist", files)
    monkeypatch.setitem(mnist_mod.MIRRORS, "mnist", [f"{base}/mirror1/", f"{base}/mirror2/"])
    env_root = tmp_path / "env"
    monkeypatch.setenv("RSMOOTH_DATA", str(env_root))
    data_dir = tmp_path / "data"
    ds = get_dataset("mnist", "test", data_dir=data_dir)  # downloads into data_dir, not $RSMOOTH_DATA
    assert sorted(p.name for p in (data_dir / "mnist").iterdir()) == [
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    assert not env_root.exists()
    np.testing.assert_array_equal(ds.targets.numpy(), arrays["t10k-labels-idx1-ubyte"])
    np.testing.assert_array_equal(ds.images[:, 0].numpy(), arrays["t10k-images-idx3-ubyte"])
    # second load finds the files: no new requests
    n = len(_QuietHandler.requests)
    again = get_dataset("mnist", "test", data_dir=data_dir)
    assert len(_QuietHandler.requests) == n and again.fingerprint() == ds.fingerprint()
    # without data_dir the download goes to $RSMOOTH_DATA; without either, to the cache
    get_dataset("mnist", "train")
    assert (env_root / "mnist" / "train-images-idx3-ubyte.gz").is_file()
    monkeypatch.delenv("RSMOOTH_DATA")
    get_dataset("mnist", "train")
    assert (tmp_path / "xdg-cache" / "rsmooth" / "data" / "mnist" / "train-labels-idx1-ubyte.gz").is_file()


def test_mnist_download_checksum_mismatch(server, tmp_path, monkeypatch):
    base, www = server
    files, _ = publish_mnist(www, 10, seed=0)
    bad = dict(files)
    bad["t10k-images-idx3-ubyte"] = mnist_mod.IdxFile("f" * 32, "f" * 32, 1)
    monkeypatch.setitem(mnist_mod.FILES, "mnist", bad)
    monkeypatch.setitem(mnist_mod.MIRRORS, "mnist", [f"{base}/"])
    with pytest.raises(RsmoothError, match="checksum mismatch"):
        get_dataset("mnist", "test", data_dir=tmp_path / "data")
    folder = tmp_path / "data" / "mnist"
    assert not (folder / "t10k-images-idx3-ubyte.gz").exists() and no_temp_files(folder)


def test_mnist_download_failure_says_where_to_put_files(server, tmp_path, monkeypatch):
    base, _ = server
    monkeypatch.setitem(mnist_mod.MIRRORS, "fashion-mnist", [f"{base}/gone/"])
    monkeypatch.setitem(mnist_mod.SYSTEM_DIRS, "fashion-mnist", [])
    target = tmp_path / "data" / "fashion-mnist"
    with pytest.raises(RsmoothError, match=rf"HTTP 404.*to install fashion-mnist by hand, place "
                                           rf"train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz .* in {target}/"):
        get_dataset("fashion-mnist", "train", data_dir=tmp_path / "data")


def test_fashion_mnist_search_order(tmp_path, monkeypatch):
    """data_dir alone when given; else $RSMOOTH_DATA, then Debian's folder, then the cache; never a download."""
    monkeypatch.setitem(mnist_mod.MIRRORS, "fashion-mnist", ["http://127.0.0.1:9/"])
    roots = {k: tmp_path / k for k in ("arg", "env", "debian", "cache")}
    published = {}
    published["arg"], _ = publish_mnist(roots["arg"] / "fashion-mnist", 8, seed=1)
    published["env"], _ = publish_mnist(roots["env"] / "fashion-mnist", 10, seed=2)
    published["debian"], _ = publish_mnist(roots["debian"], 12, seed=3)  # files directly inside
    published["cache"], _ = publish_mnist(tmp_path / "xdg-cache" / "rsmooth" / "data" / "fashion-mnist", 14, seed=4)
    monkeypatch.setitem(mnist_mod.SYSTEM_DIRS, "fashion-mnist", [roots["debian"]])
    monkeypatch.setenv("RSMOOTH_DATA", str(roots["env"]))

    def load(data_dir=None):
        with pytest.warns(DataIntegrityWarning):
            return get_dataset("fashion-mnist", "train", data_dir=data_dir, download=False)

    assert len(load(roots["arg"])) == 8
    for base in mnist_mod.SPLIT_FILES["train"]:
        (roots["arg"] / "fashion-mnist" / f"{base}.gz").unlink()
    with pytest.raises(RsmoothError, match=f"not found \\(looked in {roots['arg'] / 'fashion-mnist'}, "
                                           f"{roots['arg'] / 'FashionMNIST' / 'raw'}\\)"):
        get_dataset("fashion-mnist", "train", data_dir=roots["arg"], download=False)
    assert len(load()) == 10
    (roots["env"] / "fashion-mnist" / "train-labels-idx1-ubyte.gz").unlink()  # incomplete: skipped
    ds = load()
    assert len(ds) == 12 and ds.source == str(roots["debian"])
    monkeypatch.setitem(mnist_mod.SYSTEM_DIRS, "fashion-mnist", [])
    assert len(load()) == 14
    # with the published checksums patched in, no warning: the files are recognised
    monkeypatch.setitem(mnist_mod.FILES, "fashion-mnist", published["cache"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(get_dataset("fashion-mnist", "train", download=False)) == 14


# ----------------------------------------------------------------------------- CIFAR download


def test_cifar_download(server, tmp_path, monkeypatch):
    base, www = server
    layout = cifar_mod.LAYOUTS["cifar10"]
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 4, dtype=np.uint8)
    images = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
    test_raw = b"".join(bytes([int(l)]) + img.tobytes() for l, img in zip(labels, images))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in layout.files["train"] + layout.files["test"]:
            raw = test_raw if name == "test_batch.bin" else test_raw[: 3073 * 2]
            info = tarfile.TarInfo(f"{layout.folder}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    archive = buf.getvalue()
    (www / layout.archive).write_bytes(archive)
    monkeypatch.setitem(
        cifar_mod.LAYOUTS, "cifar10",
        cifar_mod.CifarLayout(**{**layout.__dict__, "urls": (f"{base}/missing.tar.gz", f"{base}/{layout.archive}"),
                                 "md5": hashlib.md5(archive).hexdigest(), "size": len(archive)}),
    )
    with pytest.warns(DataIntegrityWarning, match="has 4 images, the official split has 10000"):
        ds = get_dataset("cifar10", "test", data_dir=tmp_path)
    assert (tmp_path / "cifar10" / layout.archive).read_bytes() == archive
    np.testing.assert_array_equal(ds.targets.numpy(), labels)
    assert torch.equal(ds.images.reshape(4, -1), torch.from_numpy(images))
    with pytest.warns(DataIntegrityWarning):
        train = get_dataset("cifar10", "train", data_dir=tmp_path)
    assert len(train) == 10 and _QuietHandler.requests.count(f"/{layout.archive}") == 1
