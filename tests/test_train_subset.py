"""Reduced training sets (--train-subset): a fixed subset, the same for every run and seed, whose
consistency targets and checkpoints are keyed by the subset's own indices."""
import json

import numpy as np
import pytest
import torch

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.data import SubsetDataset, fixed_subset, get_dataset
from rsmooth.engine import TrainConfig, train
from rsmooth.engine.targets import compute_targets, load_targets

QUIET = dict(progress=False, log=lambda s: None)


def test_fixed_subset_is_a_sorted_seed0_draw():
    idx = fixed_subset(1437, 200)
    assert torch.equal(idx, torch.randperm(1437, generator=torch.Generator().manual_seed(0))[:200].sort().values)
    assert torch.equal(idx, fixed_subset(1437, 200)) and idx.unique().numel() == 200
    with pytest.raises(RsmoothError, match="must hold 1 to 1437 of them, got 0"):
        fixed_subset(1437, 0)
    with pytest.raises(RsmoothError, match="got 2000"):
        fixed_subset(1437, 2000)


def test_subset_view_renumbers_examples():
    full = get_dataset("digits", "train")
    sub = get_dataset("digits", "train", subset=100)
    idx = fixed_subset(len(full), 100)
    assert isinstance(sub, SubsetDataset) and len(sub) == 100
    assert torch.equal(sub.targets, full.targets[idx])
    x, y = sub.get_batch(torch.tensor([0, 99]))
    xf, yf = full.get_batch(idx[[0, 99]])
    assert torch.equal(x, xf) and torch.equal(y, yf) and torch.equal(sub[5][0], full[int(idx[5])][0])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(sub.get_batch([1, 2], augment=True, generator=g1)[0],
                       full.get_batch(idx[[1, 2]], augment=True, generator=g2)[0])
    fp = sub.fingerprint()
    assert fp["subset"] == {"size": 100, "of": 1437} and fp["length"] == 100
    assert fp["order"] != get_dataset("digits", "train", subset=101).fingerprint()["order"]


@pytest.mark.slow
def test_train_and_targets_on_a_subset(tmp_path):
    out = tmp_path / "g"
    train(TrainConfig(dataset="digits", epochs=1, train_subset=300, hparams={"sigma": 0.25}), out, **QUIET)
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["train_subset"] == 300
    t = compute_targets(str(out), str(tmp_path / "t.npy"), num_samples=5, train_subset=300, **QUIET)
    assert np.load(t).shape == (300, 10)
    assert load_targets(t, get_dataset("digits", "train", subset=300)).shape == (300, 10)
    with pytest.raises(RsmoothError, match=r"digits/train \(300 examples\) but the dataset is digits/train "
                                           r"\(1437 examples\)"):
        load_targets(t, get_dataset("digits", "train"))
    cat = TrainConfig(dataset="digits", method="catrs", epochs=1, train_subset=300, targets=str(t),
                      hparams={"sigma": 0.25, "num_noise": 2, "num_steps": 1})
    train(cat, tmp_path / "c", **QUIET)
    with pytest.raises(RsmoothError, match="--train-subset 300"):  # resuming with another subset is refused
        train(TrainConfig(dataset="digits", epochs=2, train_subset=200, hparams={"sigma": 0.25}), out,
              resume=True, **QUIET)


def test_cli_train_subset(tmp_path, capsys):
    assert main(["train", "--epochs", "1", "--train-subset", "64", "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["config"]["train_subset"] == 64
    assert main(["targets", "--checkpoint", str(tmp_path / "r"), "--num-samples", "3", "--train-subset", "64",
                 "--out", str(tmp_path / "t.npy")]) == 0
    assert np.load(tmp_path / "t.npy").shape == (64, 10)
    assert main(["train", "--epochs", "1", "--train-subset", "5000", "--out", str(tmp_path / "x")]) == 2
    assert "must hold 1 to 1437 of them, got 5000" in capsys.readouterr().err
