"""rsmooth audit (engine/audit.py, issue 40): the floating-point counterexample of issue 38 is
reported, the count is set against what alpha allows, counterexamples are written and replay,
a run resumes, and bad input is one line."""
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from conftest import QUIET
from rsmooth.engine import run_certification
from rsmooth.engine.audit import AuditSummary, audit_points, check_point, merge_audit, run_audit
from rsmooth.errors import RsmoothError
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth

D = 3 * 32 * 32


class Grid(nn.Module):
    """Class B (1) when every coordinate of the input is a multiple of 2^-31, else A (0).

    Why it breaks float32 Gaussian smoothing (Voracek & Hein 2023, arXiv 2207.07209): at x0 = 0 a
    noisy input is the float32 draw itself, whose tiny coordinates (|n| < 2^-8, about 10 of 3,072
    with sigma 1) carry mantissa bits below 2^-31, so f votes A almost always and x0 is certified A
    far beyond 1.2.  At x1 = 0.8 / sqrt(d) in every coordinate (>= 2^-7, so on the 2^-31 grid as
    every float32 >= 2^-8 is), x1 + n rounds onto the grid of 2^-31 wherever it is small (n is on it
    too whenever |n| >= 2^-8, and a smaller n leaves a sum >= 2^-8): every vote is B.
    """

    def forward(self, x):
        v = x.flatten(1) * 2.0 ** 31  # exact: a power of two only moves the exponent
        on = (v == v.round()).all(1)
        return torch.stack([(~on).double(), on.double()], 1).to(x.dtype)


def _points():
    x0 = torch.zeros(3, 32, 32)
    x1 = torch.full((3, 32, 32), 0.8 / math.sqrt(D))
    return x0, x1


def _float_attack(n, tmp_path):
    x0, x1 = _points()
    assert float((x1.double() - x0.double()).norm()) == pytest.approx(0.8, abs=1e-6)
    smooth = Smooth(Grid(), 2, 1.0)
    c, r = smooth.certify(x0, 100, n, 0.001, 1000, generator=torch.Generator().manual_seed(0))
    assert c == 0 and r >= 1.2  # x0 certified A beyond ||x1 - x0||
    summary, checks = audit_points(smooth, [x0], [x1], [c], [r], n=n, alpha=0.001, alpha_certify=0.001,
                                   out=tmp_path)
    (pc,) = checks
    assert pc.inside and pc.predict == 1 and pc.votes == [0, n] and pc.counterexample
    assert summary.counterexamples == 1 and summary.images == 1 and not summary.consistent
    # the files replay it: the point as saved, PREDICT at it again
    rec = json.loads((tmp_path / "idx-0.json").read_text())
    point = torch.from_numpy(np.load(tmp_path / rec["point"]))
    delta = torch.from_numpy(np.load(tmp_path / rec["delta"]))
    assert torch.equal(point, x1) and torch.equal(x0 + delta, x1)
    again = check_point(smooth, x0, point, 0, c, r, n=10_000, alpha=0.001, batch_size=1000,  # replay: any n
                        gen=torch.Generator().manual_seed(5))
    assert again.counterexample and rec["votes"] == [0, n] and rec["predict"] == 1


def test_float_gaussian_counterexample_is_reported(tmp_path):
    _float_attack(10_000, tmp_path)


@pytest.mark.slow
def test_float_gaussian_counterexample_at_the_issues_n(tmp_path):
    _float_attack(100_000, tmp_path)  # d = 3,072, sigma = 1, n = 100,000, alpha = 0.001 (issue 38)


def test_sound_noise_reports_none(tmp_path):
    """With the sound noise (issue 38) and x0, x1 on the 8-bit grid: no counterexample."""
    from rsmooth.smoothing.noises import make_noise

    smooth = Smooth(Grid(), 2, make_noise("sound-gaussian", 1.0))
    x0, x1 = torch.zeros(3, 32, 32), torch.full((3, 32, 32), 4 / 255)
    c, r = smooth.certify(x0, 100, 10_000, 0.001, 1000, generator=torch.Generator().manual_seed(0))
    summary, checks = audit_points(smooth, [x0], [x1], [c], [r], n=10_000, alpha=0.001, alpha_certify=0.001)
    assert summary.counterexamples == 0 and not checks[0].counterexample
    # the float construction's own x1 (off the grid): the sound certificate speaks of 8-bit images,
    # so the audit checks the 8-bit image nearest it, where the smoothed classifier says A
    _, x1 = _points()
    summary, checks = audit_points(smooth, [x0], [x1], [c], [r], n=10_000, alpha=0.001, alpha_certify=0.001)
    assert summary.counterexamples == 0 and checks[0].predict == c and not checks[0].counterexample


