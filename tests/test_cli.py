"""The command line: train -> certify -> analyze on digits, resumable certification, errors."""
import argparse
import json
import re
import subprocess
import sys

import pytest

from rsmooth.cli import main
from rsmooth.errors import RsmoothError
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


@pytest.mark.slow
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


def test_each_invocation_is_a_session_of_the_sidecar(trained, tmp_path, capsys):
    """A run continued after a kill records every invocation that certified into it: when it
    began, how many examples were done, and the code and settings it ran with."""
    args = ["certify", "--checkpoint", trained, "--n", 300, "--max", 4, "--batch-size", 100,
            "--out", tmp_path / "c.tsv"]
    sidecar = tmp_path / "c.tsv.json"
    assert run(capsys, *args)[0] == 0
    first = json.loads(sidecar.read_text())["sessions"]
    assert [e["done"] for e in first] == [0] and first[0]["batch_size"] == 100
    assert set(first[0]) == {"began", "done", "git_commit", "versions", "device", "batch_size", "channels_last",
                             "compile"}
    assert run(capsys, *args)[0] == 0  # nothing left to certify: no session
    assert json.loads(sidecar.read_text())["sessions"] == first

    def killed_after(k):
        lines = (tmp_path / "c.tsv").read_text().splitlines(keepends=True)
        (tmp_path / "c.tsv").write_text("".join(lines[:1 + k]))

    killed_after(3)
    assert run(capsys, *args[:-2], "--batch-size", 50, "--out", tmp_path / "c.tsv")[0] == 0
    meta = json.loads(sidecar.read_text())
    assert meta["complete"] and [e["done"] for e in meta["sessions"]] == [0, 3]
    assert meta["sessions"][0] == first[0] and meta["sessions"][1]["batch_size"] == 50 == meta["batch_size"]

    # a sidecar of an earlier rsmooth (no sessions): its invocations become one entry
    sidecar.write_text(json.dumps({k: v for k, v in meta.items() if k != "sessions"}))
    killed_after(1)
    assert run(capsys, *args)[0] == 0
    sessions = json.loads(sidecar.read_text())["sessions"]
    assert [e["done"] for e in sessions] == [0, 1] and "before sessions were recorded" in sessions[0]["note"]
    assert sessions[0]["began"] == meta["started"] and sessions[0]["batch_size"] == 50


def test_bf16_mode_is_recorded(trained, tmp_path, capsys):
    code, _, _ = run(capsys, "certify", "--checkpoint", trained, "--n", 200, "--max", 2,
                     "--precision", "bf16", "--channels-last", "--out", tmp_path / "b.tsv")
    meta = json.loads((tmp_path / "b.tsv.json").read_text())
    assert code == 0 and meta["precision"] == "bf16" and meta["channels_last"] is True


