"""Training under torchrun (issue 8, item 1): each optimiser step's chunk is split across the ranks
with the noise each example gets in one process, so W = 2 gloo ranks on CPU take the steps of one
process; resume with another W; a refusal or a killed rank stops the job in one line."""
import json
import math
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import trained_module
from rsmooth.cli import main
from rsmooth.engine.distributed import DROPOUTS, ModelDraws, World, disagreement, own_randomness, share
from rsmooth.errors import RsmoothError
from rsmooth.methods import METHODS, Batch, StepContext, create_method
from rsmooth.models import create_model

from test_distributed import ENV, one_line, torchrun

#: small settings of every method, so one step takes milliseconds
SMALL = {"smoothadv": {"num_noise": 2, "num_steps": 2}, "smoothmix": {"num_noise": 2, "num_steps": 2},
         "catrs": {"num_noise": 2, "num_steps": 2}, "catrs-v1": {"num_noise": 2, "num_steps": 2},
         "consistency": {"num_noise": 2}, "macer": {"num_noise": 4}}
TRAIN = ["train", "--dataset", "digits", "--batch-size", "100", "--device", "cpu"]
#: a chunked method and MACER, at learning rates where a one-process run is itself stable: a
#: relative perturbation of 1e-7 stays that small (SmoothAdv's attack, or consistency at lr
#: 0.05, amplify any rounding difference within an epoch, in one process as much as in two)
#: consistency's batch of 359 leaves one example of the 1,437 for the last step: a chunk smaller
#: than the job, which the ranks step outside DistributedDataParallel (rank 1 with no example)
RUNS = {"consistency": [*TRAIN, "--method", "consistency", "--num-noise", "2", "--lr", "0.01", "--batch-size", "359"],
        "macer": [*TRAIN, "--method", "macer", "--num-noise", "4", "--lbd", "1", "--lr", "0.03"]}


def test_share_is_tensor_split():
    for n in range(0, 12):
        for size in (1, 2, 3, 5):
            parts = torch.arange(n).tensor_split(size)
            for rank in range(size):
                lo, hi = share(n, World(rank, size))
                assert torch.equal(torch.arange(n)[lo:hi], parts[rank])


def test_step_draws_are_the_one_process_rows():
    def ctx(rows=None):
        return StepContext(torch.Generator().manual_seed(3), rows=rows)

    full = ctx()
    expect = (full.randn((14, 2, 3)), full.rand((7, 4)))  # 7 examples x 2 copies, then 7 x 4
    for lo, hi in ((0, 3), (3, 5), (5, 7)):
        part = ctx((lo, hi, 7))
        assert torch.equal(part.randn((2 * (hi - lo), 2, 3)), expect[0][2 * lo:2 * hi])
        assert torch.equal(part.rand((hi - lo, 4)), expect[1][lo:hi])
    with pytest.raises(RsmoothError, match=r"does not run over the 2 examples"):
        ctx((0, 2, 7)).randn((3, 5))


@pytest.mark.parametrize("name", METHODS.names())
def test_shares_of_a_step_sum_to_the_one_process_gradient(name):
    """The engine's rule: rank r backpropagates its loss x n_r / n; the sum over the ranks (what
    DistributedDataParallel's average x W is) is the one-process gradient of the whole chunk."""
    torch.manual_seed(0)
    model = create_model("digits_cnn", "digits")
    x, y = torch.rand(7, 1, 8, 8), torch.randint(0, 10, (7,))
    targets = torch.softmax(torch.randn(7, 10), 1)
    method = create_method(name, sigma=0.5, **SMALL.get(name, {}))
    model = trained_module(method, model, 1)

    def grad(lo, hi, rows):
        model.zero_grad()
        ctx = StepContext(torch.Generator().manual_seed(5), epoch=3, num_epochs=10, rows=rows)
        batch = Batch(x[lo:hi], y[lo:hi], torch.arange(lo, hi), {"targets": targets[lo:hi]})
        loss, _ = method.loss(model, batch, ctx)
        (loss * (hi - lo) / 7).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    one = grad(0, 7, None)
    ranks = sum(grad(*share(7, World(r, 3)), (*share(7, World(r, 3)), 7)) for r in range(3))
    torch.testing.assert_close(ranks, one, rtol=1e-5, atol=1e-7)


