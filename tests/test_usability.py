"""Tried as a new user would: the README's and the getting-started page's Python blocks, progress
and ETA, method statistics, the demo's settings, resuming to fewer epochs, radii in the reference scripts' 1/256 units."""
import functools
import io
import json
import re
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import rsmooth
from conftest import trained_module
from rsmooth import progress
from rsmooth import demo
from rsmooth.demo import run_demo
from rsmooth.engine import TrainConfig, read_checkpoint, train
from rsmooth.errors import RsmoothError
from rsmooth.methods import METHODS, Batch, StepContext, create_method

ROOT = Path(__file__).resolve().parents[1]
QUIET = dict(progress=False, log=lambda s: None)


# -- the README ----------------------------------------------------------------------------

@pytest.mark.slow
def test_readme_and_getting_started_python_blocks_run(tmp_path, monkeypatch, capsys):
    """The README's 10-line example, then the Python blocks of docs/getting-started.md (where the
    README's longer ones moved), in one folder: the second reuses the run the first trained."""
    (example,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(example.strip().splitlines()) <= 10 and "Smooth" in example
    monkeypatch.chdir(tmp_path)
    readme: dict = {}
    exec(compile(example, "README.md", "exec"), readme)
    first = readme["records"]
    assert [r["index"] for r in first] == list(range(8)) and {"predict", "radius", "correct"} <= set(first[0])
    assert str(first[0]) in capsys.readouterr().out
    page = ROOT / "docs" / "getting-started.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks and "from rsmooth import" in blocks[0] and "load_model" in blocks[0]
    scope: dict = {}
    exec(compile(blocks[0], str(page), "exec"), scope)
    assert scope["votes"].shape == (8, 10) and int(scope["votes"].sum()) == 8 * 1000
    assert scope["loaded"].sigma == 0.25 and scope["loaded"].num_classes == 10
    assert re.search(r"certified -?\d+ with l2 radius \d\.\d{3}", capsys.readouterr().out)
    exec(compile(blocks[1], str(page), "exec"), scope)  # the three lines of Smooth.certify_batch
    records = scope["records"]
    assert [r["index"] for r in records] == list(range(8)) and {"predict", "radius", "correct"} <= set(records[0])
    assert records == first  # the same run, images, n and seed: the same certificates


def test_package_exports_load_model_and_ships_types():
    from rsmooth.engine.checkpoint import load_model

    assert rsmooth.load_model is load_model and "load_model" in rsmooth.__all__
    assert (Path(rsmooth.__file__).parent / "py.typed").exists()
    assert re.search(r'\[tool\.setuptools\.package-data\]\s*rsmooth = \["py\.typed"\]',
                     (ROOT / "pyproject.toml").read_text())


# -- method statistics ---------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in METHODS.names() if not n.startswith("_")])
def test_method_stats_are_detached(name):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 5))
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(4, 1, 3, 4, generator=g), torch.tensor([0, 1, 2, 3])
    batch = Batch(x, y, torch.arange(4), {"targets": torch.full((4, 5), 0.2)})
    method = create_method(name, **({"num_steps": 2} if "num_steps" in create_method(name).hparams() else {}))
    model = trained_module(method, net, 1)
    loss, stats = method.loss(model, batch, StepContext(torch.Generator().manual_seed(1), num_epochs=2))
    assert loss.requires_grad and stats
    for key, value in stats.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0 and not value.requires_grad, key
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.tensor([float(v) for v in stats.values()])  # what a user's logger does


# -- radii in [0, 1] pixel units -----------------------------------------------------------

@pytest.mark.parametrize("name,field", [("smoothadv", "eps"), ("catrs", "eps"), ("catrs-v1", "eps"),
                                        ("smoothmix", "eps"), ("smoothmix", "mix_eps"),
                                        ("smoothmix", "alpha_step")])
def test_radius_in_reference_units_is_refused(name, field):
    with pytest.raises(RsmoothError, match=rf"{field}=256 is too large .* is {field}=1 here"):
        create_method(name, **{field: 256.0})
    assert getattr(create_method(name, **{field: 2.0}), field) == 2.0  # the papers' largest


# -- progress ------------------------------------------------------------------------------

class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty

    def write(self, s):
        return len(s)

    def flush(self):
        pass


def _kernel(config):
    shell = types.SimpleNamespace(config=config)
    return types.SimpleNamespace(get_ipython=lambda: shell if config is not None else None)


@pytest.mark.parametrize("tty,ipython,expected", [
    (True, None, True),                                  # a terminal
    (False, None, False),                                # a pipe or a log file
    (False, _kernel({"IPKernelApp": {}}), True),         # a Jupyter kernel
    (False, _kernel({}), False),                         # terminal IPython with stderr piped
    (False, _kernel(None), False),                       # IPython imported, no shell running
])
def test_interactive(monkeypatch, tty, ipython, expected):
    monkeypatch.setattr(sys, "stderr", _Stream(tty))
    if ipython is None:
        monkeypatch.delitem(sys.modules, "IPython", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert progress.interactive() is expected
    assert progress.progress_bar(total=3, enabled=True).disable is (not expected)
    assert progress.progress_bar(total=3, enabled=False).disable


def test_bar_counts_images(monkeypatch):
    monkeypatch.setattr(progress, "interactive", lambda: True)
    bar = progress.progress_bar(total=5, desc="x", file=io.StringIO())
    bar.update(5)
    assert bar.format_dict["unit"] == "img" and "5/5" in str(bar)
    bar.close()


def test_format_duration():
    assert [progress.format_duration(s) for s in (0.4, 42, 192, 7500)] == ["0s", "42s", "3m12s", "2h05m"]


def test_train_logs_eta_and_bars_raise_no_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "interactive", lambda: True)  # draw the bars (into pytest's capture)
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        train(TrainConfig(epochs=2, batch_size=512), str(tmp_path / "r"), log=lines.append)
    epochs = [ln for ln in lines if ln.startswith("epoch ")]
    assert re.search(r"  eta \d+s$", epochs[0]) and "eta" not in epochs[1]


