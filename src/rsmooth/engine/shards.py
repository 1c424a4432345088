"""Shards of a certification: independent jobs on parts of one subset, merged into one file.

Shard ``I/K`` takes every K-th example of the subset starting at position I (round robin, so
shards get the same number of examples to within one and the same mix of easy and hard
ones) and writes ``OUT`` with ``.shard-I-of-K`` before its suffix (``certify.tsv`` ->
``certify.shard-0-of-4.tsv``) and that file's sidecar.  Example i's noise depends only on
``(seed, i)``, so :func:`merge_certify` joins the K shard files into the very file a
one-process run writes (the time column aside).
"""
from __future__ import annotations

import contextlib
import datetime
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import RsmoothError, check
from ..fileio import atomic_write_bytes, run_lock
from ..metrics import read_certify_tsv, read_sidecar, sidecar_path, write_sidecar
from ..metrics.certify_io import TSV_HEADER
from .seqfile import SEQUENTIAL_MODES, adopt_legacy, legacy_sequential_path, seq_rows, sequential_path, write_seq_rows

Shard = Tuple[int, int]
#: sidecar fields that must agree for a run to continue an existing TSV, and for shards to merge
RUN_IDENTITY = ("mode", "dataset", "corruption", "split", "sigma", "n0", "n", "alpha", "start", "skip", "max",
                "seed", "checkpoint_sha256", "precision", "channels_last",
                "radii", "n_max", "radius_tol", "futility", "confidence_sequence")  # the last: sequential modes
#: the value of an identity field that sidecars written before it existed lack
_IDENTITY_DEFAULTS = {"start": 0, "corruption": None}
#: sidecar fields of a shard that the merged file does not have
SHARD_FIELDS = ("shard", "subset_size")


def parse_shard(spec: Union[str, Sequence[int]]) -> Shard:
    """``"I/K"`` (or ``(I, K)``) -> ``(I, K)`` with ``0 <= I < K``; a one-line error otherwise."""
    if isinstance(spec, str):
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
        check(m is not None, f"--shard must be I/K (this job's shard I of K, 0 <= I < K), got {spec!r}")
        i, k = int(m.group(1)), int(m.group(2))
    else:
        check(len(spec) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in spec),
              f"shard must be (I, K), got {spec!r}")
        i, k = spec
    check(k >= 1 and 0 <= i < k, f"--shard {i}/{k}: the shard index must be in 0..{k - 1} (shards count from 0)")
    return i, k


def shard_path(out: Union[str, Path], shard: Shard) -> Path:
    """``OUT`` with ``.shard-I-of-K`` before its suffix: ``c.tsv`` -> ``c.shard-0-of-4.tsv``."""
    out = Path(out)
    return out.with_name(f"{out.stem}.shard-{shard[0]}-of-{shard[1]}{out.suffix}")


def shard_share(indices: Sequence[int], shard: Shard) -> List[int]:
    """The examples of ``indices`` that shard ``(I, K)`` takes: positions I, I+K, I+2K, ..."""
    return list(indices[shard[0]::shard[1]])


def find_shards(out: Union[str, Path]) -> List[Path]:
    """The shard files of ``out`` in its folder, in shard order; one-line errors when there are
    none or they come from different shard counts."""
    out = Path(out)
    pattern = re.compile(re.escape(out.stem) + r"\.shard-(\d+)-of-(\d+)" + re.escape(out.suffix))
    found = {}
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            m = pattern.fullmatch(p.name)
            if m:
                found[int(m.group(1)), int(m.group(2))] = p
    check(bool(found), f"no shard files of {out} ({shard_path(out, (0, 'K'))} ...); run 'rsmooth certify "
                       f"--shard I/K --out {out}' for I = 0..K-1 first")
    counts = sorted({k for _, k in found})
    check(len(counts) == 1, f"shard files of {out} from different shard counts ({', '.join(map(str, counts))}); "
                            f"delete the ones of the count you did not finish")
    return [found[key] for key in sorted(found)]


