"""CAT-RS consistency targets: frequencies, order, refusal of mismatching files, resume."""
import dataclasses
import json

import numpy as np
import pytest
import torch

from conftest import assert_keywords_are_fields
from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.data import get_dataset
from rsmooth.engine import TrainConfig, load_model, train
from rsmooth.engine.targets import TargetsJob, compute_targets, load_targets

QUIET = dict(progress=False, log=lambda s: None)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("gauss")
    train(TrainConfig(dataset="digits", epochs=3, hparams={"sigma": 0.25}), out, **QUIET)
    return out


def test_compute_targets_takes_exactly_the_job_fields():
    assert_keywords_are_fields(compute_targets, TargetsJob)


def test_targets_job_checks_and_normalises_once():
    job = TargetsJob("ck", "t.npy", num_samples=1e3, shard="1/2", seed=3.0)
    assert (job.num_samples, job.shard, job.seed, job.batch_size) == (1000, (1, 2), 3, 256)
    for bad, msg in ((dict(num_samples=0), "num_samples must be >= 1, got 0"),
                     (dict(batch_size=-1), "batch_size must be >= 1, got -1"), (dict(shard="2/2"), "shard"),
                     (dict(sigma=0.0), "sigma must be > 0")):
        with pytest.raises(RsmoothError, match=msg):
            dataclasses.replace(job, **bad)


@pytest.mark.slow
def test_rows_are_frequencies_in_dataset_order(ckpt, tmp_path):
    # a negligible sigma makes every row the one-hot clean prediction of that image
    p = compute_targets(str(ckpt), str(tmp_path / "t.npy"), num_samples=20, sigma=1e-6,
                        augment=False, **QUIET)
    data = get_dataset("digits", "train")
    t = load_targets(p, data)
    model = load_model(ckpt).model.eval()
    with torch.no_grad():
        pred = model(data.get_batch(torch.arange(len(data)))[0]).argmax(1)
    assert t.shape == (1437, 10) and torch.allclose(t.sum(1), torch.ones(1437))
    assert torch.equal(t.argmax(1), pred) and bool((t.max(1).values == 1).all())
    meta = json.loads((tmp_path / "t.npy.json").read_text())
    assert meta["num_samples"] == 20 and meta["augment"] is False and meta["complete"]
    assert not (tmp_path / "t.npy.partial.npy").exists()


@pytest.mark.slow
def test_killed_run_resumes_to_identical_targets(ckpt, tmp_path):
    full = np.load(compute_targets(str(ckpt), str(tmp_path / "a.npy"), num_samples=30, **QUIET))
    compute_targets(str(ckpt), str(tmp_path / "b.npy"), num_samples=30, stop_after_blocks=2, **QUIET)
    assert not (tmp_path / "b.npy").exists() and (tmp_path / "b.npy.partial.npy").exists()
    with pytest.raises(RsmoothError, match="was started with num_samples=30"):
        compute_targets(str(ckpt), str(tmp_path / "b.npy"), num_samples=40, **QUIET)
    resumed = np.load(compute_targets(str(ckpt), str(tmp_path / "b.npy"), num_samples=30, **QUIET))
    assert np.array_equal(full, resumed)
    sessions = json.loads((tmp_path / "b.npy.json").read_text())["sessions"]  # the two invocations
    assert [e["blocks_done"] for e in sessions] == [0, 2] and set(sessions[1]) == {
        "began", "blocks_done", "git_commit", "versions", "channels_last", "compile"}
    counts = full * 30
    assert np.allclose(counts, np.round(counts), atol=1e-4)  # multiples of 1/N


def test_mismatching_files_are_refused(ckpt, tmp_path):
    p = compute_targets(str(ckpt), str(tmp_path / "t.npy"), num_samples=5, **QUIET)
    with pytest.raises(RsmoothError, match="split differs"):
        load_targets(p, get_dataset("digits", "test"))
    meta_path = tmp_path / "t.npy.json"
    meta = json.loads(meta_path.read_text())
    meta["data_fingerprint"]["order"] = "0" * 64
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(RsmoothError, match="different labels or example order"):
        load_targets(p, get_dataset("digits", "train"))
    with pytest.raises(RsmoothError, match="does not exist"):
        load_targets(tmp_path / "nope.npy", get_dataset("digits", "train"))


@pytest.mark.slow
def test_cli_targets(ckpt, tmp_path, capsys):
    assert main(["targets", "--checkpoint", str(ckpt), "--num-samples", "10",
                 "--out", str(tmp_path / "c.npy")]) == 0
    t = np.load(tmp_path / "c.npy")
    assert t.shape == (1437, 10)
    top = t.max(1).astype(np.float64)
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"targets: {tmp_path / 'c.npy'}: 1,437 images x 10 classes, 10 noises each; top class "
        f"{100 * top.mean():.1f}% of the votes on average, below half of them on {100 * np.mean(top < 0.5):.1f}% "
        f"of the images")
    assert main(["targets", "--checkpoint", str(ckpt), "--num-samples", "0",
                 "--out", str(tmp_path / "d.npy")]) == 2
    assert "--num-samples must be >= 1" in capsys.readouterr().err