@pytest.mark.parametrize("m, k, checks", [(500, 0, 2), (500, 3, 2), (40, 1, 1), (1, 1, 1)])
def test_summary_against_scipy(m, k, checks):
    s = AuditSummary(m, k, checks, 0.001, 0.001, beta=0.05)
    lo, hi = stats.binomtest(k, m).proportion_ci(0.95, method="exact")
    assert s.interval == pytest.approx((lo, hi), abs=1e-9)
    p = 0.001 + checks * 0.001
    assert s.per_image == pytest.approx(p) and s.expected == pytest.approx(m * p)
    assert s.allowed == int(stats.binom.ppf(0.95, m, p))
    assert s.consistent == (k <= s.allowed)
    assert ("consistent with alpha" in s.line()) == s.consistent


# ---- the audit of a certify file ----------------------------------------------------------

MODEL = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"})
FAST = dict(attacks=["pgd"], num_steps=2, num_noise=2, n=100, batch_size=100,
            model_options={"arch": "digits_cnn"}, **QUIET)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("audit")
    ckpt = folder / "model.pt"
    torch.save(create_model("digits_cnn", "digits").state_dict(), ckpt)
    cert = run_certification(str(ckpt), str(folder / "c.tsv"), n0=20, n=200, skip=5, max=5, batch_size=200,
                             **MODEL, **QUIET)
    return str(ckpt), str(cert)


def test_audit_rows_summary_and_resume(run, tmp_path, monkeypatch):
    ckpt, cert = run
    from rsmooth.metrics import read_certify_tsv

    res = read_certify_tsv(cert)
    certified = int(((res.predict >= 0) & (res.radius > 0)).sum())
    assert certified >= 2
    s = run_audit(ckpt, cert, str(tmp_path), **FAST)
    assert s.images == certified and s.checks_per_image == 1
    rows = (tmp_path / "audit.tsv").read_text().splitlines()
    assert len(rows) == 1 + certified
    for line in rows[1:]:
        f = line.split("\t")
        assert float(f[8]) <= float(f[4]) + 1e-6 < float(f[3]) + 1e-6  # norm <= eps < radius
    saved = json.loads((tmp_path / "audit.json").read_text())
    assert saved["summary"]["images"] == certified and saved["noise"] == "gaussian" and saved["sigma"] == 0.25
    # rerun: every image is done, nothing is attacked again
    import rsmooth.engine.audit as audit

    monkeypatch.setattr(audit, "attack_smoothed", lambda *a, **k: (_ for _ in ()).throw(AssertionError("attacked")))
    assert run_audit(ckpt, cert, str(tmp_path), **FAST).images == certified
    assert (tmp_path / "audit.tsv").read_text().splitlines() == rows
    assert json.loads((tmp_path / "audit.tsv.json").read_text())["complete"]
    # an audit written before audit.tsv had a sidecar (its settings in audit.settings.json) continues too
    sidecar = json.loads((tmp_path / "audit.tsv.json").read_text())
    run_fields = ("kind", "num_examples", "started", "finished", "complete")
    settings = {k: v for k, v in sidecar.items() if k not in run_fields}
    (tmp_path / "audit.settings.json").write_text(json.dumps(settings))
    (tmp_path / "audit.tsv.json").unlink()
    assert run_audit(ckpt, cert, str(tmp_path), **FAST).images == certified
    assert (tmp_path / "audit.tsv").read_text().splitlines() == rows
    assert not (tmp_path / "audit.settings.json").exists() and (tmp_path / "audit.tsv.json").is_file()


