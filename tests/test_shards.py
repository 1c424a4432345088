"""The shard/merge layer (engine/shards.py, issue 21): a merge killed at any step recovers when
rerun, a merge rerun says its OUT is complete, and damaged shards are refused in one line.

The shards here are written by hand (merge only reads files), so the tests need no model."""
import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

from rsmooth.cli import main
from rsmooth.engine.seqfile import write_seq_rows
from rsmooth.engine.shards import parse_shard, shard_path, shard_share
from rsmooth.errors import RsmoothError
from rsmooth.metrics.certify_io import TSV_HEADER, format_row

#: the subset of test_distributed: start 1, skip 3, 11 examples
START, SKIP, SIZE = 1, 3, 11
CERTIFY_META = {"mode": "sequential", "dataset": "digits", "corruption": None, "split": "test", "sigma": 0.25,
                "n0": 50, "n": None, "alpha": 0.001, "start": START, "skip": SKIP, "max": SIZE, "seed": 0,
                "checkpoint_sha256": "ab" * 32, "precision": "fp32", "channels_last": False, "radii": [0.25],
                "n_max": 1000, "radius_tol": None, "futility": 0.001, "confidence_sequence": "betting",
                "device": "cpu", "started": "2026-01-01T00:00:00", "complete": True}
#: 600 training images: blocks of 256, 256 and 88
ROWS, CLASSES = 600, 3
TARGETS_META = {"kind": "rsmooth-targets", "dataset": "digits", "split": "train", "data_fingerprint": {"n": ROWS},
                "checkpoint_sha256": "cd" * 32, "sigma": 0.25, "num_samples": 20, "augment": True, "seed": 0,
                "num_classes": CLASSES, "complete": True}


def certify_shards(folder: Path, k: int = 2) -> Path:
    """The K shards of a --sequential certification of OUT = folder/c.tsv (TSV, .seq, sidecar)."""
    out = folder / "c.tsv"
    subset = list(range(START, START + SKIP * SIZE, SKIP))
    for i in range(k):
        p, share = shard_path(out, (i, k)), shard_share(subset, (i, k))
        p.write_text(TSV_HEADER + "\n" + "".join(format_row(j, j % 10, j % 7, 0.1 * (j % 4), j % 10 == j % 7, 0.01)
                                                 + "\n" for j in share))
        write_seq_rows(Path(f"{p}.seq"), [(j, f"{j}\t{'x' * 3}\n") for j in share])
        meta = {**CERTIFY_META, "shard": [i, k], "subset_size": SIZE, "num_examples": len(share)}
        Path(f"{p}.json").write_text(json.dumps(meta))
    return out


def targets_shards(folder: Path, k: int = 2) -> Path:
    """The K shards of targets OUT = folder/t.npy: each its blocks' rows (frequencies) in block order."""
    out = folder / "t.npy"
    freqs = np.random.default_rng(0).dirichlet(np.ones(CLASSES), ROWS).astype(np.float32)
    blocks = list(range(3))
    for i in range(k):
        p = shard_path(out, (i, k))
        np.save(p, np.concatenate([freqs[b * 256:(b + 1) * 256] for b in shard_share(blocks, (i, k))]))
        Path(f"{p}.json").write_text(json.dumps({**TARGETS_META, "shard": [i, k], "num_rows": ROWS}))
    return out


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "internal error" not in err, err
    return err


class Killed(BaseException):
    """What a kill does to the merge: nothing after it runs (not even the locks' removal)."""


def kill_at(monkeypatch, step: int) -> list:
    """From now on, count the merge's steps (every file it replaces, renames or deletes) and kill it
    at ``step``, before the step happens; after that no file operation happens, as in a dead process.
    Returns the steps seen."""
    steps = []
    for name in ("replace", "rename", "unlink"):
        real = getattr(os, name)

        def op(*args, _real=real, _name=name, **kwargs):
            if steps and steps[-1] == "killed":
                return None
            steps.append(f"{_name} {Path(args[-1] if _name != 'unlink' else args[0]).name}")
            if len(steps) == step:
                steps.append("killed")
                raise Killed
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, op)
    return steps