@pytest.mark.parametrize("argv,message", [
    (["train", "--dataset", "nope", "--out", "x"], "invalid choice: 'nope' (choose from"),
    (["train", "--arch", "nope", "--out", "{tmp}/t"], "unknown model 'nope'; choose one of"),
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


@pytest.mark.slow
def test_help_explains_units():
    out = subprocess.run([sys.executable, "-m", "rsmooth.cli", "certify", "--help"],
                         capture_output=True, text=True).stdout
    assert "[0,1] pixel units" in out and "--precision" in out


# -- the reference scripts' flags (issue 7, item 20) ----------------------------------------

def _parse_error(argv):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    return e.value.code


@pytest.mark.parametrize("argv,message", [
    (["certify", "--checkpoint", "c", "--N", "1000", "--out", "x"], "--N is --n in rsmooth"),
    (["certify", "--checkpoint", "c", "--N0", "100", "--out", "x"], "--N0 is --n0 in rsmooth"),
    (["predict", "--checkpoint", "c", "--batch", "400", "--out", "x"], "--batch is --batch-size in rsmooth"),
    (["certify", "--checkpoint", "c", "--outfile", "x.tsv"], "--outfile is --out in rsmooth"),
    (["train", "--noise_sd", "0.5", "--out", "x"], "--noise_sd is --sigma in rsmooth"),
    (["train", "--noise-sd", "0.5", "--out", "x"], "--noise-sd is --sigma in rsmooth"),
    (["train", "--batch", "64", "--out", "x"], "--batch is --batch-size in rsmooth"),
    (["train", "--lr_step_size", "30", "--out", "x"], "--lr_step_size is --lr-step in rsmooth"),
    (["train", "--num-noise-vec", "4", "--out", "x"], "--num-noise-vec is --num-noise in rsmooth"),
    (["train", "--gamma", "0.1", "--out", "x"], "--gamma is --lr-gamma in rsmooth (for the learning-rate "
     "decay of Cohen's and the CAT-RS scripts; MACER's hinge threshold is --macer-gamma"),
    (["train", "--margin", "8", "--out", "x"], "--margin is --macer-gamma in rsmooth"),
    (["train", "--epsilon", "512", "--out", "x"], "--epsilon is --eps in rsmooth (an l2 radius in [0,1] "
     "pixel units, where the scripts count 1/256 units): --epsilon 512 is --eps 2"),
    (["train", "--alpha", "1.0", "--out", "x"], "--alpha is --alpha-step in rsmooth"),
    (["pipeline", "catrs", "--N", "1000", "--out", "x"], "--N is --n in rsmooth"),
    (["targets", "--checkpoint", "c", "--noise_sd", "0.25", "--out", "x"], "--noise_sd is --sigma"),
    (["demo", "--N", "100"], "--N is --n in rsmooth"),
])
def test_reference_spellings_name_rsmooth_flags(capsys, monkeypatch, tmp_path, argv, message):
    monkeypatch.chdir(tmp_path)  # nothing is written: parsing fails first
    assert _parse_error(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv", [
    ["train", "--epoch", "2", "--out", "x"],           # once a prefix of --epochs
    ["train", "--batch-s", "64", "--out", "x"],
    ["certify", "--checkpoint", "c", "--max", "3", "--out", "x", "--over"],
])
def test_flags_are_not_abbreviated(capsys, monkeypatch, tmp_path, argv):
    monkeypatch.chdir(tmp_path)  # nothing is written: parsing fails first
    assert _parse_error(argv) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_method_specific_gamma_flags(capsys):
    from rsmooth.cli import build_parser, train_config_from_args

    def config(*argv):
        return train_config_from_args(build_parser().parse_args(["train", "--out", "x", *argv]))

    assert config("--method", "macer", "--macer-gamma", "3").hparams["gamma"] == 3.0
    assert config("--method", "stability", "--stability-gamma", "1").hparams["gamma"] == 1.0
    assert config("--preset", "cifar10/macer/0.25", "--macer-gamma", "4").hparams["gamma"] == 4.0
    with pytest.raises(RsmoothError, match="--stability-gamma is a hyperparameter of stability, not of macer"):
        config("--method", "macer", "--stability-gamma", "1")
    with pytest.raises(RsmoothError, match="--eps is a hyperparameter of catrs, catrs-v1, smoothadv, "
                                           "smoothmix, not of gaussian"):
        config("--eps", "1.0")


def test_eps_in_reference_units_is_refused(tmp_path, capsys):
    code, _, err = run(capsys, "train", "--method", "smoothadv", "--eps", "256", "--out", tmp_path / "r")
    assert code == 2 and "eps=256 is too large for smoothadv" in err and "eps=1 here" in err


# -- --help, list and show-preset (item 23) -------------------------------------------------

def _subparsers():
    from rsmooth.cli import build_parser

    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_help_texts_are_clean(command):
    text = _subparsers()[command].format_help()
    assert "HP_" not in text and "%%" not in text
    assert not re.search(r"\(default:?[^()]*\)\s*\(default", text), text
    if command in ("train", "pipeline"):
        for flag, choices in (("--attack", "{pgd,ddn}"), ("--low", "{bottom-k,gaussian,none}"),
                              ("--high", "{max,mean,none}"), ("--target", "{consistency,smoothed,hard}"),
                              ("--renorm", "{rms,std}"), ("--variant", "{default,kl,mse,ce,code,paper}")):
            assert f"{flag} {choices}" in text
        assert "--macer-gamma GAMMA" in text and "--stability-gamma GAMMA" in text


def test_pipeline_certify_options_have_help():
    actions = {a.option_strings[0]: a for a in _subparsers()["pipeline"]._actions if a.option_strings}
    for flag in ("--n0", "--n", "--alpha", "--skip", "--max", "--seed"):
        assert actions[flag].help, flag
    certify = {a.option_strings[0]: a.help for a in _subparsers()["certify"]._actions if a.option_strings}
    assert actions["--alpha"].help == certify["--alpha"]


def test_list_is_readable(capsys):
    from rsmooth.presets import PRESETS, get_preset

    code, out, _ = run(capsys, "list")
    assert code == 0 and max(map(len, out.splitlines())) <= 100
    assert "fashion-mnist: catrs/0.25" in out and "rsmooth show-preset NAME" in out
    code, out, _ = run(capsys, "list", "presets")
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(PRESETS)
    for line, name in zip(lines, PRESETS.names()):
        assert line.split()[0] == name and line.endswith(get_preset(name).source)
    code, out, _ = run(capsys, "list", "methods")
    from rsmooth.methods import METHODS

    assert code == 0 and out.splitlines() == [n for n in METHODS.names() if not n.startswith("_")]
    assert out.splitlines()[:2] == ["catrs", "catrs-v1"] and "standard" in out.splitlines()


def test_show_preset(capsys):
    code, out, _ = run(capsys, "show-preset", "cifar10/macer/1.00")
    assert code == 0
    for text in ("dataset  cifar10", "method   macer", "sigma    1", "--macer-gamma 8.0  *",
                 "--deferred", "--arch cifar_resnet110", "--epochs 150", "--batch-size 64", "--lr 0.1",
                 "--lr-step 50", "source   Jeong et al. 2022", "note     several rows"):
        assert text in out, text
    code, out, _ = run(capsys, "show-preset", "fashion-mnist/catrs/0.50")
    assert "\n  --low bottom-k\n" in out and re.search(r"\n  --num-noise 4 +\*\n", out)  # defaults too
    code, _, err = run(capsys, "show-preset", "mnist/nope/0.25")
    assert code == 2 and "unknown preset 'mnist/nope/0.25'" in err


def test_demo_has_a_working_overwrite_flag():
    from rsmooth.cli import build_parser

    args = build_parser().parse_args(["demo", "--out", "d", "--epochs", "2", "--overwrite"])
    assert args.overwrite and args.epochs == 2


def test_warnings_print_as_one_line_and_debug_is_documented(tmp_path, capsys):
    """A warning during a command is one line 'rsmooth: warning: ...', not file:line + source."""
    tsv = tmp_path / "pred.tsv"
    tsv.write_text("idx\tlabel\tpredict\tradius\tcorrect\ttime\n0\t1\t1\t0.0\t1\t0.1\n")
    code, out, err = run(capsys, "analyze", tsv)
    assert code == 0 and "| pred |" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rsmooth: warning: ") and "predict run" in lines[0]
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--debug" in capsys.readouterr().out


# -- issue 37: help, listing and refusals that match what train accepts -------------------------

def test_i37_help_after_method_shows_only_its_hyperparameters(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--method", "consistency", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "--method consistency's hyperparameters (without --method, --help lists every method's):" in out
    assert "--lbd LBD" in out and "--num-noise" in out and "--macer-gamma" not in out and "--mix-eps" not in out
    assert "smoothmix:" not in out  # only consistency's own help text
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "method hyperparameters (defaults are per method" in out and "--macer-gamma" in out and "--lbd" in out


def test_i37_list_architectures_names_every_arch_train_takes(capsys):
    from rsmooth.models import DENOISERS, arch_names

    assert main(["list", "architectures"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == arch_names() + [f"{name} (denoiser)" for name in DENOISERS.names()]
    assert {"dncnn (denoiser)", "dncnn_small (denoiser)"} <= set(listed)


def test_i37_a_denoiser_arch_with_a_classifier_method_says_which_methods_train_it(tmp_path, capsys):
    from rsmooth.engine import TrainConfig

    assert main(["train", "--arch", "dncnn", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err == ("rsmooth: error: dncnn is a denoiser architecture (images to images, no classes) and --method "
                   "gaussian trains a classifier: train dncnn with --method denoise-mse or denoise-stab (in front "
                   "of a --classifier), or choose a classifier architecture ('rsmooth list architectures')\n")
    assert not (tmp_path / "r").exists()
    with pytest.raises(RsmoothError, match=r"and method='macer' trains a classifier: train dncnn_small with method "
                                           r"denoise-mse or denoise-stab \(in front of a classifier\)"):
        TrainConfig(arch="dncnn_small", method="macer").resolved()
