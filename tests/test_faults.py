"""Faults: kills at exact points, SIGTERM, two writers on one output, a full disk, file modes,
and the command line's one-line errors (issue 7, items 4-9 and 18)."""
import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SUBPROCESS_ENV as ENV
import rsmooth
from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.data import get_dataset
from rsmooth.engine import TrainConfig, atomic_save, read_checkpoint, train
from rsmooth.engine import targets as targets_mod
from rsmooth.engine.targets import compute_targets, load_targets
from rsmooth.fileio import atomic_write_bytes, remove_stale_temps, run_lock
from rsmooth.metrics import CertifyWriter, read_certify_tsv, write_sidecar

QUIET = dict(progress=False, log=lambda s: None)
#: the settings of the reference run, as API fields and as command-line flags
CONFIG = dict(dataset="digits", epochs=3, batch_size=128, lr=0.05, lr_step=2, seed=3)
FLAGS = ["--dataset", "digits", "--epochs", "3", "--batch-size", "128", "--lr", "0.05",
         "--lr-step", "2", "--seed", "3", "--sigma", "0.25"]
CERTIFY = ["--n", "3000", "--n0", "50", "--batch-size", "1000", "--max", "8"]
#: how a stopped command says to continue: train, certify, and one that keeps no progress (list)
RESUME_LINE = "rerun the same command with --resume to continue from the last saved step"
CERTIFY_LINE = "rerun the same command (without --overwrite) to continue the file: its finished rows are kept"
RERUN_LINE = "rerun the same command"


def _config(**kw):
    return TrainConfig(**{**CONFIG, "hparams": {"sigma": 0.25}, **kw})


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """An uninterrupted training run (the reference for resumed ones, and a model to certify)."""
    out = tmp_path_factory.mktemp("ref")
    train(_config(), out, **QUIET)
    return out


def _cli(*args):
    return subprocess.Popen([sys.executable, "-m", "rsmooth", *map(str, args)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, proc, what, timeout=180):
    end = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"finished before {what}: {proc.communicate()}"
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def _main(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _one_line(err):
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def _same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k].cpu()) for k in a)


def _unshare_available():
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode == 0


# ----------------------------------------------------------------------------- 9: file modes


@pytest.mark.slow
@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_files_get_the_umask_mode(ref, tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        atomic_save({"a": torch.ones(1)}, tmp_path / "c.pt")
        write_sidecar(tmp_path / "r.tsv", {"a": 1})
        with CertifyWriter(tmp_path / "r.tsv") as w:
            w.write(0, 1, 1, 0.5, True, 0.1)
        with open(tmp_path / "r.tsv", "a") as f:
            f.write("1\t2")  # a torn row: resuming rewrites the file atomically
        CertifyWriter(tmp_path / "r.tsv", resume=True).close()
        compute_targets(str(ref), str(tmp_path / "t.npy"), num_samples=2, **QUIET)
        train(_config(epochs=1), tmp_path / "run", **QUIET)
    finally:
        os.umask(old)
    files = ["c.pt", "r.tsv.json", "r.tsv", "t.npy", "t.npy.json",
             "run/checkpoint.pt", "run/config.json", "run/train.log"]
    assert {f: oct(stat.S_IMODE((tmp_path / f).stat().st_mode)) for f in files} == {f: oct(mode) for f in files}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt", "r.tsv", "r.tsv.json", "run",
                                                          "t.npy", "t.npy.json"]


# ----------------------------------------------------------------------------- 4 and 7: locks, SIGTERM


@pytest.mark.slow
def test_second_train_is_refused_and_sigterm_stops_cleanly(ref, tmp_path, capsys):
    run = tmp_path / "run"
    p = _cli("train", *FLAGS, "--out", run)
    try:
        _wait_for(lambda: (run / "checkpoint.pt").exists(), p, "the first checkpoint")
        code, err = _main(capsys, "train", *FLAGS, "--out", run, "--resume")
        assert code == 2 and _one_line(err) == (
            f"rsmooth: error: another rsmooth process (pid {p.pid}) is writing {run}; "
            f"wait for it to finish or choose another --out")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 143 and _one_line(err) == f"rsmooth: terminated; {RESUME_LINE}"
    assert read_checkpoint(run)["epoch"] < 3  # stopped mid-run; the last checkpoint stands
    resumed = train(_config(), run, resume=True, **QUIET)
    full = read_checkpoint(ref)
    assert _same_weights(full["state_dict"], resumed.model.state_dict())
    assert [h["loss"] for h in full["history"]] == [h["loss"] for h in resumed.history]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt", "config.json", "train.log"]


