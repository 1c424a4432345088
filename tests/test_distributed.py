"""Sharded certification and targets (issue 8, item 2): --start, --shard I/K + merge, and torchrun
with 2 gloo ranks on CPU give the file a one-process run writes (a certify TSV's time column
aside); killed shards and ranks resume."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV as ENV
from rsmooth.cli import main
from rsmooth.data import certify_indices
from rsmooth.engine.shards import parse_shard, shard_path, shard_share
from rsmooth.engine.targets import compute_targets
from rsmooth.errors import RsmoothError

#: a subset with a start, a skip and a max that is not a multiple of 2 (shards of 6 and 5)
SUBSET = ["--start", "1", "--skip", "3", "--max", "11"]
FAST = ["--n", "200", "--n0", "50", "--batch-size", "200", "--device", "cpu", *SUBSET]
#: slow enough per example (~0.3 s) that a kill lands mid-run
SLOW = ["--n", "4000", "--n0", "50", "--batch-size", "1000", "--device", "cpu", *SUBSET]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("model")
    assert main(["train", "--dataset", "digits", "--sigma", "0.25", "--epochs", "3", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def one(model, tmp_path_factory):
    """The one-process runs the sharded ones must equal: FAST and SLOW settings."""
    root = tmp_path_factory.mktemp("one")
    for name, flags in (("fast", FAST), ("slow", SLOW)):
        assert main(["certify", "--checkpoint", str(model), *flags, "--out", str(root / f"{name}.tsv")]) == 0
    return root


def rows(path):
    """Every column but time, line by line."""
    return [line.split("\t")[:5] for line in Path(path).read_text().splitlines()]


def certify(model, out, *flags):
    return main(["certify", "--checkpoint", str(model), *map(str, flags), "--out", str(out)])


def torchrun(*args, script=None, env=None):
    """2 ranks of ``rsmooth ARGS`` (or of ``python SCRIPT ARGS``), with ``env`` added to the environment."""
    program = ["--", str(script)] if script else ["-m", "rsmooth", "--"]
    cmd = ["torchrun", "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.1",
           *program, *map(str, args)]
    return subprocess.Popen(cmd, env={**ENV, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(condition, proc, what, timeout=120):
    end = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"finished before {what}: {proc.communicate()}"
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def one_line(capsys):
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------------- --start


def test_start_skip_max_against_brute_force():
    for length, start, skip, max in [(10, 0, 1, None), (10, 3, 1, None), (10, 1, 3, 2), (10, 2, 4, 100),
                                     (360, 7, 20, 5), (10, 10, 1, None), (5, 9, 2, 3)]:
        brute = []
        for i in range(length):  # the reference scripts' loop, max counting certified examples
            if i >= start and (i - start) % skip == 0 and (max is None or len(brute) < max):
                brute.append(i)
        assert certify_indices(length, skip=skip, max=max, start=start) == brute
    with pytest.raises(RsmoothError, match="start must be >= 0"):
        certify_indices(10, start=-1)


@pytest.mark.slow
def test_start_is_recorded_and_part_of_the_run(model, one, tmp_path, capsys):
    meta = json.loads((one / "fast.tsv.json").read_text())
    assert meta["start"] == 1 and meta["skip"] == 3 and meta["num_examples"] == 11 and meta["complete"]
    assert [int(r[0]) for r in rows(one / "fast.tsv")[1:]] == list(range(1, 32, 3))
    (tmp_path / "c.tsv").write_text((one / "fast.tsv").read_text())
    (tmp_path / "c.tsv.json").write_text((one / "fast.tsv.json").read_text())
    assert certify(model, tmp_path / "c.tsv", *FAST, "--start", 2) == 2  # a later --start wins in argparse
    assert "holds a run with start=1, not 2" in one_line(capsys)
    assert certify(model, tmp_path / "d.tsv", *FAST[:-6], "--start", 360) == 2
    assert "--start 360 is past the last test example (index 359)" in one_line(capsys)


def test_pipeline_passes_start_to_certification(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr("rsmooth.engine.pipeline.run_pipeline", lambda *a, **kw: seen.update(kw) or "done")
    assert main(["pipeline", "catrs", "--start", "5", "--skip", "2", "--out", str(tmp_path)]) == 0
    assert seen["certify_options"]["start"] == 5 and seen["skip"] == 2


# ----------------------------------------------------------------------------- --shard and merge


def test_parse_shard_and_shares():
    assert parse_shard("1/4") == (1, 4) and parse_shard((0, 1)) == (0, 1)
    for bad in ("4/4", "-1/2", "1", "a/b", "1/0"):
        with pytest.raises(RsmoothError, match="--shard"):
            parse_shard(bad)
    assert shard_path("runs/x/certify.tsv", (0, 4)) == Path("runs/x/certify.shard-0-of-4.tsv")
    subset = list(range(1, 32, 3))
    shares = [shard_share(subset, (i, 3)) for i in range(3)]
    assert sorted(sum(shares, [])) == subset and [len(s) for s in shares] == [4, 4, 3]


def test_shards_merge_into_the_one_process_file(model, one, tmp_path, capsys):
    out = tmp_path / "c.tsv"
    for i in (1, 0):
        assert certify(model, out, *FAST, "--shard", f"{i}/2") == 0
    shard = json.loads((tmp_path / "c.shard-1-of-2.tsv.json").read_text())
    assert shard["shard"] == [1, 2] and shard["subset_size"] == 11 and shard["num_examples"] == 5
    assert main(["merge", str(out)]) == 0
    assert rows(out) == rows(one / "fast.tsv")
    merged, single = (json.loads(Path(f"{p}.json").read_text()) for p in (out, one / "fast.tsv"))
    assert "shard" not in merged and "subset_size" not in merged and merged["merged_shards"] == 2
    assert [(e["shard"], e["done"]) for e in merged["sessions"]] == [([0, 2], 0), ([1, 2], 0)]
    for key in ("started", "finished", "merged_shards", "sessions"):
        merged.pop(key), single.pop(key, None)
    assert merged == single
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tsv", "c.tsv.json"]  # shards removed
    before = out.read_bytes()
    capsys.readouterr()
    assert main(["merge", str(out)]) == 0  # a second merge: nothing left to do, and it says so
    assert f"{out} is already complete\n" in capsys.readouterr().out and out.read_bytes() == before
    assert main(["merge", str(tmp_path / "none.tsv")]) == 2 and "no shard files of" in one_line(capsys)


def test_predict_shards_merge_into_the_one_process_file(model, tmp_path):
    flags = ["--n", 200, "--batch-size", 200, "--device", "cpu", *SUBSET]
    predict = ["predict", "--checkpoint", str(model), *map(str, flags), "--out"]
    assert main([*predict, str(tmp_path / "one.tsv")]) == 0
    for i in range(3):
        assert main([*predict, str(tmp_path / "p.tsv"), "--shard", f"{i}/3"]) == 0
    assert main(["merge", str(tmp_path / "p.tsv")]) == 0
    assert rows(tmp_path / "p.tsv") == rows(tmp_path / "one.tsv")
    assert json.loads((tmp_path / "p.tsv.json").read_text())["mode"] == "predict"


@pytest.mark.slow
def test_killed_shard_resumes_and_merges_the_same(model, one, tmp_path):
    out = tmp_path / "c.tsv"
    part = shard_path(out, (1, 2))
    cmd = [sys.executable, "-m", "rsmooth", "certify", "--checkpoint", str(model), *SLOW, "--shard", "1/2",
           "--out", str(out)]
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: part.exists() and len(part.read_text().splitlines()) >= 2, p, "the first row")
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert 1 <= len(rows(part)) - 1 < 5 and not json.loads(Path(f"{part}.json").read_text())["complete"]
    assert certify(model, out, *SLOW, "--shard", "0/2") == 0
    assert main(["merge", str(out)]) == 2  # shard 1 is incomplete
    assert certify(model, out, *SLOW, "--shard", "1/2") == 0  # the same command resumes
    assert main(["merge", "--keep-shards", "--out", str(out), str(part), str(shard_path(out, (0, 2)))]) == 0
    assert rows(out) == rows(one / "slow.tsv") and part.exists()


def interrupted(one_file, out, keep=4):
    """``out``: the first ``keep`` rows of the one-process file ``one_file`` (their time column set
    to 123, to tell copied rows from recomputed ones) and half of the next, incomplete, as a
    one-process run killed mid-write leaves it."""
    lines = Path(one_file).read_text().splitlines(keepends=True)
    kept = ["\t".join([*ln.split("\t")[:5], "123\n"]) for ln in lines[1:keep + 1]]
    out.write_text("".join([lines[0], *kept, lines[keep + 1][:7]]))
    meta = json.loads(Path(f"{one_file}.json").read_text())
    Path(f"{out}.json").write_text(json.dumps({**meta, "complete": False}))
    for ext in (".seq",):
        if Path(f"{one_file}{ext}").exists():
            seq = Path(f"{one_file}{ext}").read_text().splitlines(keepends=True)
            Path(f"{out}{ext}").write_text("".join(seq[:keep + 2]))  # one row more than the TSV has
    return [ln.split("\t")[0] for ln in kept]


def test_an_interrupted_one_process_run_continues_as_shards(model, one, tmp_path, capsys):
    out = tmp_path / "c.tsv"
    copied = interrupted(one / "fast.tsv", out)
    assert certify(model, out, *FAST, "--shard", "1/2") == 0
    assert f"c.shard-1-of-2.tsv: continues {out}, which holds rows of 2 of its 5 examples" in capsys.readouterr().out
    assert certify(model, out, *FAST, "--shard", "0/2") == 0
    assert main(["merge", str(out)]) == 0
    assert rows(out) == rows(one / "fast.tsv")
    times = {ln.split("\t")[0]: ln.split("\t")[5] for ln in out.read_text().splitlines()[1:]}
    assert [i for i, t in times.items() if t == "123"] == copied  # taken from OUT, not certified again
    sessions = json.loads(Path(f"{out}.json").read_text())["sessions"]
    assert [(e.get("from"), e.get("shard"), e["done"]) for e in sessions] == \
        [("c.tsv", None, 0), (None, [0, 2], 2), (None, [1, 2], 2)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tsv", "c.tsv.json"]


def test_a_shard_does_not_take_rows_from_a_run_still_writing_them(model, one, tmp_path, capsys, monkeypatch):
    from rsmooth.engine.shards import lock_path
    from rsmooth.fileio import run_lock

    out = tmp_path / "c.tsv"
    interrupted(one / "fast.tsv", out)
    monkeypatch.setattr("rsmooth.engine.shards.SHARD_START_WAIT", 0.3)
    with run_lock(lock_path(out), out):  # the one-process run, still going
        assert certify(model, out, *FAST, "--shard", "0/2") == 2
    assert f"another rsmooth process (pid {os.getpid()}) is writing {out}" in one_line(capsys)
    assert not shard_path(out, (0, 2)).exists()
    taken = threading.Event()

    def another_shard_starting():
        with run_lock(lock_path(out), out):
            taken.set()
            time.sleep(1.0)

    t = threading.Thread(target=another_shard_starting)
    t.start()
    taken.wait()
    monkeypatch.setattr("rsmooth.engine.shards.SHARD_START_WAIT", 30.0)
    assert certify(model, out, *FAST, "--shard", "0/2") == 0  # waited for the lock held a moment
    t.join()
    assert "which holds rows of 2 of its 6 examples" in capsys.readouterr().out


def test_merge_errors_are_one_line(model, tmp_path, capsys):
    out = tmp_path / "c.tsv"
    assert certify(model, out, *FAST, "--shard", "0/3") == 0
    assert main(["merge", str(out)]) == 2
    assert f"shard 1/3 of {out} is missing ({tmp_path / 'c.shard-1-of-3.tsv'} not found); run its certify " \
           f"command with --shard 1/3" in one_line(capsys)
    assert certify(model, out, *FAST, "--shard", "1/3", "--n", 300) == 0
    assert certify(model, out, *FAST, "--shard", "2/3") == 0
    assert main(["merge", str(out)]) == 2
    assert "shard 1/3 (" in (err := one_line(capsys)) and "was run with n=300, shard 0/3 with 200" in err
    assert certify(model, out, *FAST, "--shard", "1/3", "--overwrite") == 0
    assert certify(model, tmp_path / "o.tsv", *FAST, "--shard", "1/2") == 0  # a shard of another run
    assert main(["merge", "--out", str(out), str(shard_path(out, (0, 3))), str(tmp_path / "o.shard-1-of-2.tsv")]) == 2
    assert "different shard counts (2, 3)" in one_line(capsys)
    assert main(["merge", "--out", str(out), *(str(shard_path(out, (i, 3))) for i in (0, 1, 1, 2))]) == 2
    assert f"shard file {shard_path(out, (1, 3))} is given twice" in one_line(capsys)
    damaged = shard_path(out, (2, 3))
    damaged.write_text("\n".join(damaged.read_text().splitlines()[:-1]) + "\n")  # a row lost
    assert main(["merge", str(out)]) == 2
    assert "does not hold exactly its share of the subset (idx 25 is missing)" in one_line(capsys)
    assert certify(model, out, *FAST, "--shard", "2/3") == 0  # the same command completes it
    other = {**json.loads(Path(f"{shard_path(out, (0, 3))}.json").read_text()), "n": 1000}
    Path(f"{out}.json").write_text(json.dumps(other))  # an OUT from another run
    assert main(["merge", str(out)]) == 2 and "holds a run with n=1000, not 200; pass --overwrite" in one_line(capsys)
    assert main(["merge", "--overwrite", str(out)]) == 0
    assert certify(model, out, "--shard", "2/2") == 2
    assert "--shard 2/2: the shard index must be in 0..1" in one_line(capsys)


# ----------------------------------------------------------------------------- torchrun


def test_shard_flag_under_torchrun_is_refused(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert certify(model, tmp_path / "c.tsv", *FAST, "--shard", "0/2") == 2
    assert "--shard under torchrun: each rank certifies shard RANK/WORLD_SIZE itself" in one_line(capsys)


def _killed_in_the_merge_as_rank_0_of_2(out, monkeypatch):
    """Merge ``out``'s two shards as a torchrun rank 0 killed while deleting them (after the first
    sidecar, holding every lock), then make this process rank 0 of 2 without a process group.
    Returns OUT's bytes."""
    from contextlib import contextmanager

    from rsmooth.engine import distributed

    assert main(["merge", "--keep-shards", str(out)]) == 0
    Path(f"{shard_path(out, (0, 2))}.json").unlink()
    for p in (out, shard_path(out, (0, 2)), shard_path(out, (1, 2))):
        Path(f"{p}.lock").write_text("12345\n")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "process_group", contextmanager(lambda dev, timeout=None: (yield)))
    monkeypatch.setattr(distributed, "agree", lambda world, facts: None)
    return out.read_bytes()