class Counting(nn.Module):
    """Stands in for DistributedDataParallel: counts the forward passes that go through it."""

    def __init__(self, module):
        super().__init__()
        self.module, self.calls = module, 0

    def forward(self, x):
        self.calls += 1
        return self.module(x)


@pytest.mark.parametrize("name, forwards", [("smoothadv", 1), ("smoothmix", 2), ("catrs", 2), ("catrs-v1", 2)])
def test_attacks_run_on_the_unwrapped_module(name, forwards):
    torch.manual_seed(0)
    model = create_model("digits_cnn", "digits")
    wrapped = Counting(model)
    batch = Batch(torch.rand(4, 1, 8, 8), torch.randint(0, 10, (4,)), torch.arange(4),
                  {"targets": torch.softmax(torch.randn(4, 10), 1)})
    ctx = StepContext(torch.Generator().manual_seed(1), rows=(0, 4, 4), module=model)
    create_method(name, **SMALL[name]).loss(wrapped, batch, ctx)
    assert wrapped.calls == forwards  # the training forwards only; the attack steps went to ``model``


def _draws(model, x, rows, warn=None):
    """(output, gradient) of ``model`` on rows ``lo:hi`` of ``x`` (2 copies each, image-major) in a
    step whose rows these are."""
    lo, hi, _ = rows
    model.zero_grad()
    with ModelDraws(model, warn) as draws, draws.step(123, rows):
        out = model(x[lo:hi].repeat_interleave(2, 0))
        out.square().sum().backward()
    return out.detach(), torch.cat([p.grad.flatten() for p in model.parameters()] or [torch.zeros(0)])


@pytest.mark.parametrize("dropout", DROPOUTS)
def test_dropout_masks_are_the_one_process_rows(dropout):
    """Each example gets the dropout mask it gets in one process, whichever rank computes it; the
    ranks' gradients sum to the one-process one; the modules are restored after."""
    torch.manual_seed(0)
    drop = dropout(0.4)
    shape = {nn.Dropout1d: (2, 5), nn.Dropout2d: (2, 4, 5), nn.Dropout3d: (2, 3, 4, 5)}.get(dropout, (2, 4, 5))
    model = nn.Sequential(nn.Linear(5, 5), drop, nn.Flatten(), nn.Linear(math.prod(shape), 3),
                          nn.Dropout(0.5), nn.Linear(3, 2))
    x = torch.randn(7, *shape)
    one, grad = _draws(model, x, (0, 7, 7))
    assert one.ne(model.eval()(x.repeat_interleave(2, 0))).any()  # it drops
    model.train()
    ranks = [_draws(model, x, (*share(7, World(r, 3)), 7)) for r in range(3)]
    torch.testing.assert_close(torch.cat([o for o, _ in ranks]), one)
    torch.testing.assert_close(sum(g for _, g in ranks), grad, rtol=1e-5, atol=1e-6)
    assert "forward" not in drop.__dict__


