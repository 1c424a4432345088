"""Issue 39 item 3: an image whose n0 samples select a class other than its label stops there
(``skip_wrong``); the certified-accuracy table and ACR are those of running it to the end."""
import json

import numpy as np
import pytest
import torch

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import CertifyJob, run_certification
from rsmooth.metrics import acr, certified_accuracy, read_certify_tsv
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth
from rsmooth.smoothing.procedures import Adaptive, Certify, Sequential, Skipped

from test_smoothing import Linear2

QUIET = dict(progress=False, log=lambda s: None)
RADII = (0.0, 0.25, 0.5, 0.75)


def _linear_images(vs):
    """A two-class linear classifier (P(class 1) = Phi(v / sigma) at x = (1/2 + v, 0, 0, 0)) and its images."""
    smooth = Smooth(Linear2(torch.tensor([1.0, 0.0, 0.0, 0.0]), -0.5), 2, 0.5)
    return smooth, [torch.tensor([0.5 + v, 0.0, 0.0, 0.0]).view(1, 2, 2) for v in vs]


def _stream(smooth, xs, procedure, labels=None):
    items = [(k, x, torch.Generator().manual_seed(k), *([] if labels is None else [labels[k]]))
             for k, x in enumerate(xs)]
    return dict((k, r) for k, r, _ in smooth.stream(procedure, items, 512))


@pytest.mark.parametrize("make", [
    lambda skip: Certify(50, 2000, 0.01, skip_wrong=skip),
    lambda skip: Sequential(50, 0.01, 2000, 0.05, (0.25, 0.5), skip_wrong=skip),
    lambda skip: Adaptive(50, 0.01, 2000, 0.05, 0.05, skip_wrong=skip),
])
def test_right_images_are_unchanged_and_wrong_ones_stop_after_n0(make):
    """Every image has label 1: those whose n0 samples pick class 1 get exactly the result of the
    procedure without skip_wrong (the same noise); the others stop after n0 samples."""
    vs = [-0.45, -0.2, -0.02, 0.02, 0.2, 0.45]
    smooth, xs = _linear_images(vs)
    full, skipped = _stream(smooth, xs, make(False)), _stream(smooth, xs, make(True), labels=[1] * len(xs))
    assert _stream(smooth, xs, make(True)) == full  # no labels: nothing is skipped
    kinds = set()
    for k in range(len(xs)):
        if isinstance(skipped[k], Skipped):
            kinds.add("skipped")
            assert skipped[k] == Skipped(0, 50) and make(True).samples(skipped[k]) == 50
            c_a = full[k].c_a if hasattr(full[k], "c_a") else None
            assert c_a in (None, 0)  # CERTIFY does not report c_A; the sequences do
            pred = full[k][0] if isinstance(full[k], tuple) else full[k].prediction
            assert pred in (0, Smooth.ABSTAIN)  # wrong or abstaining: no radius in the table
        else:
            kinds.add("kept")
            assert skipped[k] == full[k]
    assert kinds == {"skipped", "kept"}


def test_stream_checks_the_label():
    smooth, xs = _linear_images([0.5])
    with pytest.raises(RsmoothError, match=r"label must be a class in 0\.\.1 or None, got 2"):
        _stream(smooth, xs, Certify(10, 100, 0.01, skip_wrong=True), labels=[2])


def test_predict_has_no_selection_samples_to_skip_after(tmp_path):
    with pytest.raises(RsmoothError, match="skip_wrong=True stops an example after its n0 selection samples"):
        CertifyJob("ck", str(tmp_path / "c.tsv"), mode="predict", skip_wrong=True)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A briefly perturbed untrained digits model: it predicts several classes, most wrong."""
    torch.manual_seed(3)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    torch.save(create_model("digits_cnn", "digits").state_dict(), path)
    return path


MODEL = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"}, max=40, skip=7, batch_size=400)


@pytest.mark.parametrize("mode", ["certify", "sequential"])
def test_table_and_acr_equal_a_full_run(ckpt, tmp_path, mode, capsys):
    kw = dict(n=600, n0=20) if mode == "certify" else dict(mode="sequential", radii=RADII, n_max=600, n0=20)
    full = run_certification(str(ckpt), str(tmp_path / "full.tsv"), **MODEL, **kw, **QUIET)
    fast = run_certification(str(ckpt), str(tmp_path / "fast.tsv"), **MODEL, **kw, skip_wrong=True, **QUIET)
    a, b = read_certify_tsv(full), read_certify_tsv(fast)
    assert np.array_equal(certified_accuracy(a.radius, a.correct, RADII), certified_accuracy(b.radius, b.correct, RADII))
    assert acr(a.radius, a.correct) == acr(b.radius, b.correct)
    skipped = (b.predict >= 0) & (b.radius == 0) & (b.predict != b.label)
    assert 0 < skipped.sum() < b.n and not b.correct[skipped].any()
    same = ~skipped
    assert np.array_equal(a.predict[same], b.predict[same]) and np.array_equal(a.radius[same], b.radius[same])
    meta = json.loads((tmp_path / "fast.tsv.json").read_text())
    assert meta["skip_wrong"] is True and json.loads((tmp_path / "full.tsv.json").read_text())["skip_wrong"] is False
    if mode == "sequential":
        rows = [ln.split("\t") for ln in (tmp_path / "fast.tsv.seq").read_text().splitlines()[1:]]
        marked = {int(r[0]) for r in rows if r[8] == "skipped"}
        assert marked == set(b.idx[skipped].tolist()) and all(r[2] == "20" for r in rows if r[8] == "skipped")
    capsys.readouterr()
    assert main(["analyze", str(fast), str(full)]) == 0
    assert capsys.readouterr().out.count("--skip-wrong: examples whose n0 samples") == 1
    with pytest.raises(RsmoothError, match="holds a run with skip_wrong=True, not False"):
        run_certification(str(ckpt), str(fast), **MODEL, **kw, **QUIET)
