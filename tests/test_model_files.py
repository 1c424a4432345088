"""Which model a weights file is loaded as, and where a model's module is found (issue 20 items 13, 14).

A file's recorded arch is used when it is built in or installed; a ``module:factory`` it names is
never imported unless the user names it; mismatched keys are named as the user's file names them.
``python -m rsmooth`` and the ``rsmooth`` script find a module named with ``--arch`` in the current
folder alike, and neither imports anything else from there.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import rsmooth
from rsmooth import RsmoothError, load_model
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, train
from rsmooth.imports import drop_implicit_cwd
from rsmooth.models import MODELS, create_model

from conftest import QUIET

SRC = Path(rsmooth.__file__).resolve().parents[1]
X = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
MODULE_TEXT = '''
import pathlib
from torch import nn

pathlib.Path("{marker}").touch()  # shows that the module was imported


def Tiny(num_classes=10, width=6):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, num_classes))
'''


def _is_cwd(entry):
    return entry in ("", ".") or Path(entry).resolve() == Path.cwd().resolve()


@pytest.fixture
def cwd_module(tmp_path, monkeypatch):
    """A folder, now the current one and not on sys.path, holding a module of factories; yields its name."""
    def make(name):
        (tmp_path / f"{name}.py").write_text(MODULE_TEXT.format(marker=tmp_path / f"{name}.imported"))
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not _is_cwd(p)])
    yield make
    for name in [m for m in sys.modules if m.startswith("h5mod")]:
        del sys.modules[name]


def _tiny_weights(seed=0, width=6):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10)).eval()
    return net, {k: v.contiguous() for k, v in net.state_dict().items()}


# ----------------------------------------------------------------------------- item 13


def test_a_module_factory_a_file_names_is_refused_unless_the_user_names_it(cwd_module, tmp_path):
    name = cwd_module("h5mod_a")
    net, sd = _tiny_weights()
    st = tmp_path / "w.safetensors"
    save_file(sd, str(st), metadata={"arch": f"{name}:Tiny", "dataset": "digits"})
    pt = tmp_path / "w.pt"
    torch.save({"arch": f"{name}:Tiny", "state_dict": sd}, pt)
    for path in (st, pt):
        with pytest.raises(RsmoothError) as e:
            load_model(path, dataset="digits")
        message = str(e.value)
        assert f"names its architecture {name}:Tiny" in message and f"pass --arch {name}:Tiny" in message
        assert "\n" not in message and "lenet" not in message and "digits_cnn" not in message
    assert name not in sys.modules and not (tmp_path / f"{name}.imported").exists()  # never imported
    loaded = load_model(st, arch=f"{name}:Tiny")  # the user names it: the opt-in
    assert loaded.arch == f"{name}:Tiny" and (tmp_path / f"{name}.imported").exists()
    with torch.no_grad():
        assert torch.equal(loaded.model.eval()(X), net(X))


def test_a_recorded_builtin_or_registered_arch_is_used(tmp_path):
    torch.manual_seed(1)
    lenet_like = create_model("digits_cnn", "digits").eval()
    p = tmp_path / "d.safetensors"
    save_file(dict(lenet_like.state_dict()), str(p), metadata={"arch": "digits_cnn", "dataset": "digits"})
    assert load_model(p).arch == "digits_cnn"
    net, sd = _tiny_weights(width=5)
    try:
        rsmooth.register_model("_h5_tiny", lambda num_classes: nn.Sequential(
            nn.Flatten(), nn.Linear(64, 5), nn.ReLU(), nn.Linear(5, num_classes)))
        save_file(sd, str(p), metadata={"arch": "_h5_tiny", "dataset": "digits"})
        loaded = load_model(p)  # not the dataset's default digits_cnn
        assert loaded.arch == "_h5_tiny"
        with torch.no_grad():
            assert torch.equal(loaded.model.eval()(X), net(X))
    finally:
        MODELS._items.pop("_h5_tiny", None)


def test_a_recorded_entry_point_arch_is_used(cwd_module, tmp_path, monkeypatch):
    name = cwd_module("h5mod_ep")
    dist = tmp_path / "site" / "h5_models-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: h5-models\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[rsmooth.models]\nh5_tiny_ep = {name}:Tiny\n")
    shutil.copy(tmp_path / f"{name}.py", tmp_path / "site")  # an installed package: on sys.path
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    net, sd = _tiny_weights()
    p = tmp_path / "e.safetensors"
    save_file(sd, str(p), metadata={"arch": "h5_tiny_ep", "dataset": "digits"})
    loaded = load_model(p)
    assert loaded.arch == "h5_tiny_ep"
    with torch.no_grad():
        assert torch.equal(loaded.model.eval()(X), net(X))


def test_the_users_arch_wins_over_the_recorded_one(cwd_module, tmp_path):
    name = cwd_module("h5mod_b")
    net, sd = _tiny_weights(width=4)
    p = tmp_path / "w.safetensors"
    save_file(sd, str(p), metadata={"arch": "digits_cnn", "dataset": "digits"})
    loaded = load_model(p, arch=f"{name}:Tiny", arch_kwargs={"width": 4})
    with torch.no_grad():
        assert loaded.arch == f"{name}:Tiny" and torch.equal(loaded.model.eval()(X), net(X))


def test_without_a_recorded_arch_a_mismatch_says_pass_arch_and_names_the_files_keys(tmp_path):
    _, sd = _tiny_weights()
    sd = {{"1": "fc", "3": "head"}[k.split(".")[0]] + "." + k.split(".", 1)[1]: v for k, v in sd.items()}
    p = tmp_path / "bare.safetensors"
    save_file(sd, str(p), metadata={"dataset": "digits"})
    with pytest.raises(RsmoothError) as e:
        load_model(p)
    message = str(e.value)
    assert "records no architecture, so digits_cnn (the default for digits) was tried: pass --arch" in message
    # the model's keys as a bare net names them, the file's own keys: no rsmooth "1." prefix
    assert "missing keys conv1.bias, conv1.weight, conv2.bias, ... (8 in all)" in message
    assert "unexpected keys fc.bias, fc.weight, head.bias, ... (4 in all)" in message
    assert "\n" not in message and " 1." not in message
    save_file(sd, str(p), metadata={"dataset": "digits", "arch": "wide_resnet_h5"})
    with pytest.raises(RsmoothError, match=r"'wide_resnet_h5' is not built in or installed, so digits_cnn "
                                           r"\(the default for digits\) was tried: pass --arch"):
        load_model(p)


def test_indexed_files_keep_their_own_prefix_and_shapes_name_the_files_keys(tmp_path):
    torch.manual_seed(0)
    sd = dict(create_model("digits_cnn", "digits").state_dict())
    sd = {"module." + k: v for k, v in sd.items() if k.startswith("1.")}  # DataParallel around Cohen's Sequential
    key = next(k for k in sd if k.endswith("fc2.weight"))
    sd[key] = torch.zeros(3, 3)
    p = tmp_path / "dp.pt"
    torch.save({"state_dict": sd, "arch": "digits_cnn"}, p)
    with pytest.raises(RsmoothError, match=r"shape mismatch module\.1\.fc2\.weight: checkpoint \(3, 3\)"):
        load_model(p, dataset="digits")


def test_cli_refuses_the_recorded_module_and_certifies_with_arch(cwd_module, tmp_path, capsys):
    name = cwd_module("h5mod_c")
    _, sd = _tiny_weights()
    p = tmp_path / "w.safetensors"
    save_file(sd, str(p), metadata={"arch": f"{name}:Tiny", "dataset": "digits"})
    args = ["certify", "--checkpoint", str(p), "--sigma", "0.25", "--n0", "10", "--n", "50", "--max", "2"]
    assert main([*args, "--out", str(tmp_path / "a.tsv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rsmooth: error: ") and err.count("\n") == 1 and f"--arch {name}:Tiny" in err
    assert main([*args, "--out", str(tmp_path / "b.tsv"), "--arch", f"{name}:Tiny"]) == 0
    assert json.loads(Path(f"{tmp_path / 'b.tsv'}.json").read_text())["arch"] == f"{name}:Tiny"


# ----------------------------------------------------------------------------- item 14


def test_a_named_module_is_found_in_the_current_folder_after_sys_path(cwd_module, tmp_path):
    name = cwd_module("h5mod_d")
    assert not any(_is_cwd(p) for p in sys.path)
    model = create_model(f"{name}:Tiny", "digits")
    assert model.arch == f"{name}:Tiny" and Path(sys.path[-1]).resolve() == tmp_path.resolve()  # appended last


def test_a_run_folders_module_is_not_imported_from_the_current_folder(cwd_module, tmp_path):
    name = cwd_module("h5mod_e")
    run = tmp_path / "run"
    create_model(f"{name}:Tiny", "digits")  # named: found in the current folder (training itself never looks there)
    train(TrainConfig(dataset="digits", arch=f"{name}:Tiny", epochs=1, train_subset=64), run, **QUIET)
    sys.path.remove(os.getcwd())  # a new process: nothing imported, the current folder not on sys.path
    del sys.modules[name]
    with pytest.raises(RsmoothError) as e:
        load_model(run, trust_code=True)  # even trusted, from sys.path only
    message = str(e.value)
    assert f"cannot import module '{name}'" in message and f"pass --arch {name}:Tiny" in message
    assert name not in sys.modules and "\n" not in message
    assert load_model(run, arch=f"{name}:Tiny").arch == f"{name}:Tiny"  # named by the user: found


def test_drop_implicit_cwd_removes_only_the_first_entry_when_it_is_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for before, after in [([str(tmp_path), "/a", str(tmp_path)], ["/a", str(tmp_path)]),
                          (["", "/a"], ["/a"]), (["/a", str(tmp_path)], ["/a", str(tmp_path)])]:
        monkeypatch.setattr(sys, "path", list(before))
        drop_implicit_cwd()
        assert sys.path == after


MODEL_FILE = '''
from torch import nn


def tiny(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
'''
STRAY = 'raise SystemExit("the stray {} in the current folder was imported")\n'


def _entry_points():
    script = shutil.which("rsmooth", path=str(Path(sys.executable).parent)) or shutil.which("rsmooth")
    if script is None:
        pytest.skip("the rsmooth console script is not installed")
    return {"module": [sys.executable, "-m", "rsmooth"], "script": [script]}


def _run(cmd, cwd, *argv):
    env = {**os.environ, "PYTHONPATH": str(SRC), "RSMOOTH_DEBUG": ""}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([*cmd, *map(str, argv)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a new process imports torch: seconds
def test_python_m_imports_nothing_from_the_current_folder(tmp_path):
    (tmp_path / "numpy.py").write_text(STRAY.format("numpy.py"))
    (tmp_path / "argparse.py").write_text(STRAY.format("argparse.py"))
    done = _run(_entry_points()["module"], tmp_path, "list", "datasets")
    assert done.returncode == 0 and "cifar10" in done.stdout, done.stderr


@pytest.mark.slow  # five new processes
def test_both_entry_points_train_and_certify_a_module_in_the_current_folder(tmp_path):
    """The issue's report: mymodels.py in the current folder was found by python -m only."""
    entry = _entry_points()
    (tmp_path / "h5nets.py").write_text(MODEL_FILE)
    cert = ["--n0", "10", "--n", "100", "--max", "3", "--batch-size", "100"]
    done = _run(entry["script"], tmp_path, "train", "--arch", "h5nets:tiny", "--epochs", "1", "--out", "run")
    assert done.returncode == 0, done.stderr
    rows = {}
    for how, cmd in entry.items():
        done = _run(cmd, tmp_path, "certify", "--checkpoint", "run", "--arch", "h5nets:tiny", "--out", f"{how}.tsv",
                    *cert)
        assert done.returncode == 0, done.stderr
        rows[how] = [line.rsplit("\t", 1)[0] for line in (tmp_path / f"{how}.tsv").read_text().splitlines()]
    assert rows["module"] == rows["script"] and len(rows["module"]) == 4
    errors = []
    for how, cmd in entry.items():  # the run folder's record alone does not import from the current folder
        done = _run(cmd, tmp_path, "certify", "--checkpoint", "run", "--out", f"{how}-2.tsv", *cert)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        errors.append(done.stderr)
    assert errors[0] == errors[1] and "pass --arch h5nets:tiny" in errors[0]