def test_torchrun_rerun_after_a_kill_in_the_merge_cleans_what_it_left(model, tmp_path, monkeypatch, capsys):
    """A torchrun certify killed while rank 0 deletes the merged shards: the rerun says OUT is complete
    and deletes the shard and lock files left beside it (rank 0 of 2 here, in this process)."""
    out = tmp_path / "c.tsv"
    for i in range(2):
        assert certify(model, out, *FAST, "--shard", f"{i}/2") == 0
    merged = _killed_in_the_merge_as_rank_0_of_2(out, monkeypatch)
    capsys.readouterr()
    assert certify(model, out, *FAST) == 0
    assert f"{out} is already complete; removed the 3 files its shards left" in capsys.readouterr().out
    assert sorted(q.name for q in tmp_path.iterdir()) == ["c.tsv", "c.tsv.json"] and out.read_bytes() == merged


def test_torchrun_targets_rerun_after_a_kill_in_the_merge_cleans_what_it_left(model, tmp_path, monkeypatch):
    out, logs = tmp_path / "t.npy", []
    quiet = dict(num_samples=2, train_subset=300, device="cpu", progress=False, log=logs.append)
    for i in range(2):
        compute_targets(str(model), str(out), shard=(i, 2), **quiet)
    merged = _killed_in_the_merge_as_rank_0_of_2(out, monkeypatch)
    compute_targets(str(model), str(out), **quiet)
    assert logs[-1] == f"{out} is already complete; removed the 3 files its shards left"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["t.npy", "t.npy.json"] and out.read_bytes() == merged


