"""The published corrupted datasets (cifar10-c, cifar100-c, mnist-c) on small fixture archives in
the official layouts, built here and served from 127.0.0.1; the layouts' URLs and checksums are
monkeypatched to point at them.

In fixture image ``i`` of corruption number ``k`` at severity ``s``, pixels (0, 0), (0, 1), (0, 2) of
channel 0 hold ``k``, ``s``, ``i``; every other row and the label are those of clean example ``i``,
so a wrong block, order or label shows.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import shutil
import tarfile
import warnings
import zipfile
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch

from test_data_download import _isolated_roots, _QuietHandler, no_temp_files, server  # noqa: F401  (fixtures)

from rsmooth.corruptions import BENCHMARK, HELD_OUT
from rsmooth.data import DATASETS, DataIntegrityWarning, dataset_info, get_dataset
from rsmooth.data import corrupted as corrupted_mod
from rsmooth.errors import RsmoothError

PER = 4  # images per severity
CIFAR = {"cifar10-c": ("CIFAR-10-C", 10), "cifar100-c": ("CIFAR-100-C", 100)}


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@dataclasses.dataclass
class Release:
    """A fixture release: ``files`` (path in the archive -> bytes), the archive's bytes, the clean set."""

    name: str
    files: Dict[str, bytes]
    archive: bytes
    clean_images: np.ndarray  # [N, H, W, C]
    clean_labels: np.ndarray

    @property
    def layout(self) -> corrupted_mod.CorruptedLayout:
        return corrupted_mod.LAYOUTS[self.name]

    def write_archive(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.layout.archive
        path.write_bytes(self.archive)
        return path

    def extract(self, root: Path) -> None:
        for rel, data in self.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)


def corrupted_copy(clean: np.ndarray, k: int, s: int) -> np.ndarray:
    """``clean`` [N, H, W, C] with (k, s, i) written into row 0 of channel 0."""
    x = clean.copy()
    x[:, 0, :3, 0] = np.stack([np.full(len(x), k), np.full(len(x), s), np.arange(len(x))], axis=1)
    return x


def check_codes(ds, k: int, s: int, rel: Release) -> None:
    """``ds`` is corruption ``k`` at severity ``s`` of ``rel``'s clean set, example by example."""
    n = len(rel.clean_labels)
    np.testing.assert_array_equal(ds.images[:, 0, 0, :3].numpy(), np.stack(
        [np.full(n, k), np.full(n, s), np.arange(n)], axis=1))
    np.testing.assert_array_equal(ds.images.permute(0, 2, 3, 1)[:, 1:].numpy(), rel.clean_images[:, 1:])
    np.testing.assert_array_equal(ds.targets.numpy(), rel.clean_labels)


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def cifar_release(name: str, seed: int = 0, per: int = PER) -> Release:
    folder, classes = CIFAR[name]
    rng = np.random.default_rng(seed)
    clean = rng.integers(0, 256, (per, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, classes, per).astype(np.uint8)
    files = {f"{folder}/labels.npy": npy(np.tile(labels, 5))}  # the same labels in every severity block
    for k, c in enumerate(("fog", "snow", "frost")):
        files[f"{folder}/{c}.npy"] = npy(np.concatenate([corrupted_copy(clean, k, s) for s in range(1, 6)]))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:  # uncompressed, as published
        tar.addfile(_dir(folder))
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return Release(name, files, buf.getvalue(), clean, labels)


def mnist_release(seed: int = 0, per: int = PER) -> Release:
    rng = np.random.default_rng(seed)
    files, clean = {}, {}
    for split, n in (("train", 2 * per), ("test", per)):
        clean[split] = (rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, n).astype(np.uint8))
        for k, c in enumerate(("fog", "identity", "zigzag")):
            files[f"mnist_c/{c}/{split}_images.npy"] = npy(corrupted_copy(clean[split][0], k, 0))
            files[f"mnist_c/{c}/{split}_labels.npy"] = npy(clean[split][1])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in files.items():
            z.writestr(rel, data)
    return Release("mnist-c", files, buf.getvalue(), *clean["test"])


