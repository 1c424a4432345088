"""Bad input (issue 37, items 7-8): absurd numbers and values of the wrong type on the command line,
in config files, checkpoints, certify TSVs, sidecars and run folders are each one line on stderr
and exit 2, before any work; never an internal error, a silent acceptance or a run of hours.

Each case of CASES is (id, what to write in the test's folder, argv, a substring of the line);
``{tmp}`` in argv is that folder, ``{ckpt}`` a hand-made rsmooth checkpoint there.  The cases of
``certify --diffusion`` (DDPM files and schedules, items 7-9, 20-21) are written in
``test_bad_input_37_diffusion.CASES`` beside their builders and run here, in the same table.
"""
import json

import pytest
import torch

from test_bad_input_37_diffusion import CASES as DIFFUSION_CASES
from test_diffusion_certify import files  # noqa: F401  (fixture: a classifier and a DDPM file)

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine.checkpoint import FORMAT
from rsmooth.metrics import TSV_HEADER

HUGE = str(2 ** 64)  # 18446744073709551616


def _checkpoint(tmp, **edit):
    """A digits_cnn rsmooth checkpoint (untrained) with ``edit``ed entries, as ``tmp/ckpt.pt``."""
    from rsmooth.models import create_model

    ck = {"format": FORMAT, "arch": "digits_cnn", "dataset": "digits", "num_classes": 10, "input_shape": [1, 8, 8],
          "sigma": 0.25, "epoch": 1, "config": {"epochs": 1},
          "state_dict": create_model("digits_cnn", "digits").state_dict()}
    torch.save({**ck, **edit}, tmp / "ckpt.pt")


def _strings(tmp):
    from rsmooth.models import create_model

    _checkpoint(tmp, state_dict={k: "x" for k in create_model("digits_cnn", "digits").state_dict()})


