"""The training loop: bit-identical resume, chunking, checkpoints and their errors."""
from dataclasses import dataclass

import pytest
import torch

from rsmooth import RsmoothError
from rsmooth.engine import TrainConfig, load_model, read_checkpoint, train
from rsmooth.engine.checkpoint import atomic_save
from rsmooth.methods import METHODS, Batch, Method, StepContext, create_method
from rsmooth.methods.gaussian import gaussian_loss

QUIET = dict(progress=False, log=lambda s: None)


def _config(**kw):
    base = dict(dataset="digits", epochs=3, batch_size=128, lr=0.05, lr_step=2, seed=3,
                hparams={"sigma": 0.25})
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.slow
def test_resume_after_kill_is_bit_identical(tmp_path, check_resume):
    check_resume(_config())
    ck = read_checkpoint(tmp_path / "part" / "checkpoint.pt")
    for key in ("state_dict", "optimizer", "scheduler", "epoch", "rng", "config", "seed",
                "rsmooth_version", "data_fingerprint", "sigma", "arch", "dataset"):
        assert key in ck
    assert ck["scheduler"]["last_epoch"] == 3 and ck["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.005)


@pytest.mark.slow
def test_learning_and_log(tmp_path):
    res = train(_config(epochs=4, lr_step=50), tmp_path, **QUIET)
    assert res.history[-1]["test_acc"] > 0.6  # chance is 0.1
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert len(lines) == 4 and (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_existing_checkpoint_needs_resume_and_same_settings(tmp_path):
    train(_config(epochs=1), tmp_path, **QUIET)
    with pytest.raises(RsmoothError, match="already exists; pass resume=True"):
        train(_config(epochs=1), tmp_path, **QUIET)
    with pytest.raises(RsmoothError, match="cannot resume .* with --lr 0.05, not --lr 0.1;"):
        train(_config(epochs=2, lr=0.1), tmp_path, resume=True, **QUIET)
    # more epochs is fine
    assert len(train(_config(epochs=2), tmp_path, resume=True, **QUIET).history) == 2


@dataclass
class _Chunked(Method):
    """A Gaussian loss taking one optimiser step per chunk of 4, recording what it saw."""

    name = "_test_chunked"
    seen = []

    @property
    def num_chunks(self):
        return 4

    def loss(self, model, batch: Batch, ctx: StepContext):
        type(self).seen.append((len(batch), ctx.epoch, ctx.step, batch.idx.clone()))
        return gaussian_loss(model(batch.x + self.noise_like(batch.x, ctx)), batch.y), {}


def test_chunking_one_step_per_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(METHODS, "_items", {**METHODS._items, "_test_chunked": _Chunked})  # this test only
    _Chunked.seen.clear()
    train(_config(epochs=1, method="_test_chunked", batch_size=100), tmp_path, **QUIET)
    sizes = [s[0] for s in _Chunked.seen]
    assert sizes[:4] == [25, 25, 25, 25] and sum(sizes) == 1437
    assert [s[2] for s in _Chunked.seen] == list(range(len(sizes)))  # one step each
    idx = torch.cat([s[3] for s in _Chunked.seen])
    assert sorted(idx.tolist()) == list(range(1437))  # every example once per epoch


def test_load_model_and_checkpoint_errors(tmp_path):
    train(_config(epochs=1), tmp_path, **QUIET)
    loaded = load_model(tmp_path)
    assert loaded.dataset == "digits" and loaded.sigma == 0.25 and loaded.num_classes == 10
    with pytest.raises(RsmoothError, match="does not exist"):
        load_model(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(RsmoothError, match="cannot read checkpoint"):
        load_model(bad)
    truncated = tmp_path / "trunc.pt"
    truncated.write_bytes((tmp_path / "checkpoint.pt").read_bytes()[:5000])
    with pytest.raises(RsmoothError, match="cannot read checkpoint"):
        load_model(truncated)
    with pytest.raises(RsmoothError, match="holds a digits_cnn model, not lenet"):
        load_model(tmp_path, arch="lenet")
    with pytest.raises(RsmoothError, match="was trained on digits"):
        load_model(tmp_path, dataset="cifar10")


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickled_objects_are_refused(tmp_path):
    p = tmp_path / "evil.pt"
    torch.save({"format": "x", "obj": _Evil()}, p)
    with pytest.raises(RsmoothError, match="not a safe PyTorch checkpoint"):
        read_checkpoint(p)


def _global_pickle(path, module, name, call=True):
    """A torch zip whose pickle is ``{'f': module.name('touch marker')}`` (``call=False``: the bare
    reference ``module.name``), written opcode by opcode: GLOBAL of any module, even one absent
    here (``nt`` on POSIX)."""
    import io
    import zipfile

    args = b"X\x0c\x00\x00\x00touch marker\x85R" if call else b""  # BINUNICODE, TUPLE1, REDUCE
    data = b"\x80\x02}X\x01\x00\x00\x00fc" + f"{module}\n{name}\n".encode() + args + b"s."
    buf = io.BytesIO()
    torch.save({}, buf)
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w") as dst:
        for entry in src.namelist():
            dst.writestr(entry, data if entry.endswith("/data.pkl") else src.read(entry))
    return path


@pytest.mark.parametrize("module,name", [("os", "system"), ("posix", "system"), ("nt", "system"),
                                         ("sys", "exit")])
def test_globals_of_modules_torch_blocks_are_named_not_called_corrupt(tmp_path, monkeypatch, module, name):
    monkeypatch.chdir(tmp_path)
    p = _global_pickle(tmp_path / "evil.pt", module, name)
    with pytest.raises(RsmoothError) as e:
        read_checkpoint(p)
    assert str(e.value) == (f"checkpoint {p} is not a safe PyTorch checkpoint: it needs to unpickle "
                            f"{module}.{name} (module {module}, which torch blocks outright), which can "
                            f"run arbitrary code; pass --trust-pickle (trust_pickle=True) only if you "
                            f"trust the file")
    assert not (tmp_path / "marker").exists()
    # --trust-pickle unpickles in full as before (here a bare reference: nothing is called)
    ref = _global_pickle(tmp_path / "ref.pt", module, name, call=False)
    with pytest.warns(UserWarning, match=f"it needs {module}.{name} \\(module {module}, which torch"):
        if module == "nt":  # not importable on POSIX
            with pytest.raises(RsmoothError, match=f"cannot unpickle checkpoint {ref}: ModuleNotFoundError"):
                read_checkpoint(ref, trust_pickle=True)
        else:
            import importlib

            assert read_checkpoint(ref, trust_pickle=True) == {"f": getattr(importlib.import_module(module), name)}


def test_certify_names_a_blocked_global_in_one_line(tmp_path, monkeypatch, capsys):
    from rsmooth.cli import main

    monkeypatch.chdir(tmp_path)
    p = _global_pickle(tmp_path / "evil.pt", "posix", "system")
    assert main(["certify", "--checkpoint", str(p), "--dataset", "digits", "--sigma", "0.25",
                 "--out", str(tmp_path / "c.tsv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unpickle posix.system (module posix, which torch blocks outright)" in err
    assert not (tmp_path / "marker").exists()


def test_atomic_save_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "c.pt"
    atomic_save({"a": torch.ones(2)}, p)
    with pytest.raises(Exception):
        atomic_save({"a": lambda: 0}, p)  # unpicklable
    assert torch.equal(torch.load(p, weights_only=True)["a"], torch.ones(2))
    assert [f.name for f in tmp_path.iterdir()] == ["c.pt"]


@pytest.mark.parametrize("kw,match", [
    (dict(epochs=0), "--epochs must be >= 1"),
    (dict(epochs=2.5), "--epochs must be an integer, got 2.5"),
    (dict(batch_size="64"), "--batch-size must be an integer, got '64'"),
    (dict(lr_step=1.5), "--lr-step must be an integer, got 1.5"),
    (dict(lr=-1.0), r"--lr must be in \(0, 10\]"),
    (dict(lr="0.1"), "--lr must be a number, got '0.1'"),
    (dict(momentum="0.9"), "--momentum must be a number, got '0.9'"),
    (dict(milestones="3"), "--milestones must be increasing epochs >= 1, got '3'"),
    (dict(train_subset=10.5), "--train-subset must be an integer, got 10.5"),
    (dict(hparams=[1]), "hparams must be a mapping of the method's hyperparameters"),
    (dict(hparams={"sigma": 0.0}), "sigma must be > 0"),
    (dict(hparams={"sigma": 0.25, "lbd": 1.0}), "has no hyperparameter lbd"),
    (dict(dataset="nope"), "unknown dataset 'nope'"),
    (dict(method="nope"), "unknown training method 'nope'"),
    (dict(arch="nope"), "unknown model 'nope'"),
])
def test_config_errors(tmp_path, kw, match):
    with pytest.raises(RsmoothError, match=match):
        train(_config(**kw), tmp_path, **QUIET)


def test_create_method_registry():
    assert "gaussian" in METHODS.names()
    assert create_method("gaussian", sigma=0.5).sigma == 0.5


def test_lr_timing_matches_the_reference_scripts():
    from rsmooth.engine.train import first_lr_drop, lr_factor

    catrs = _config(epochs=150, lr_step=50).resolved()
    cohen = _config(epochs=150, lr_step=50, lr_timing="cohen").resolved()
    # Jeong-family scripts: scheduler.step(epoch) after epoch -> epochs 0..50 at the base lr
    assert [lr_factor(e, catrs) for e in (0, 50, 51, 100, 101)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])
    # Cohen: scheduler.step(epoch) before epoch -> epoch 50 is the first reduced one
    assert [lr_factor(e, cohen) for e in (0, 49, 50, 100)] == pytest.approx([1, 1, 0.1, 0.01])
    assert (first_lr_drop(catrs), first_lr_drop(cohen)) == (51, 50)
    multi = _config(epochs=90, milestones=[30, 60]).resolved()
    assert [lr_factor(e, multi) for e in (30, 31, 61)] == pytest.approx([1, 0.1, 0.01])
    with pytest.raises(RsmoothError, match="--lr-timing must be one of"):
        _config(lr_timing="late").resolved()