@pytest.mark.slow
def test_second_certify_is_refused_and_sigterm_keeps_whole_rows(ref, tmp_path, capsys):
    tsv = tmp_path / "c.tsv"
    p = _cli("certify", "--checkpoint", ref, *CERTIFY, "--out", tsv)
    try:
        _wait_for(lambda: tsv.exists() and tsv.read_text().count("\n") >= 3, p, "two rows")
        code, err = _main(capsys, "certify", "--checkpoint", ref, *CERTIFY, "--out", tsv)
        assert code == 2 and f"another rsmooth process (pid {p.pid}) is writing {tsv}" in _one_line(err)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 143 and _one_line(err) == f"rsmooth: terminated; {CERTIFY_LINE}"
    text = tsv.read_text()
    assert text.endswith("\n") and 2 <= len(read_certify_tsv(tsv)) < 8  # whole rows only
    assert _main(capsys, "certify", "--checkpoint", ref, *CERTIFY, "--out", tsv)[0] == 0
    assert _main(capsys, "certify", "--checkpoint", ref, *CERTIFY, "--out", tmp_path / "full.tsv")[0] == 0

    def rows(path):
        return [ln.split("\t")[:5] for ln in path.read_text().splitlines()]  # all but the time

    assert rows(tsv) == rows(tmp_path / "full.tsv") and len(rows(tsv)) == 9
    assert not (tmp_path / "c.tsv.lock").exists()