class FeaturesFirst(nn.Module):
    """Dropout on the transposed input: its first dimension runs over the features."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x.t()).t()


def test_dropout_on_another_layout_warns_once():
    warned = []
    model = nn.Sequential(nn.Linear(3, 3), FeaturesFirst(), FeaturesFirst())
    _draws(model, torch.randn(3, 3), (0, 2, 3), warned.append)  # 2 rows x 2 copies: shape (3, 4)
    assert len(warned) == 1 and "Dropout on an input of shape (3, 4)" in warned[0]


def test_own_randomness_names_what_cannot_be_split():
    model = nn.Sequential(nn.Dropout(0.1), nn.RReLU(), nn.MultiheadAttention(4, 1, dropout=0.1),
                          nn.MultiheadAttention(4, 1))
    assert own_randomness(model) == ["1 (RReLU)", "2 (MultiheadAttention)"]


def test_disagreement_names_each_field_and_rank():
    same = {"seed": 0, "train_subset": None}
    assert disagreement([same, dict(same)]) is None
    assert disagreement([same, {**same, "train_subset": 500}, same]) == \
        "train_subset (rank 0: None, rank 1: 500, rank 2: None)"
    assert disagreement([{"a": "x" * 100}, {}]) == f"a (rank 0: '{'x' * 56}..., rank 1: absent)"
    data = {"data": {"name": "digits", "length": 1437, "subset": None}}
    assert disagreement([data, {"data": {**data["data"], "length": 500, "subset": {"size": 500}}}]) == \
        ("data length (rank 0: 1437, rank 1: 500); data subset (rank 0: None, rank 1: absent); "
         "data subset size (rank 0: absent, rank 1: 500)")
    assert disagreement([{k: 0 for k in "abcde"}, {k: 1 for k in "abcde"}]).endswith(
        "c (rank 0: 0, rank 1: 1); and 2 more")


def test_sync_bn_needs_cuda(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main([*TRAIN, "--epochs", "1", "--sync-bn", "--out", str(tmp_path / "r")]) == 2
    assert "--sync-bn needs CUDA devices" in one_line(capsys)
    assert not (tmp_path / "r").exists()


# ----------------------------------------------------------------------------- torchrun


def weights(run):
    return torch.load(Path(run) / "checkpoint.pt", weights_only=True)["state_dict"]


def history(run):
    return [{k: v for k, v in r.items() if k != "time"} for r in
            torch.load(Path(run) / "checkpoint.pt", weights_only=True)["history"]]


def assert_same_run(a, b):
    """Weights to float-reduction tolerance, the log's figures likewise (time aside)."""
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:  # relative to the tensor's norm: a float reduction's rounding, not a step apart
        assert float((wb[k] - wa[k]).norm() / wa[k].norm()) < 1e-5, k
    for ra, rb in zip(history(a), history(b), strict=True):
        assert ra.keys() == rb.keys()
        for k in ra:
            assert rb[k] == pytest.approx(ra[k], rel=1e-4, abs=2e-3), k  # accuracies: one image of 360 at most


def run(*args, timeout=240, **kw):
    p = torchrun(*args, **kw)
    stdout, stderr = p.communicate(timeout=timeout)
    return p.returncode, stdout, stderr


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """One-process runs: consistency (chunked) and MACER, 2 epochs each."""
    root = tmp_path_factory.mktemp("one")
    for name, args in RUNS.items():
        assert main([*args, "--epochs", "2", *TENSORBOARD[name], "--out", str(root / name)]) == 0
    return root


#: the MACER runs also log each step's loss (under torchrun: the sum of the ranks' weighted losses)
TENSORBOARD = {"consistency": [], "macer": ["--tensorboard"]}


def _step_losses(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("step/loss")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["consistency", "macer"])
def test_two_ranks_train_as_one_process(one, tmp_path, name):
    code, stdout, stderr = run(*RUNS[name], "--epochs", "2", *TENSORBOARD[name], "--out", tmp_path / "r")
    assert code == 0, stderr
    assert stdout.count("checkpoint:") == 1 and stdout.count("epoch 2/2") == 1  # rank 0 only
    assert_same_run(one / name, tmp_path / "r")
    assert json.loads((tmp_path / "r" / "config.json").read_text())["world_size"] == 2
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == sorted(
        ["checkpoint.pt", "config.json", "train.log", *(["tensorboard"] if TENSORBOARD[name] else [])])
    if TENSORBOARD[name]:  # each step's loss is the whole batch's, as in one process (not rank 0's half)
        ours, theirs = _step_losses(tmp_path / "r" / "tensorboard"), _step_losses(one / name / "tensorboard")
        assert [s for s, _ in ours] == [s for s, _ in theirs] == list(range(1, 31))
        assert [v for _, v in ours] == pytest.approx([v for _, v in theirs], rel=1e-4)

    if name == "consistency":  # rank 0 refuses to overwrite: every rank stops, in one line each
        code, _, stderr = run(*RUNS[name], "--epochs", "2", "--out", tmp_path / "r")
        assert code != 0
        assert re.search(r"^rsmooth: error: .*checkpoint.pt already exists; pass --resume", stderr, re.M), stderr
        assert "rank 1 of 2: rank 0 refused the run" in stderr
        assert len(re.findall(r"^rsmooth: error:", stderr, re.M)) == 2 and "rsmooth/" not in stderr  # (torchrun's own report follows)