def test_an_audit_of_other_settings_is_kept_unless_overwrite(run, tmp_path, capsys):
    """Its rows and counterexamples are never deleted by a run of other settings without --overwrite:
    one line naming the setting; the same settings continue; --overwrite replaces it."""
    from rsmooth.cli import main

    ckpt, cert = run
    counter = tmp_path / "counterexamples" / "idx-0.json"
    run_audit(ckpt, cert, str(tmp_path), **FAST)
    counter.parent.mkdir(exist_ok=True)
    counter.write_text("{}")  # stands for a counterexample the first audit found
    rows = (tmp_path / "audit.tsv").read_text()
    np.save(tmp_path / "p.npy", np.zeros((1, 1, 8, 8), dtype=np.float32))
    for kw, says in [(dict(num_steps=3), "num_steps=2, not 3"), (dict(num_steps=3, shard="0/2"), "num_steps=2"),
                     (dict(points=str(tmp_path / "p.npy"), indices=[0]), "attacks=['pgd'], not None")]:
        with pytest.raises(RsmoothError, match="pass overwrite=True to replace it") as e:
            run_audit(ckpt, cert, str(tmp_path), **{**FAST, **kw})
        assert says in str(e.value) and "\n" not in str(e.value)
    assert (tmp_path / "audit.tsv").read_text() == rows and counter.is_file()
    (tmp_path / "audit.json").write_text("{damaged")
    argv = ["audit", "--checkpoint", ckpt, "--certify", cert, "--out", str(tmp_path), "--num-steps", "2",
            "--num-noise", "2", "--n", "100", "--batch-size", "100", "--arch", "digits_cnn"]
    assert main(argv) != 0
    assert "audit.json holds an audit whose metadata is missing or damaged" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0 and not counter.exists()
    assert (tmp_path / "audit.tsv").read_text().splitlines()[1:] != [] and json.loads((tmp_path / "audit.json").read_text())


def test_points_are_checked_and_counterexamples_written(run, tmp_path, monkeypatch):
    ckpt, cert = run
    from rsmooth.data import get_dataset
    from rsmooth.metrics import read_certify_tsv

    res = read_certify_tsv(cert)
    i = int(res.idx[(res.predict >= 0) & (res.radius > 0)][0])
    x = get_dataset("digits", "test")[i][0]
    far = (x + 0.5).clamp(0, 1)
    np.save(tmp_path / "p.npy", torch.stack([x, far]).numpy())
    s = run_audit(ckpt, cert, str(tmp_path / "a"), points=str(tmp_path / "p.npy"), indices=[i, i], **FAST)
    assert s.counterexamples == 0 and s.images == 1
    # a PREDICT that answers another class: the point within r is a counterexample, written to replay
    import rsmooth.engine.audit as audit

    c = int(res.predict[res.idx == i][0])
    monkeypatch.setattr(audit, "predict_votes", lambda *a, **k: ((c + 1) % 10, np.arange(10)))
    s = run_audit(ckpt, cert, str(tmp_path / "b"), points=str(tmp_path / "p.npy"), indices=[i, i], **FAST)
    assert s.counterexamples == 1  # the far point is outside the radius
    found = json.loads((tmp_path / "b" / "counterexamples.json").read_text())
    assert [r["idx"] for r in found] == [i] and found[0]["votes"] == list(range(10))
    assert np.array_equal(np.load(tmp_path / "b" / "counterexamples" / found[0]["delta"]), np.zeros_like(x.numpy()))


@pytest.mark.parametrize("kw, says", [(dict(indices=[0]), "--points and --indices"),
                                      (dict(shrink=1.5), "--shrink"), (dict(attacks=["cw"]), "--attack"),
                                      (dict(num_noise=0), "num_noise")])
def test_bad_settings_are_one_line(run, tmp_path, kw, says):
    ckpt, cert = run
    with pytest.raises(RsmoothError, match=says) as e:
        run_audit(ckpt, cert, str(tmp_path), **{**FAST, **kw})
    assert "\n" not in str(e.value)


def test_bad_files_are_one_line(run, tmp_path):
    ckpt, cert = run
    np.save(tmp_path / "p.npy", np.zeros((2, 1, 8, 8), dtype=np.float32))
    for kw, says in [(dict(points=str(tmp_path / "p.npy"), indices=[0]), "one test index per point"),
                     (dict(points=str(tmp_path / "p.npy"), indices=[0, 1]), "not in")]:
        with pytest.raises(RsmoothError, match=says) as e:
            run_audit(ckpt, cert, str(tmp_path / "o"), **{**FAST, **kw})
        assert "\n" not in str(e.value)
    other = tmp_path / "other.pt"
    torch.manual_seed(1)
    torch.save(create_model("digits_cnn", "digits").state_dict(), other)
    with pytest.raises(RsmoothError, match="not the model") as e:
        run_audit(str(other), cert, str(tmp_path / "o"), **FAST)


def test_missing_or_foreign_certify_files_are_one_line(run, tmp_path):
    ckpt, _ = run
    with pytest.raises(RsmoothError, match="not found"):
        run_audit(ckpt, str(tmp_path / "none.tsv"), str(tmp_path / "o"), **FAST)
    bare = tmp_path / "bare.tsv"
    bare.write_text("idx\tlabel\tpredict\tradius\tcorrect\ttime\n")
    with pytest.raises(RsmoothError, match="no sidecar"):
        run_audit(ckpt, str(bare), str(tmp_path / "o"), **FAST)


