"""A file never makes rsmooth run code (issue 21 item 1; bad input of item 5 for load_model).

Every loading path gets a hostile checkpoint, run folder, safetensors file or denoiser run whose
arch is a payload that writes a marker file: ``os:system`` with a harmless ``touch`` (the real
attack) and a factory of a module on ``sys.path``.  Each is refused in one line naming the
callable and the opt-ins, and the marker stays absent; ``--arch SAME`` and ``--trust-code`` load
a legitimate ``module:factory`` model.
"""
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import rsmooth
from rsmooth import RsmoothError, load_model
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, train
from rsmooth.engine.checkpoint import file_sha256, seal
from rsmooth.models import MODELS, create_model
from rsmooth.models.dncnn import create_denoiser
from rsmooth.trust import UntrustedCode

from conftest import QUIET, SUBPROCESS_ENV

NETS = '''
from torch import nn


def tiny(num_classes, width=6):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, num_classes))
'''
PAYLOAD = '''
import pathlib
from torch import nn


def make(marker, num_classes=10):
    pathlib.Path(marker).touch()  # the attack's effect
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
'''
LEGIT = "trustnets:tiny"
CERTIFY = ["--n", "50", "--max", "2", "--batch-size", "50", "--n0", "10"]  # predict: without the last two


def _payloads(marker):
    """(arch, arch_kwargs) of each payload: the shell command of the issue, and a module's factory."""
    return {"os:system": {"command": f"touch {shlex.quote(str(marker))}"},
            "trustpayload:make": {"marker": str(marker)}}


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """A folder on sys.path with the legitimate factory module and the payload module."""
    folder = tmp_path_factory.mktemp("nets")
    (folder / "trustnets.py").write_text(NETS)
    (folder / "trustpayload.py").write_text(PAYLOAD)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    for name in ("trustnets", "trustpayload"):
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def runs(nets, tmp_path_factory):
    """A module:factory classifier run and a denoiser run in front of it (trained with trust_code)."""
    root = tmp_path_factory.mktemp("runs")
    fast = dict(dataset="digits", epochs=1, train_subset=64, eval_examples=0)
    train(TrainConfig(arch=LEGIT, hparams={"sigma": 0.25}, **fast), root / "clf", **QUIET)
    train(TrainConfig(method="denoise-mse", classifier=str(root / "clf"), arch="dncnn_small", optimizer="adam",
                      lr=1e-3, hparams={"sigma": 0.25}, **fast), root / "den", trust_code=True, **QUIET)
    return root


def _edit(run, dest, **changes):
    """A copy of run folder ``run`` whose checkpoint and config.json record ``changes`` (arch,
    arch_kwargs: in the config too; classifier): what an attacker edits, the weights untouched."""
    shutil.copytree(run, dest)
    ck = torch.load(dest / "checkpoint.pt", weights_only=True)
    record = json.loads((dest / "config.json").read_text())
    for key, value in changes.items():
        if key != "arch_kwargs":
            ck[key] = value
        if key != "classifier":
            ck["config"][key] = record["config"][key] = value
    torch.save(seal(ck), dest / "checkpoint.pt")  # an attacker recomputes the digest
    (dest / "config.json").write_text(json.dumps(record, default=repr))  # a tensor: only the checkpoint holds one
    return dest


@pytest.fixture(params=["os:system", "trustpayload:make"])
def hostile(request, runs, tmp_path):
    """(a run folder recording payload ``arch`` with its arch_kwargs, the arch, the marker it writes)."""
    marker = tmp_path / "MARKER"
    arch = request.param
    run = _edit(runs / "clf", tmp_path / "hostile", arch=arch, arch_kwargs=_payloads(marker)[arch])
    yield run, arch, marker
    assert not marker.exists(), "the payload ran"


def _refused(e, arch):
    message = str(e)
    assert f"names its architecture {arch}," in message and "--trust-code" in message, message
    assert "\n" not in message