@pytest.mark.slow
def test_resume_with_another_number_of_processes(one, tmp_path):
    out = tmp_path / "r"
    code, _, stderr = run(*RUNS["consistency"], "--epochs", "1", "--out", out)
    assert code == 0, stderr
    assert main([*RUNS["consistency"], "--epochs", "2", "--out", str(out), "--resume"]) == 0
    assert_same_run(one / "consistency", out)


def _rank_pid(parent: int, rank: int) -> int:
    """The pid of torchrun's worker of ``rank`` (its child with RANK=rank in its environment)."""
    for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in env:
            return int(child)
    raise LookupError(rank)


@pytest.mark.slow
def test_killed_rank_stops_the_job_and_resume_finishes(one, tmp_path):
    out = tmp_path / "r"
    args = [*RUNS["consistency"], "--epochs", "2", "--out", out]
    p = torchrun(*args)
    end = time.monotonic() + 120
    while not (out / "checkpoint.pt").exists():  # after the first epoch
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end
        time.sleep(0.02)
    os.kill(_rank_pid(p.pid, 1), signal.SIGKILL)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode != 0
    # rank 0 was stopped by torchrun, or (in a collective already) saw gloo lose rank 1
    assert re.search(r"^rsmooth: (error: )?rank 0 of 2: .*rerun the same torchrun command", stderr, re.M), stderr
    code, _, stderr = run(*args, "--resume")
    assert code == 0, stderr
    assert_same_run(one / "consistency", out)


@pytest.mark.slow
def test_pipeline_under_torchrun_runs_every_step_in_one_process_group(tmp_path, capsys):
    args = ["pipeline", "catrs", "--dataset", "digits", "--sigma", "0.5", "--epochs", "1", "--target-samples", "4",
            "--num-noise", "2", "--num-steps", "1",  # the cheapest CAT-RS epoch
            "--n0", "10", "--n", "50", "--max", "6", "--device", "cpu", "--no-compare-gaussian", "--out", tmp_path]
    code, stdout, stderr = run(*args)
    assert code == 0, stderr
    assert stdout.count("== train gaussian_0.25") == 1 and stdout.count("| CAT-RS sigma=0.5 |") == 1  # rank 0 only
    assert len((tmp_path / "catrs_0.50" / "certify.tsv").read_text().splitlines()) == 7
    assert main([str(a) for a in args]) == 0  # rerun (one process will do): every step is found done
    out = capsys.readouterr().out
    assert out.count("has already trained all 1 epochs") == 2 and "targets_0.25.npy is already computed" in out, out
    assert "certify.tsv: 6 of 6 examples done" in out, out


@pytest.mark.slow
def test_sigterm_mid_epoch_under_torchrun_then_resume(one, tmp_path):
    """torchrun passes SIGTERM to its ranks: they agree on the step, rank 0 saves it mid-epoch,
    and --resume (here with one process) finishes the run as the uninterrupted one."""
    out = tmp_path / "r"
    args = [*RUNS["consistency"], "--epochs", "2", "--checkpoint-every", "1", "--out", out]
    p = torchrun(*args)

    def mid_epoch():
        try:
            return "partial" in torch.load(out / "checkpoint.pt", weights_only=True)
        except Exception:  # not there yet
            return False

    end = time.monotonic() + 180
    while not mid_epoch():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode != 0
    partial = torch.load(out / "checkpoint.pt", weights_only=True).get("partial")
    assert partial is not None, stdout + stderr
    assert re.search(r"^stopped in epoch \d/2 after step \d+/\d+: saved .*; rerun with --resume", stdout, re.M), stdout
    assert main([*RUNS["consistency"], "--epochs", "2", "--out", str(out), "--resume"]) == 0
    assert_same_run(one / "consistency", out)