def test_cli_audit_of_points_from_files(run, tmp_path, capsys):
    from rsmooth.cli import main
    from rsmooth.data import get_dataset

    ckpt, cert = run
    x = get_dataset("digits", "test")[0][0]
    np.save(tmp_path / "p.npy", x[None].numpy())
    np.save(tmp_path / "i.npy", np.array([0]))
    args = ["audit", "--checkpoint", ckpt, "--arch", "digits_cnn", "--certify", cert, "--out", str(tmp_path / "o"),
            "--points", str(tmp_path / "p.npy"), "--n", "100"]
    assert main([*args, "--indices", str(tmp_path / "i.npy")]) == 0
    out = capsys.readouterr().out
    assert "audit: 0 counterexamples" in out and out.strip().endswith(f"results: {tmp_path / 'o'}")
    assert main([*args, "--indices", "zero"]) != 0
    err = capsys.readouterr().err.strip()
    assert "--indices" in err and len(err.splitlines()) == 1


# ---- shards and torchrun -------------------------------------------------------------------

def _rows(folder, name="audit.tsv"):
    """The rows without the time column."""
    return [ln.rsplit("\t", 1)[0] for ln in (folder / name).read_text().splitlines()]


def _results(folder):
    """What the merge must give as one process does: rows, summary, counterexample records and files."""
    record = json.loads((folder / "audit.json").read_text())
    files = {p.name: p.read_bytes() for p in (folder / "counterexamples").glob("*")}
    return (_rows(folder), record["summary"], {k: v for k, v in record.items() if k not in ("summary", "finished")},
            json.loads((folder / "counterexamples.json").read_text()), files)


@pytest.fixture
def flagged(monkeypatch):
    """PREDICT answers another class at every point of images 0, 10, 20, ...: counterexamples to merge."""
    import rsmooth.engine.audit as audit

    real = audit.check_point

    def fake(smooth, x, point, idx, c, r, **kw):
        pc = real(smooth, x, point, idx, c, r, **kw)
        if idx % 10 == 0:
            pc.predict = (c + 1) % 10
        return pc

    monkeypatch.setattr(audit, "check_point", fake)


def _interrupted(whole, out, keep):
    """``out``: the one-process audit ``whole`` killed after ``keep`` rows (and a cut one), each kept
    row's time set to 123 so that a row taken over (not attacked again) can be told."""
    import shutil

    lines = (whole / "audit.tsv").read_text().splitlines(keepends=True)
    kept = [ln.rsplit("\t", 1)[0] + "\t123\n" for ln in lines[1:keep + 1]]
    out.mkdir()
    (out / "audit.tsv").write_text("".join([lines[0], *kept, lines[keep + 1][:3]]))
    meta = json.loads((whole / "audit.tsv.json").read_text())
    (out / "audit.tsv.json").write_text(json.dumps({**meta, "complete": False}))
    (out / "counterexamples").mkdir()
    for ln in kept:
        for p in (whole / "counterexamples").glob(f"idx-{ln.split()[0]}.*"):
            shutil.copy(p, out / "counterexamples" / p.name)
    return kept


@pytest.mark.parametrize("k, keep", [(2, 0), (3, 2)])
def test_shards_merge_into_the_one_process_audit(run, tmp_path, flagged, capsys, k, keep):
    """K shards, from nothing or continuing a killed one-process audit (whose rows they take, not
    attacking them again), merge into its rows, counterexamples and summary."""
    from rsmooth.cli import main

    ckpt, cert = run
    whole, out = tmp_path / "whole", tmp_path / "out"
    s = run_audit(ckpt, cert, str(whole), **FAST)
    assert s.counterexamples >= 1 and s.images >= 3  # images 0, 10, 20, ... (where certified)
    kept = _interrupted(whole, out, keep) if keep else []
    for i in range(k):
        part = run_audit(ckpt, cert, str(out), shard=f"{i}/{k}", **FAST)
        assert part.images == len(range(i, s.images, k))
    assert main(["merge", str(out)]) == 0
    printed = capsys.readouterr().out
    assert s.line() in printed and f"results: {out}" in printed
    assert _results(out) == _results(whole)
    assert [ln for ln in (out / "audit.tsv").read_text().splitlines(keepends=True) if ln.endswith("\t123\n")] == kept
    meta = json.loads((out / "audit.tsv.json").read_text())
    assert meta["complete"] and meta["merged_shards"] == k and "shard" not in meta
    assert not list(out.glob("audit.shard-*"))
    # a rerun of the merge says the folder is complete
    assert main(["merge", str(out)]) == 0 and "already complete" in capsys.readouterr().out


