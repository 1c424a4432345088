"""rsmooth attack (engine/attack.py, issue 40): rows, resume, shards and their merge, bad input in
one line, and analyze --attack's table and plot."""
import json
from pathlib import Path

import pytest
import torch

from conftest import QUIET
from rsmooth.cli import main
from rsmooth.engine.attack import AttackJob, run_attack
from rsmooth.errors import RsmoothError
from rsmooth.metrics.attack_io import ATTACK_HEADER, read_attack_tsv
from rsmooth.models import create_model

MODEL = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"})
FAST = dict(eps=[0.2, 0.5], n=100, num_steps=2, num_noise=2, batch_size=100, skip=7, max=4, **MODEL, **QUIET)
CLI_MODEL = ["--dataset", "digits", "--sigma", "0.25", "--arch", "digits_cnn"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("attack") / "model.pt"
    torch.save(create_model("digits_cnn", "digits").state_dict(), path)
    return str(path)


@pytest.fixture(scope="module")
def whole(ckpt, tmp_path_factory):
    return run_attack(ckpt, str(tmp_path_factory.mktemp("whole") / "a.tsv"), **FAST)


def _rows(path):
    """The rows without the time column."""
    return [ln.rsplit("\t", 1)[0] for ln in Path(path).read_text().splitlines()]


def test_rows_one_per_image_and_eps_within_the_ball(whole):
    res = read_attack_tsv(whole)
    assert res.n == 8 and sorted(set(res.idx.tolist())) == [0, 7, 14, 21]
    assert (res.norm <= res.eps + 1e-6).all() and (res.norm > 0).any()
    assert ((res.predict == res.label) == res.correct).all()
    meta = json.loads(Path(f"{whole}.json").read_text())
    assert meta["kind"] == "rsmooth-attack" and meta["complete"] and meta["eps"] == [0.2, 0.5]
    assert meta["noise"] == "gaussian" and meta["sigma"] == 0.25 and meta["num_steps"] == 2


def test_a_killed_run_resumes_to_the_same_rows(ckpt, whole, tmp_path):
    out = tmp_path / "a.tsv"
    lines = Path(whole).read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:4]) + lines[4][:5])  # three rows and a cut one (image 7 at eps 0.5)
    meta = json.loads(Path(f"{whole}.json").read_text())
    Path(f"{out}.json").write_text(json.dumps({**meta, "complete": False}))
    run_attack(ckpt, str(out), **FAST)
    assert _rows(out) == _rows(whole)
    assert json.loads(Path(f"{out}.json").read_text())["complete"]


def test_a_run_of_other_settings_is_refused_in_one_line(ckpt, whole, tmp_path):
    out = tmp_path / "a.tsv"
    out.write_text(Path(whole).read_text())
    Path(f"{out}.json").write_text(Path(f"{whole}.json").read_text())
    with pytest.raises(RsmoothError, match="num_noise") as e:
        run_attack(ckpt, str(out), **{**FAST, "num_noise": 3})
    assert "\n" not in str(e.value)


def _interrupted(whole, out, keep):
    """``out``: the one-process run ``whole`` killed after ``keep`` rows (and a cut one), each kept
    row's time set to 123 so that a row copied (not attacked again) can be told."""
    lines = Path(whole).read_text().splitlines(keepends=True)
    kept = [ln.rsplit("\t", 1)[0] + "\t123\n" for ln in lines[1:keep + 1]]
    Path(out).write_text("".join([lines[0], *kept, lines[keep + 1][:5]]))
    meta = json.loads(Path(f"{whole}.json").read_text())
    Path(f"{out}.json").write_text(json.dumps({**meta, "complete": False}))
    return kept


@pytest.mark.parametrize("keep", [0, 3])
def test_shards_merge_into_the_one_process_file(ckpt, whole, tmp_path, capsys, keep):
    """Two shards, from nothing or continuing a killed one-process run (which they take its rows
    from: not attacked again), merge into the one-process file."""
    out = tmp_path / "a.tsv"
    kept = _interrupted(whole, out, keep) if keep else []
    for i in range(2):
        run_attack(ckpt, str(out), shard=f"{i}/2", **FAST)
    assert main(["merge", str(out)]) == 0
    assert "results:" in capsys.readouterr().out
    assert _rows(out) == _rows(whole)
    assert [ln for ln in Path(out).read_text().splitlines(keepends=True) if ln.endswith("\t123\n")] == kept
    meta = json.loads(Path(f"{out}.json").read_text())
    assert meta["complete"] and meta["merged_shards"] == 2 and "shard" not in meta
    assert not list(tmp_path.glob("a.shard-*"))


@pytest.mark.parametrize("kw, says", [(dict(eps=[0.0]), "--eps"), (dict(eps=[-0.5]), "--eps"),
                                      (dict(eps=[]), "--eps"), (dict(num_noise=0), "--num-noise"),
                                      (dict(attack="cw"), "--attack"), (dict(n=0), "n")])
def test_bad_settings_are_one_line_before_the_checkpoint_is_read(kw, says, tmp_path):
    with pytest.raises(RsmoothError, match=says) as e:
        AttackJob("missing.pt", str(tmp_path / "a.tsv"), **{**FAST, **kw})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("flags, says", [(["--eps", "0"], "--eps"), (["--num-noise", "0"], "num-noise")])
def test_cli_bad_input_is_one_line(ckpt, tmp_path, capsys, flags, says):
    code = main(["attack", "--checkpoint", ckpt, *CLI_MODEL, "--out", str(tmp_path / "a.tsv"), *flags])
    err = capsys.readouterr().err.strip()
    assert code != 0 and says in err and len(err.splitlines()) == 1


