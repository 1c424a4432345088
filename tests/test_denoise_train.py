"""Denoised smoothing end to end (issue 9 item 4): a denoiser trained in front of a frozen clean
classifier on digits lowers its MSE, raises the accuracy under noise, and is certified from its
run folder alone; the classifier it records is checked."""
import shutil

import pytest
import torch

from rsmooth.cli import main
from rsmooth.data import get_dataset
from rsmooth.engine.checkpoint import load_model
from rsmooth.engine.train import evaluate
from rsmooth.smoothing import Smooth

SIGMA = "0.5"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("den")
    assert main(["train", "--dataset", "digits", "--method", "standard", "--epochs", "6", "--out",
                 str(root / "clf")]) == 0
    assert main(["train", "--dataset", "digits", "--method", "denoise-mse", "--classifier", str(root / "clf"),
                 "--sigma", SIGMA, "--optimizer", "adam", "--lr", "1e-3", "--epochs", "4",
                 "--out", str(root / "mse")]) == 0
    assert main(["train", "--dataset", "digits", "--method", "denoise-stab", "--classifier", str(root / "clf"),
                 "--sigma", SIGMA, "--optimizer", "adam", "--lr", "1e-3", "--epochs", "4",
                 "--out", str(root / "stab")]) == 0
    return root


@pytest.mark.slow
def test_denoisers_lower_the_mse_and_raise_accuracy_under_noise(runs):
    history = torch.load(runs / "mse" / "checkpoint.pt", weights_only=True)["history"]
    assert history[-1]["loss"] < 0.7 * history[0]["loss"]  # MSE to the clean image
    test = get_dataset("digits", "test")
    f, stab = load_model(runs / "clf"), load_model(runs / "stab")
    assert stab.arch == "dncnn_small+digits_cnn" and stab.sigma == 0.5
    plain, denoised = (evaluate(m.model, test, 0.5, seed=1)["test_acc_noisy"] for m in (f, stab))
    assert denoised > plain + 0.03  # the base classifier under noise (measured: 0.54 -> 0.62)
    # and the smoothed classifier: CERTIFY's prediction correct (abstentions count as wrong)
    x, y = test.get_batch(torch.arange(0, 360, 4))
    correct = [sum(r["correct"] for r in Smooth(m.model, 10, 0.5).certify_batch(x, 10, 100, 0.001, 100, labels=y))
               for m in (f, stab)]
    assert correct[1] > correct[0], correct
    # only D trained: the classifier inside the composition is the file's
    for a, b in zip(f.model.state_dict().values(), stab.model.classifier.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_stability_fine_tunes_the_mse_denoiser_and_certify_needs_only_the_run(runs, tmp_path, capsys):
    out = tmp_path / "stab"
    assert main(["train", "--dataset", "digits", "--method", "denoise-stab", "--classifier", str(runs / "clf"),
                 "--init", str(runs / "mse"), "--sigma", SIGMA, "--optimizer", "adam", "--lr", "1e-4",
                 "--epochs", "1", "--out", str(out)]) == 0
    tsv = tmp_path / "c.tsv"
    assert main(["certify", "--checkpoint", str(out), "--n0", "10", "--n", "100", "--max", "5",
                 "--out", str(tsv)]) == 0
    assert len(tsv.read_text().splitlines()) == 6


@pytest.mark.slow
def test_the_recorded_classifier_is_checked(runs, tmp_path, capsys):
    clf, den = tmp_path / "clf", tmp_path / "mse"
    shutil.copytree(runs / "clf", clf)
    assert main(["train", "--dataset", "digits", "--method", "denoise-mse", "--classifier", str(clf), "--sigma",
                 SIGMA, "--epochs", "1", "--optimizer", "adam", "--lr", "1e-3", "--out", str(den)]) == 0
    capsys.readouterr()
    with open(clf / "checkpoint.pt", "ab") as fh:  # another file now
        fh.write(b"\0")
    assert main(["certify", "--checkpoint", str(den), "--n0", "10", "--n", "50", "--max", "1", "--out", str(tmp_path / "c.tsv")]) == 2
    assert "changed since the denoiser was trained" in capsys.readouterr().err
    shutil.rmtree(clf)
    assert main(["certify", "--checkpoint", str(den), "--n0", "10", "--n", "50", "--max", "1", "--out", str(tmp_path / "c.tsv")]) == 2
    assert "which is missing" in capsys.readouterr().err


def test_denoiser_flags_are_checked(tmp_path, capsys):
    assert main(["train", "--method", "denoise-mse", "--out", str(tmp_path / "a")]) == 2
    assert "pass --classifier CKPT_OR_RUN" in capsys.readouterr().err
    assert main(["train", "--classifier", "x", "--out", str(tmp_path / "b")]) == 2
    assert "--classifier and --init are for the denoiser methods" in capsys.readouterr().err


@pytest.mark.slow
def test_any_importable_module_is_a_denoiser(runs, tmp_path, monkeypatch, capsys):
    (tmp_path / "mydenoisers.py").write_text(
        "import torch.nn as nn\n"
        "def tiny(in_channels, width=4):\n"
        "    return nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),\n"
        "                         nn.Conv2d(width, in_channels, 3, padding=1))\n"
        "def shrinks(in_channels):\n"
        "    return nn.Conv2d(in_channels, in_channels, 3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["train", "--dataset", "digits", "--method", "denoise-mse", "--classifier", str(runs / "clf"),
              "--sigma", SIGMA, "--epochs", "1", "--optimizer", "adam", "--lr", "1e-3"]
    assert main([*common, "--arch", "mydenoisers:tiny", "--arch-kwargs", '{"width": 6}', "--out", str(tmp_path / "d")]) == 0
    loaded = load_model(tmp_path / "d", trust_code=True)  # its module:factory runs only when trusted
    assert loaded.arch == "mydenoisers:tiny+digits_cnn" and loaded.model.denoiser[0].out_channels == 6
    assert main([*common, "--arch", "mydenoisers:shrinks", "--out", str(tmp_path / "e")]) == 2
    assert "a denoiser returns an image of its input's shape" in capsys.readouterr().err
