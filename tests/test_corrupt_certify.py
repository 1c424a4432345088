"""Certifying corrupted test sets: generated copies, the plan of files, resume, shards, merge."""
import json

import numpy as np
import pytest
import torch

from rsmooth.cli import main
from rsmooth.corruptions import SUITES, Corruption
from rsmooth.data import get_dataset
from rsmooth.engine import TrainConfig, corruption_plan, train
from rsmooth.errors import RsmoothError
from rsmooth.metrics import read_certify_tsv, read_sidecar

QUIET = dict(progress=False, log=lambda s: None)


def _noisy(x, severity, rng):
    """A test corruption: noise of std 0.1 * severity (1 without levels)."""
    return np.clip(x + rng.normal(size=x.shape) * 0.1 * (severity or 1), 0, 1)


@pytest.fixture
def fake_suites(monkeypatch):
    """Two fake corruptions in each suite (the real ones are tested in test_corruptions_*)."""
    for suite in SUITES.values():
        table = dict(suite.corruptions)
        table["_noisy"] = Corruption("_noisy", _noisy, (1, 2, 3), 2)
        table["_flat"] = Corruption("_flat", lambda x, s, rng: np.full_like(x, 0.5), ())
        monkeypatch.setattr(suite, "corruptions", table)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    train(TrainConfig(dataset="digits", epochs=1, batch_size=128, hparams={"sigma": 0.25}), out, **QUIET)
    return out


def test_generated_copy_is_per_example_and_seeded(fake_suites):
    clean = get_dataset("digits", "test")
    a = get_dataset("digits", "test", corruption="_noisy", severity=3)
    b = get_dataset("digits", "test", corruption="_noisy", severity=3)
    xa, ya = a.get_batch([5, 7, 9])
    xb, _ = b.get_batch([9])  # another batch, another order: the same image 9
    assert torch.equal(xa[2], xb[0]) and torch.equal(a[7][0], xa[1])
    assert torch.equal(ya, clean.targets[[5, 7, 9]])
    assert 0.05 < (xa - clean.get_batch([5, 7, 9])[0]).std() < 0.5
    assert a.corruption == {"name": "_noisy", "severity": 3, "source": "generated", "suite": "mnist-c", "seed": 0}
    assert a.fingerprint() == b.fingerprint()
    other_seed = get_dataset("digits", "test", corruption="_noisy", severity=3, corruption_seed=1)
    assert not torch.equal(other_seed.get_batch([5])[0], xa[:1])
    assert other_seed.fingerprint() != a.fingerprint() != clean.fingerprint()
    assert get_dataset("digits", "test", corruption="_noisy").corruption["severity"] == 2  # the default
    with pytest.raises(RsmoothError, match="has severities 1, 2, 3, not 5"):
        get_dataset("digits", "test", corruption="_noisy", severity=5)
    with pytest.raises(RsmoothError, match="has no severity levels"):
        get_dataset("digits", "test", corruption="_flat", severity=1)
    with pytest.raises(RsmoothError, match="unknown corruption 'nope' in the mnist-c suite"):
        get_dataset("digits", "test", corruption="nope")
    with pytest.raises(RsmoothError, match="without a corruption"):
        get_dataset("digits", "test", severity=2)


def test_plan_files_and_levels(fake_suites, monkeypatch):
    plan = corruption_plan("digits", "_noisy,_flat", None)  # mnist-c suite: one level each
    assert [(p.corruption, p.severity, p.file) for p in plan] == [("_noisy", None, "_noisy.tsv"),
                                                                  ("_flat", None, "_flat.tsv")]
    plan = corruption_plan("digits", "_noisy,_flat", "all", suite="cifar10-c")  # levels of their own
    assert [p.file for p in plan] == ["_noisy-s1.tsv", "_noisy-s2.tsv", "_noisy-s3.tsv", "_flat.tsv"]
    assert [p.file for p in corruption_plan("digits", "_noisy,_flat", "1,3")] == [
        "_noisy-s1.tsv", "_noisy-s3.tsv", "_flat.tsv"]
    monkeypatch.setitem(__import__("rsmooth.corruptions").corruptions.BENCHMARK, "mnist-c", ("_flat", "frost"))
    notes = []
    assert [p.file for p in corruption_plan("digits", "all", log=notes.append)] == ["_flat.tsv"]
    assert "frost cannot be made" in notes[0]
    with pytest.raises(RsmoothError, match="unknown corruption 'fgo' for digits"):
        corruption_plan("digits", "fgo")
    with pytest.raises(RsmoothError, match="--severity 'x'"):
        corruption_plan("digits", "_noisy", "x")


