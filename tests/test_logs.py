"""What long runs write into a log file (a SLURM job): heartbeat lines and a closing summary."""
import json

import pytest

from rsmooth import progress
from rsmooth.cli import main
from rsmooth.engine.certify import summary_line
from rsmooth.errors import RsmoothError
from rsmooth.metrics import CertifyWriter, write_sidecar
from rsmooth.progress import Heartbeat, heartbeat_interval


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def not_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "interactive", lambda: False)
    monkeypatch.delenv("RSMOOTH_HEARTBEAT", raising=False)


def _beat(clock, lines, **kw):
    return Heartbeat(kw.pop("total", 100), desc="certify", log=lines.append, clock=clock, **kw)


def test_heartbeat_first_after_10s_then_every_interval(not_a_terminal):
    clock, lines = Clock(), []
    beat = _beat(clock, lines, done=20)  # 20 of 100 done before this session
    for _ in range(4):  # 4 examples in 8 s: nothing yet
        clock.now += 2
        beat.update(1, samples=100_100)
    assert lines == []
    clock.now += 2
    beat.update(1, samples=100_100)  # 10 s: the first line
    assert lines == ["certify: 25/100 examples (25.0%), 0.5 examples/s, 50,050 samples/s, elapsed 10s, eta 2m30s"]
    for _ in range(29):  # up to 68 s: no second line before 70 s
        clock.now += 2
        beat.update()
    assert len(lines) == 1
    clock.now += 2
    beat.update()
    assert len(lines) == 2 and lines[1].startswith("certify: 55/100 examples (55.0%), 0.5 examples/s")
    assert lines[1].endswith("elapsed 1m10s, eta 1m30s")


def test_heartbeat_interval_flag_env_and_off(not_a_terminal, monkeypatch):
    assert heartbeat_interval() == 60.0
    monkeypatch.setenv("RSMOOTH_HEARTBEAT", "300")
    assert heartbeat_interval() == 300.0 and heartbeat_interval(5) == 5.0  # the flag wins
    clock, lines = Clock(), []
    beat = _beat(clock, lines, interval=5)
    clock.now += 5
    beat.update()
    clock.now += 4
    beat.update()
    clock.now += 1
    beat.update()
    assert [ln.split(",")[0] for ln in lines] == ["certify: 1/100 examples (1.0%)", "certify: 3/100 examples (3.0%)"]
    for off in (dict(interval=0), dict(enabled=False)):  # 0 turns it off; so do ranks > 0 (progress=False)
        lines.clear()
        beat = _beat(clock, lines, **off)
        clock.now += 1000
        beat.update()
        assert lines == []
    monkeypatch.setenv("RSMOOTH_HEARTBEAT", "soon")
    with pytest.raises(RsmoothError, match=r"\$RSMOOTH_HEARTBEAT must be a number of seconds >= 0.*'soon'"):
        heartbeat_interval()
    with pytest.raises(RsmoothError, match="--heartbeat must be a number of seconds >= 0"):
        heartbeat_interval(-1)


def test_no_heartbeat_beside_a_progress_bar(monkeypatch):
    monkeypatch.setattr(progress, "interactive", lambda: True)
    clock, lines = Clock(), []
    beat = _beat(clock, lines)
    clock.now += 1000
    beat.update()
    assert lines == []


def _result(path, rows, **meta):
    with CertifyWriter(path) as w:
        for i, (label, pred, radius) in enumerate(rows):
            w.write(i, label, pred, radius, pred == label, 0.1)
    if meta:
        write_sidecar(path, {"complete": True, **meta})
    return path