def shard_groups(folder: Union[str, Path]) -> List[Path]:
    """The OUT files whose shards lie in ``folder`` (``OUT.shard-I-of-K.tsv``), sorted."""
    pattern = re.compile(r"(.+)\.shard-\d+-of-\d+(\.[^.]*)?")
    outs = {Path(folder) / (m.group(1) + (m.group(2) or "")) for p in Path(folder).iterdir()
            if (m := pattern.fullmatch(p.name)) and not p.name.endswith(".json")}
    check(bool(outs), f"no shard files in {folder}; run 'rsmooth certify ... --shard I/K --out {folder}' first")
    return sorted(outs)


def merge_certify(out: Union[str, Path], shards: Optional[Sequence[Union[str, Path]]] = None, *,
                  overwrite: bool = False, keep: bool = False, identity: Sequence[str] = RUN_IDENTITY,
                  log: Callable[[str], None] = print) -> Path:
    """Join the K shard files of a certification into ``out`` and ``out``'s sidecar.

    ``shards``: the shard TSVs (default: :func:`find_shards`).  They must all be complete,
    from the same settings (the ``identity`` fields and the subset), and together hold every
    example of the subset exactly once.  ``out`` gets their rows sorted by idx, as a one-process
    run writes them, and a complete sidecar; both are written atomically (and so is
    ``out.seq`` from the shards' for --sequential/--adaptive).  An existing ``out``
    from other settings is refused unless ``overwrite``.  The shard files are deleted after
    the merge unless ``keep``.
    """
    out = Path(out)
    paths = [Path(p) for p in shards] if shards else find_shards(out)
    for j, p in enumerate(paths):
        check(p.resolve() not in {q.resolve() for q in paths[:j]}, f"shard file {p} is given twice")
    with contextlib.ExitStack() as stack:  # no shard is being written, and no other merge runs
        stack.enter_context(run_lock(out.with_name(out.name + ".lock"), out))
        for p in paths:
            stack.enter_context(run_lock(p.with_name(p.name + ".lock"), p))
        metas = _shard_metas(paths)
        first = metas[0][1]
        k = first["shard"][1]
        for p, meta in metas[1:]:
            diff = identity_diff(meta, first, (*identity, "subset_size"))
            if diff:
                raise RsmoothError(f"shard {_name(meta)} ({p}) was run with {diff[0]}={meta.get(diff[0])!r}, shard "
                                   f"{_name(first)} with {first.get(diff[0])!r}; rerun it with the others' settings")
        by_shard: Dict[int, Tuple[Path, dict]] = {}
        for p, meta in metas:
            i = meta["shard"][0]
            check(i not in by_shard, f"shard {i}/{k} is given twice: {by_shard.get(i, (p,))[0]} and {p}")
            by_shard[i] = (p, meta)
        for i in range(k):
            check(i in by_shard, f"shard {i}/{k} of {out} is missing ({shard_path(out, (i, k))} not found); "
                                 f"run its certify command with --shard {i}/{k}")
        old = read_sidecar(out)
        diff = identity_diff(old, first, identity) if old is not None and not overwrite else []
        if diff:
            raise RsmoothError(f"{out} holds a run with {diff[0]}={old.get(diff[0])!r}, not {first.get(diff[0])!r}; "
                               f"pass --overwrite to replace it or choose another --out")
        rows: List[Tuple[int, str]] = []
        for i in range(k):
            p, meta = by_shard[i]
            rows += _rows(p, meta)
        rows.sort()
        check(len(rows) == first["subset_size"],
              f"the shards of {out} hold {len(rows)} examples, the subset has {first['subset_size']}; "
              f"they were not run on the same subset")
        merged = {key: v for key, v in first.items() if key not in SHARD_FIELDS}
        merged.update(num_examples=len(rows), merged_shards=k,
                      device=", ".join(dict.fromkeys(str(m.get("device")) for _, m in metas)),
                      started=min(str(m.get("started", "")) for _, m in metas),
                      finished=datetime.datetime.now().isoformat(timespec="seconds"))
        sequential = first.get("mode") in SEQUENTIAL_MODES
        seq = sorted(row for p in paths for row in seq_rows(adopt_legacy(p))) if sequential else []
        check(not sequential or [i for i, _ in seq] == [i for i, _ in rows],
              f"the shards' {sequential_path(paths[0]).name} files do not hold one row per example of their TSVs; "
              f"rerun the shards' certify commands with --overwrite")
        # the sidecar says incomplete while the files are replaced: a kill in between is rerun
        write_sidecar(out, {**merged, "complete": False})
        if sequential:
            write_seq_rows(sequential_path(out), seq)
            legacy_sequential_path(out).unlink(missing_ok=True)  # an earlier version's, now stale
        atomic_write_bytes(out, "".join([TSV_HEADER + "\n"] + [line for _, line in rows]).encode("utf-8"))
        write_sidecar(out, {**merged, "complete": True})
        if not keep:
            remove_shards(paths, sidecar_path)
            if sequential:
                for p in paths:
                    sequential_path(p).unlink(missing_ok=True)
    log(f"merged {k} shards into {out}: {len(rows)} examples")
    return out