#: a model with dropout and no batch norm (a module of factories on the ranks' PYTHONPATH)
DROPOUT_NET = """
from torch import nn


def dropout_net(num_classes):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Dropout2d(0.2), nn.Flatten(),
                         nn.Linear(256, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, num_classes))
"""


@pytest.fixture(scope="module")
def dropout_net(tmp_path_factory):
    """(the folder of the module, the one-process run of consistency on it, 2 epochs)."""
    folder = tmp_path_factory.mktemp("dropout")
    (folder / "dropout_nets.py").write_text(DROPOUT_NET)
    sys.path.insert(0, str(folder))
    try:
        assert main([*RUNS["consistency"], "--arch", "dropout_nets:dropout_net", "--epochs", "2",
                     "--out", str(folder / "one")]) == 0
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("dropout_nets", None)
    return folder


@pytest.mark.slow
def test_dropout_model_trains_on_two_ranks_as_one_process(dropout_net, tmp_path):
    """nn.Dropout and nn.Dropout2d draw each example's mask as in one process: equal weights
    (consistency: B x 2 copies per forward, and a last chunk smaller than the job)."""
    code, _, stderr = run(*RUNS["consistency"], "--arch", "dropout_nets:dropout_net", "--epochs", "2",
                          "--out", tmp_path / "r", env={"PYTHONPATH": f"{dropout_net}{os.pathsep}{ENV['PYTHONPATH']}"})
    assert code == 0, stderr
    assert "warning" not in stderr
    assert_same_run(dropout_net / "one", tmp_path / "r")


#: ``python LAUNCHER ARGS``: rsmooth ARGS, rank 1 adding $RANK1_ARGS (a rank that disagrees)
LAUNCHER = """
import os, sys
from rsmooth.cli import main
extra = os.environ["RANK1_ARGS"].split() if os.environ["RANK"] == "1" else []
sys.exit(main(sys.argv[1:] + extra))
"""


@pytest.mark.slow
@pytest.mark.parametrize("command, extra, field", [
    ("train", "--train-subset 500", "train_subset (rank 0: None, rank 1: 500); training data length "
                                    "(rank 0: 1437, rank 1: 500)"),
    ("certify", "--alpha 0.01", "alpha (rank 0: 0.001, rank 1: 0.01)"),
    ("targets", "--num-samples 30", "num_samples (rank 0: 20, rank 1: 30)")])
def test_ranks_that_disagree_stop_at_once_naming_what(dropout_net, tmp_path, command, extra, field):
    """Rank 1 runs other settings: once the ranks have joined, each stops within seconds naming
    them (not a hang until the process group's timeout)."""
    (tmp_path / "launch.py").write_text(LAUNCHER)
    model = ["--checkpoint", dropout_net / "one", "--arch", "dropout_nets:dropout_net", "--device", "cpu"]
    args = {"train": [*TRAIN, "--epochs", "1", "--out", tmp_path / "r"],
            "certify": ["certify", *model, "--n0", "10", "--n", "100", "--max", "4", "--out", tmp_path / "c.tsv"],
            "targets": ["targets", *model, "--num-samples", "20", "--out", tmp_path / "t.npy"]}[command]
    p = torchrun(*args, script=tmp_path / "launch.py",
                 env={"RANK1_ARGS": extra, "PYTHONPATH": f"{dropout_net}{os.pathsep}{ENV['PYTHONPATH']}"})
    line = p.stdout.readline()
    assert "rsmooth: 2 processes (gloo, cpu)" in line, p.communicate()  # the ranks have joined
    joined = time.monotonic()
    _, stderr = p.communicate(timeout=120)
    assert p.returncode != 0 and time.monotonic() - joined < 30, stderr
    for rank in (0, 1):
        assert f"rsmooth: error: rank {rank} of 2: the ranks disagree on {field}" in stderr, stderr
    assert "rsmooth/" not in stderr  # no traceback of ours (torchrun's own report follows)