def release(name: str, seed: int = 0, per: int = PER) -> Release:
    return mnist_release(seed, per) if name == "mnist-c" else cifar_release(name, seed, per)


def publish(monkeypatch, rel: Release, urls=("http://127.0.0.1:9/never",), counts=None) -> None:
    """Make ``rel`` the published release: its checksums, the given mirrors, its example counts."""
    top = rel.layout.folder + "/"
    md5s = {} if rel.name == "mnist-c" else {
        p[len(top):-len(".npy")]: md5(d) for p, d in rel.files.items()}
    counts = counts or {s: len(rel.clean_labels) * (2 if s == "train" else 1) for s in rel.layout.counts}
    monkeypatch.setitem(corrupted_mod.LAYOUTS, rel.name, dataclasses.replace(
        rel.layout, urls=tuple(urls), archive_md5=md5(rel.archive), size=len(rel.archive), md5=md5s, counts=counts))


def load(name: str, data_dir, corruption="fog", severity=None, **kw):
    severity = severity if severity is not None or name == "mnist-c" else 1
    return get_dataset(name, kw.pop("split", "test"), data_dir=data_dir, corruption=corruption, severity=severity, **kw)


@pytest.fixture
def strict():
    """Any warning is an error (the published files are recognised as such)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ----------------------------------------------------------------------------- registry


def test_registered_with_the_clean_datasets_info():
    for name, clean in (("cifar10-c", "cifar10"), ("cifar100-c", "cifar100"), ("mnist-c", "mnist")):
        cls = DATASETS.get(name)
        assert cls.clean == clean
        assert dataset_info(name) == dataclasses.replace(dataset_info(clean), name=name)
    for name in ("cifar10-c", "cifar100-c"):
        cls = DATASETS.get(name)
        assert cls.published_corruptions == BENCHMARK["cifar10-c"] + HELD_OUT["cifar10-c"]
        assert len(cls.published_corruptions) == 19 and cls.severities == (1, 2, 3, 4, 5)
        assert set(cls.published_corruptions) | {"labels"} == set(corrupted_mod.LAYOUTS[name].md5)
    mnist_c = DATASETS.get("mnist-c")
    assert mnist_c.published_corruptions == BENCHMARK["mnist-c"] + ("identity",) and mnist_c.severities == ()


# ----------------------------------------------------------------------------- downloads


def test_cifar_c_download_then_read_in_place(server, tmp_path, monkeypatch, capsys, strict):
    base, www = server
    rel = cifar_release("cifar10-c")
    rel.write_archive(www)
    publish(monkeypatch, rel, urls=(f"{base}/gone.tar", f"{base}/CIFAR-10-C.tar"))
    ds = load("cifar10-c", tmp_path / "data", severity=2)
    folder = tmp_path / "data" / "cifar10-c"
    assert [p.name for p in folder.iterdir()] == ["CIFAR-10-C.tar"]  # nothing extracted
    assert (folder / "CIFAR-10-C.tar").read_bytes() == rel.archive
    err = capsys.readouterr().err
    assert "fetching CIFAR-10-C.tar (all corruptions, " in err and str(folder) in err
    assert ds.source == f"{folder / 'CIFAR-10-C.tar'}:CIFAR-10-C/fog.npy rows {PER}-{2 * PER - 1}"
    assert ds.corruption == {"name": "fog", "severity": 2, "source": "published"}
    np.testing.assert_array_equal(ds.targets.numpy(), rel.clean_labels)
    # later loads (another severity, another corruption) read the archive: no new request
    n = len(_QuietHandler.requests)
    assert load("cifar10-c", tmp_path / "data", "snow", severity=5).corruption["severity"] == 5
    assert _QuietHandler.requests[n:] == [] and _QuietHandler.requests == ["/gone.tar", "/CIFAR-10-C.tar"]


def test_mnist_c_download(server, tmp_path, monkeypatch, strict):
    base, www = server
    rel = mnist_release()
    rel.write_archive(www)
    publish(monkeypatch, rel, urls=(f"{base}/mnist_c.zip",))
    monkeypatch.setenv("RSMOOTH_DATA", str(tmp_path / "env"))
    ds = load("mnist-c", None, "zigzag")  # no data_dir: into $RSMOOTH_DATA
    assert (tmp_path / "env" / "mnist-c" / "mnist_c.zip").read_bytes() == rel.archive
    assert ds.corruption == {"name": "zigzag", "severity": None, "source": "published"}
    assert ds.input_shape == (1, 28, 28) and ds.images.dtype == torch.uint8
    np.testing.assert_array_equal(ds.targets.numpy(), rel.clean_labels)
    train = load("mnist-c", None, "identity", split="train")
    assert len(train) == 2 * PER and _QuietHandler.requests == ["/mnist_c.zip"]


@pytest.mark.parametrize("name", ["cifar10-c", "mnist-c"])
def test_download_with_the_wrong_checksum_is_refused(server, tmp_path, monkeypatch, name):
    base, www = server
    rel = release(name)
    publish(monkeypatch, rel, urls=(f"{base}/{rel.layout.archive}",))
    www.joinpath(rel.layout.archive).write_bytes(rel.archive[:-1] + b"?")  # the server sends other bytes
    with pytest.raises(RsmoothError) as e:
        load(name, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "checksum mismatch" in msg and f"expected {md5(rel.archive)}" in msg
    assert f"to install {name} by hand, download {base}/{rel.layout.archive}" in msg
    folder = tmp_path / name
    assert not (folder / rel.layout.archive).exists() and no_temp_files(folder)


def test_no_download_without_the_disk_space(server, tmp_path, monkeypatch):
    base, www = server
    rel = cifar_release("cifar10-c")
    rel.write_archive(www)
    publish(monkeypatch, rel, urls=(f"{base}/CIFAR-10-C.tar",))
    monkeypatch.setattr(corrupted_mod.shutil, "disk_usage", lambda p: dataclasses.make_dataclass(
        "Usage", ["total", "used", "free"])(10**9, 10**9, 100))
    with pytest.raises(RsmoothError, match=r"has 0.1 KB free but CIFAR-10-C.tar needs .*; free some space"):
        load("cifar10-c", tmp_path)
    assert _QuietHandler.requests == []


# ----------------------------------------------------------------------------- reading


@pytest.mark.parametrize("name", ["cifar10-c", "cifar100-c", "mnist-c"])
def test_archive_read_in_place_equals_the_extracted_folder(tmp_path, monkeypatch, strict, name):
    rel = release(name)
    publish(monkeypatch, rel)
    rel.write_archive(tmp_path / "a" / name)
    rel.extract(tmp_path / "b")  # <root>/CIFAR-10-C/..., where `tar -xf` puts it
    for corruption in ("fog", "zigzag" if name == "mnist-c" else "frost"):
        a = load(name, tmp_path / "a", corruption, severity=None if name == "mnist-c" else 3, download=False)
        b = load(name, tmp_path / "b", corruption, severity=None if name == "mnist-c" else 3, download=False)
        assert a.source.startswith(str(tmp_path / "a" / name / rel.layout.archive))
        assert b.source.startswith(str(tmp_path / "b" / rel.layout.folder))
        assert torch.equal(a.images, b.images) and torch.equal(a.targets, b.targets)
        assert a.fingerprint() == b.fingerprint()


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_cifar_c_selects_the_corruption_and_severity_block(tmp_path, monkeypatch, strict, severity):
    rel = cifar_release("cifar100-c", per=6)
    publish(monkeypatch, rel)
    rel.write_archive(tmp_path / "cifar100-c")
    for k, c in enumerate(("fog", "snow", "frost")):
        ds = load("cifar100-c", tmp_path, c, severity=severity, download=False)
        assert ds.images.shape == (6, 3, 32, 32) and ds.images.dtype == torch.uint8
        check_codes(ds, k, severity, rel)
        x, y = ds.get_batch(torch.tensor([5, 0]))
        assert torch.equal(x, ds.images[[5, 0]].float() / 255) and y.tolist() == rel.clean_labels[[5, 0]].tolist()


def test_cifar_c_labels_come_from_the_same_rows(tmp_path, monkeypatch, strict):
    """The published labels repeat in every block; read them from the block of the images all the same."""
    rel = cifar_release("cifar10-c")
    blocks = np.stack([(rel.clean_labels + s) % 10 for s in range(5)]).astype(np.uint8)
    rel.files["CIFAR-10-C/labels.npy"] = npy(blocks.reshape(-1))
    publish(monkeypatch, rel)
    rel.extract(tmp_path)
    for s in (1, 4):
        ds = load("cifar10-c", tmp_path, "snow", s, download=False)
        np.testing.assert_array_equal(ds.targets.numpy(), blocks[s - 1])


def test_mnist_c_splits_and_row_order(tmp_path, monkeypatch, strict):
    rel = mnist_release(per=5)
    publish(monkeypatch, rel)
    rel.write_archive(tmp_path)  # the archive in the root itself
    for k, c in enumerate(("fog", "identity", "zigzag")):
        check_codes(load("mnist-c", tmp_path, c, download=False), k, 0, rel)
    train = load("mnist-c", tmp_path, "zigzag", split="train", download=False)
    assert len(train) == 10 and train.split == "train" and train.source.endswith("mnist_c/zigzag/train_images.npy")
    np.testing.assert_array_equal(train.images[:, 0, 0, 2].numpy(), np.arange(10))


def test_fingerprints_differ_across_severities_and_corruptions(tmp_path, monkeypatch, strict):
    rel = cifar_release("cifar10-c")
    publish(monkeypatch, rel)
    rel.extract(tmp_path / "cifar10-c")
    fps = {(c, s): load("cifar10-c", tmp_path, c, s, download=False).fingerprint()
           for c in ("fog", "snow") for s in (2, 3)}
    assert len({fp["order"] for fp in fps.values()}) == 4  # the image digest is of the rows used
    assert fps["fog", 2]["corruption"] == {"name": "fog", "severity": 2, "source": "published"}
    assert fps["fog", 2]["name"] == "cifar10-c" and fps["fog", 2]["length"] == PER
    assert load("cifar10-c", tmp_path, "fog", 3, download=False).fingerprint() == fps["fog", 3]


def test_search_order(tmp_path, monkeypatch, strict):
    """data_dir (<root>/<name>/ or <root>) alone when given; else $RSMOOTH_DATA, then the cache; never a download."""
    rel = cifar_release("cifar10-c")
    publish(monkeypatch, rel, counts={"test": 10000})
    monkeypatch.setenv("RSMOOTH_DATA", str(tmp_path / "env"))
    cache = tmp_path / "xdg-cache" / "rsmooth" / "data" / "cifar10-c"
    places = [tmp_path / "arg" / "cifar10-c", tmp_path / "arg", tmp_path / "env" / "cifar10-c", tmp_path / "env", cache]
    for i, place in enumerate(places):
        (rel.write_archive(place) if i % 2 else rel.extract(place))
    for i, place in enumerate(places):
        with pytest.warns(DataIntegrityWarning, match=f"has {PER} images per severity, the official set has 10000"):
            ds = load("cifar10-c", tmp_path / "arg" if i < 2 else None, download=False)
        assert ds.source.startswith(str(place / rel.layout.folder))
        for p in [place / rel.layout.archive, place / rel.layout.folder]:
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()


def test_files_directly_in_the_dataset_folder(tmp_path, monkeypatch, strict):
    rel = cifar_release("cifar10-c")
    publish(monkeypatch, rel)
    rel.extract(tmp_path / "x")
    (tmp_path / "x" / "CIFAR-10-C").rename(tmp_path / "cifar10-c")  # <root>/cifar10-c/fog.npy
    assert load("cifar10-c", tmp_path, download=False).source.startswith(str(tmp_path / "cifar10-c" / "fog.npy"))


# ----------------------------------------------------------------------------- local files that differ


def test_a_local_file_that_differs_warns_and_is_read(tmp_path, monkeypatch):
    rel = cifar_release("cifar10-c")
    publish(monkeypatch, rel)
    rel.extract(tmp_path)
    path = tmp_path / "CIFAR-10-C" / "snow.npy"
    data = np.load(path)
    data[0, 5, 5, 0] ^= 1
    np.save(path, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load("cifar10-c", tmp_path, "fog", download=False)  # only the files read are checked
    with pytest.warns(DataIntegrityWarning, match=r"snow.npy does not match the published cifar10-c file snow.npy"):
        ds = load("cifar10-c", tmp_path, "snow", download=False)
    assert int(ds.images[0, 0, 5, 5]) == int(data[0, 5, 5, 0])


def test_a_local_mnist_c_archive_that_differs_warns(tmp_path, monkeypatch):
    rel = mnist_release()
    publish(monkeypatch, rel)
    monkeypatch.setitem(corrupted_mod.LAYOUTS, "mnist-c",
                        dataclasses.replace(corrupted_mod.LAYOUTS["mnist-c"], archive_md5="0" * 32))
    rel.write_archive(tmp_path / "mnist-c")
    with pytest.warns(DataIntegrityWarning, match="mnist_c.zip does not match the published mnist_c.zip"):
        load("mnist-c", tmp_path, download=False)


def test_corrupt_files_are_one_line_errors(tmp_path, monkeypatch):
    rel = cifar_release("cifar10-c")
    publish(monkeypatch, rel)
    rel.extract(tmp_path)
    fog = tmp_path / "CIFAR-10-C" / "fog.npy"
    fog.write_bytes(fog.read_bytes()[:-10])
    with pytest.warns(DataIntegrityWarning), pytest.raises(RsmoothError, match=r"fog.npy is corrupt or truncated"):
        load("cifar10-c", tmp_path, download=False)
    np.save(fog, np.zeros((5 * PER, 32, 32), np.uint8))
    with pytest.warns(DataIntegrityWarning), pytest.raises(RsmoothError, match=r"holds uint8 data of shape "
                                                                               r"\(20, 32, 32\); cifar10-c images"):
        load("cifar10-c", tmp_path, download=False)
    np.save(fog, np.zeros((5 * PER + 1, 32, 32, 3), np.uint8))
    with pytest.warns(DataIntegrityWarning), pytest.raises(RsmoothError, match="has 21 images but .* has 20 labels"):
        load("cifar10-c", tmp_path, download=False)
    (tmp_path / "CIFAR-10-C").rename(tmp_path / "elsewhere")
    (tmp_path / "CIFAR-10-C.tar").write_bytes(b"not a tar")
    with pytest.raises(RsmoothError, match="is not a readable uncompressed tar archive"):
        load("cifar10-c", tmp_path, download=False)
    (tmp_path / "CIFAR-10-C.tar").write_bytes(cifar_release("cifar100-c").archive)
    with pytest.raises(RsmoothError, match=r"lacks CIFAR-10-C/fog.npy, CIFAR-10-C/labels.npy; is it the official"):
        load("cifar10-c", tmp_path, download=False)


# ----------------------------------------------------------------------------- choices


@pytest.mark.parametrize("name,kw,match", [
    ("cifar10-c", {}, r"cifar10-c needs a corruption \(--corruption NAME, one of gaussian_noise, .*saturate\) "
                      r"and a severity \(--severity 1-5\)$"),
    ("mnist-c", {}, r"mnist-c needs a corruption \(--corruption NAME, one of shot_noise, .*, identity\)$"),
    ("cifar10-c", {"corruption": "stripe", "severity": 1}, "unknown corruption 'stripe' for cifar10-c; choose one of: "
                                                           "gaussian_noise, shot_noise"),
    ("cifar10-c", {"corruption": "fog"}, r"cifar10-c needs a severity \(--severity 1-5\) for fog"),
    ("cifar100-c", {"corruption": "fog", "severity": 6}, "cifar100-c has severities 1, 2, 3, 4, 5, not 6"),
    ("mnist-c", {"corruption": "fog", "severity": 1}, "mnist-c has one published level per corruption; drop --severity"),
    ("mnist-c", {"corruption": "frost"}, "unknown corruption 'frost' for mnist-c"),
])
def test_bad_choices(tmp_path, name, kw, match):
    with pytest.raises(RsmoothError, match=match) as e:
        get_dataset(name, "test", data_dir=tmp_path, **kw)
    assert "\n" not in str(e.value)


def test_cifar_c_has_only_a_test_split(tmp_path):
    with pytest.raises(RsmoothError, match=r"cifar10-c has only a test split .*; train on cifar10"):
        get_dataset("cifar10-c", "train", data_dir=tmp_path, corruption="fog", severity=1)


def test_not_found_names_every_place_and_the_manual_download(tmp_path, monkeypatch):
    monkeypatch.setenv("RSMOOTH_DATA", str(tmp_path / "env"))
    with pytest.raises(RsmoothError) as e:
        load("mnist-c", None, "fog", download=False)
    places = [tmp_path / "env" / "mnist-c", tmp_path / "env", tmp_path / "xdg-cache" / "rsmooth" / "data" / "mnist-c"]
    assert f"in {', '.join(map(str, places))}); " in str(e.value)
    with pytest.raises(RsmoothError) as e:  # a data_dir given is searched alone
        load("mnist-c", tmp_path / "arg", "fog", download=False)
    msg = str(e.value)
    assert msg.startswith("mnist-c/test not found (looked for mnist_c/fog/test_images.npy and test_labels.npy, "
                          f"or mnist_c.zip, in {tmp_path / 'arg' / 'mnist-c'}, {tmp_path / 'arg'}); ")
    assert msg.endswith("allow downloading or download https://zenodo.org/records/3239543/files/mnist_c.zip?download=1 "
                        f"(MD5 4b34b33045869ee6d424616cd3a65da3) to {tmp_path / 'arg' / 'mnist-c' / 'mnist_c.zip'}")


# ----------------------------------------------------------------------------- certify


def test_certify_a_public_checkpoint_on_published_corruptions(tmp_path, monkeypatch, capsys, strict):
    """'rsmooth certify --dataset mnist-c --corruption fog,zigzag' writes one TSV per corruption."""
    from rsmooth.cli import main
    from rsmooth.metrics import read_certify_tsv, read_sidecar
    from rsmooth.models import create_model

    rel = release("mnist-c")
    publish(monkeypatch, rel)
    rel.write_archive(tmp_path / "data" / "mnist-c")
    torch.manual_seed(0)
    ckpt = tmp_path / "lenet.pth"
    torch.save({"arch": "lenet", "state_dict": create_model("lenet", "mnist").state_dict()}, ckpt)
    folder = tmp_path / "out"
    assert main(["certify", "--checkpoint", str(ckpt), "--dataset", "mnist-c", "--sigma", "0.25",
                 "--corruption", "fog,zigzag", "--n0", "10", "--n", "50", "--data-dir", str(tmp_path / "data"),
                 "--out", str(folder)]) == 0
    for name in ("fog", "zigzag"):
        meta = read_sidecar(folder / f"{name}.tsv")
        assert meta["dataset"] == "mnist-c"
        assert meta["corruption"] == {"name": name, "severity": None, "source": "published"}
        res = read_certify_tsv(folder / f"{name}.tsv")
        assert res.idx.tolist() == list(range(PER)) and res.label.tolist() == rel.clean_labels.tolist()
    with pytest.raises(RsmoothError, match="unknown corruption 'rotate90' for mnist-c"):
        main(["certify", "--checkpoint", str(ckpt), "--dataset", "mnist-c", "--sigma", "0.25", "--debug",
              "--corruption", "rotate90", "--out", str(folder)])