def identity_diff(old: dict, new: dict, fields: Sequence[str] = RUN_IDENTITY) -> List[str]:
    """The ``fields`` in which the sidecar ``old`` differs from ``new`` (old sidecars lack ``start``)."""
    return [f for f in fields if old.get(f, _IDENTITY_DEFAULTS.get(f)) != new.get(f)]


def _name(meta: dict) -> str:
    return f"{meta['shard'][0]}/{meta['shard'][1]}"


def _shard_metas(paths: Sequence[Path]) -> List[Tuple[Path, dict]]:
    """(path, sidecar) of each shard, checked to be a complete shard."""
    out = []
    for p in paths:
        check(p.is_file(), f"shard file {p} not found")
        meta = read_sidecar(p)
        check(meta is not None and isinstance(meta.get("shard"), list) and len(meta["shard"]) == 2,
              f"{p} is not a certify shard (its metadata {sidecar_path(p)} is missing or names no shard); "
              f"rerun its certify command with --shard I/K")
        if not meta.get("complete"):
            done = len(read_certify_tsv(p)) if _whole_lines(p) else "some"
            raise RsmoothError(f"shard {_name(meta)} ({p}) is incomplete ({done} of {meta.get('num_examples')} "
                               f"examples); rerun its certify command to finish it")
        out.append((p, meta))
    counts = sorted({m["shard"][1] for _, m in out})
    check(len(counts) == 1, f"the shard files are from different shard counts ({', '.join(map(str, counts))}); "
                            f"merge the K files of one run")
    return out


def _whole_lines(p: Path) -> bool:
    with contextlib.suppress(OSError):
        return p.read_bytes().endswith(b"\n")
    return False


def _rows(p: Path, meta: dict) -> List[Tuple[int, str]]:
    """(idx, the row's line as written) of a complete shard file, checked against its share."""
    result = read_certify_tsv(p)  # one-line errors for a damaged file
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines(keepends=True)[1:] if ln.strip()]
    start, skip = meta.get("start", 0), meta["skip"]
    subset = range(start, start + skip * meta["subset_size"], skip)  # what certify_indices selects
    share = set(shard_share(subset, tuple(meta["shard"])))
    extra = sorted(set(result.idx.tolist()) ^ share)
    if extra:
        raise RsmoothError(f"shard {_name(meta)} ({p}) does not hold exactly its share of the subset (idx "
                           f"{extra[0]} {'is missing' if extra[0] in share else 'is not in it'}); "
                           f"rerun its certify command with --overwrite")
    return [(int(i), ln if ln.endswith("\n") else ln + "\n") for i, ln in zip(result.idx.tolist(), lines)]


def remove_shards(paths: Sequence[Path], meta_path: Callable[[Path], Path]) -> None:
    """Delete merged shard files and their metadata files (``meta_path(shard)``)."""
    for p in paths:
        meta_path(p).unlink(missing_ok=True)
        p.unlink(missing_ok=True)