def die(folder: Path) -> None:
    """What the kernel does for a killed process: close its files in ``folder`` (releasing its locks)."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{folder}/"):
            os.close(int(fd))


def listing(folder: Path):
    return sorted(p.name for p in folder.iterdir())


def other_out(make):
    """``make``, with an OUT of other settings (n_max 2000) beside the shards, for --overwrite."""
    def made(folder):
        out = make(folder)
        out.write_text(TSV_HEADER + "\n")
        Path(f"{out}.json").write_text(json.dumps({**CERTIFY_META, "n_max": 2000, "num_examples": 0}))
        return out
    return made


CERTIFY_FILES, TARGETS_FILES = ["c.tsv", "c.tsv.json", "c.tsv.seq"], ["t.npy", "t.npy.json"]


@pytest.mark.parametrize("make, files, flags", [
    (certify_shards, CERTIFY_FILES, []), (targets_shards, TARGETS_FILES, []),
    (certify_shards, CERTIFY_FILES, ["--keep-shards"]), (targets_shards, TARGETS_FILES, ["--keep-shards"]),
    (other_out(certify_shards), CERTIFY_FILES, ["--overwrite"])])
def test_a_merge_killed_at_every_step_recovers_when_rerun(tmp_path, monkeypatch, capsys, make, files, flags):
    """Kill the merge before each of its steps (OUT's metadata marked incomplete, OUT.seq, OUT,
    the metadata marked complete, each shard file, its metadata and companions deleted, the locks
    released; every kill leaves the temporary files and locks of the moment), then rerun it: it
    succeeds, OUT has the bytes an uninterrupted merge writes, and nothing else is left; a further
    merge says OUT is complete."""
    keep = "--keep-shards" in flags
    (tmp_path / "reference").mkdir()
    reference = make(tmp_path / "reference")
    assert main(["merge", *flags, str(reference)]) == 0
    expected = reference.read_bytes()
    step, seen = 0, []
    while True:
        step += 1
        folder = tmp_path / f"kill-{step}"
        folder.mkdir()
        out = make(folder)
        shards = listing(folder)
        with monkeypatch.context() as m:
            steps = kill_at(m, step)
            try:
                main(["merge", *flags, str(out)])
            except Killed:
                die(folder)
        if "killed" not in steps:  # the merge ran to its end: every step was a kill point
            break
        seen.append(steps[-2])
        assert main(["merge", *flags, str(out)]) == 0, (steps, capsys.readouterr())
        assert out.read_bytes() == expected, steps
        assert listing(folder) == sorted(files + (shards if keep else [])), steps
    assert main(["merge", *flags, str(out)]) == 0  # a further merge: nothing to do
    assert f"{out} is already complete\n" in capsys.readouterr().out
    assert out.read_bytes() == expected and listing(folder) == sorted(files + (shards if keep else []))
    name = files[0]
    assert [s for s in seen if s.startswith("replace")][-2:] == [f"replace {name}", f"replace {name}.json"], seen
    assert keep or f"unlink {name.replace('.', '.shard-1-of-2.')}" in seen, seen
    assert seen[-1] == f"unlink {name}.lock", seen


def test_merge_rerun_cleans_leftovers_named_on_the_command_line(tmp_path, monkeypatch, capsys):
    out = certify_shards(tmp_path)
    given = [str(shard_path(out, (i, 2))) for i in range(2)]
    with monkeypatch.context() as m:
        kill_at(m, 6)  # in the deletion of the shards
        with pytest.raises(Killed):
            main(["merge", "--out", str(out), *given])
    die(tmp_path)
    assert (tmp_path / "c.tsv.lock").exists() and shard_path(out, (1, 2)).exists()
    assert main(["merge", "--out", str(out), *given]) == 0
    assert "is already complete; removed the" in capsys.readouterr().out
    assert listing(tmp_path) == ["c.tsv", "c.tsv.json", "c.tsv.seq"]


def test_complete_out_of_other_settings_than_a_leftover_shard_is_refused(tmp_path, capsys):
    out = certify_shards(tmp_path)
    assert main(["merge", "--keep-shards", str(out)]) == 0
    p = shard_path(out, (0, 2))
    Path(f"{p}.json").write_text(json.dumps({**json.loads(Path(f"{p}.json").read_text()), "n_max": 2000}))
    assert main(["merge", str(out)]) == 2
    assert f"{out} holds a run with n_max=1000, not 2000 ({p}); pass --overwrite" in one_line(capsys)
    assert p.exists()


def test_folder_merge_rerun_says_complete(tmp_path, capsys):
    certify_shards(tmp_path)
    assert main(["merge", str(tmp_path)]) == 0
    assert main(["merge", str(tmp_path)]) == 0
    assert f"results: {tmp_path} (already complete: no shard files left to merge)" in capsys.readouterr().out
    assert listing(tmp_path) == CERTIFY_FILES
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "empty")]) == 2 and "no shard files in" in one_line(capsys)


def test_targets_merge_rerun_names_targets(tmp_path, capsys):
    out = targets_shards(tmp_path)
    assert main(["merge", str(out)]) == 0
    assert main(["merge", str(out)]) == 0 and "already complete" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "other.npy")]) == 2
    assert "run 'rsmooth targets --shard I/K" in one_line(capsys)


# ----------------------------------------------------------------------------- damaged shards


def edit_meta(p: Path, **changes) -> None:
    meta = {**json.loads(Path(f"{p}.json").read_text()), **changes}
    Path(f"{p}.json").write_text(json.dumps({k: v for k, v in meta.items() if v is not None}))


@pytest.mark.parametrize("changes, says", [
    ({"subset_size": None}, "no subset_size"),
    ({"skip": None}, "no skip"),
    ({"shard": ["0", "2"]}, "its shard is ['0', '2'], not [I, K]"),
    ({"subset_size": 10 ** 15}, "num_examples is 6, but shard 0/2 of subset_size 1000000000000000 has"),
    ({"subset_size": -3}, "subset_size is -3, not an integer >= 1"),
])
def test_damaged_certify_shard_metadata_is_one_line(tmp_path, capsys, changes, says):
    out = certify_shards(tmp_path)
    p = shard_path(out, (0, 2))
    edit_meta(p, **changes)
    assert main(["merge", str(out)]) == 2
    err = one_line(capsys)
    assert says in err and f"{p}.json is damaged" in err and "--overwrite" in err and "--batch-size" not in err
    assert not out.exists()


@pytest.mark.parametrize("changes, says", [
    ({"shard": [0, 1, 2]}, "its shard is [0, 1, 2], not [I, K]"),
    ({"num_rows": None}, "no num_rows"),
    ({"num_classes": None}, "no num_classes"),
    ({"num_rows": -5}, "num_rows is -5, not an integer >= 1"),
])
def test_damaged_targets_shard_metadata_is_one_line(tmp_path, capsys, changes, says):
    out = targets_shards(tmp_path)
    p = shard_path(out, (0, 2))
    edit_meta(p, **changes)
    assert main(["merge", str(out)]) == 2
    err = one_line(capsys)
    assert says in err and f"{p}.json is damaged" in err and "rerun its targets command" in err


def _truncate(p):
    p.write_bytes(p.read_bytes()[:200])


def _pickle(p):
    np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)


def _nan(p):
    a = np.load(p)
    a[3, 1] = np.nan
    np.save(p, a)


@pytest.mark.parametrize("damage, says", [
    (_truncate, "empty, truncated or not a .npy array"),
    (lambda p: p.write_bytes(b""), "empty, truncated or not a .npy array"),
    (_pickle, "empty, truncated or not a .npy array"),
    (_nan, "does not hold frequencies"),
    (lambda p: np.save(p, (np.load(p) * 20).astype(np.int32)), "does not hold frequencies"),
    (lambda p: np.save(p, np.load(p)[:-1]), "has shape (343, 3), expected (344, 3)"),
])
def test_damaged_targets_shard_array_is_refused_in_one_line(tmp_path, capsys, damage, says):
    out = targets_shards(tmp_path)
    p = shard_path(out, (0, 2))
    damage(p)
    assert main(["merge", str(out)]) == 2
    err = one_line(capsys)
    assert f"targets file {p}" in err and says in err
    assert "rerun its targets command with --shard 0/2 --overwrite" in err
    assert not out.exists() and not Path(f"{out}.json").exists()


def test_keep_shards_merges_shards_on_a_read_only_mount(tmp_path, monkeypatch, capsys):
    """--keep-shards reads the shards only: no lock beside them (a read-only mount); without it the
    merge says that it must write there, and how to merge anyway."""
    import rsmooth.engine.shards as shards

    ro = tmp_path / "ro"
    ro.mkdir()
    src = certify_shards(ro)
    real = shards.run_lock

    def run_lock(lock_file, target):
        if Path(lock_file).parent == ro:
            raise OSError(errno.EROFS, "Read-only file system", str(lock_file))
        return real(lock_file, target)

    monkeypatch.setattr(shards, "run_lock", run_lock)
    given = [str(shard_path(src, (i, 2))) for i in range(2)]
    out = tmp_path / "c.tsv"
    assert main(["merge", "--out", str(out), *given]) == 2
    err = one_line(capsys)
    assert "Read-only file system" in err and "pass --keep-shards" in err and "choose another --out" not in err
    assert main(["merge", "--keep-shards", "--out", str(out), *given]) == 0
    assert len(out.read_text().splitlines()) == SIZE + 1 and listing(ro) == sorted(
        f"c.shard-{i}-of-2.tsv{end}" for i in range(2) for end in ("", ".json", ".seq"))


def test_shard_count_zero_says_the_count():
    with pytest.raises(RsmoothError, match=r"--shard 0/0: the shard count K must be >= 1"):
        parse_shard("0/0")


def test_a_certification_continued_as_shards_is_read_so_far_each_example_once(tmp_path):
    """--collect while shards continue a one-process run: OUT's rows and the shards', once each
    (the shards copied OUT's rows of their share), a last line being written left out."""
    from rsmooth.engine.shards import certify_so_far

    out = tmp_path / "c.tsv"
    assert certify_so_far(out) == (None, None)

    def tsv(p, idx, cut=""):
        p.write_text(TSV_HEADER + "\n" + "".join(format_row(j, 1, 1, 0.5, True, 2.0) + "\n" for j in idx) + cut)

    shard_meta = {**CERTIFY_META, "mode": "certify", "complete": False, "subset_size": SIZE}
    for i, idx in ((0, [1, 7, 13]), (1, [4, 10])):
        tsv(shard_path(out, (i, 2)), idx, cut="16\t1\t" if i else "")
        Path(f"{shard_path(out, (i, 2))}.json").write_text(json.dumps({**shard_meta, "shard": [i, 2]}))
    res, meta = certify_so_far(out)  # started as shards: no OUT
    assert res.idx.tolist() == [1, 4, 7, 10, 13] and meta["num_examples"] == SIZE and "shard" not in meta
    tsv(out, [1, 4, 7, 10], cut="13\t")
    Path(f"{out}.json").write_text(json.dumps({**CERTIFY_META, "complete": False, "num_examples": SIZE}))
    res, meta = certify_so_far(out)
    assert res.idx.tolist() == [1, 4, 7, 10, 13] and res.time.tolist() == [2.0] * 5 and not meta["complete"]
    tsv(out, [1])
    Path(f"{out}.json").write_text(json.dumps({**CERTIFY_META, "num_examples": 1}))  # complete: OUT alone
    assert certify_so_far(out)[0].idx.tolist() == [1]