@pytest.fixture(scope="module")
def certified(ckpt, tmp_path_factory):
    from rsmooth.engine import run_certification

    return run_certification(ckpt, str(tmp_path_factory.mktemp("cert") / "c.tsv"), n0=20, n=200, skip=7, max=4,
                             batch_size=200, **MODEL, **QUIET)


def test_analyze_attack_table_and_plot(certified, whole, tmp_path, capsys):
    plot = tmp_path / "p.png"
    assert main(["analyze", str(certified), "--attack", str(whole), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "| radius = eps | certified (%) | empirical (%" in out
    res, cert = read_attack_tsv(whole), __import__("rsmooth").metrics.read_certify_tsv(certified)
    for e in (0.2, 0.5):
        emp = 100 * res.correct[res.eps == e].mean()
        acc = 100 * (cert.correct & (cert.radius >= e)).mean()
        assert f"| {e:g} | {acc:.1f} | {emp:.1f}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["analyze", str(certified), "--attack", str(whole), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["images"] == 4


def test_analyze_attack_of_other_images_or_sigma_is_one_line(ckpt, certified, whole, tmp_path, capsys):
    fewer = run_attack(ckpt, str(tmp_path / "few.tsv"), **{**FAST, "max": 3})
    assert main(["analyze", str(certified), "--attack", str(fewer)]) != 0
    err = capsys.readouterr().err.strip()
    assert "not of" in err and "images" in err and len(err.splitlines()) == 1
    other = tmp_path / "sig.tsv"
    other.write_text(Path(whole).read_text())
    meta = json.loads(Path(f"{whole}.json").read_text())
    Path(f"{other}.json").write_text(json.dumps({**meta, "sigma": 0.5}))
    assert main(["analyze", str(certified), "--attack", str(other)]) != 0
    err = capsys.readouterr().err.strip()
    assert "sigma" in err and len(err.splitlines()) == 1
    assert main(["analyze", str(certified), str(certified), "--attack", str(whole)]) != 0
    assert "one certify file" in capsys.readouterr().err
    bad = tmp_path / "bad.tsv"
    bad.write_text(ATTACK_HEADER.replace("eps", "radius") + "\n")
    assert main(["analyze", str(certified), "--attack", str(bad)]) != 0
    assert "not an attack TSV" in capsys.readouterr().err


@pytest.mark.slow  # two ranks starting PyTorch: ~25 s on a loaded 2-core machine
def test_torchrun_ranks_give_the_one_process_file(ckpt, whole, tmp_path):
    import shutil
    import subprocess

    from conftest import SUBPROCESS_ENV

    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not installed")
    out = tmp_path / "a.tsv"
    kept = _interrupted(whole, out, 3)  # rank 0 starts both shards with the rows of a killed one-process run
    flags = ["--checkpoint", ckpt, *CLI_MODEL, "--eps", "0.2", "0.5", "--n", "100", "--num-steps", "2",
             "--num-noise", "2", "--batch-size", "100", "--skip", "7", "--max", "4", "--out", str(out)]
    done = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.1",
                           "-m", "rsmooth", "--", "attack", *flags], env=SUBPROCESS_ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _rows(out) == _rows(whole)
    assert [ln for ln in Path(out).read_text().splitlines(keepends=True) if ln.endswith("\t123\n")] == kept
    assert json.loads(Path(f"{out}.json").read_text())["merged_shards"] == 2


def test_heartbeat_lines_where_no_bar_is_drawn(ckpt, tmp_path):
    lines = []
    run_attack(ckpt, str(tmp_path / "a.tsv"), **{**FAST, "max": 2, "heartbeat": 0.001, "progress": True,
                                                 "log": lines.append})
    beats = [ln for ln in lines if ln.startswith("attack: 1/2 images")]
    assert beats and "samples/s" in beats[0]
    assert lines[-1].startswith("attack: 2 images, empirical accuracy")


def test_overwrite_replaces_only_an_attack_file(ckpt, tmp_path):
    other = tmp_path / "notes.tsv"
    other.write_text("my notes\n")
    with pytest.raises(RsmoothError, match="not an attack TSV"):
        run_attack(ckpt, str(other), overwrite=True, **FAST)
    assert other.read_text() == "my notes\n"


def test_the_committed_fashion_mnist_report_is_what_its_files_give():
    """docs/reproductions/fashion-mnist-attack.md: its table, image-by-image claim and audit count
    come from the files committed beside it."""
    from rsmooth.metrics import read_certify_tsv
    from rsmooth.report.attack import empirical_table

    docs = Path(__file__).resolve().parents[1] / "docs" / "reproductions"
    folder, page = docs / "fashion-mnist-attack", (docs / "fashion-mnist-attack.md").read_text()
    table = empirical_table(folder / "certify.tsv", folder / "attack.tsv")
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert len(rows) == 4 and all(row in page for row in rows)
    cert, att = read_certify_tsv(folder / "certify.tsv"), read_attack_tsv(folder / "attack.tsv")
    radius = dict(zip(cert.idx.tolist(), (cert.radius * cert.correct).tolist()))
    broken = [(i, e) for i, e, ok in zip(att.idx.tolist(), att.eps.tolist(), att.correct.tolist())
              if radius[i] >= e and not ok]
    assert len(cert.idx) == 500 and not broken
    summary = json.loads((folder / "audit" / "audit.json").read_text())["summary"]
    assert (summary["images"], summary["counterexamples"]) == (492, 0) and summary["line"][:40] in page.replace("\n", " ")