def test_bad_shard_input_is_one_line(run, tmp_path, capsys):
    """--shard with --points, and merges of a missing, incomplete, mismatched or short shard."""
    from rsmooth.cli import main

    ckpt, cert = run
    np.save(tmp_path / "p.npy", np.zeros((1, 1, 8, 8), dtype=np.float32))
    for kw, says in [(dict(points=str(tmp_path / "p.npy"), indices=[0], shard="0/2"), "--points"),
                     (dict(shard="2/2"), "--shard 2/2")]:
        with pytest.raises(RsmoothError, match=says) as e:
            run_audit(ckpt, cert, str(tmp_path / "o"), **{**FAST, **kw})
        assert "\n" not in str(e.value)
    out = tmp_path / "out"
    run_audit(ckpt, cert, str(out), shard="0/2", **FAST)

    def refused(says):
        assert main(["merge", str(out)]) != 0
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err

    refused("audit shard 1/2 of")  # missing
    one = tmp_path / "one"  # an unfinished one-process audit: no shards to merge, and the command says so
    run_audit(ckpt, cert, str(one), **FAST)
    side = json.loads((one / "audit.tsv.json").read_text())
    (one / "audit.tsv.json").write_text(json.dumps({**side, "complete": False}))
    assert main(["merge", str(one)]) != 0
    assert f"run 'rsmooth audit --shard I/K --out {one}' for I" in capsys.readouterr().err
    run_audit(ckpt, cert, str(out), shard="1/2", **FAST)
    side, tsv = out / "audit.shard-1-of-2.tsv.json", out / "audit.shard-0-of-2.tsv"
    meta, rows = json.loads(side.read_text()), tsv.read_text()
    for change, says in [({"complete": False}, "is incomplete"), ({"n": 200}, "n=200")]:
        side.write_text(json.dumps({**meta, **change}))
        refused(says)
    side.write_text("{damaged")  # still known as an audit folder: the advice is the audit's
    refused("audit.shard-1-of-2.tsv.json is damaged (not a JSON object); rerun its audit command with --shard I/K --overwrite")
    side.write_text(json.dumps(meta))
    tsv.write_text(rows.rsplit("\n", 2)[0] + "\n")  # its last row lost
    refused("rows of")
    tsv.write_text(rows)
    assert main(["merge", str(out)]) == 0


@pytest.mark.slow  # two ranks starting PyTorch: ~25 s on a loaded 2-core machine
def test_torchrun_ranks_give_the_one_process_audit(run, tmp_path):
    import shutil
    import subprocess

    from conftest import SUBPROCESS_ENV

    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not installed")
    ckpt, cert = run
    whole, out = tmp_path / "whole", tmp_path / "out"
    summary = run_audit(ckpt, cert, str(whole), **FAST)
    kept = _interrupted(whole, out, 1)  # rank 0 starts both shards with the rows of a killed one-process audit
    flags = ["--checkpoint", ckpt, "--arch", "digits_cnn", "--certify", cert, "--attack", "pgd", "--n", "100",
             "--num-steps", "2", "--num-noise", "2", "--batch-size", "100", "--out", str(out)]
    done = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.1",
                           "-m", "rsmooth", "--", "audit", *flags], env=SUBPROCESS_ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _results(out) == _results(whole)
    assert [ln for ln in (out / "audit.tsv").read_text().splitlines(keepends=True) if ln.endswith("\t123\n")] == kept
    assert json.loads((out / "audit.tsv.json").read_text())["merged_shards"] == 2
    assert summary.line() in done.stdout and f"results: {out} (2 processes)" in done.stdout


def test_a_linked_counterexamples_folder_is_refused_and_nothing_deleted(run, tmp_path):
    """OUT/counterexamples planted as a link to another folder: the audit and the merge of its
    shards refuse it in one line, and no file there is deleted (they delete idx-* files in it)."""
    ckpt, cert = run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "idx-0.json").write_text("a colleague's file\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "counterexamples").symlink_to(elsewhere)
    with pytest.raises(RsmoothError, match="is a symbolic link") as e:
        run_audit(ckpt, cert, str(out), **FAST)
    assert "\n" not in str(e.value)
    (out / "counterexamples").unlink()
    for i in (0, 1):
        run_audit(ckpt, cert, str(out), shard=f"{i}/2", **FAST)
    (out / "counterexamples").rename(tmp_path / "theirs")
    (out / "counterexamples").symlink_to(elsewhere)
    with pytest.raises(RsmoothError, match="is a symbolic link"):
        merge_audit(out)
    assert (elsewhere / "idx-0.json").read_text() == "a colleague's file\n"
