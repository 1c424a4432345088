"""Symbolic links in an output folder never redirect a write (issue 21, item 3).

On a group-writable folder anyone may place ``c.tsv.lock -> ~/victim``; rsmooth must not write
``victim``.  Files written whole replace the link itself; locks and files written incrementally
refuse it with one line.  Each test checks that the victim is unchanged."""
from pathlib import Path

import pytest

from conftest import QUIET
from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, train
from rsmooth.fileio import atomic_write_text, open_nofollow, run_lock

VICTIM_TEXT = "a colleague's file\n"
LINK_ERROR = "is a symbolic link; rsmooth does not write through links"
CERTIFY = ["--n", "200", "--n0", "20", "--batch-size", "200", "--max", "4"]


@pytest.fixture
def victim(tmp_path):
    p = tmp_path / "elsewhere" / "victim"
    p.parent.mkdir()
    p.write_text(VICTIM_TEXT)
    yield p
    assert p.read_text() == VICTIM_TEXT and p.is_file() and not p.is_symlink()


def _link(at: Path, victim: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(victim)
    return at


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny trained run folder to certify."""
    out = tmp_path_factory.mktemp("run")
    train(TrainConfig(dataset="digits", epochs=1, hparams={"sigma": 0.25}, train_subset=200), out, **QUIET)
    return out


def _refused(capsys, *argv):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and LINK_ERROR in err and len(err.splitlines()) == 1, (code, err)
    return err


# ----------------------------------------------------------------------------- fileio


@pytest.mark.parametrize("dangling", [False, True])
def test_a_linked_lock_is_refused_and_left_alone(tmp_path, victim, dangling):
    target = tmp_path / "elsewhere" / "new" if dangling else victim
    lock = _link(tmp_path / "out" / "c.tsv.lock", target)
    with pytest.raises(RsmoothError, match=f"{lock} {LINK_ERROR}"):
        with run_lock(lock, "c.tsv"):
            pass
    assert lock.is_symlink() and not (tmp_path / "elsewhere" / "new").exists()


@pytest.mark.parametrize("mode", ["w", "a", "ab", "r+b"])
def test_incremental_writes_refuse_links(tmp_path, victim, mode):
    with pytest.raises(RsmoothError, match=LINK_ERROR):
        open_nofollow(_link(tmp_path / "f", victim), mode)
    with open_nofollow(tmp_path / "g", "a") as f:  # a plain file still works
        f.write("x")
    assert (tmp_path / "g").read_text() == "x"


def test_whole_writes_replace_the_link(tmp_path, victim):
    link = _link(tmp_path / "table.md", victim)
    atomic_write_text(link, "table\n")
    assert not link.is_symlink() and link.read_text() == "table\n"


# ----------------------------------------------------------------------------- commands


def test_certify_refuses_a_linked_lock_and_output(run, tmp_path, victim, capsys):
    out = tmp_path / "s" / "c.tsv"
    _link(Path(f"{out}.lock"), victim)
    _refused(capsys, "certify", "--checkpoint", run, "--out", out, *CERTIFY)
    Path(f"{out}.lock").unlink()
    new = victim.with_name("new")  # the output itself, linked to a file to be created (~/.bashrc)
    _link(out, new)
    _refused(capsys, "certify", "--checkpoint", run, "--out", out, *CERTIFY)
    assert not new.exists()


def test_merge_refuses_a_linked_lock(run, tmp_path, victim, capsys):
    out = tmp_path / "s" / "c.tsv"
    for i in range(2):
        assert main(["certify", "--checkpoint", str(run), "--out", str(out), "--shard", f"{i}/2", *CERTIFY]) == 0
    capsys.readouterr()
    lock = _link(Path(f"{out}.lock"), victim)
    _refused(capsys, "merge", out, "--keep-shards")
    lock.unlink()
    shard_lock = _link(tmp_path / "s" / "c.shard-1-of-2.tsv.lock", victim)
    _refused(capsys, "merge", out, "--keep-shards")
    shard_lock.unlink()
    assert main(["merge", str(out), "--keep-shards"]) == 0


def test_targets_refuse_a_linked_lock(run, tmp_path, victim, capsys):
    out = tmp_path / "t.npy"
    _link(Path(f"{out}.lock"), victim)
    _refused(capsys, "targets", "--checkpoint", run, "--num-samples", 2, "--out", out)
    assert not out.exists()


def test_train_refuses_a_linked_lock(tmp_path, victim, capsys):
    out = tmp_path / "run"
    _link(out / ".lock", victim)
    _refused(capsys, "train", "--dataset", "digits", "--epochs", 1, "--train-subset", 100, "--sigma", 0.25,
             "--out", out)


def test_train_replaces_linked_run_files(tmp_path, victim):
    out = tmp_path / "run"
    links = [_link(out / name, victim.with_name(name)) for name in ("train.log", "config.json", "checkpoint.pt")]
    train(TrainConfig(dataset="digits", epochs=1, hparams={"sigma": 0.25}, train_subset=100), out, **QUIET)
    assert not any(p.is_symlink() for p in links) and list(victim.parent.iterdir()) == [victim]
    assert len((out / "train.log").read_text().splitlines()) == 1


def test_reproduce_replaces_linked_table_results_and_commands(tmp_path, victim):
    from rsmooth.reproduce import reproduce

    out = tmp_path / "rep"
    links = [_link(out / name, victim) for name in ("table.md", "results.json", "commands/stage1.txt")]
    reproduce("catrs:table4", str(out), budget="smoke", methods=["gaussian"], sigmas=[0.25], collect=True)
    reproduce("catrs:table4", str(out), budget="smoke", methods=["gaussian"], sigmas=[0.25], print_commands=True)
    assert not any(p.is_symlink() for p in links) and "catrs:table4" in (out / "table.md").read_text()


def test_reproduce_step_logs_refuse_links(tmp_path, victim):
    from rsmooth.reproduce.plan import Step
    from rsmooth.reproduce.run import run_steps

    steps = [Step("train", f"step {k}", ["--version"], tmp_path / f"out{k}") for k in range(2)]
    _link(tmp_path / "logs" / "step_0.log", victim)  # the first step started
    with pytest.raises(RsmoothError, match=LINK_ERROR):
        run_steps(steps, 2, tmp_path / "logs", log=lambda s: None)


def test_analyze_replaces_a_linked_plot(tmp_path, victim):
    from rsmooth.metrics import CertifyWriter

    with CertifyWriter(tmp_path / "c.tsv") as w:
        w.write(0, 1, 1, 0.5, True, 0.1)
    plot = _link(tmp_path / "plot.png", victim)
    assert main(["analyze", str(tmp_path / "c.tsv"), "--plot", str(plot)]) == 0
    assert not plot.is_symlink() and plot.read_bytes().startswith(b"\x89PNG")



# ----------------------------------------------------------------------------- tensorboard (issue 37, item 4)


def test_i37_a_linked_tensorboard_folder_is_refused(tmp_path, victim, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    _link(out / "tensorboard", victim.parent)
    _refused(capsys, "train", "--dataset", "digits", "--epochs", "1", "--train-subset", "64", "--eval-examples", "0",
             "--tensorboard", "--out", out)
    assert [p.name for p in victim.parent.iterdir()] == ["victim"]


def test_i37_an_events_file_name_planted_as_a_link_is_never_written(tmp_path, victim, monkeypatch):
    """Links at every name tensorboard would give the events file (time, host, pid, counter) are left
    alone: the file gets a random suffix nobody can plant a link at."""
    pytest.importorskip("tensorboard")
    import os
    import socket
    import time

    from rsmooth.engine.callbacks import TensorBoardLogger

    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)
    folder = tmp_path / "run" / "tensorboard"
    folder.mkdir(parents=True)
    name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}"
    for uid in range(100):
        _link(folder / f"{name}.{uid}", victim)
    logger = TensorBoardLogger(folder)
    logger.on_train_begin({"global_step": 0, "config": {"seed": 0}})
    logger.on_epoch_end({"epoch": 1, "loss": 0.5})
    logger.on_train_end({})
    written = [p for p in folder.iterdir() if not p.is_symlink()]
    assert len(written) == 1 and written[0].name.startswith(name) and written[0].stat().st_size > 0