@pytest.mark.slow
def test_torchrun_killed_rank_stops_the_job_and_rerun_finishes(model, one, tmp_path):
    """A killed rank stops the job; the same command continues it into the one-process file."""
    out = tmp_path / "c.tsv"
    shard1 = shard_path(out, (1, 2))
    p = torchrun("certify", "--checkpoint", model, *SLOW, "--out", out)
    lock = Path(f"{shard1}.lock")
    wait_for(lambda: shard1.exists() and len(shard1.read_text().splitlines()) >= 2 and lock.exists(), p,
             "rank 1's first row")
    os.kill(int(lock.read_text()), signal.SIGKILL)  # the lock holds rank 1's pid
    _, stderr = p.communicate(timeout=120)
    assert p.returncode != 0
    # rank 0 was stopped by torchrun (and says a rank failed: no signal came from outside), or (waiting
    # for rank 1 already) saw gloo lose it
    assert re.search(r"^rsmooth: (error: rank 0 of 2: another rank stopped|rank 0 of 2: stopped because another "
                     r"rank failed ).*rerun the same torchrun command", stderr, re.M), stderr
    report = stderr.index("ChildFailedError")  # torchrun's own report comes after the ranks' lines
    assert all(m.start() < report for m in re.finditer(r"^rsmooth: ", stderr, re.M)), stderr
    assert not out.exists()
    p = torchrun("certify", "--checkpoint", model, *SLOW, "--out", out)  # continues both shards
    stdout, stderr = p.communicate(timeout=180)
    assert p.returncode == 0, stderr
    assert rows(out) == rows(one / "slow.tsv")
    assert stdout.count("results:") == 1 and stdout.count("merged 2 shards") == 1  # rank 0 only
    assert stdout.splitlines()[0] == "rsmooth: 2 processes (gloo, cpu)" and f"results: {out} (2 processes)" in stdout
    assert sorted(q.name for q in tmp_path.iterdir()) == ["c.tsv", "c.tsv.json"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["--sequential", "--radii", "0.25", "0.5"],
                                  ["--adaptive", "--radius-tol", "0.1", "--two-sided"]])