def test_summary_lines(tmp_path):
    rows = [(1, 1, 0.6), (2, 2, 0.3), (3, -1, 0.0), (4, 5, 0.2)]
    assert summary_line(_result(tmp_path / "c.tsv", rows, mode="certify")) == \
        "certify: 4 examples, smoothed accuracy 50.0% (1 abstained), ACR 0.225"
    assert summary_line(_result(tmp_path / "p.tsv", [(1, 1, 0.0), (2, -1, 0.0)], mode="predict")) == \
        "predict: 2 examples, smoothed accuracy 50.0% (1 abstained)"
    seq = [(1, 1, 0.5), (2, 2, 0.25), (3, -1, 0.0), (4, 4, 0.5)]
    assert summary_line(_result(tmp_path / "s.tsv", seq, mode="sequential", radii=[0.25, 0.5])) == (
        "certify --sequential: 4 examples, certified accuracy 75.0% at r = 0.25, 50.0% at 0.5 (1 not certified "
        "at any radius; add 0 to --radii for the smoothed accuracy)")
    line = summary_line(_result(tmp_path / "s0.tsv", seq, mode="sequential", radii=[0.0, 0.5]))
    assert "certified accuracy 75.0% at r = 0, 50.0% at 0.5 (1 not certified at any radius)" in line
    line = summary_line(_result(tmp_path / "a.tsv", rows, mode="adaptive", n_max=100_000, alpha=0.001, sigma=0.25))
    assert line.startswith("certify --adaptive: 4 examples, smoothed accuracy 50.0% (1 abstained), ACR 0.225; "
                           "certifiable radii up to 0.")
    assert summary_line(_result(tmp_path / "public.tsv", rows)).startswith("certify: 4 examples")  # no sidecar


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "--dataset", "digits", "--sigma", "0.25", "--epochs", "1", "--out", str(out)]) == 0
    return out


def test_certify_in_a_log_file_beats_and_ends_with_a_summary(model, tmp_path, capsys, not_a_terminal):
    out = tmp_path / "c.tsv"
    argv = ["certify", "--checkpoint", str(model), "--n", "200", "--n0", "20", "--max", "3", "--out", str(out)]
    assert main([*argv, "--heartbeat", "1e-9"]) == 0
    estimate, *lines = capsys.readouterr().out.splitlines()
    assert estimate.startswith("estimate: 3 images x 220 samples = 660 samples at ")
    assert [ln.split(",")[0] for ln in lines[:2]] == ["certify: 1/3 examples (33.3%)", "certify: 2/3 examples (66.7%)"]
    assert "samples/s" in lines[0] and "eta" in lines[0]
    assert lines[2].startswith("certify: 3 examples, smoothed accuracy ") and "ACR" in lines[2]
    assert lines[3] == f"results: {out}" and len(lines) == 4
    assert main(argv) == 0  # rerun: already done, the summary again
    assert capsys.readouterr().out.splitlines()[1:] == lines[2:]
    assert main([*argv, "--heartbeat", "-5"]) == 2
    assert "--heartbeat must be a number of seconds >= 0" in capsys.readouterr().err
    assert json.loads((tmp_path / "c.tsv.json").read_text())["complete"]


def test_targets_beat_in_a_log_file(model, tmp_path, capsys, not_a_terminal, monkeypatch):
    monkeypatch.setenv("RSMOOTH_HEARTBEAT", "1e-9")
    from rsmooth.engine.targets import compute_targets

    lines = []
    compute_targets(str(model), str(tmp_path / "t.npy"), num_samples=2, batch_size=512, log=lines.append)
    assert lines[0].startswith("targets: 256/1437 images (17.8%)") and "samples/s" in lines[0]
    assert len(lines) == 5  # one per block of 256 but the last


def test_stdout_is_line_buffered_in_a_log_file(monkeypatch):
    import io
    import sys

    log = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # a file: block-buffered
    monkeypatch.setattr(sys, "stdout", log)
    assert not log.line_buffering
    progress.line_buffered_stdout()
    assert log.line_buffering


def test_heartbeat_eta_recovers_one_line_after_a_suspension(not_a_terminal):
    """The pace is measured since the previous line: after a job stood still for an hour (SIGSTOP,
    a suspended SLURM job), the next line's eta is the running pace again."""
    clock, lines = Clock(), []
    beat = _beat(clock, lines, total=1000)
    for _ in range(5):  # 1 example/s
        clock.now += 2
        beat.update(2)
    clock.now += 3600  # suspended
    beat.update(2)
    assert lines[-1].startswith("certify: 12/1000 examples") and "eta " in lines[-1]
    for _ in range(30):
        clock.now += 2
        beat.update(2)
    assert lines[-1].startswith("certify: 72/1000 examples (7.2%), 1 examples/s")
    assert lines[-1].endswith("eta 15m28s")  # 928 examples at 1 per second


def test_epoch_eta_is_the_median_pace_of_the_last_epochs():
    from rsmooth.engine.train import epoch_pace

    history = [{"time": t} for t in (40, 41, 400, 39, 42, 38)]  # one epoch slowed 10x
    assert epoch_pace(history) == 41
    assert epoch_pace(history[:1]) == 40