def _cli(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


# ------------------------------------------------------------------ refused by default


def test_load_model_refuses_a_checkpoint_naming_code(hostile):
    run, arch, _ = hostile
    with pytest.raises(UntrustedCode) as e:
        load_model(run)
    _refused(e.value, arch)
    assert f"pass --arch {arch} (arch={arch!r} in Python) or --trust-code" in str(e.value)


@pytest.mark.parametrize("argv", [
    ["certify"], ["predict"], ["certify", "--sequential", "--radii", "0.25"],
    ["certify", "--shard", "0/2"],
    ["certify", "--corruption", "gaussian_noise", "--severity", "1"],
], ids=["certify", "predict", "sequential", "shard", "corruption"])
def test_certify_and_predict_refuse_a_checkpoint_naming_code(hostile, argv, tmp_path, capsys):
    run, arch, _ = hostile
    out = tmp_path / ("c" if "--corruption" in argv else "c.tsv")
    cert = {"certify": CERTIFY, "predict": CERTIFY[:-2]}[argv[0]]
    cert = cert[2:] if "--sequential" in argv else cert  # sequential takes --n-max, not --n
    code, err = _cli([*argv, "--checkpoint", str(run), "--out", str(out), *cert], capsys)
    assert code == 2 and err.count("\n") == 1 and f"names its architecture {arch}," in err, err
    assert not list(tmp_path.glob("c*"))


def test_targets_refuse_a_checkpoint_naming_code(hostile, tmp_path, capsys):
    run, arch, _ = hostile
    code, err = _cli(["targets", "--checkpoint", str(run), "--out", str(tmp_path / "t.npy")], capsys)
    assert code == 2 and err.count("\n") == 1 and f"names its architecture {arch}," in err, err


def test_a_resumed_run_folder_naming_code_is_refused(hostile, capsys):
    run, arch, _ = hostile
    with pytest.raises(UntrustedCode) as e:
        TrainConfig.from_run(run)
    _refused(e.value, arch)
    assert str(e.value).startswith(f"run folder {run} (config.json) names")
    with pytest.raises(UntrustedCode):
        train(None, run, resume=True, **QUIET)  # resolving and building the model called it before
    code, err = _cli(["train", "--resume", "--out", str(run)], capsys)
    assert code == 2 and err.count("\n") == 1 and f"names its architecture {arch}," in err, err


def test_training_a_denoiser_on_a_classifier_naming_code_is_refused(hostile, tmp_path, capsys):
    run, arch, _ = hostile
    code, err = _cli(["train", "--dataset", "digits", "--method", "denoise-mse", "--classifier", str(run),
                      "--out", str(tmp_path / "d")], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"--classifier: its classifier {run} names its architecture {arch}," in err
    assert "pass --trust-code" in err and "--arch" not in err  # --arch names the denoiser's


def test_a_denoiser_run_naming_code_is_refused(hostile, runs, tmp_path):
    _, arch, marker = hostile
    den = _edit(runs / "den", tmp_path / "den", arch=arch, arch_kwargs=_payloads(marker)[arch])
    with pytest.raises(UntrustedCode) as e:
        load_model(den, trust_code=False)
    _refused(e.value, arch)


def test_a_denoiser_run_whose_classifier_names_code_is_refused(hostile, runs, tmp_path):
    run, arch, _ = hostile
    clf = run / "checkpoint.pt"
    den = _edit(runs / "den", tmp_path / "den", classifier={"path": str(clf), "sha256": file_sha256(clf), "arch": arch})
    with pytest.raises(UntrustedCode) as e:
        load_model(den, arch="dncnn_small")  # naming the denoiser's arch does not approve its classifier's
    _refused(e.value, arch)
    assert f"its classifier {clf} names" in str(e.value) and "--arch" not in str(e.value)


def test_safetensors_metadata_naming_code_is_refused(nets, tmp_path, capsys):
    marker = tmp_path / "MARKER"
    net = create_model(LEGIT, "digits")
    weights = {k[2:]: v for k, v in net.state_dict().items() if k.startswith("1.")}
    p = tmp_path / "w.safetensors"
    save_file(weights, str(p), metadata={"arch": "trustpayload:make", "dataset": "digits"})
    with pytest.raises(UntrustedCode) as e:
        load_model(p)
    _refused(e.value, "trustpayload:make")
    assert "pass --arch trustpayload:make (with --arch-kwargs" in str(e.value)
    code, err = _cli(["certify", "--checkpoint", str(p), "--out", str(tmp_path / "c.tsv"), *CERTIFY], capsys)
    assert code == 2 and "names its architecture trustpayload:make," in err and not marker.exists()
    save_file(weights, str(p), metadata={"arch": LEGIT, "dataset": "digits"})
    with pytest.raises(UntrustedCode):
        load_model(p)
    assert load_model(p, trust_code=True).arch == LEGIT  # opted in


def test_i37_a_config_file_naming_code_is_refused(hostile, tmp_path, capsys):
    """A run's config.json (or YAML) given to --config, also to resume that run, is a file like the
    checkpoint: its module:factory needs --arch SAME or --trust-code."""
    import yaml

    run, arch, _ = hostile
    config = run / "config.json"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(json.loads(config.read_text())["config"]))
    with pytest.raises(UntrustedCode) as e:
        TrainConfig.from_file(config)
    _refused(e.value, arch)
    for argv in (["--config", str(config), "--out", str(tmp_path / "t")],
                 ["--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "t")],
                 ["--out", str(run), "--resume", "--config", str(config)]):
        code, err = _cli(["train", *argv], capsys)
        assert code == 2 and err.count("\n") == 1 and err.startswith("rsmooth: error: config file "), err
        assert f"names its architecture {arch}," in err and "--trust-code" in err
    assert not (tmp_path / "t").exists()


def test_i37_a_config_files_module_factory_with_an_opt_in(runs):
    from rsmooth.cli import build_parser
    from rsmooth.cli.train import train_config_from_args

    config = str(runs / "clf" / "config.json")
    for flags in (["--arch", LEGIT], ["--trust-code"]):
        args = build_parser().parse_args(["train", "--config", config, "--out", "x", *flags])
        assert train_config_from_args(args).arch == LEGIT


@pytest.mark.parametrize("run_name", ["clf", "den"])
def test_i37_resume_with_trust_code_never_imports_a_module_from_the_current_folder(runs, run_name, tmp_path,
                                                                                    monkeypatch, capsys):
    """cd RUN && rsmooth train --out . --resume --trust-code: the module the run records (classifier
    or denoiser) is looked for on sys.path only, never in the run folder it ships in."""
    marker = tmp_path / "MARKER"
    run = _edit(runs / run_name, tmp_path / "run", arch="i37evil:make", arch_kwargs={"width": 1})
    (run / "i37evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                    f"def make(**kw):\n    raise SystemExit\n")
    monkeypatch.chdir(run)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != run.resolve()])
    code, err = _cli(["train", "--out", ".", "--resume", "--trust-code"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "cannot import module 'i37evil'" in err and "pass --arch i37evil:make" in err
    assert not marker.exists() and "i37evil" not in sys.modules


# ------------------------------------------------------------------ the opt-ins


def test_arch_same_name_or_trust_code_load_a_module_factory_run(runs):
    for kwargs in ({"arch": LEGIT}, {"trust_code": True}):
        loaded = load_model(runs / "clf", **kwargs)
        assert loaded.arch == LEGIT and loaded.model[1][1].out_features == 6
    with pytest.raises(UntrustedCode, match=f"pass --arch {LEGIT} "):
        load_model(runs / "clf")


def test_the_cli_certifies_a_module_factory_run_with_arch_or_trust_code(runs, tmp_path, capsys):
    rows = []
    for flags in (["--arch", LEGIT], ["--trust-code"]):
        out = tmp_path / f"{flags[0]}.tsv"
        code, err = _cli(["certify", "--checkpoint", str(runs / "clf"), "--out", str(out), *flags, *CERTIFY], capsys)
        assert code == 0, err
        rows.append([line.rsplit("\t", 1)[0] for line in out.read_text().splitlines()])
    assert rows[0] == rows[1] and len(rows[0]) == 3
    code, _ = _cli(["targets", "--checkpoint", str(runs / "clf"), "--out", str(tmp_path / "t.npy"), "--trust-code",
                    "--num-samples", "4", "--train-subset", "64"], capsys)
    assert code == 0 and (tmp_path / "t.npy").exists()


def test_a_resumed_module_factory_run_needs_arch_or_trust_code(runs, tmp_path):
    with pytest.raises(UntrustedCode, match=f"pass --arch {LEGIT} "):
        TrainConfig.from_run(runs / "clf")
    assert TrainConfig.from_run(runs / "clf", arch=LEGIT).arch == LEGIT
    assert TrainConfig.from_run(runs / "clf", trust_code=True).arch == LEGIT
    with pytest.raises(UntrustedCode, match=f"^config file .* pass --arch {LEGIT} "):  # travels like a run
        TrainConfig.from_file(runs / "clf" / "config.json")
    assert TrainConfig.from_file(runs / "clf" / "config.json", trust_code=True).arch == LEGIT
    run = shutil.copytree(runs / "clf", tmp_path / "more")
    assert train(None, run, resume=True, trust_code=True, **QUIET).checkpoint.exists()


def test_a_denoiser_on_a_module_factory_classifier_needs_trust_code(runs, tmp_path, capsys):
    with pytest.raises(UntrustedCode, match="its classifier .* pass --trust-code"):
        load_model(runs / "den")
    loaded = load_model(runs / "den", trust_code=True)
    assert loaded.arch == f"dncnn_small+{LEGIT}"
    code, err = _cli(["train", "--dataset", "digits", "--method", "denoise-mse", "--classifier", str(runs / "clf"),
                      "--out", str(tmp_path / "d")], capsys)
    assert code == 2 and "--classifier: its classifier" in err and not (tmp_path / "d").exists()


def test_a_model_registered_in_this_process_loads_without_a_flag(runs):
    import trustnets

    try:
        rsmooth.register_model("_trust_tiny", trustnets.tiny)  # records trustnets:tiny
        assert load_model(runs / "clf").arch == LEGIT
    finally:
        MODELS._items.pop("_trust_tiny", None)


@pytest.mark.slow  # a new process imports torch
def test_python_m_in_a_run_folder_never_imports_the_module_it_ships(runs, tmp_path):
    """Even with --trust-code, a recorded module is looked for on sys.path only, not in the run
    folder that ``python -m rsmooth`` is started from."""
    marker = tmp_path / "MARKER"
    run = _edit(runs / "clf", tmp_path / "run", arch="shipped:make", arch_kwargs={})
    (run / "shipped.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                    f"def make(num_classes):\n    raise SystemExit\n")
    done = subprocess.run([sys.executable, "-m", "rsmooth", "certify", "--checkpoint", ".", "--trust-code",
                           "--out", "c.tsv", *CERTIFY], cwd=run, env=SUBPROCESS_ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot import module 'shipped'" in done.stderr and "pass --arch shipped:make" in done.stderr
    assert not marker.exists()


# ------------------------------------------------------------------ arch_kwargs are data


@pytest.mark.parametrize("kwargs,message", [
    ([1], "arch_kwargs must be a dict of keyword arguments (a JSON object"),
    ({"width": print}, "arch_kwargs['width'] is not data but a builtin_function_or_method"),
    ({1: 2}, "arch_kwargs has the key 1, not a string"),
    ({"a": [1, {"b": torch.zeros(1)}]}, "arch_kwargs['a'][1]['b'] is not data but a Tensor"),
])
def test_arch_kwargs_must_be_json_like_data(nets, kwargs, message):
    for call in (lambda: load_model("nowhere", arch_kwargs=kwargs),
                 lambda: create_model(LEGIT, "digits", arch_kwargs=kwargs),
                 lambda: create_denoiser("trustnets:tiny", 1, kwargs=kwargs)):
        with pytest.raises(RsmoothError) as e:
            call()
        assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_recorded_arch_kwargs_that_are_not_data_are_refused(runs, tmp_path):
    run = _edit(runs / "clf", tmp_path / "r", arch=LEGIT, arch_kwargs={"width": torch.tensor(6)})
    with pytest.raises(RsmoothError, match=r"arch_kwargs\['width'\] is not data but a Tensor"):
        load_model(run, trust_code=True)


def test_a_builtin_denoiser_takes_no_arch_kwargs():
    with pytest.raises(RsmoothError, match="--arch-kwargs applies to a package.module:factory denoiser"):
        create_denoiser("dncnn_small", 1, kwargs={"width": 3})


@pytest.mark.parametrize("path", [123, None, ["a"]])
def test_load_model_of_something_not_a_path_is_one_line(path):
    with pytest.raises(RsmoothError, match="checkpoint must be a file or folder path"):
        load_model(path)