def test_sequential_shards_and_torchrun_give_the_one_process_files(model, tmp_path, capsys, mode):
    """--sequential/--adaptive (two-sided) split by --shard + merge, and by 2 torchrun ranks: OUT and
    OUT.seq are the one-process files (OUT's time column aside)."""
    flags = [*mode, "--n-max", "3000", "--n0", "50", "--batch-size", "500", "--device", "cpu", *SUBSET]
    assert certify(model, tmp_path / "one.tsv", *flags) == 0
    seq = (tmp_path / "one.tsv.seq").read_text()
    assert len(seq.splitlines()) == 12
    for i in (1, 0):
        assert certify(model, tmp_path / "s.tsv", *flags, "--shard", f"{i}/2") == 0
    assert (tmp_path / "s.shard-0-of-2.tsv.seq").is_file()
    # a shard of an earlier version, which named the samples file OUT.seq.tsv, merges too
    (tmp_path / "s.shard-0-of-2.tsv.seq").rename(tmp_path / "s.shard-0-of-2.tsv.seq.tsv")
    assert main(["merge", str(tmp_path / "s.tsv")]) == 0
    assert rows(tmp_path / "s.tsv") == rows(tmp_path / "one.tsv") and (tmp_path / "s.tsv.seq").read_text() == seq
    assert json.loads((tmp_path / "s.tsv.json").read_text())["n_max"] == 3000
    assert not list(tmp_path.glob("s.shard-*"))
    (tmp_path / "t").mkdir()
    out = tmp_path / "t" / "c.tsv"
    # --sequential: the ranks continue a one-process run killed part-way (rank 0 starts both shards
    # with its rows); --adaptive: from nothing
    copied = interrupted(tmp_path / "one.tsv", out, keep=5) if mode[0] == "--sequential" else []
    p = torchrun("certify", "--checkpoint", model, *flags, "--out", out, "--heartbeat", "1e-9")
    stdout, stderr = p.communicate(timeout=180)
    assert p.returncode == 0, stderr
    assert rows(out) == rows(tmp_path / "one.tsv") and Path(f"{out}.seq").read_text() == seq
    assert stdout.count(f"continues {out}") == (2 if copied else 0), stdout
    assert [ln.split("\t")[0] for ln in out.read_text().splitlines()[1:] if ln.endswith("\t123")] == copied
    # rank 0 alone logs: heartbeat lines of its shard, then the summary of OUT once
    beats = [ln for ln in stdout.splitlines() if "examples (" in ln]
    assert beats and all(ln.startswith(f"certify {mode[0]} (shard 0/2): ") for ln in beats), stdout
    assert [ln for ln in stdout.splitlines() if ln.startswith(f"certify {mode[0]}: ")] == \
        [ln for ln in stdout.splitlines() if ln.startswith(f"certify {mode[0]}: 11 examples, ")], stdout
    assert stdout.count(f"certify {mode[0]}: 11 examples, ") == 1, stdout
    assert sorted(q.name for q in out.parent.iterdir()) == ["c.tsv", "c.tsv.json", "c.tsv.seq"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["certify"], ["predict"], ["certify", "--sequential", "--radii", "0.25", "0.5"],
                                  ["certify", "--adaptive", "--radius-tol", "0.1"]])