# -- settings that were silently ignored ---------------------------------------------------

def test_resume_to_fewer_epochs_is_refused(tmp_path):
    config = TrainConfig(epochs=2, batch_size=512)
    train(config, str(tmp_path / "r"), **QUIET)
    with pytest.raises(RsmoothError, match="already trained 2 epochs; pass epochs=2 or more"):
        train(TrainConfig(epochs=1, batch_size=512), str(tmp_path / "r"), resume=True, **QUIET)
    lines = []
    train(config, str(tmp_path / "r"), resume=True, progress=False, log=lines.append)
    assert any("already trained all 2 epochs; nothing to do" in ln for ln in lines)
    assert read_checkpoint(tmp_path / "r")["epoch"] == 2


@pytest.mark.slow
def test_demo_refuses_other_settings_and_overwrites(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "run_certification", functools.partial(demo.run_certification, max=4))
    out = tmp_path / "demo"
    kw = dict(sigmas=(0.5,), n=100, log=lambda s: None)
    table = run_demo(str(out), epochs=1, **kw)
    assert run_demo(str(out), epochs=1, **kw) == table  # same settings: reused
    with pytest.raises(RsmoothError, match=r"holds a demo run with .*epochs=1.*pass overwrite=True"):
        run_demo(str(out), epochs=2, **kw)
    (out / "keep.txt").write_text("not the demo's")
    run_demo(str(out), epochs=2, overwrite=True, **kw)
    assert read_checkpoint(out / "gaussian_0.50")["epoch"] == 2
    assert json.loads((out / "demo.json").read_text())["epochs"] == 2
    assert (out / "keep.txt").exists()


# -- issue 37: messages right for where they are read -----------------------------------------

def test_i37_a_finished_run_says_so_in_the_callers_spelling(tmp_path, capsys):
    """A finished run reused says it is finished (and resumes nothing), naming the setting to raise
    as the caller gives it: a keyword from Python, a flag in a command."""
    from rsmooth.cli import main

    run = tmp_path / "r"
    config = TrainConfig(epochs=1, batch_size=512, train_subset=64, eval_every=0)
    train(config, str(run), **QUIET)
    lines = []
    train(config, str(run), resume=True, progress=False, log=lines.append)
    assert lines == [f"{run / 'checkpoint.pt'} has already trained all 1 epochs; nothing to do (to train "
                     f"further, pass more epochs, e.g. epochs=2)"]
    with pytest.raises(RsmoothError, match=r"already exists; pass resume=True to continue that run or choose "
                                           r"another out$"):
        train(config, str(run), **QUIET)
    assert main(["train", "--out", str(run), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "nothing to do (to train further, pass more epochs, e.g. --epochs 2)" in out and "resuming" not in out
    assert main(["train", "--out", str(run)]) == 2
    assert "already exists; pass --resume to continue that run or choose another --out" in capsys.readouterr().err


@pytest.mark.parametrize("argv,hint", [
    (["train", "--out", "r"], " with --resume to continue from the last saved step"),
    (["certify", "--checkpoint", "r", "--out", "c.tsv"],
     " (without --overwrite) to continue the file: its finished rows are kept"),
    (["predict", "--checkpoint", "r", "--out", "p.tsv"],
     " (without --overwrite) to continue the file: its finished rows are kept"),
    (["targets", "--checkpoint", "r", "--out", "t.pt"], " (without --overwrite) to continue"),
    (["list"], ""),
])
def test_i37_a_stopped_command_says_how_it_continues(monkeypatch, capsys, argv, hint):
    """Ctrl-C's line gives the stopped subcommand's own advice (certify continues its file; only
    train needs --resume), in one process and in a torchrun rank."""
    from rsmooth.cli import certify, listing, main, targets
    from rsmooth.cli import train as train_cli
    from rsmooth.torchrun import stop_line

    def ctrl_c(args):
        raise KeyboardInterrupt

    for module in (train_cli, certify, targets, listing):
        monkeypatch.setattr(module, "run", ctrl_c)
    assert main(argv) == 130
    assert capsys.readouterr().err == f"rsmooth: interrupted; rerun the same command{hint}\n"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert stop_line(False, hint) == f"rsmooth: rank 1 of 2: interrupted; rerun the same torchrun command{hint}"


def test_i37_settings_are_named_as_the_reader_gives_them():
    from rsmooth.errors import command_line, setting, spelled

    assert [setting("epochs", 3), setting("resume", True), setting("out"), spelled("--sequential", "mode=...")] == [
        "epochs=3", "resume=True", "out", "mode=..."]
    with command_line():
        assert [setting("epochs", 3), setting("resume", True), setting("out"), spelled("--sequential", "mode=..."),
                setting("keep", True, flag="--keep-shards"), setting("num_workers", 2, flag="--workers")] == [
            "--epochs 3", "--resume", "--out", "--sequential", "--keep-shards", "--workers 2"]
    assert setting("out") == "out"  # the command's spelling ends with it
