"""The command line: train -> certify -> analyze on digits, resumable certification, errors."""
import json
import subprocess
import sys

import pytest

from rsmooth.cli import main
from rsmooth.metrics import read_certify_tsv


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "--dataset", "digits", "--sigma", "0.25", "--epochs", "8",
                 "--out", str(out)]) == 0
    return out


def test_train_certify_analyze(trained, tmp_path, capsys):
    tsv = tmp_path / "c.tsv"
    code, out, _ = run(capsys, "certify", "--checkpoint", trained, "--n", 500, "--skip", 10,
                       "--max", 12, "--batch-size", 200, "--out", tsv)
    assert code == 0 and "results:" in out
    res = read_certify_tsv(tsv)
    assert res.idx.tolist() == list(range(0, 120, 10))  # --max counts certified examples
    assert res.correct.mean() > 0.5
    meta = json.loads((tmp_path / "c.tsv.json").read_text())
    assert meta["sigma"] == 0.25 and meta["n"] == 500 and meta["n0"] == 100 and meta["complete"]
    assert meta["dataset"] == "digits" and meta["precision"] == "fp32" and meta["skip"] == 10

    code, out, _ = run(capsys, "analyze", tsv, "--json", "--radii", 0, 0.25)
    data = json.loads(out)
    assert code == 0 and data["files"][0]["num_examples"] == 12
    assert set(data["files"][0]["certified_accuracy"]) == {"0.0", "0.25"}
    png = tmp_path / "p.png"
    code, out, _ = run(capsys, "analyze", tsv, "--plot", png, "--format", "latex")
    assert code == 0 and "\\toprule" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    code, out, _ = run(capsys, "predict", "--checkpoint", trained, "--n", 200, "--max", 3,
                       "--out", tmp_path / "p.tsv")
    assert code == 0 and len(read_certify_tsv(tmp_path / "p.tsv").idx) == 3


def test_certification_resumes_to_the_same_file(trained, tmp_path, capsys):
    args = ["certify", "--checkpoint", trained, "--n", 300, "--max", 6, "--batch-size", 100]
    assert run(capsys, *args, "--out", tmp_path / "full.tsv")[0] == 0
    # a run killed after 2 examples (with a torn last line) and then rerun
    lines = (tmp_path / "full.tsv").read_text().splitlines(keepends=True)
    part = tmp_path / "part.tsv"
    assert run(capsys, *args, "--out", part)[0] == 0
    part.write_text("".join(lines[:3]) + lines[3][:7])
    code, out, _ = run(capsys, *args, "--out", part)
    assert code == 0 and "2 of 6 examples done" in out

    def rows(p):
        return [ln.split("\t")[:5] for ln in p.read_text().splitlines()]  # all but time

    assert rows(part) == rows(tmp_path / "full.tsv")
    code, _, err = run(capsys, *args[:-2], "--batch-size", 100, "--n", 400, "--out", part)
    assert code == 2 and "holds a run with n=300, not 400" in err


def test_bf16_mode_is_recorded(trained, tmp_path, capsys):
    code, _, _ = run(capsys, "certify", "--checkpoint", trained, "--n", 200, "--max", 2,
                     "--precision", "bf16", "--channels-last", "--out", tmp_path / "b.tsv")
    meta = json.loads((tmp_path / "b.tsv.json").read_text())
    assert code == 0 and meta["precision"] == "bf16" and meta["channels_last"] is True


@pytest.mark.parametrize("argv,message", [
    (["train", "--dataset", "nope", "--out", "x"], "invalid choice: 'nope' (choose from"),
    (["train", "--arch", "nope", "--out", "x"], "invalid choice: 'nope'"),
    (["train", "--method", "nope", "--out", "x"], "invalid choice: 'nope'"),
    (["train", "--sigma", "0", "--out", "{tmp}/t"], "sigma must be > 0"),
    (["train", "--sigma", "-0.5", "--out", "{tmp}/t"], "sigma must be > 0"),
    (["certify", "--checkpoint", "{tmp}/missing.pt", "--out", "{tmp}/x.tsv"], "does not exist"),
    (["certify", "--checkpoint", "{tmp}/corrupt.pt", "--out", "{tmp}/x.tsv"], "cannot read checkpoint"),
    (["certify", "--checkpoint", "{ck}", "--alpha", "1.5", "--out", "{tmp}/x.tsv"], "alpha must be in (0, 1)"),
    (["certify", "--checkpoint", "{ck}", "--alpha", "0", "--out", "{tmp}/x.tsv"], "alpha must be in (0, 1)"),
    (["certify", "--checkpoint", "{ck}", "--n", "0", "--out", "{tmp}/x.tsv"], "n must be >= 1"),
    (["certify", "--checkpoint", "{ck}", "--n0", "0", "--out", "{tmp}/x.tsv"], "n0 must be >= 1"),
    (["certify", "--checkpoint", "{ck}", "--sigma", "-1", "--out", "{tmp}/x.tsv"], "sigma must be > 0"),
    (["certify", "--checkpoint", "{ck}", "--dataset", "cifar10", "--out", "{tmp}/x.tsv"], "was trained on digits"),
    (["analyze", "{tmp}/missing.tsv"], "not found"),
])
def test_errors_are_one_line(trained, tmp_path, capsys, argv, message):
    (tmp_path / "corrupt.pt").write_bytes(b"\x00garbage")
    argv = [a.format(tmp=tmp_path, ck=trained) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_help_explains_units():
    out = subprocess.run([sys.executable, "-m", "rsmooth.cli", "certify", "--help"],
                         capture_output=True, text=True).stdout
    assert "[0,1] pixel units" in out and "--precision" in out
