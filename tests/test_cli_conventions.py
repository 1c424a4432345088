"""Small things a researcher meets on the command line (issue 20, item 15): a closed pipe, 'rsmooth
list', the defaults in --help, a --sigma other than the model's, inputs outside [0, 1], and what a
rank of a multi-process job says when it is stopped or starts."""
import argparse
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from torch import nn

from conftest import SUBPROCESS_ENV as ENV
import rsmooth
from rsmooth.cli import build_parser, main
from rsmooth.smoothing import Smooth



def test_closed_pipe_ends_quietly(monkeypatch, capsys):
    """'rsmooth list presets | head -2': the reader is gone before rsmooth writes (deterministic)."""
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([sys.executable, "-m", "rsmooth", "list", "presets"], stdout=write,
                           stderr=subprocess.PIPE, env=ENV, text=True, timeout=300)
    finally:
        os.close(write)
    assert (p.returncode, p.stderr) == (141, "")  # as a tool that SIGPIPE ends, and silent

    def other_pipe(args):  # a broken pipe that is not stdout stays an error
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("rsmooth.cli.listing.run", other_pipe)
    assert main(["list"]) == 2
    assert capsys.readouterr().err == "rsmooth: error: Broken pipe\n"


def test_list_without_kind_lists_corruptions(capsys):
    from rsmooth.corruptions import SUITES

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "corruptions by suite ('rsmooth list corruptions'" in out and max(map(len, out.splitlines())) <= 100
    tail = out[out.index("corruptions by suite"):].replace("\n", " ")
    for suite in SUITES.values():
        assert f"  {suite.name}: " in tail
        assert all(f" {name}," in tail or f" {name} " in tail or tail.rstrip().endswith(name)
                   for name in suite.corruptions), suite.name


def _subparser(name):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["certify", "predict", "targets"])
def test_help_states_every_default(command):
    """Every flag that takes a value and is not required says its default (or when it is needed)."""
    from rsmooth.smoothing import DEFAULT_BATCH_SIZE

    helps = {}
    for a in _subparser(command)._actions:
        if a.option_strings and a.help != argparse.SUPPRESS and not a.required and a.nargs != 0:
            helps[a.option_strings[0]] = a.help
            assert "default" in a.help or "required with" in a.help, (command, a.option_strings[0])
    batch = helps["--batch-size"]
    if command == "targets":
        assert f"(default: {DEFAULT_BATCH_SIZE}," in batch and "tuned" not in batch
    else:  # measured, and said not to change results
        assert "auto (default)" in batch and "do not depend on it" in batch
    assert "(default: 0)" in helps["--seed"]
    assert "[0,1] pixel units" in helps["--sigma"]


@pytest.fixture(scope="module")
def run025(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "--dataset", "digits", "--sigma", "0.25", "--epochs", "1", "--train-subset", "100",
                 "--out", str(out)]) == 0
    return out


def test_certify_at_another_sigma_says_so_once(run025, tmp_path, capsys):
    capsys.readouterr()
    flags = ["--n", "100", "--max", "2", "--batch-size", "100"]
    assert main(["certify", "--checkpoint", str(run025), *flags, "--sigma", "0.5",
                 "--out", str(tmp_path / "a.tsv")]) == 0
    err = capsys.readouterr().err
    assert err.count("rsmooth: warning: certifying at --sigma 0.5 a model trained at sigma 0.25") == 1, err
    for same in (["--sigma", "0.25"], []):  # the model's sigma, given or not: no warning
        assert main(["certify", "--checkpoint", str(run025), *flags, *same, "--out",
                     str(tmp_path / f"b{len(same)}.tsv")]) == 0
        assert "warning: certifying at" not in capsys.readouterr().err
    # a folder of corruptions certifies several files at --sigma 1: still one warning
    assert main(["certify", "--checkpoint", str(run025), *flags, "--sigma", "1", "--corruption",
                 "shot_noise,fog", "--severity", "1", "--out", str(tmp_path / "corr")]) == 0
    assert capsys.readouterr().err.count("warning: certifying at --sigma 1 a model trained at sigma 0.25") == 1


