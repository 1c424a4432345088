"""Evaluation during training (--eval-every, --eval-examples) and training logs (callbacks,
--tensorboard): issue 20, items 4 and 7."""
import json
import sys

import pytest
import torch

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, read_checkpoint, train
from rsmooth.engine.callbacks import CallbackList, TensorBoardLogger
from rsmooth.engine.checkpoint import seal

QUIET = dict(progress=False, log=lambda s: None)
#: 4 steps per epoch
CONFIG = dict(dataset="digits", epochs=3, batch_size=64, lr=0.05, lr_step=2, seed=1, train_subset=256)


def _config(**kw):
    return TrainConfig(**{**CONFIG, "hparams": {"sigma": 0.25}, **kw})


def test_each_invocation_is_a_session_of_the_run(tmp_path):
    """A run resumed across days and commits says where each invocation began and with what code."""
    out = tmp_path / "r"
    train(_config(eval_every=0), out, stop_after_epoch=1, **QUIET)
    train(_config(eval_every=0), out, resume=True, **QUIET)
    train(_config(eval_every=0), out, resume=True, **QUIET)  # all epochs done: no session
    sessions = json.loads((out / "config.json").read_text())["sessions"]
    where = [(e["epoch"], e["step"], e["world_size"], e["device"]) for e in sessions]
    assert where == [(0, 0, 1, "cpu"), (1, 0, 1, "cpu")]
    assert all(e["began"] and "rsmooth" in e["versions"] for e in sessions)
    ck = read_checkpoint(out)
    assert ck["sessions"] == sessions

    # a checkpoint of an earlier rsmooth (no sessions): its invocations become one entry
    torch.save(seal({k: v for k, v in ck.items() if k != "sessions"}), out / "checkpoint.pt")
    train(_config(eval_every=0, epochs=4), out, resume=True, **QUIET)
    sessions = read_checkpoint(out)["sessions"]
    assert [e["epoch"] for e in sessions] == [0, 3] and "before sessions were recorded" in sessions[0]["note"]
    assert sessions[0]["git_commit"] == ck["git_commit"]


# ----------------------------------------------------------------------------- item 4


def test_eval_every_and_examples_are_recorded_and_logged(tmp_path):
    logs = []
    result = train(_config(eval_every=2, eval_examples=50), tmp_path / "r", progress=False, log=logs.append)
    evaluated = [r["epoch"] for r in result.history if "test_acc" in r]
    assert evaluated == [2, 3]  # every 2nd epoch and the last
    assert all(r["eval_examples"] == 50 for r in result.history if "test_acc" in r)
    assert "test_acc" not in result.history[0] and "test_acc_noisy" not in result.history[0]
    lines = [line for line in logs if line.startswith("epoch ")]
    assert "(not evaluated)" in lines[0] and "(on 50 test examples)" in lines[1]
    assert all(round(r["test_acc"] * 50) == r["test_acc"] * 50 for r in result.history if "test_acc" in r)
    config = json.loads((tmp_path / "r" / "config.json").read_text())["config"]
    assert (config["eval_every"], config["eval_examples"]) == (2, 50)
    assert read_checkpoint(tmp_path / "r")["config"]["eval_examples"] == 50
    log = [json.loads(line) for line in (tmp_path / "r" / "train.log").read_text().splitlines()]
    assert ["test_acc" in r for r in log] == [False, True, True]


def test_eval_subset_is_fixed_and_off_leaves_weights_alone(tmp_path):
    a = train(_config(epochs=1, eval_examples=50), tmp_path / "a", **QUIET)
    b = train(_config(epochs=1, eval_examples=50), tmp_path / "b", **QUIET)
    assert a.history[0]["test_acc"] == b.history[0]["test_acc"]
    for off in (dict(eval_every=0), dict(eval_examples=0)):
        c = train(_config(epochs=1, **off), tmp_path / str(off), **QUIET)
        assert "test_acc" not in c.history[0]
        sa, sc = a.model.state_dict(), c.model.state_dict()
        assert all(torch.equal(sa[k], sc[k]) for k in sa)  # evaluation draws nothing training uses