def test_cli_folder_resume_shards_and_merge(fake_suites, ckpt, tmp_path, capsys):
    common = ["certify", "--checkpoint", str(ckpt), "--n0", "20", "--n", "100", "--skip", "40", "--max", "4"]
    folder = tmp_path / "c"
    assert main(common + ["--corruption", "_noisy,_flat", "--out", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "[1/2] _noisy -> " in out and "[2/2] _flat -> " in out
    meta = read_sidecar(folder / "_noisy.tsv")
    assert meta["corruption"]["severity"] == 2 and meta["method"] == "gaussian" and meta["complete"]
    first = (folder / "_noisy.tsv").read_text()
    assert read_certify_tsv(folder / "_noisy.tsv").idx.tolist() == [0, 40, 80, 120]
    # rerun: nothing to do, same bytes
    assert main(common + ["--corruption", "_noisy,_flat", "--out", str(folder)]) == 0
    assert (folder / "_noisy.tsv").read_text() == first
    # the same file with another corruption seed is refused, not mixed
    with pytest.raises(RsmoothError, match="corruption"):
        main(common + ["--corruption", "_noisy", "--corruption-seed", "1", "--out", str(folder / "_noisy.tsv"),
                       "--debug"])
    # two shards of the whole folder, merged by 'rsmooth merge FOLDER', give the same files
    sharded = tmp_path / "s"
    for i in range(2):
        assert main(common + ["--corruption", "_noisy,_flat", "--shard", f"{i}/2", "--out", str(sharded)]) == 0
    assert main(["merge", str(sharded)]) == 0
    for name in ("_noisy.tsv", "_flat.tsv"):
        a, b = read_certify_tsv(folder / name), read_certify_tsv(sharded / name)
        assert a.idx.tolist() == b.idx.tolist() and a.predict.tolist() == b.predict.tolist()
        assert np.allclose(a.radius, b.radius)
    # the tables of both folders (one column each), and the flags that do not go together
    capsys.readouterr()
    assert main(["analyze", "--corruptions", str(folder), str(sharded), "--labels", "one", "sharded"]) == 0
    table = capsys.readouterr().out
    assert "| corruption | one | sharded |" in table and "_noisy (not in mean)" in table
    with pytest.raises(RsmoothError, match="--corruptions takes folders"):
        main(["analyze", str(folder / "_flat.tsv"), "--corruptions", str(folder), "--debug"])
    with pytest.raises(RsmoothError, match="--paper never goes with --corruptions"):
        main(["analyze", str(folder / "_flat.tsv"), "--paper", "never", "--debug"])
    # one corruption and severity into a .tsv stays one file
    one = tmp_path / "one.tsv"
    assert main(common + ["--corruption", "_noisy", "--severity", "1", "--out", str(one)]) == 0
    assert read_sidecar(one)["corruption"]["severity"] == 1
    capsys.readouterr()
    assert main(["list", "corruptions"]) == 0
    assert "_noisy" in capsys.readouterr().out


def test_clean_results_have_no_corruption(ckpt, tmp_path):
    from rsmooth.engine import run_certification

    out = run_certification(str(ckpt), str(tmp_path / "c.tsv"), n0=10, n=50, max=1, **QUIET)
    assert json.loads((tmp_path / "c.tsv.json").read_text())["corruption"] is None
    assert read_certify_tsv(out).idx.tolist() == [0]


def test_models_know_the_corrupted_datasets():
    """A public checkpoint certified on cifar10-c / mnist-c is built as its clean dataset's model."""
    from rsmooth.data import DATASETS, dataset_info
    from rsmooth.models import create_model, default_arch
    from rsmooth.models.factory import dataset_stats

    for name in DATASETS.names():
        cls = DATASETS.get(name)
        info, stats = dataset_info(name), dataset_stats(name)
        assert (stats.num_classes, stats.input_shape, stats.mean, stats.std) == (
            info.num_classes, info.input_shape, info.mean, info.std)
        if getattr(cls, "published_corruptions", None):
            assert default_arch(name) == default_arch(cls.clean)
    model = create_model("lenet", "mnist-c")
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_preview_grid(fake_suites, tmp_path, capsys):
    out = tmp_path / "p.png"
    assert main(["preview-corruptions", "--dataset", "digits", "--corruption", "_noisy,_flat", "--severity", "1,3",
                 "--corruption-suite", "cifar10-c", "--examples", "2", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "preview:" in capsys.readouterr().out
    with pytest.raises(RsmoothError, match="--start 999 is past the last test example"):
        main(["preview-corruptions", "--corruption", "_flat", "--start", "999", "--out", str(out), "--debug"])


def test_plan_of_the_published_datasets():
    from rsmooth.corruptions import BENCHMARK, HELD_OUT

    plan = corruption_plan("cifar10-c", "all", "all")
    assert len(plan) == 75 and plan[0].file == "gaussian_noise-s1.tsv" and plan[-1].file == "jpeg_compression-s5.tsv"
    assert [p.corruption for p in plan[::5]] == list(BENCHMARK["cifar10-c"])
    assert [p.file for p in corruption_plan("cifar100-c", "held-out", "2")] == [
        f"{c}-s2.tsv" for c in HELD_OUT["cifar10-c"]]
    assert [p.file for p in corruption_plan("mnist-c", "all,identity")] == [
        f"{c}.tsv" for c in BENCHMARK["mnist-c"]] + ["identity.tsv"]
    with pytest.raises(RsmoothError, match="published corrupted dataset; drop --corruption-suite"):
        corruption_plan("mnist-c", "all", suite="mnist-c")
    with pytest.raises(RsmoothError, match="no held-out corruptions"):
        corruption_plan("mnist-c", "held-out")


@pytest.mark.parametrize("command", [["train", "--out", "x"], ["targets", "--checkpoint", "c", "--out", "x"],
                                     ["pipeline", "catrs", "--out", "x"]])
def test_corrupted_test_sets_are_not_trained_on(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--dataset", "cifar10-c"])
    assert "invalid choice: 'cifar10-c'" in capsys.readouterr().err