def test_the_batch_size_changes_no_row(model, tmp_path, mode):
    """Issue 23: examples share forward passes and each one's noise comes in blocks of 256 copies,
    so every batch size (auto included) writes the same rows, sorted by idx, and OUT.seq alike."""
    flags = ["--n-max", "3000"] if len(mode) > 1 else ["--n", "700"]
    runs = {}
    for batch in ("13", "1000", "auto"):
        out = tmp_path / f"b{batch}.tsv"
        n0 = ["--n0", "50"] * (mode != ["predict"])
        assert main([*mode, "--checkpoint", str(model), *flags, *n0, "--batch-size", batch, "--device", "cpu", *SUBSET,
                     "--out", str(out)]) == 0
        runs[batch] = rows(out), Path(f"{out}.seq").read_text() if len(mode) > 1 else None
    assert runs["13"] == runs["1000"] == runs["auto"]
    assert [int(r[0]) for r in runs["13"][0][1:]] == list(range(1, 32, 3))
    meta = json.loads((tmp_path / "bauto.tsv.json").read_text())
    assert (meta["batch_size"], meta["noise_block"], meta["tuning"]["how"]["batch_size"]) == (256, 256, "default")


def test_merge_refuses_sequential_shards_of_other_settings_or_without_their_rows(model, tmp_path, capsys):
    flags = ["--sequential", "--radii", "0.25", "--n-max", "1000", "--n0", "50", "--device", "cpu", *SUBSET]
    assert certify(model, tmp_path / "s.tsv", *flags, "--shard", "0/2") == 0
    assert certify(model, tmp_path / "s.tsv", *flags, "--n-max", "2000", "--shard", "1/2") == 0
    assert main(["merge", str(tmp_path / "s.tsv")]) == 2
    assert "was run with n_max=2000" in one_line(capsys)
    assert certify(model, tmp_path / "s.tsv", *flags, "--shard", "1/2", "--overwrite") == 0
    seq1 = tmp_path / "s.shard-1-of-2.tsv.seq"
    seq1.write_text("".join(seq1.read_text().splitlines(keepends=True)[:-1]))  # a row lost
    assert main(["merge", str(tmp_path / "s.tsv")]) == 2
    assert "files do not hold one row per example of their TSVs" in one_line(capsys)
    assert not (tmp_path / "s.tsv").exists()