def _file(name, text):
    """Write ``text`` (str, or bytes as they are) to ``tmp/name``."""
    def build(tmp):
        (tmp / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return build


def _tsv(row, sidecar=None):
    def build(tmp):
        (tmp / "c.tsv").write_text(TSV_HEADER + "\n" + row + "\n")
        if sidecar is not None:
            (tmp / "c.tsv.json").write_text(sidecar)
    return build


def _run_folder(damage):
    """A reproduction folder (catrs:table4, gaussian 0.25, seed 0) whose run ``damage`` edits."""
    def build(tmp):
        run = tmp / "rep" / "runs" / "fashion-mnist" / "gaussian_0.25" / "seed0"
        run.mkdir(parents=True)
        damage(run)
    return build


def _sidecar_list(run):
    _checkpoint(run)
    (run / "ckpt.pt").rename(run / "checkpoint.pt")
    (run / "certify.tsv").write_text(TSV_HEADER + "\n")
    (run / "certify.tsv.json").write_text("[]")


def _config_string(run):
    _checkpoint(run, config="gaussian, 1 epoch")
    (run / "ckpt.pt").rename(run / "checkpoint.pt")


CERTIFY = ["certify", "--checkpoint", "{tmp}/none", "--out", "{tmp}/c.tsv"]
PREDICT = ["predict", "--checkpoint", "{tmp}/none", "--out", "{tmp}/c.tsv"]
TRAIN = ["train", "--out", "{tmp}/run"]
REPRODUCE = ["reproduce", "catrs:table4", "--budget", "smoke", "--methods", "gaussian", "--sigmas", "0.25",
             "--out", "{tmp}/rep"]
COUNT = "expected an integer of at most 2**40 (1,099,511,627,776)"
FINITE = "expected a finite number, got "

CASES = [
    # -- the tester's: integer flags out of range (were an internal error or silently accepted)
    ("n-2**64", None, CERTIFY + ["--n", HUGE], f"argument --n: {COUNT}, got '{HUGE}'; lower it"),
    ("n0-2**64", None, CERTIFY + ["--n0", HUGE], f"argument --n0: {COUNT}"),
    ("n-2**63-1", None, CERTIFY + ["--n", str(2 ** 63 - 1)], f"argument --n: {COUNT}"),
    ("n-1e15", None, CERTIFY + ["--n", "1e15"], f"argument --n: {COUNT}, got '1e15'"),
    ("predict-n-1e20", None, PREDICT + ["--n", "1e20"], f"argument --n: {COUNT}, got '1e20'"),
    ("workers-negative", None, TRAIN + ["--workers", "-3"], "--workers must be >= 0, got -3"),
    # -- any count or index flag
    ("max", None, CERTIFY + ["--max", str(2 ** 50)], f"argument --max: {COUNT}"),
    ("skip", None, CERTIFY + ["--skip", "1e13"], f"argument --skip: {COUNT}"),
    ("start", None, PREDICT + ["--start", HUGE], f"argument --start: {COUNT}"),
    ("batch-size", None, CERTIFY + ["--batch-size", str(2 ** 41)], f"argument --batch-size: {COUNT}"),
    ("n-max", None, CERTIFY + ["--adaptive", "--n-max", HUGE], f"argument --n-max: {COUNT}"),
    ("epochs", None, TRAIN + ["--epochs", HUGE], f"argument --epochs: {COUNT}"),
    ("hparam-int", None, TRAIN + ["--method", "smoothmix", "--num-noise", "1e15"], f"argument --num-noise: {COUNT}"),
    ("seeds", None, REPRODUCE + ["--seeds", HUGE], f"argument --seeds: {COUNT}"),
    ("seeds-many", None, REPRODUCE + ["--seeds", "1e6"],
     "--seeds must be 1 to 100 (the papers average over 5 at most)"),
    ("jobs-many", None, REPRODUCE + ["--jobs", "100000"], "--jobs must be 1 to 256 (processes), got 100000"),
    ("num-classes", None, TRAIN + ["--num-classes", "1e9"],
     "--num-classes must be at least the 10 classes of digits and at most 1,048,576, got 1000000000"),
    ("workers-many", None, TRAIN + ["--workers", "100000"], "--workers must be at most 256, got 100000"),
    ("fraction", None, CERTIFY + ["--n", "100.5"], "argument --n: expected an integer, got '100.5'"),
    # -- float flags: inf, nan, absurd
    ("lr-1e300", None, TRAIN + ["--lr", "1e300"], "--lr must be in (0, 10] (the papers use 0.01-0.1), got 1e+300"),
    ("lr-inf", None, TRAIN + ["--lr", "inf"], f"argument --lr: {FINITE}'inf'"),
    ("weight-decay", None, TRAIN + ["--weight-decay", "1e300"], "--weight-decay must be in [0, 1] (e.g. 1e-4)"),
    ("sigma-nan", None, CERTIFY + ["--sigma", "nan"], f"argument --sigma: {FINITE}'nan'"),
    ("alpha-nan", None, PREDICT + ["--alpha", "nan"], f"argument --alpha: {FINITE}'nan'"),
    ("hparam-float", None, TRAIN + ["--method", "smoothadv", "--eps=-inf"], f"argument --eps: {FINITE}'-inf'"),
    ("sequential-radii", None, CERTIFY + ["--sequential", "--radii", "0.5", "1e300"],
     "radii must be at most 100 (sigma <= 10 certifies at most 83), got 1e+300"),
    ("analyze-radii", _tsv("0\t1\t1\t0.5\t1\t0.1"), ["analyze", "{tmp}/c.tsv", "--radii", "nan"],
     f"argument --radii: {FINITE}'nan'"),
    # -- config files: values of the wrong type or range, bytes that are not UTF-8
    ("config-batch-size", _file("c.yaml", "batch_size: 99999999999999999999\n"), TRAIN + ["--config", "{tmp}/c.yaml"],
     "c.yaml: batch_size must be an integer, got 99999999999999999999, which does not fit 64 bits; lower it"),
    ("config-latin-1", _file("c.yaml", "dataset: digits\n# caf\xe9\n".encode("latin-1")),
     TRAIN + ["--config", "{tmp}/c.yaml"], "c.yaml: not UTF-8 text (invalid continuation byte at byte 21); save it"),
    ("config-workers", _file("c.yaml", "num_workers: -3\n"), TRAIN + ["--config", "{tmp}/c.yaml"],
     "--workers must be >= 0, got -3"),
    ("config-json-latin-1", _file("c.json", b'{"dataset": "caf\xe9"}'), TRAIN + ["--config", "{tmp}/c.json"],
     "c.json: not UTF-8 text"),
    ("config-inf", _file("c.yaml", "lr: .inf\n"), TRAIN + ["--config", "{tmp}/c.yaml"],
     "c.yaml: lr must be a number or null, got inf, which is not finite"),
    ("config-nan-hparam", _file("c.json", '{"method": "gaussian", "hparams": {"sigma": NaN}}'),
     TRAIN + ["--config", "{tmp}/c.json"],
     "c.json: hparams: sigma must be a number, got nan, which is not finite"),
    ("config-epochs-huge", _file("c.json", '{"epochs": 1099511627777}'), TRAIN + ["--config", "{tmp}/c.json"],
     "--epochs must be at most 2**40 (1,099,511,627,776), got 1099511627777; lower it"),
    ("config-lr", _file("c.json", '{"lr": 1e300}'), TRAIN + ["--config", "{tmp}/c.json"], "--lr must be in (0, 10]"),
    # -- checkpoints: entries of the wrong type
    ("ckpt-config-str", lambda t: _checkpoint(t, config="oops"), CERTIFY[:2] + ["{tmp}/ckpt.pt"] + CERTIFY[3:],
     "ckpt.pt is an rsmooth checkpoint whose 'config' is str 'oops', not mapping; it was edited or damaged"),
    ("ckpt-weights-str", _strings, CERTIFY[:2] + ["{tmp}/ckpt.pt"] + CERTIFY[3:],
     "whose state_dict holds str 'x' under '1.conv1.weight', not a tensor; it was edited or damaged: restore it"),
    ("ckpt-num-classes", lambda t: _checkpoint(t, num_classes="10"), PREDICT[:2] + ["{tmp}/ckpt.pt"] + PREDICT[3:],
     "whose 'num_classes' is str '10', not int"),
    ("ckpt-state-dict-list", lambda t: _checkpoint(t, state_dict=[1, 2]), PREDICT[:2] + ["{tmp}/ckpt.pt"] + PREDICT[3:],
     "whose 'state_dict' is list [1, 2], not mapping"),
    ("ckpt-sigma", lambda t: _checkpoint(t, sigma="0.25"),
     ["targets", "--checkpoint", "{tmp}/ckpt.pt", "--out", "{tmp}/t.npy"], "whose 'sigma' is str '0.25', not int or float"),
    ("ckpt-epoch-bool", lambda t: _checkpoint(t, epoch=True), CERTIFY[:2] + ["{tmp}/ckpt.pt"] + CERTIFY[3:],
     "whose 'epoch' is bool True, not int"),
    # -- certify TSVs and sidecars: numbers that are not finite or out of range
    ("tsv-idx-1e23", _tsv("1e23\t1\t1\t0.5\t1\t0.1"), ["analyze", "{tmp}/c.tsv"],
     "line 2: malformed row: idx/label/predict must be integers, got '1e23'"),
    ("tsv-idx-huge", _tsv(f"{10 ** 23}\t1\t1\t0.5\t1\t0.1"), ["analyze", "{tmp}/c.tsv"],
     f"line 2: malformed row: idx {10 ** 23} and label 1 must be >= 0 and at most 2**40"),
    ("tsv-radius-1e308", _tsv("0\t1\t1\t1e308\t1\t0.1"), ["analyze", "{tmp}/c.tsv"],
     "line 2: malformed row: radius 1e+308 must be finite, >= 0 and at most 100 (sigma <= 10"),
    ("tsv-radius-nan", _tsv("0\t1\t1\tnan\t1\t0.1"), ["analyze", "{tmp}/c.tsv"], "radius nan must be finite"),
    ("tsv-label-huge", _tsv(f"0\t{2 ** 62}\t{2 ** 62}\t0.5\t1\t0.1"), ["analyze", "{tmp}/c.tsv", "--json"],
     f"idx 0 and label {2 ** 62} must be >= 0 and at most 2**40"),
    ("tsv-predict-huge", _tsv(f"0\t1\t{2 ** 63}\t0.5\t0\t0.1"), ["analyze", "{tmp}/c.tsv"],
     f"predict {2 ** 63} must be a class (>= 0) or -1 (abstain), at most 2**40"),
    ("tsv-time-inf", _tsv("0\t1\t1\t0.5\t1\tinf"), ["analyze", "{tmp}/c.tsv"],
     "time 'inf' must be a finite number of seconds >= 0"),
    ("sidecar-list", _tsv("0\t1\t1\t0.5\t1\t0.1", "[]"), ["analyze", "{tmp}/c.tsv"],
     "c.tsv.json: sidecar JSON must be an object, got list; rerun the certify command with --overwrite"),
    ("sidecar-n-string", _tsv("0\t1\t1\t0.5\t1\t0.1", '{"n": "1e5"}'), ["analyze", "{tmp}/c.tsv", "--ci"],
     "damaged sidecar: n '1e5' must be an integer >= 1"),
    ("sidecar-n-huge", _tsv("0\t1\t1\t0.5\t1\t0.1", '{"n": 1e400}'), ["analyze", "{tmp}/c.tsv", "--ci"],
     "c.tsv.json: damaged sidecar: n inf must be an integer >= 1, at most 2**40"),
    ("sidecar-sigma-huge", _tsv("0\t1\t1\t0.5\t1\t0.1", '{"sigma": 1e300}'), ["analyze", "{tmp}/c.tsv"],
     "damaged sidecar: sigma 1e+300 must be a number > 0, at most 10"),
    ("sidecar-n-2**70", _tsv("0\t1\t1\t0.5\t1\t0.1", '{"n": %d}' % 2 ** 70), ["analyze", "{tmp}/c.tsv", "--ci"],
     f"damaged sidecar: n {2 ** 70} must be an integer >= 1, at most 2**40"),
    # -- reproduce over run folders with a damaged file
    ("reproduce-sidecar-list", _run_folder(_sidecar_list), REPRODUCE,
     "seed0/certify.tsv.json: sidecar JSON must be an object, got list; rerun the certify command with --overwrite"),
    ("reproduce-config-str", _run_folder(_config_string), REPRODUCE,
     "seed0/checkpoint.pt is an rsmooth checkpoint whose 'config' is str 'gaussian, 1 epoch', not mapping"),
]


def _diffusion(builder, flags):
    """argv(tmp, files) of a --diffusion case: the fixture's classifier behind what ``builder`` writes."""
    def argv(tmp, files):
        return ["certify", "--checkpoint", str(files / "model.pt"), "--dataset", "digits", "--arch", "digits_cnn",
                "--sigma", "0.25", "--diffusion", builder(tmp, files), "--n0", "10", "--n", "100000", "--max", "1",
                "--batch-size", "20", "--out", str(tmp / "c.tsv"), *flags]
    return argv


#: the whole table: CASES, then the --diffusion cases (argv a function of the folder and the fixture)
ALL_CASES = CASES + [(f"diffusion-{name}", None, _diffusion(builder, flags), expected)
                     for name, builder, flags, expected in DIFFUSION_CASES]


def _main(argv):
    try:
        return main(argv)
    except SystemExit as e:  # an argparse error
        return e.code


@pytest.mark.parametrize("build,argv,expected", [c[1:] for c in ALL_CASES], ids=[c[0] for c in ALL_CASES])
def test_bad_input_is_one_line(build, argv, expected, tmp_path, capsys, monkeypatch, request):
    monkeypatch.chdir(tmp_path)  # relative paths resolve here; a pickle's 'touch marker' would land here
    if build is not None:
        build(tmp_path)
    argv = argv(tmp_path, request.getfixturevalue("files")) if callable(argv) else [a.format(tmp=tmp_path) for a in argv]
    before = sorted(tmp_path.rglob("*"))
    assert _main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("rsmooth") and expected in err, err
    assert "internal error" not in err and "Traceback" not in err and "\x1b" not in err
    assert sorted(tmp_path.rglob("*")) == before or argv[0] == "reproduce"  # no work was started, no marker


def test_case_ids_are_unique():
    assert len({c[0] for c in ALL_CASES}) == len(ALL_CASES)


# -- the same bounds below the command line: the Python API ---------------------------------------
def test_the_api_bounds_counts_too(tmp_path):
    from rsmooth.engine import TrainConfig, run_certification
    from rsmooth.smoothing import validate_count

    assert validate_count("n", 2 ** 40) == 2 ** 40
    with pytest.raises(RsmoothError, match=r"n must be at most 2\*\*40 \(1,099,511,627,776\), got 1099511627777; "
                                           r"lower it"):
        validate_count("n", 2 ** 40 + 1)
    with pytest.raises(RsmoothError, match=r"n must be at most 2\*\*40 .*, got 9223372036854775807"):
        run_certification(str(tmp_path / "none"), str(tmp_path / "c.tsv"), n=2 ** 63 - 1, progress=False)
    with pytest.raises(RsmoothError, match=r"n0 must be at most 2\*\*40"):
        run_certification(str(tmp_path / "none"), str(tmp_path / "c.tsv"), n0=2 ** 64, progress=False)
    with pytest.raises(RsmoothError, match=r"--workers must be at most 256"):
        TrainConfig(num_workers=10 ** 6).resolved()
    assert TrainConfig(num_workers=256, lr=10.0).resolved().num_workers == 256


def test_integers_may_be_written_with_an_exponent():
    from rsmooth.cli import build_parser

    args = build_parser().parse_args(["certify", "--checkpoint", "c", "--out", "o.tsv", "--n", "1e5", "--n0", "100"])
    assert (args.n, args.n0) == (100_000, 100) and type(args.n) is int


def test_a_checkpoint_with_the_entries_it_should_have_loads(tmp_path):
    from rsmooth.engine import load_model

    _checkpoint(tmp_path)
    assert load_model(tmp_path / "ckpt.pt").num_classes == 10


def test_the_config_file_of_a_run_still_reads(tmp_path):
    from rsmooth.engine import TrainConfig

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"config": TrainConfig(seed=2 ** 63 - 1, lr=0.1).to_dict()}))
    assert TrainConfig.from_file(path).seed == 2 ** 63 - 1
