"""Preemption inside an epoch (issue 20, item 2): --checkpoint-every, SIGTERM/SIGINT save the step
in progress, and --resume continues from it bit-identically (weights, history, train.log)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import QUIET, SUBPROCESS_ENV as ENV
from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, read_checkpoint, train
from rsmooth.engine.checkpoint import seal
from rsmooth.engine.preempt import CheckpointClock, parse_checkpoint_every

train_mod = sys.modules["rsmooth.engine.train"]  # the module (rsmooth.engine.train is the function)

CONFIG = dict(dataset="digits", epochs=2, batch_size=64, lr=0.05, lr_step=1, seed=5, train_subset=640)
FLAGS = ["--dataset", "digits", "--epochs", "2", "--batch-size", "64", "--lr", "0.05",
         "--lr-step", "1", "--seed", "5", "--sigma", "0.25", "--train-subset", "640"]


def _config(**kw):
    return TrainConfig(**{**CONFIG, "hparams": {"sigma": 0.25}, **kw})


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The uninterrupted run (10 steps per epoch)."""
    out = tmp_path_factory.mktemp("ref")
    train(_config(), out, **QUIET)
    return out


def _without_time(history):
    return [{k: v for k, v in r.items() if k != "time"} for r in history]


def _log_lines(run):
    return _without_time(json.loads(line) for line in (Path(run) / "train.log").read_text().splitlines())


