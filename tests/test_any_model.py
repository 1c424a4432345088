"""Any model through every path: --arch package.module:factory, rsmooth.models entry points,
rsmooth.register_model, --mean/--std, foreign checkpoints, and Smooth.certify_batch."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import rsmooth
from rsmooth import RsmoothError, Smooth, get_dataset, load_model
from rsmooth.cli import main
from rsmooth.data import dataset_info
from rsmooth.engine import run_certification
from rsmooth.models import MODELS, arch_names, arch_ref, create_model

from conftest import QUIET

SRC = Path(rsmooth.__file__).resolve().parents[1]
MODULE = "anymodel_nets"
NETS = '''
import torch
from torch import nn


def small(num_classes, width=16):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, num_classes))


def conv(num_classes, input_size):
    c, h, w = input_size
    return nn.Sequential(nn.Conv2d(c, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * h * w, num_classes))


def five_logits():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 5))


def not_a_module(num_classes):
    return "a string"
'''
CERTIFY = ["--n0", "20", "--n", "200", "--max", "4", "--batch-size", "100"]


def _tsv(path):
    """The TSV rows without the time column."""
    lines = Path(path).read_text().splitlines()
    return [line.rsplit("\t", 1)[0] for line in lines]


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """The folder of a test-local module of factories, on sys.path for this module's tests."""
    folder = tmp_path_factory.mktemp("nets")
    (folder / f"{MODULE}.py").write_text(NETS)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


@pytest.fixture(scope="module")
def run(nets, tmp_path_factory):
    """A run folder of a module:factory model with normalisation, trained 2 epochs on digits."""
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "--arch", f"{MODULE}:small", "--arch-kwargs", '{"width": 24}', "--mean", "0.3",
                 "--std", "0.4", "--num-classes", "10", "--input-size", "1", "8", "8", "--epochs", "2",
                 "--out", str(out)]) == 0
    return out


def _run_cli(*argv, pythonpath):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-m", "rsmooth.cli", *map(str, argv)], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_module_factory_trains_certifies_and_recertifies_from_its_run_folder(run, nets, tmp_path):
    ck = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ck["arch"] == f"{MODULE}:small" and ck["config"]["arch_kwargs"] == {"width": 24}
    assert ck["config"]["mean"] == [0.3] and ck["config"]["std"] == [0.4]
    assert main(["certify", "--checkpoint", str(run), "--arch", f"{MODULE}:small", "--out", str(tmp_path / "a.tsv"),
                 *CERTIFY]) == 0
    # a new process rebuilds the model from the run folder alone (no --mean, ...; --trust-code runs its module)
    done = _run_cli("certify", "--checkpoint", run, "--trust-code", "--out", tmp_path / "b.tsv", *CERTIFY,
                    pythonpath=[SRC, nets])
    assert done.returncode == 0, done.stderr
    assert _tsv(tmp_path / "a.tsv") == _tsv(tmp_path / "b.tsv") and len(_tsv(tmp_path / "a.tsv")) == 5
    model = load_model(run, trust_code=True).model
    assert model[0].mean.flatten().tolist() == pytest.approx([0.3]) and model[1][1].out_features == 24


@pytest.mark.slow
def test_a_run_folder_whose_module_is_gone_is_refused_in_one_line(run, tmp_path):
    done = _run_cli("certify", "--checkpoint", run, "--trust-code", "--out", tmp_path / "c.tsv", *CERTIFY,
                    pythonpath=[SRC])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"cannot import module '{MODULE}'" in done.stderr and "Traceback" not in done.stderr


def test_a_flag_that_contradicts_the_run_folder_is_refused(run, tmp_path):
    with pytest.raises(RsmoothError, match="records arch_kwargs"):
        load_model(run, arch_kwargs={"width": 8})
    with pytest.raises(RsmoothError, match="holds a anymodel_nets:small model, not lenet"):
        load_model(run, arch="lenet")