# ----------------------------------------------------------------------------- targets


@pytest.mark.slow
def test_targets_shards_and_torchrun_give_the_one_process_file(model, tmp_path, capsys):
    quiet = dict(num_samples=20, device="cpu", progress=False, log=lambda s: None)
    one = compute_targets(str(model), str(tmp_path / "one.npy"), **quiet)
    out = tmp_path / "t.npy"
    compute_targets(str(model), str(out), shard=(1, 2), stop_after_blocks=1, **quiet)  # killed after a block
    compute_targets(str(model), str(out), shard="0/2", **quiet)
    assert main(["merge", str(out)]) == 2
    assert f"targets shard 1/2 ({shard_path(out, (1, 2))}) is incomplete" in one_line(capsys)
    compute_targets(str(model), str(out), shard="1/2", **quiet)  # resumes
    assert main(["merge", str(out)]) == 0
    assert out.read_bytes() == one.read_bytes()
    assert without_sessions(out) == without_sessions(one)
    blocks = [(e["shard"], e["blocks_done"]) for e in json.loads(Path(f"{out}.json").read_text())["sessions"]]
    assert blocks == [([0, 2], 0), ([1, 2], 0), ([1, 2], 1)]  # shard 1 killed after a block and continued
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.npy", "one.npy.json", "t.npy", "t.npy.json"]

    ranks = tmp_path / "r.npy"
    p = torchrun("targets", "--checkpoint", model, "--num-samples", 20, "--device", "cpu", "--out", ranks)
    stdout, stderr = p.communicate(timeout=180)
    assert p.returncode == 0, stderr
    assert stdout.count("targets:") == 1 and ranks.read_bytes() == one.read_bytes()
    assert without_sessions(ranks) == without_sessions(one)


def without_sessions(npy):
    """A targets file's metadata but its ``sessions`` (which say when and where each part was made)."""
    return {k: v for k, v in json.loads(Path(f"{npy}.json").read_text()).items() if k != "sessions"}


@pytest.mark.slow
def test_torchrun_corruption_folder_equals_one_process(model, tmp_path):
    """'certify --corruption a,b' under torchrun: every file sharded over the ranks, merged by rank 0,
    the same rows as one process (generated corruptions are made per example, wherever)."""
    flags = [*FAST, "--corruption", "stripe,shot_noise"]
    assert certify(model, tmp_path / "one", *flags) == 0
    p = torchrun("certify", "--checkpoint", model, *flags, "--out", tmp_path / "ranks")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    for name in ("stripe.tsv", "shot_noise.tsv"):
        assert rows(tmp_path / "ranks" / name) == rows(tmp_path / "one" / name)
    assert sorted(q.name for q in (tmp_path / "ranks").iterdir() if not q.name.endswith(".lock")) == [
        "shot_noise.tsv", "shot_noise.tsv.json", "stripe.tsv", "stripe.tsv.json"]