def assert_same_run(ref, run):
    """Bit-identical weights, optimiser state, history and train.log (times aside)."""
    a, b = read_checkpoint(ref), read_checkpoint(run)
    assert "partial" not in b and b["epoch"] == a["epoch"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert _without_time(a["history"]) == _without_time(b["history"])
    assert _log_lines(ref) == _log_lines(run)


def _cli(*args):
    return subprocess.Popen([sys.executable, "-m", "rsmooth", *map(str, args)], env=ENV, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _partial(run):
    try:
        return read_checkpoint(run).get("partial")
    except RsmoothError:  # not written yet
        return None


def _wait_for(condition, proc, what, timeout=180):
    end = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"finished before {what}: {proc.communicate()}"
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


# ----------------------------------------------------------------------------- --checkpoint-every


@pytest.mark.parametrize("text,parsed", [("500", (500, None)), (7, (7, None)), ("600s", (None, 600.0)),
                                         ("10m", (None, 600.0)), ("1.5h", (None, 5400.0)), (None, (None, None))])
def test_checkpoint_every_syntax(text, parsed):
    assert parse_checkpoint_every(text) == parsed


@pytest.mark.parametrize("bad", ["0", "-5", "1.5", "10x", "m", "", "0s", True])
def test_checkpoint_every_errors(bad, capsys, tmp_path):
    with pytest.raises(RsmoothError, match=r"^--checkpoint-every must be a number of optimiser steps \(e.g. 500\) "
                       r"or a duration \(e.g. 600s, 10m, 1h\), got"):
        parse_checkpoint_every(bad)
    assert main(["train", "--dataset", "digits", "--checkpoint-every", str(bad), "--out", str(tmp_path / "never")]) == 2
    assert "--checkpoint-every must be" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_checkpoint_clock():
    clock = CheckpointClock("3", global_step=10)
    assert [clock.due(s) for s in (11, 12, 13)] == [False, False, True]
    clock.reset(13)
    assert not clock.due(14) and not CheckpointClock(None).due(10 ** 9)
    timed = CheckpointClock("1s")
    assert not timed.due(1)
    timed.last_time -= 2
    assert timed.due(1)


# ----------------------------------------------------------------------------- kills


def _stop_at_a_partial(p, run):
    """SIGSTOP ``p`` once its checkpoint is mid-epoch, then SIGKILL it there."""
    while True:
        _wait_for(lambda: _partial(run) is not None, p, "a mid-epoch checkpoint")
        p.send_signal(signal.SIGSTOP)
        partial = _partial(run)
        if partial is not None:
            p.kill()
            p.communicate(timeout=60)
            return partial
        p.send_signal(signal.SIGCONT)  # an epoch's end: let it run on


@pytest.mark.slow
def test_sigkill_mid_epoch_resumes_bit_identically(ref, tmp_path):
    run = tmp_path / "run"
    p = _cli("train", *FLAGS, "--checkpoint-every", "1", "--out", run)
    try:
        partial = _stop_at_a_partial(p, run)
    finally:
        p.kill()
    assert p.returncode == -signal.SIGKILL and 0 < partial["steps"]
    ck = read_checkpoint(run)
    assert ck["epoch"] == partial["epoch"] and len(ck["history"]) == ck["epoch"]
    assert json.loads((run / "config.json").read_text())["config"]["checkpoint_every"] == "1"
    logs = []
    train(_config(checkpoint_every="1"), run, resume=True, progress=False, log=logs.append)
    assert f"resuming {run / 'checkpoint.pt'} in epoch {partial['epoch'] + 1} after step {partial['steps']}" in logs
    assert_same_run(ref, run)
    sessions = json.loads((run / "config.json").read_text())["sessions"]  # the two invocations, where each began
    assert [(e["epoch"], e["step"]) for e in sessions] == [(0, 0), (partial["epoch"], partial["steps"])]
    assert read_checkpoint(run)["sessions"] == sessions


@pytest.mark.slow
def test_sigterm_mid_epoch_saves_the_step_and_resume_finishes(ref, tmp_path, capsys):
    run = tmp_path / "run"
    p = _cli("train", *FLAGS, "--checkpoint-every", "3", "--workers", "2", "--out", run)
    try:  # SIGTERM once epoch 2 has begun (7 steps and an evaluation to go), to the loader workers too
        _wait_for(lambda: (_partial(run) or {}).get("epoch") == 1, p, "a checkpoint in epoch 2")
        os.killpg(p.pid, signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 143, stderr
    assert stderr.strip() == ("rsmooth: terminated; rerun the same command with --resume to continue from the "
                              "last saved step")
    partial = read_checkpoint(run)["partial"]
    assert partial["epoch"] == 1 and partial["steps"] >= 1
    assert (f"stopped in epoch 2/2 after step {partial['steps']}/10: saved {run / 'checkpoint.pt'}; "
            f"rerun with --resume to continue from this step") in stdout
    assert main(["train", *FLAGS, "--checkpoint-every", "3", "--out", str(run), "--resume"]) == 0
    assert_same_run(ref, run)
    assert sorted(f.name for f in run.iterdir()) == ["checkpoint.pt", "config.json", "train.log"]


class _Signal:
    """A callback that sends ``sig`` to this process after global step ``at``."""

    def __init__(self, at, sig=signal.SIGINT):
        self.at, self.sig = at, sig

    def on_step(self, record):
        if record["global_step"] == self.at:
            os.kill(os.getpid(), self.sig)


def test_sigint_in_process_every_step_count_and_old_checkpoints(ref, tmp_path):
    run, logs = tmp_path / "run", []
    checkpoints = []

    class Saved:
        def on_checkpoint(self, info):
            checkpoints.append((info["epoch"], info["step"], info["reason"]))

    with pytest.raises(KeyboardInterrupt):
        train(_config(checkpoint_every="4"), run, progress=False, log=logs.append, callbacks=[_Signal(16), Saved()])
    assert checkpoints == [(0, 4, "every"), (0, 8, "every"), (1, 0, "epoch"), (1, 4, "every"), (1, 6, "signal")]
    assert logs[-1].startswith("stopped in epoch 2/2 after step 6/10")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert read_checkpoint(run)["partial"]["batch"] == 6
    train(_config(), run, resume=True, **QUIET)
    assert_same_run(ref, run)

    # an end-of-epoch checkpoint written before these fields existed still resumes
    old = tmp_path / "old"
    train(_config(), old, stop_after_epoch=1, **QUIET)
    ck = read_checkpoint(old)
    for key in ("checkpoint_every", "eval_every", "eval_examples", "tensorboard"):
        del ck["config"][key]
    torch.save(seal(ck), old / "checkpoint.pt")
    train(_config(), old, resume=True, **QUIET)
    assert_same_run(ref, old)


def test_stop_during_evaluation_saves_the_epochs_steps(ref, tmp_path, monkeypatch):
    evaluate, logs = train_mod.evaluate, []

    def interrupted(*args, **kw):  # Ctrl-C while the second epoch is evaluated
        if args[3] == train_mod.derive_seed(CONFIG["seed"], 1):
            os.kill(os.getpid(), signal.SIGINT)
        return evaluate(*args, **kw)

    monkeypatch.setattr(train_mod, "evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(_config(), tmp_path / "run", progress=False, log=logs.append)
    monkeypatch.undo()
    partial = read_checkpoint(tmp_path / "run")["partial"]
    assert (partial["epoch"], partial["batch"], partial["steps"]) == (1, 10, 10)
    assert logs[-1].startswith("stopped in epoch 2/2 after step 10/10")
    train(_config(), tmp_path / "run", resume=True, **QUIET)
    assert_same_run(ref, tmp_path / "run")


def test_resume_refuses_fewer_epochs_than_the_partial_one(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(_config(train_subset=256), run, callbacks=[_Signal(5)], **QUIET)
    with pytest.raises(RsmoothError, match=r"stopped inside epoch 2; pass epochs=2 or more"):
        train(_config(train_subset=256, epochs=1), run, resume=True, **QUIET)


def test_heartbeat_in_a_log(tmp_path, monkeypatch):
    """rank 0 logs progress.Heartbeat's line within an epoch (not after its last step)."""
    monkeypatch.setenv("RSMOOTH_HEARTBEAT", "1e-9")
    logs = []
    train(_config(epochs=1, train_subset=256), tmp_path / "run", progress=False, log=logs.append)
    beats = [line for line in logs if line.startswith("epoch 1/1: ")]
    assert len(beats) == 3 and beats[0].startswith("epoch 1/1: 1/4 steps (25.0%), ")
    assert "steps/s" in beats[0] and ", eta " in beats[0]


def test_a_second_signal_stops_at_once(tmp_path):
    class Twice:
        def on_step(self, record):
            if record["global_step"] == 2:
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # not reached: the second signal raises here

    logs = []
    with pytest.raises(KeyboardInterrupt):
        train(_config(train_subset=256), tmp_path / "run", progress=False, log=logs.append, callbacks=[Twice()])
    assert not any(line.startswith("stopped") for line in logs)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()  # nothing saved: the stop was immediate
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