def test_a_foreign_state_dict_certifies_with_arch_and_normalisation(nets, tmp_path):
    import anymodel_nets

    torch.manual_seed(0)
    net = anymodel_nets.small(10, width=12).eval()
    torch.save(net.state_dict(), tmp_path / "theirs.pt")  # bare keys, no normalisation stored
    loaded = load_model(tmp_path / "theirs.pt", dataset="digits", arch=f"{MODULE}:small",
                        arch_kwargs={"width": 12}, mean=[0.5], std=[0.2])
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(loaded.model.eval()(x), net((x - 0.5) / 0.2))
    out = tmp_path / "t.tsv"
    assert main(["certify", "--checkpoint", str(tmp_path / "theirs.pt"), "--dataset", "digits", "--sigma", "0.25",
                 "--arch", f"{MODULE}:small", "--arch-kwargs", '{"width": 12}', "--mean", "0.5", "--std", "0.2",
                 "--out", str(out), *CERTIFY]) == 0
    assert len(_tsv(out)) == 5


def test_a_foreign_file_with_normalisation_asks_for_its_mean_std(nets, tmp_path):
    """A factory's model without --mean/--std takes [0, 1] pixels: a file that stores normalisation
    buffers needs them passed (its values named), not another dataset."""
    theirs = create_model(f"{MODULE}:small", "digits", arch_kwargs={"width": 12}, mean=[0.5], std=[0.25])
    torch.save(theirs.state_dict(), tmp_path / "theirs.pt")
    load = dict(dataset="digits", arch=f"{MODULE}:small", arch_kwargs={"width": 12})
    with pytest.raises(RsmoothError, match=r"built without normalisation; pass the checkpoint's "
                                           r"--mean/--std \(--mean 0.5 --std 0.25\)$"):
        load_model(tmp_path / "theirs.pt", **load)
    with pytest.raises(RsmoothError, match=r"mean \[0.5\] differs from --mean \[0.3.*\]; pass the checkpoint's"):
        load_model(tmp_path / "theirs.pt", **load, mean=[0.3], std=[0.25])
    x = torch.rand(3, 1, 8, 8)
    loaded = load_model(tmp_path / "theirs.pt", **load, mean=[0.5], std=[0.25]).model.eval()
    assert torch.equal(loaded(x), theirs.eval()(x))


@pytest.mark.parametrize("dataset,mean,std", [("digits", [0.5], [0.25]),
                                              ("cifar10", [0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010])])
def test_mean_std_wrapping_equals_a_hand_normalised_model(nets, dataset, mean, std):
    torch.manual_seed(0)
    model = create_model(f"{MODULE}:conv", dataset, mean=mean, std=std).eval()
    x = torch.rand(4, *dataset_info(dataset).input_shape)
    m, s = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    assert torch.equal(model(x), model[1]((x - m) / s))
    plain = create_model(f"{MODULE}:conv", dataset).eval()  # a factory without --mean/--std gets [0, 1] pixels
    plain[1].load_state_dict(model[1].state_dict())
    assert torch.equal(plain(x), model[1](x))


def test_an_entry_point_architecture_is_found(nets, tmp_path, monkeypatch):
    dist = tmp_path / "fake_models-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-models\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[rsmooth.models]\nfake_small = {MODULE}:small\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "fake_small" in arch_names() and "fake_small" not in MODELS
    model = create_model("fake_small", "digits", arch_kwargs={"width": 8})
    assert model.arch == "fake_small" and model[1][1].out_features == 8
    assert arch_ref("fake_small") == "fake_small"  # a new process finds it again through the package


def test_register_model_records_an_importable_factory_for_the_cli(nets, run):
    import anymodel_nets

    try:
        rsmooth.register_model("_any_small", anymodel_nets.small)
        rsmooth.register_model("_any_local", lambda num_classes: nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes)))
        assert arch_ref("_any_small") == f"{MODULE}:small"  # what a checkpoint records: a new process imports it
        assert create_model("_any_small", "digits").arch == f"{MODULE}:small"
        assert load_model(run, arch="_any_small").arch == f"{MODULE}:small"  # the run's arch, by its name
        assert arch_ref("_any_local") == "_any_local"  # a lambda lives only in this process
        assert create_model("_any_local", "digits")(torch.rand(2, 1, 8, 8)).shape == (2, 10)
        with pytest.raises(RsmoothError, match="already registered"):
            rsmooth.register_model("_any_small", anymodel_nets.conv)
        with pytest.raises(RsmoothError, match="already registered; pick another name$"):
            rsmooth.register_model("lenet", anymodel_nets.small, replace=True)
        rsmooth.register_model("_any_small", anymodel_nets.conv, replace=True)
        assert arch_ref("_any_small") == f"{MODULE}:conv"
    finally:
        for name in ("_any_small", "_any_local"):
            MODELS._items.pop(name, None)