def test_certify_without_recorded_sigma_does_not_warn(tmp_path, capsys):
    from rsmooth.engine.certify import _warn_other_sigma
    from rsmooth.engine.checkpoint import LoadedModel
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for sigma, method in ((None, "gaussian"), (0.25, "standard"), (0.5, "gaussian")):
            loaded = LoadedModel(nn.Identity(), "lenet", "digits", 10, sigma, tmp_path, {"method": method})
            _warn_other_sigma(loaded, 0.5)


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_smooth_warns_once_on_inputs_outside_unit_range(recwarn):
    torch.manual_seed(0)
    x = torch.rand(1, 2, 2)
    smooth = Smooth(_Tiny(), 3, 0.25)
    smooth.predict(x, 20, 0.001, 20)
    smooth.certify(x, 10, 20, 0.001, 20)
    smooth.count_votes(x.unsqueeze(0), 10, 10)
    assert not [w for w in recwarn if "outside [0, 1]" in str(w.message)]
    with pytest.warns(UserWarning, match=r"x ranges over \[0, 255\], outside \[0, 1\]: .* sigma \(0.25\) is in "
                                         r"\[0, 1\] pixel units .* divide such images by 255"):
        smooth.certify(x * 0 + torch.tensor([0.0, 255.0, 3.0, 1.0]).view(1, 2, 2), 10, 20, 0.001, 20)
    recwarn.clear()
    smooth.predict(x * 255, 20, 0.001, 20)  # once per Smooth object
    smooth.count_votes(x.unsqueeze(0) - 0.5, 10, 10)
    assert not [w for w in recwarn if "outside [0, 1]" in str(w.message)]
    with pytest.warns(UserWarning, match=r"xs ranges over \[-0.5"):  # a new object warns again
        Smooth(_Tiny(), 3, 0.25).count_votes(torch.full((2, 1, 2, 2), -0.5), 10, 10)
    with pytest.raises(rsmooth.RsmoothError, match="contains NaN or infinite values"):
        smooth.certify(torch.full((1, 2, 2), float("nan")), 10, 20, 0.001, 20)
    with pytest.raises(rsmooth.RsmoothError, match="contains NaN or infinite values"):
        smooth.predict(torch.tensor([[[0.0, float("inf")], [0.0, 0.0]]]), 20, 0.001, 20)


# ----------------------------------------------------------------------------- torchrun


#: a stand-in for torchrun: starts two ranks (waiting in rsmooth's main), then either sends SIGTERM to
#: both (as a scheduler's SIGTERM, which torchrun passes on) or lets rank 1 fail, reaps it and sends
#: SIGTERM to rank 0 (as torchrun stops the others); prints each rank's exit status and stderr
_TORCHRUN = r'''
import json, os, signal, subprocess, sys
RANK = """
import sys, time
import rsmooth.cli as cli
def ready():
    print("ready", flush=True)
    time.sleep(120)
cli.build_parser = ready
sys.exit(cli.main(["list"]))
"""
env = {**os.environ, "TORCHELASTIC_RUN_ID": "test", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
procs = [subprocess.Popen([sys.executable, "-c", RANK], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
for p in procs:
    assert p.stdout.readline() == "ready\n"
if sys.argv[1] == "signal":
    for p in procs:
        p.send_signal(signal.SIGTERM)
else:
    procs[1].kill()
    procs[1].wait()
    procs[0].send_signal(signal.SIGTERM)
for p in procs:  # the ranks stopped by SIGTERM stay unreaped until all have exited
    if p.returncode is None:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
print(json.dumps([(p.wait(timeout=60), p.stderr.read()) for p in procs]))
'''


def _torchrun(scenario):
    p = subprocess.run([sys.executable, "-c", _TORCHRUN, scenario], env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_rank_says_whether_a_signal_or_another_rank_stopped_it():
    for r, (code, err) in enumerate(_torchrun("signal")):  # the scheduler's SIGTERM reaches every rank
        assert code == 143
        assert err == (f"rsmooth: rank {r} of 2: terminated by SIGTERM (from the scheduler or a user; torchrun "
                       f"passes it to every rank); rerun the same torchrun command\n")
    (code, err), (killed, _) = _torchrun("failure")  # rank 1 fails; torchrun reaps it and stops rank 0
    assert code == 143 and killed == -signal.SIGKILL
    assert err.startswith("rsmooth: rank 0 of 2: stopped because another rank failed (torchrun stops all ranks "
                          "when one fails; its report names it); rerun the same torchrun command"), err


def test_process_line(monkeypatch):
    from rsmooth.torchrun import processes

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert processes(2, "gloo", "cpu") == "rsmooth: 2 processes (gloo, cpu)"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert processes(16, "nccl", "cuda") == "rsmooth: 16 processes on 2 nodes (nccl, cuda)"