def _hold_lock(lock):
    """A second process holding ``lock`` until killed; returns it once it holds the lock."""
    code = (f"from rsmooth.fileio import run_lock\nwith run_lock({str(lock)!r}, 'x'):\n"
            f"    print('locked', flush=True)\n    import time; time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "locked\n"
    return p


def test_targets_are_refused_while_another_process_writes_them(ref, tmp_path, capsys):
    out = tmp_path / "t.npy"
    p = _hold_lock(tmp_path / "t.npy.lock")
    try:
        with pytest.raises(RsmoothError, match=f"another rsmooth process \\(pid {p.pid}\\) is writing"):
            compute_targets(str(ref), str(out), num_samples=2, **QUIET)
        code, err = _main(capsys, "targets", "--checkpoint", ref, "--num-samples", 2, "--out", out)
        assert code == 2 and "another rsmooth process" in _one_line(err)
        assert not out.exists() and not (tmp_path / "t.npy.json").exists()
    finally:
        p.kill()
        p.wait()
    # the killed holder left its lock file: stale, it is simply taken over
    assert (tmp_path / "t.npy.lock").exists()
    load_targets(compute_targets(str(ref), str(out), num_samples=2, **QUIET), get_dataset("digits", "train"))
    assert not (tmp_path / "t.npy.lock").exists()


def test_run_lock_in_one_process_and_removal(tmp_path):
    with run_lock(tmp_path / "a.lock", "A"):
        assert (tmp_path / "a.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(RsmoothError, match=f"pid {os.getpid()}\\) is writing A"):
            with run_lock(tmp_path / "a.lock", "A"):
                pass
    assert list(tmp_path.iterdir()) == []
    with run_lock(tmp_path / "a.lock", "A"):  # free again
        pass


def test_file_systems_without_locks_run_unlocked(tmp_path, monkeypatch):
    def no_locks(fd, how):
        raise OSError(errno.ENOSYS, "Function not implemented")  # Lustre without -o flock

    monkeypatch.setattr("rsmooth.fileio.fcntl.flock", no_locks)
    with pytest.warns(UserWarning, match="cannot lock .*a.lock \\(Function not implemented\\); nothing keeps"):
        with run_lock(tmp_path / "a.lock", "A"):
            (tmp_path / "out").write_text("x")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_sigterm_and_ctrl_c_before_torch_is_imported(monkeypatch, capsys):
    code = "import sys, rsmooth.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert out.stdout == "False\n", out.stderr
    # the handlers cover building the parser (which imports torch)
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr("rsmooth.cli.build_parser", lambda: os.kill(os.getpid(), signal.SIGTERM))
    code, err = _main(capsys, "list")
    assert code == 143 and _one_line(err) == f"rsmooth: terminated; {RERUN_LINE}"
    assert signal.getsignal(signal.SIGTERM) == before  # restored

    def ctrl_c():
        raise KeyboardInterrupt

    monkeypatch.setattr("rsmooth.cli.build_parser", ctrl_c)
    code, err = _main(capsys, "list")
    assert code == 130 and _one_line(err) == f"rsmooth: interrupted; {RERUN_LINE}"


@pytest.mark.slow
def test_python_dash_m_rsmooth():
    out = subprocess.run([sys.executable, "-m", "rsmooth", "--version"], env=ENV,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == f"rsmooth {rsmooth.__version__}\n"


def test_lazy_top_level_names():
    from rsmooth.data import get_dataset as g
    from rsmooth.engine.checkpoint import load_model

    assert rsmooth.load_model is load_model and rsmooth.get_dataset is g
    assert {"Smooth", "create_model", "get_dataset", "load_model"} <= set(dir(rsmooth))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rsmooth.nope


# ----------------------------------------------------------------------------- 6: train leftovers


def test_stale_temp_files_are_removed_on_start(tmp_path):
    train(_config(epochs=1), tmp_path, **QUIET)
    stale = [tmp_path / ".checkpoint.pt.k2j_9x0a.tmp", tmp_path / ".train.log.abcdefgh.tmp"]
    for p in stale:
        p.write_bytes(b"\0" * 1000)
    kept = tmp_path / ".checkpoint.pt.mine.tmp"  # not a name atomic_write gives: not ours
    kept.write_bytes(b"x")
    train(_config(epochs=2), tmp_path, resume=True, **QUIET)
    assert not any(p.exists() for p in stale) and kept.exists()
    assert remove_stale_temps(tmp_path / "checkpoint.pt") == 0


@pytest.mark.slow
def test_log_line_lost_between_checkpoint_and_log_is_rebuilt(tmp_path):
    def killed_after_checkpoint_2(line):
        if line.startswith("epoch 2/"):
            raise KeyboardInterrupt  # after epoch 2's checkpoint, before its log line

    with pytest.raises(KeyboardInterrupt):
        train(_config(), tmp_path, progress=False, log=killed_after_checkpoint_2)
    assert len((tmp_path / "train.log").read_text().splitlines()) == 1
    assert read_checkpoint(tmp_path)["epoch"] == 2
    res = train(_config(), tmp_path, resume=True, **QUIET)
    assert (tmp_path / "train.log").read_text().splitlines() == [json.dumps(h) for h in res.history]
    assert [h["epoch"] for h in res.history] == [1, 2, 3]


# ----------------------------------------------------------------------------- 5: targets kills


@pytest.fixture(scope="module")
def reference_targets(ref, tmp_path_factory):
    out = tmp_path_factory.mktemp("targets") / "t.npy"
    return np.load(compute_targets(str(ref), str(out), num_samples=3, **QUIET))


def _targets(ref, out, **kw):
    return compute_targets(str(ref), str(out), num_samples=3, **QUIET, **kw)


def _check_finished(out, expected):
    data = get_dataset("digits", "train")
    assert np.array_equal(load_targets(out, data).numpy(), expected)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name, out.name + ".json"]


def _kill_at(monkeypatch, target, name, when=lambda *a, **k: True):
    """Make ``target.name`` raise KeyboardInterrupt (a kill) on the first call ``when`` accepts."""
    original = getattr(target, name)

    def killed(*args, **kw):
        if when(*args, **kw):
            monkeypatch.setattr(target, name, original)
            raise KeyboardInterrupt
        return original(*args, **kw)

    monkeypatch.setattr(target, name, killed)


def test_targets_kill_before_the_final_file_appears(ref, tmp_path, monkeypatch, reference_targets):
    out = tmp_path / "t.npy"
    _kill_at(monkeypatch, targets_mod, "atomic_write", when=lambda path, write: Path(path) == out)
    with pytest.raises(KeyboardInterrupt):
        _targets(ref, out)
    assert json.loads((tmp_path / "t.npy.json").read_text())["complete"] and not out.exists()
    with pytest.raises(RsmoothError, match="does not exist"):
        load_targets(out, get_dataset("digits", "train"))
    _targets(ref, out)
    _check_finished(out, reference_targets)


@pytest.mark.slow
def test_targets_kill_after_the_final_file_appears(ref, tmp_path, monkeypatch, reference_targets):
    out = tmp_path / "t.npy"
    _kill_at(monkeypatch, targets_mod._Files, "remove")
    with pytest.raises(KeyboardInterrupt):
        _targets(ref, out)
    assert (tmp_path / "t.npy.partial.npy").exists()
    load_targets(out, get_dataset("digits", "train"))  # complete already
    logs = []
    compute_targets(str(ref), str(out), num_samples=3, progress=False, log=logs.append)
    assert logs == [f"{out} is already computed"]
    _check_finished(out, reference_targets)
    # an older version's kill: the final file present, its metadata not yet complete
    meta = json.loads((tmp_path / "t.npy.json").read_text())
    (tmp_path / "t.npy.json").write_text(json.dumps({**meta, "complete": False}))
    with pytest.raises(RsmoothError, match="incomplete"):
        load_targets(out, get_dataset("digits", "train"))
    _targets(ref, out)
    _check_finished(out, reference_targets)


@pytest.mark.parametrize("name", ["partial", "done"])
def test_targets_empty_or_torn_partial_files_start_over(ref, tmp_path, reference_targets, name):
    out = tmp_path / "t.npy"
    _targets(ref, out, stop_after_blocks=2)
    (tmp_path / f"t.npy.{name}.npy").write_bytes(b"")  # what a kill while creating it left before
    logs = []
    compute_targets(str(ref), str(out), num_samples=3, progress=False, log=logs.append)
    assert logs == [f"{tmp_path / 't.npy.partial.npy'} or {tmp_path / 't.npy.done.npy'} is unreadable "
                    f"(left by an interrupted run); starting over"]
    _check_finished(out, reference_targets)


def test_targets_kill_while_creating_partial_files(ref, tmp_path, monkeypatch, reference_targets):
    out = tmp_path / "t.npy"
    _kill_at(monkeypatch, targets_mod, "_allocate")
    with pytest.raises(KeyboardInterrupt):
        _targets(ref, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npy.json"]  # nothing half-made
    (tmp_path / ".t.npy.partial.npy.x1y2z3w4.tmp").write_bytes(b"\0" * 100)  # as SIGKILL leaves it
    _kill_at(monkeypatch, targets_mod._Files, "write_done", when=lambda self, done: done.sum() == 3)
    with pytest.raises(KeyboardInterrupt):  # a kill after block 3's counts, before its done-flag
        _targets(ref, out)
    _targets(ref, out)
    _check_finished(out, reference_targets)


# ----------------------------------------------------------------------------- 8: a full disk


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_available(), reason="needs unshare -Urm to mount a small tmpfs")
def test_full_disk_one_line_then_resume(ref, tmp_path):
    """Real ENOSPC: each command on a tiny tmpfs, then again after the disk is enlarged."""
    disk = tmp_path / "disk"
    disk.mkdir()
    program = f"""
import os, subprocess, sys, torch
from rsmooth.cli import main
torch.set_num_threads(1)
def size(s):
    subprocess.run(["mount", "-o", "remount,size=" + s, {str(disk)!r}], check=True)
targets = ["targets", "--checkpoint", {str(ref)!r}, "--num-samples", "2", "--out", "t.npy"]
trains = ["train", *{FLAGS!r}, "--epochs", "1", "--out", "run", "--resume"]
certify = ["certify", "--checkpoint", {str(ref)!r}, "--n", "20", "--n0", "10", "--out", "c.tsv"]
codes = [main(targets), main(trains)]
for name in os.listdir():
    subprocess.run(["rm", "-r", name], check=True)
size("16k")
codes.append(main(certify))
size("4m")
codes += [main(targets), main(trains), main(certify)]
print(codes, sorted(os.listdir()), len(open("c.tsv").readlines()))
"""
    script = 'mount -t tmpfs -o size=32k tmpfs "$2" || exit 99; cd "$2" && exec "$0" -c "$1"'
    out = subprocess.run(["unshare", "-Urm", "sh", "-c", script, sys.executable, program, str(disk)],
                         env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode != 99, out.stderr
    full = ("No space left on device; free some space or choose another --out, then rerun the same "
            "command to continue")
    assert out.stderr.splitlines() == [f"rsmooth: error: t.npy.partial.npy: {full}",
                                       f"rsmooth: error: run/checkpoint.pt: {full}",
                                       f"rsmooth: error: c.tsv: {full}"], out.stderr
    lines = out.stdout.splitlines()
    assert any(ln.startswith("continuing c.tsv: ") for ln in lines), out.stdout
    assert lines[-1] == ("[2, 2, 2, 0, 0, 0] ['c.tsv', 'c.tsv.json', 'run', 't.npy', 't.npy.json'] 361"), out.stdout


def test_disk_errors_name_the_file(tmp_path, monkeypatch, capsys):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as e:
        atomic_write_bytes(tmp_path / "a.json", b"{}")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "a.json")
    with pytest.raises(OSError) as e:
        atomic_save({"w": torch.ones(3)}, tmp_path / "c.pt")
    assert e.value.filename == str(tmp_path / "c.pt")
    assert list(tmp_path.iterdir()) == []  # no temporary file left
    w = CertifyWriter(tmp_path / "r.tsv")
    with pytest.raises(OSError) as e:
        w.close()
    assert e.value.filename == str(tmp_path / "r.tsv") and w._f.closed


# ----------------------------------------------------------------------------- 18: main's errors


@pytest.mark.parametrize("exc,code,line", [
    (RsmoothError("bad --n; use 10"), 2, "rsmooth: error: bad --n; use 10"),
    (OSError(errno.ENOSPC, "No space left on device", "/x/c.tsv"), 2,
     "rsmooth: error: /x/c.tsv: No space left on device; free some space or choose another --out, "
     "then rerun the same command to continue"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/c.tsv"), 2,
     "rsmooth: error: /ro/c.tsv: Read-only file system; choose another --out on a writable file system"),
    (PermissionError(errno.EACCES, "Permission denied", "/root/x"), 2,
     "rsmooth: error: /root/x: Permission denied; fix the permissions (or, for an output, choose another --out)"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/d/x"), 2,
     "rsmooth: error: /d/x: No such file or directory"),
    (MemoryError(), 2, "rsmooth: error: out of memory (MemoryError); lower --batch-size and rerun the "
     "same command to continue"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore"), 2,
     "rsmooth: error: out of memory (CUDA out of memory. Tried to allocate 2.00 GiB); lower "
     "--batch-size and rerun the same command to continue"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory"), 2,
     "rsmooth: error: out of memory ([enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
     "allocate memory); lower --batch-size and rerun the same command to continue"),
    (ZeroDivisionError("division by zero\nsecond line"), 1,
     "rsmooth: internal error: ZeroDivisionError: division by zero (rerun with --debug or "
     "RSMOOTH_DEBUG=1 to see the traceback; please report it)"),
])
def test_main_prints_one_line_per_error(monkeypatch, capsys, exc, code, line):
    monkeypatch.delenv("RSMOOTH_DEBUG", raising=False)

    def fail(args):
        raise exc

    monkeypatch.setattr("rsmooth.cli.listing.run", fail)
    assert _main(capsys, "list") == (code, line + "\n")


def test_a_sigterm_while_the_error_line_is_written_does_not_cut_it(monkeypatch, capsys):
    """Under torchrun, the rank that fails first makes torchrun SIGTERM the others, which may be
    writing their own one line: a CI run once saw a rank's line end without its newline."""
    monkeypatch.delenv("RSMOOTH_DEBUG", raising=False)

    def fail(args):
        raise RsmoothError("refused")

    real = sys.stderr.write

    def write(text):  # the signal arrives in the middle of the write
        os.kill(os.getpid(), signal.SIGTERM)
        return real(text)

    monkeypatch.setattr("rsmooth.cli.listing.run", fail)
    monkeypatch.setattr(sys.stderr, "write", write)
    before = signal.getsignal(signal.SIGTERM)
    try:
        result = _main(capsys, "list")
    except KeyboardInterrupt:  # what rsmooth's SIGTERM handler raises
        pytest.fail("the SIGTERM stopped the error line being written")
    assert result == (2, "rsmooth: error: refused\n")
    assert signal.getsignal(signal.SIGTERM) == before  # restored

    def stop(args):  # the same for the line of a command that a first SIGTERM stopped
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("rsmooth.cli.listing.run", stop)
    try:
        result = _main(capsys, "list")
    except KeyboardInterrupt:
        pytest.fail("a second SIGTERM stopped the line of the first being written")
    assert result == (143, f"rsmooth: terminated; {RERUN_LINE}\n")


def test_debug_shows_the_traceback(monkeypatch, capsys):
    def fail(args):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("rsmooth.cli.listing.run", fail)
    monkeypatch.delenv("RSMOOTH_DEBUG", raising=False)
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "list"])
    with pytest.raises(ZeroDivisionError):
        main(["list", "--debug"])
    monkeypatch.setenv("RSMOOTH_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["list"])
    monkeypatch.setenv("RSMOOTH_DEBUG", "0")
    assert main(["list"]) == 1


def test_parser_errors_inside_the_handling(monkeypatch, capsys):
    monkeypatch.delenv("RSMOOTH_DEBUG", raising=False)

    def broken():
        raise ImportError("cannot import name 'x'")

    monkeypatch.setattr("rsmooth.cli.build_parser", broken)
    code, err = _main(capsys, "list")
    assert code == 1 and _one_line(err).startswith("rsmooth: internal error: ImportError: cannot import")