@pytest.mark.parametrize("argv,message", [
    (["--arch", f"{MODULE}.small"], f"unknown model '{MODULE}.small'; choose one of"),
    (["--arch", "no_such_module_xyz:net"], "cannot import module 'no_such_module_xyz' (No module named"),
    (["--arch", f"{MODULE}:nothere"], f"module '{MODULE}' has no attribute 'nothere'"),
    (["--arch", f"{MODULE}:not_a_module"], "the factory returned a str, not a torch.nn.Module"),
    (["--arch", f"{MODULE}:five_logits"], "returns 5 logits but num_classes is 10"),
    (["--arch", f"{MODULE}:small", "--arch-kwargs", "{width: 3}"], "expected a JSON object"),
    (["--arch", f"{MODULE}:small", "--arch-kwargs", "[3]"], "expected a JSON object"),
    (["--arch", f"{MODULE}:small", "--arch-kwargs", '{"depth": 3}'], "the factory failed with arguments"),
    (["--arch", "lenet", "--arch-kwargs", '{"depth": 3}'], "--arch-kwargs applies to a package.module:factory"),
    (["--arch", f"{MODULE}:small", "--mean", "0.5"], "--mean and --std go together"),
    (["--arch", f"{MODULE}:small", "--mean", "0.5", "0.5", "--std", "1", "1"], "one value per channel"),
    (["--input-size", "3", "8", "8"], "differs from dataset 'digits'"),
    (["--num-classes", "4"], "--num-classes must be at least the 10 classes"),
])
def test_bad_arch_flags_give_one_line_errors(nets, tmp_path, capsys, argv, message):
    try:
        code = main(["train", *argv, "--epochs", "1", "--out", str(tmp_path / "t")])
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("start,skip", [(0, 1), (3, 2)])
def test_certify_batch_records_equal_the_cli_rows(run, tmp_path, start, skip):
    out = run_certification(str(run), str(tmp_path / "r.tsv"), n0=20, n=200, alpha=0.001, batch_size=100,
                            start=start, skip=skip, max=4, seed=7, trust_code=True, **QUIET)
    loaded = load_model(run, trust_code=True)
    indices = list(range(start, start + 4 * skip, skip))
    xs, ys = get_dataset("digits", "test").get_batch(torch.tensor(indices))
    records = Smooth(loaded.model, loaded.num_classes, loaded.sigma).certify_batch(
        xs, n0=20, n=200, alpha=0.001, batch_size=100, labels=ys, indices=indices, seed=7)
    rows = [line.split("\t") for line in _tsv(out)[1:]]
    assert [[str(r["index"]), str(r["label"]), str(r["predict"]), repr(r["radius"]), str(int(r["correct"]))]
            for r in records] == rows
    assert set(records[0]) == {"index", "predict", "radius", "label", "correct"}


def test_a_module_factory_run_resumes_bit_identically_and_keeps_its_arch(nets, check_resume, tmp_path):
    from rsmooth.engine import TrainConfig, train

    config = TrainConfig(dataset="digits", arch=f"{MODULE}:small", arch_kwargs={"width": 8}, mean=[0.5],
                         std=[0.3], epochs=2, hparams={"sigma": 0.25})
    check_resume(config)
    changed = dataclasses.replace(config, arch_kwargs={"width": 9})
    with pytest.raises(RsmoothError, match="trained with --arch-kwargs '\\{\"width\": 8\\}'"):
        train(changed, tmp_path / "part", resume=True, **QUIET)
