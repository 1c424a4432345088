"""Certification as a job (issue 22): CertifyJob checks every setting once, run_certification is
CertifyJob(...).run(), and the callers that certify many times build one job."""
import dataclasses
import time

import pytest
import torch

from conftest import assert_keywords_are_fields
from rsmooth import RsmoothError
from rsmooth.engine import CertifyJob, certify_corruptions, run_certification
from rsmooth.engine.pipeline import run_pipeline
from rsmooth.metrics import read_certify_tsv, read_sidecar
from rsmooth.models import create_model

QUIET = dict(progress=False, log=lambda s: None)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """An untrained digits model's state_dict (built with the model options below)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    torch.save(create_model("digits_cnn", "digits").state_dict(), path)
    return path


MODEL = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"})


def test_run_certification_takes_exactly_the_job_fields():
    assert_keywords_are_fields(run_certification, CertifyJob)


def test_certify_flags_are_the_job_fields():
    """Issue 38: the certify command's keywords come from CertifyJob's fields (cli.certify.job_keywords):
    each field has a flag of its name, or is one the command sets otherwise."""
    from rsmooth.cli import build_parser
    from rsmooth.cli.certify import _NOT_FROM_FLAGS, job_keywords

    parser = build_parser()
    args = parser.parse_args(["certify", "--checkpoint", "c.pt", "--out", "o.tsv"])
    names = {f.name for f in dataclasses.fields(CertifyJob)}
    assert _NOT_FROM_FLAGS <= names
    assert names - _NOT_FROM_FLAGS == {k for k in vars(args) if k in names} - _NOT_FROM_FLAGS
    kwargs = job_keywords(args)
    assert set(kwargs) <= names and CertifyJob("c.pt", "o.tsv", **kwargs).mode == "certify"
    seq = job_keywords(parser.parse_args(["certify", "--checkpoint", "c", "--out", "o", "--sequential",
                                          "--radii", "0.5", "--noise", "gaussian"]))
    assert seq["mode"] == "sequential" and seq["radii"] == [0.5] and seq["noise"] == "gaussian"


def test_job_checks_and_normalises_once():
    job = CertifyJob("ck", "o.tsv", mode="sequential", radii=[0.5, 0.25, 0.5], n_max=1e3, shard="1/2", skip=2.0)
    assert job.radii == [0.25, 0.5] and job.n is None and job.n_max == 1000 and job.radius_tol is None
    assert job.shard == (1, 2) and job.skip == 2 and job.batch_size is None and job.sequential
    other = dataclasses.replace(job, out="p.tsv", corruption="fog")  # checked again, unchanged
    assert dataclasses.replace(other, out="o.tsv", corruption=None) == job
    with pytest.raises(RsmoothError, match="n0 must be >= 1, got 0"):
        dataclasses.replace(job, n0=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.n0 = 5


@pytest.mark.parametrize("kw,match", [
    (dict(mode="x"), "mode must be certify, predict, sequential or adaptive, got 'x'"),
    (dict(radii=[0.5]), "radii goes with mode='sequential'"),
    (dict(mode="sequential", radii=[0.5], n_max=10), "--n-max 10 is below --n0 100"),
    (dict(mode="adaptive", radius_tol=-1), "radius_tol must be >= 0"),
    (dict(shard="2/2"), r"--shard 2/2: the shard index must be in 0\.\.1"),
    (dict(heartbeat=-1), "--heartbeat must be a number of seconds >= 0"),
    (dict(precision="fp8"), "unknown precision 'fp8'; choose one of: fp32, bf16"),
])
def test_settings_fail_before_the_checkpoint_is_read(tmp_path, kw, match):
    """The job is checked before anything is read: a missing checkpoint is not reached (the
    precision, checked by Smooth after loading until the job, included)."""
    for make in (lambda: CertifyJob(str(tmp_path / "nope.pt"), str(tmp_path / "c.tsv"), **kw),
                 lambda: run_certification(str(tmp_path / "nope.pt"), str(tmp_path / "c.tsv"), **kw, **QUIET)):
        with pytest.raises(RsmoothError, match=match):
            make()
    assert list(tmp_path.iterdir()) == []


def test_job_run_is_run_certification(ckpt, tmp_path):
    kw = dict(mode="predict", n=50, max=3, batch_size=50, **MODEL, **QUIET)
    a = run_certification(str(ckpt), str(tmp_path / "a.tsv"), **kw)
    b = CertifyJob(str(ckpt), str(tmp_path / "b.tsv"), **kw).run()
    ra, rb = read_certify_tsv(a), read_certify_tsv(b)
    assert (ra.idx == rb.idx).all() and (ra.predict == rb.predict).all() and ra.n == 3
    when = ("started", "finished", "sessions")
    ma, mb = ({k: v for k, v in read_sidecar(p).items() if k not in when} for p in (a, b))
    assert list(ma) == list(mb) and ma == mb


def test_certify_corruptions_checks_the_settings_before_making_the_folder(tmp_path):
    with pytest.raises(RsmoothError, match="n0 must be >= 1, got 0"):
        certify_corruptions(str(tmp_path / "nope.pt"), str(tmp_path / "folder"), dataset="digits", n0=0, **QUIET)
    assert list(tmp_path.iterdir()) == []


def test_pipeline_checks_the_certify_options_before_the_first_step(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(RsmoothError, match="batch_size must be >= 1, got 0"):
        run_pipeline(str(tmp_path / "p"), certify_options={"batch_size": 0}, log=QUIET["log"])
    assert time.perf_counter() - t0 < 1.0 and list(tmp_path.iterdir()) == []


# -- issue 37, item 16: the cost a run will take, told before it starts ---------------------------

def test_i37_the_first_line_is_the_estimate_and_a_resume_counts_what_is_left(ckpt, tmp_path):
    lines = []
    kw = dict(n0=10, n=50, batch_size=64, **MODEL, progress=False, log=lines.append)
    out = run_certification(str(ckpt), str(tmp_path / "c.tsv"), max=5, **kw)
    assert lines[0].startswith("estimate: 5 images x 60 samples = 300 samples at ")
    assert " samples/s (measured on cpu, batch 64): about " in lines[0]
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:3]))  # killed after 2 rows
    lines.clear()
    run_certification(str(ckpt), str(out), max=5, **kw)
    assert lines[0].startswith("continuing ") and lines[1].startswith("estimate: 3 images x 60 samples")


def test_i37_estimate_line_arithmetic():
    from rsmooth.engine.certify import estimate_line

    line = estimate_line(10_000, 100_100, 3120.0, "cpu", 256)  # 320,833 s
    assert line == ("estimate: 10,000 images x 100,100 samples = 1e+09 samples at 3,120 samples/s (measured on "
                    "cpu, batch 256): about 89h07m")
    assert estimate_line(3, 1000, 100.0, "cuda:0", 512, at_most=True).endswith("about 30s at most")


def test_i37_the_tuner_stops_trying_larger_batches_after_tune_time(monkeypatch):
    """A clock on which every reading is 3 s later: after 64 (3 s) 128 is tried, after 128 (6 s)
    nothing larger, though each size doubles the rate (without the limit: 1,024)."""
    import itertools
    import types

    import rsmooth.smoothing.tuning as tuning_module

    ticks = itertools.count()
    monkeypatch.setattr(tuning_module, "time", types.SimpleNamespace(perf_counter=lambda: 3.0 * next(ticks)))
    monkeypatch.setattr(tuning_module, "_rate", lambda smooth, x, b: float(b))
    smooth, tuning = tuning_module.fastest(create_model("digits_cnn", "digits"), 10, 0.25, torch.zeros(1, 8, 8),
                                           channels_last=False, samples=10 ** 7)
    assert tuning_module.TUNE_TIME == 4.0 and tuning.batch_size == 128 and tuning.rate == 128.0