def test_eval_flags_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--train-subset", "128", "--eval-every", "0",
                 "--out", str(out)]) == 0
    assert "(not evaluated)" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["config"]["eval_every"] == 0
    for flags, message in ((["--eval-every", "-1"], "--eval-every must be a number of epochs >= 0"),
                           (["--eval-examples", "-3"], "--eval-examples must be a number of test examples >= 0"),
                           (["--eval-examples", "5000"], "--eval-examples 5000 is more than the 360 test examples")):
        assert main(["train", "--dataset", "digits", *flags, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rsmooth: error: {message}") and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- item 7


class Recorder:
    """Records every event it is given."""

    def __init__(self):
        self.events = []

    def on_train_begin(self, info):
        self.events.append(("begin", info))

    def on_step(self, record):
        self.events.append(("step", record))

    def on_epoch_end(self, record):
        self.events.append(("epoch", record))

    def on_checkpoint(self, info):
        self.events.append(("checkpoint", info))

    def on_train_end(self, info):
        self.events.append(("end", info))


class EpochsOnly:
    def __init__(self):
        self.records = []

    def on_epoch_end(self, record):
        self.records.append(record)


def test_callbacks_see_every_step_epoch_and_checkpoint(tmp_path):
    rec, epochs_only = Recorder(), EpochsOnly()
    result = train(_config(epochs=2), tmp_path / "r", callbacks=[rec, epochs_only], **QUIET)
    kinds = [k for k, _ in rec.events]
    assert kinds == ["begin", *(["step"] * 4 + ["checkpoint", "epoch"]) * 2, "end"]
    begin = rec.events[0][1]
    assert (begin["start_epoch"], begin["steps_per_epoch"], begin["world_size"]) == (0, 4, 1)
    assert begin["config"]["train_subset"] == 256
    steps = [r for k, r in rec.events if k == "step"]
    assert [s["global_step"] for s in steps] == list(range(1, 9))
    assert [(s["epoch"], s["step"]) for s in steps[3:5]] == [(1, 4), (2, 1)]
    assert all(isinstance(s["loss"], float) and s["lr"] == 0.05 for s in steps)
    assert [r for k, r in rec.events if k == "epoch"] == result.history == epochs_only.records
    assert [(c["epoch"], c["step"], c["reason"]) for k, c in rec.events if k == "checkpoint"] == [
        (1, 0, "epoch"), (2, 0, "epoch")]
    end = rec.events[-1][1]
    assert end["completed"] is True and end["history"] == result.history


def test_callbacks_are_checked(tmp_path):
    with pytest.raises(RsmoothError, match="has none of the methods on_train_begin, on_step"):
        CallbackList([object()])
    calls = []

    class Greedy:  # a callback that changes its record cannot change what the next one sees
        def on_epoch_end(self, record):
            record["loss"] = -1

    class Reader:
        def on_epoch_end(self, record):
            calls.append(record["loss"])

    CallbackList([Greedy(), Reader()])("on_epoch_end", {"loss": 2.0})
    assert calls == [2.0]


def _scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_logs_every_figure(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "2", "--train-subset", "256", "--batch-size", "64",
                 "--eval-every", "2", "--tensorboard", "--out", str(out)]) == 0
    history = read_checkpoint(out)["history"]
    scalars = _scalars(out / "tensorboard")
    for key in ("lr", "loss", "acc_noisy", "time"):
        assert [s for s, _ in scalars[f"epoch/{key}"]] == [1, 2]
        assert [v for _, v in scalars[f"epoch/{key}"]] == pytest.approx([r[key] for r in history])
    assert scalars["epoch/test_acc"] == [(2, pytest.approx(history[1]["test_acc"]))]  # evaluated epochs only
    assert [s for s, _ in scalars["step/loss"]] == list(range(1, 9))
    assert json.loads((out / "config.json").read_text())["config"]["tensorboard"] is True


def test_tensorboard_without_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(RsmoothError, match=r"^--tensorboard needs the tensorboard package: pip install tensorboard"):
        TensorBoardLogger(tmp_path)
    assert main(["train", "--dataset", "digits", "--tensorboard", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rsmooth: error: --tensorboard needs the tensorboard package") and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_tensorboard_continues_a_stopped_run(tmp_path):
    pytest.importorskip("tensorboard")
    import os
    import signal

    class Stop:
        def on_step(self, record):
            if record["global_step"] == 6:
                os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        train(_config(epochs=2, tensorboard=True), tmp_path / "r", callbacks=[Stop()], **QUIET)
    result = train(_config(epochs=2, tensorboard=True), tmp_path / "r", resume=True, **QUIET)
    scalars = _scalars(tmp_path / "r" / "tensorboard")
    assert [s for s, _ in scalars["step/loss"]] == list(range(1, 9))
    assert scalars["epoch/loss"] == [(1, pytest.approx(result.history[0]["loss"])),
                                     (2, pytest.approx(result.history[1]["loss"]))]