# ----------------------------------------------------------------------------- issue 37, item 5


def _shared_lists(levels, width=10):
    x = [0]
    for _ in range(levels):
        x = [x] * width  # one list, referred to width times: a small pickle, width**levels values
    return x


def _self_referencing():
    x = []
    x.append(x)
    return x


@pytest.mark.parametrize("bomb,message", [(_shared_lists(10), "holds more than 100000 values"),
                                          (_self_referencing(), "is nested more than 64 levels deep (or holds itself)")])
def test_i37_a_checkpoint_whose_arch_kwargs_unfold_without_end_is_refused_quickly(tmp_path, capsys, bomb, message):
    ck = tmp_path / "c.pt"
    torch.save({"arch": "digits_cnn", "state_dict": {}, "config": {"arch_kwargs": {"a": bomb}}}, ck)
    assert ck.stat().st_size < 4000
    code = main(["certify", "--checkpoint", str(ck), "--out", str(tmp_path / "c.tsv"), "--dataset", "digits"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"checkpoint {ck}" in err and message in err, err
    with pytest.raises(RsmoothError, match=r"^arch_kwargs (holds more|is nested more) than .*; rsmooth reads no larger"):
        create_model("digits_cnn", "digits", arch_kwargs={"a": bomb})  # the same bound in Python
