"""Shards: independent jobs on parts of one run, merged into the file one process writes.

One layer for certification and CAT-RS targets.  Shard ``I/K`` takes positions I, I+K, I+2K,
... of the run's units of work (:func:`shard_share`): the examples of a certification's subset
(round robin, so shards get the same number of examples to within one and the same mix of easy
and hard ones) or the blocks of 256 training images of targets.  It writes ``OUT`` with
``.shard-I-of-K`` before its suffix (``certify.tsv`` -> ``certify.shard-0-of-4.tsv``) and that
file's metadata ``NAME.json``.  A unit's noise depends only on ``(seed, unit)``, so
:func:`merge_shards` joins the K shard files into the very file a one-process run writes (a
certify TSV's time column aside); :class:`ShardKind` holds what differs between the two.

A merge can be killed anywhere and rerun: ``OUT`` is marked complete only once written, the
shards are deleted only after that, and a merge finding ``OUT`` complete says so and deletes
what the shards left (:func:`clean_merged`).
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import RsmoothError, check, setting
from ..fileio import atomic_write_bytes, remove_stale_temps, run_lock
from ..metrics import CertifyResult, read_certify_tsv, read_sidecar, sidecar_path, write_sidecar
from ..metrics.certify_io import TSV_COLUMNS, TSV_HEADER
from .seqfile import SEQUENTIAL_MODES, adopt_legacy, legacy_sequential_path, seq_rows, sequential_path, write_seq_rows
from .sessions import shard_sessions

Shard = Tuple[int, int]
PathLike = Union[str, Path]
#: sidecar fields that must agree for a run to continue an existing TSV, and for shards to merge
RUN_IDENTITY = ("mode", "dataset", "corruption", "split", "noise", "sigma", "noise_params", "n0", "n", "alpha",
                "skip_wrong", "two_sided", "alpha_share",
                "start", "skip", "max", "seed", "checkpoint_sha256", "precision",
                "radii", "n_max", "radius_tol", "futility", "confidence_sequence",  # these five: sequential modes
                "diffusion", "diffusion_sha256", "diffusion_t", "diffusion_steps", "diffusion_noise",
                "diffusion_timestep_scale", "classifier_input")  # these: engine/diffusion.py
#: the value of an identity field that sidecars written before it existed lack
_IDENTITY_DEFAULTS = {"start": 0, "corruption": None, "noise": "gaussian", "skip_wrong": False, "two_sided": False, "alpha_share": 1.0}
#: sidecar fields of a certify shard that the merged file does not have
SHARD_FIELDS = ("shard", "subset_size")
#: how long (s) a shard starting beside a one-process run's OUT waits for OUT's lock
SHARD_START_WAIT = 30.0
#: errors of creating a lock beside a shard that mean "this folder cannot be written here"
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class ShardKind:
    """What the shards of one command add to the common layer (:data:`CERTIFY`, targets' ``TARGETS``)."""

    #: the command that computes a shard, as messages name it
    command: str
    #: how messages name one shard ("shard", "targets shard")
    noun: str
    #: metadata fields in which the shards, and an existing OUT, must agree
    identity: Tuple[str, ...]
    #: metadata fields of a shard that OUT's lacks (the first is "shard"); the others must agree too
    shard_fields: Tuple[str, ...]
    #: files beside a shard or OUT that belong to it, as suffixes of its name (besides .json, .lock)
    companions: Tuple[str, ...]
    #: what is wrong with a shard's own metadata fields ("" when nothing)
    damage: Callable[[dict], str]
    #: from the K shards in shard order: (OUT's metadata, a function writing OUT's files, a log note)
    join: Callable[[Path, List[Tuple[Path, dict]]], Tuple[dict, Callable[[], None], str]]
    #: what an incomplete shard holds, for its message (" (3 of 5 examples)"; None: not said)
    progress: Optional[Callable[[Path, dict], str]] = None
    #: whether the command's --out is OUT's folder (the audit's), not OUT itself
    out_is_folder: bool = False


def parse_shard(spec: Union[str, Sequence[int]]) -> Shard:
    """``"I/K"`` (or ``(I, K)``) -> ``(I, K)`` with ``0 <= I < K``; a one-line error otherwise."""
    if isinstance(spec, str):
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
        check(m is not None, f"--shard must be I/K (this job's shard I of K, 0 <= I < K), got {spec!r}")
        i, k = int(m.group(1)), int(m.group(2))
    else:
        check(len(spec) == 2 and all(_is_int(v) for v in spec), f"shard must be (I, K), got {spec!r}")
        i, k = spec
    check(k >= 1, f"--shard {i}/{k}: the shard count K must be >= 1 (--shard I/K runs shard I of K jobs)")
    check(0 <= i < k, f"--shard {i}/{k}: the shard index must be in 0..{k - 1} (shards count from 0)")
    return i, k


def shard_path(out: PathLike, shard: Shard) -> Path:
    """``OUT`` with ``.shard-I-of-K`` before its suffix: ``c.tsv`` -> ``c.shard-0-of-4.tsv``."""
    out = Path(out)
    return out.with_name(f"{out.stem}.shard-{shard[0]}-of-{shard[1]}{out.suffix}")


def shard_share(units: Sequence[int], shard: Shard) -> List[int]:
    """The units of work (examples, blocks) that shard ``(I, K)`` takes: positions I, I+K, I+2K, ..."""
    return list(units[shard[0]::shard[1]])


def continue_as_shards(out: Path, meta: dict, indices: Sequence[int], shards: Sequence[Shard], *,
                       identity: Sequence[str], units: Callable[[Path], List[int]], header: str,
                       begin: Callable[[Path, dict, List[Tuple[int, str]]], dict],
                       log: Callable[[str], None]) -> None:
    """Start each of ``shards`` not yet begun with the rows of its share that ``out`` holds, where
    ``out`` is a one-process run of the same settings (an interrupted run continued as K shards, by
    ``--shard`` jobs or ``torchrun``): the shards skip those units and their merge replaces ``out``.
    ``units(out)``: the unit of each of its rows, read and checked, a last line cut by a kill left
    out; ``begin(path, old, mine)`` writes a shard's companion files and returns fields for its
    sidecar (``old``: ``out``'s sidecar, ``mine``: the shard's (unit, line) rows)."""
    if not out.is_file():
        return
    with contextlib.ExitStack() as stack:
        wait_for_lock(stack, out)  # no one-process run adds rows meanwhile
        old = read_sidecar(out)
        if old is None or "shard" in old or identity_diff(old, meta, identity):
            return  # a shard's, or another run's (which the merge refuses): nothing to continue
        text = out.read_text(encoding="utf-8")
        lines = [ln + "\n" for ln in text[:text.rfind("\n") + 1].splitlines()[1:] if ln.strip()]
        held = list(zip(units(out), lines))
        for shard in shards:
            path, share = shard_path(out, shard), set(shard_share(indices, shard))
            if path.exists():
                continue
            mine = [(i, line) for i, line in held if i in share]
            smeta = {**meta, "shard": list(shard), "subset_size": len(indices), "num_examples": len(share)}
            extra = begin(path, old, mine)  # companions, before the sidecar and the rows
            write_sidecar(path, {**smeta, "started": old.get("started", meta.get("started")), **extra,
                                 "complete": False})  # before the TSV: a kill before it starts over
            atomic_write_bytes(path, "".join([header + "\n", *(line for _, line in mine)]).encode("utf-8"))
            log(f"{path}: continues {out}, which holds rows of {len({i for i, _ in mine})} of its {len(share)} "
                f"examples")


def wait_for_lock(stack: contextlib.ExitStack, out: Path) -> None:
    """Hold ``out``'s lock, waiting up to :data:`SHARD_START_WAIT` s for it: shards started together
    each hold it a moment; a run writing ``out`` holds it on (then the one-line error says so)."""
    deadline = time.monotonic() + SHARD_START_WAIT
    while True:
        try:
            stack.enter_context(run_lock(lock_path(out), out))
            return
        except RsmoothError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def identity_diff(old: dict, new: dict, fields: Sequence[str] = RUN_IDENTITY) -> List[str]:
    """The ``fields`` in which the metadata ``old`` differs from ``new`` (sidecars older than a field,
    such as ``start`` or ``noise``, read as its default)."""
    return [f for f in fields if old.get(f, _IDENTITY_DEFAULTS.get(f)) != new.get(f, _IDENTITY_DEFAULTS.get(f))]


def lock_path(path: PathLike) -> Path:
    """The lock file beside an output: ``NAME.lock``."""
    return Path(f"{path}.lock")


def find_shards(out: PathLike, kind: Optional[ShardKind] = None) -> List[Path]:
    """The shard files of ``out`` (default: a certification's) in its folder, in shard order;
    one-line errors when there are none or they come from different shard counts."""
    out, kind = Path(out), kind or CERTIFY
    found = {key: p for key, p in shard_names(out, kind).items() if p.is_file()}
    check(bool(found), f"no shard files of {out} ({shard_path(out, (0, 'K'))} ...); run 'rsmooth {kind.command} "
                       f"--shard I/K --out {out.parent if kind.out_is_folder else out}' for I = 0..K-1 first")
    counts = sorted({k for _, k in found})
    check(len(counts) == 1, f"shard files of {out} from different shard counts ({', '.join(map(str, counts))}); "
                            f"delete the ones of the count you did not finish")
    return list(found.values())


def shard_names(out: Path, kind: ShardKind) -> Dict[Shard, Path]:
    """``(I, K)`` -> shard file name, in shard order, of every shard of ``out`` that left a file in
    its folder: its data, or only its metadata, lock or companions (a merge killed while deleting)."""
    ends = "|".join(re.escape(s) for s in (".json", ".lock", *kind.companions))
    pattern = re.compile(rf"{re.escape(out.stem)}\.shard-(\d+)-of-(\d+){re.escape(out.suffix)}(?:{ends})?")
    found = {}
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            m = pattern.fullmatch(p.name)
            if m:
                key = (int(m.group(1)), int(m.group(2)))
                found[key] = shard_path(out, key)
    return dict(sorted(found.items()))


def shard_groups(folder: PathLike) -> List[Path]:
    """The OUT files whose certify shards lie in ``folder`` (``OUT.shard-I-of-K.tsv``), sorted; none
    when the folder's files are merged already (complete), an error when it holds neither."""
    ends = "|".join(re.escape(s) for s in (".json", ".lock", *CERTIFY.companions))
    pattern = re.compile(rf"(.+)\.shard-\d+-of-\d+(\.[^.]*)?(?:{ends})?")
    outs = {Path(folder) / (m.group(1) + (m.group(2) or "")) for p in Path(folder).iterdir()
            if (m := pattern.fullmatch(p.name))}
    merged = any(_is_complete(p) for p in Path(folder).glob("*.tsv"))
    check(bool(outs) or merged, f"no shard files in {folder}; run 'rsmooth certify ... --shard I/K --out {folder}' "
                                f"first")
    return sorted(outs)


def merge_shards(out: PathLike, kind: ShardKind, shards: Optional[Sequence[PathLike]] = None, *,
                 overwrite: bool = False, keep: bool = False, log: Callable[[str], None] = print) -> Path:
    """Join the K shard files of a run into ``out`` and its metadata, the files one process writes.

    ``shards``: the shard files (default: those of ``out`` in its folder).  They must all be
    complete, from the same settings, and together hold every unit of the run exactly once.
    ``out``'s metadata says incomplete while its files are written (atomically), then complete;
    the shards are deleted after that unless ``keep`` (then they are locked where their folder can
    be written, and read unlocked on a read-only mount).  An ``out`` of other settings is refused
    unless ``overwrite``.  A complete ``out`` of the shards' settings (a merge rerun, or one killed
    while deleting the shards) is kept as it is, and what its shards left is deleted unless ``keep``.
    """
    out, given = Path(out), [Path(p) for p in shards or ()]
    for j, p in enumerate(given):
        check(p.resolve() not in {q.resolve() for q in given[:j]}, f"shard file {p} is given twice")
    with contextlib.ExitStack() as stack:
        stack.enter_context(run_lock(lock_path(out), out))
        remove_stale_temps(out, sidecar_path(out), *_companions(out, kind))
        left = given or list(shard_names(out, kind).values())
        if _is_complete(out) and not (overwrite and _disagreement(out, kind, left)):
            _clean(out, kind, left, keep, stack, log)  # a merge rerun: OUT stays as it is
            return out
        paths = given or find_shards(out, kind)
        for p in paths:
            _lock_shard(stack, p, keep)
        ordered = _checked_shards(out, kind, paths, overwrite)
        merged, write, note = kind.join(out, ordered)
        write_sidecar(out, {**merged, "complete": False})  # a kill from here to the end is merged again
        write()
        write_sidecar(out, {**merged, "complete": True})
        if not keep:
            for p in paths:
                _remove(p, kind)
    log(f"merged {len(ordered)} shards into {out}{note}")
    return out


def merge_certify(out: PathLike, shards: Optional[Sequence[PathLike]] = None, *, overwrite: bool = False,
                  keep: bool = False, log: Callable[[str], None] = print) -> Path:
    """:func:`merge_shards` of certify/predict shards: ``out`` gets their rows sorted by idx, as a
    one-process run writes them (``out.seq`` too for --sequential/--adaptive), and a complete
    sidecar (without the shards' ``shard`` and ``subset_size``, with ``merged_shards``; its
    ``sessions`` are every shard's, each naming its shard)."""
    return merge_shards(out, CERTIFY, shards, overwrite=overwrite, keep=keep, log=log)


def clean_merged(out: PathLike, kind: ShardKind, shards: Sequence[PathLike], *,
                 log: Callable[[str], None] = print) -> bool:
    """Whether ``out`` holds a complete run; if so, delete what its ``shards`` left beside it (a
    torchrun job rerun after a kill in its merge) and say so."""
    out = Path(out)
    with contextlib.ExitStack() as stack:
        stack.enter_context(run_lock(lock_path(out), out))
        if not _is_complete(out):
            return False
        remove_stale_temps(out, sidecar_path(out), *_companions(out, kind))
        _clean(out, kind, [Path(p) for p in shards], False, stack, log)
    return True


def _is_complete(out: Path) -> bool:
    """Whether ``out`` is there and its metadata says complete."""
    meta = read_sidecar(out) if out.is_file() else None
    return bool(meta and meta.get("complete"))


def _clean(out: Path, kind: ShardKind, paths: Sequence[Path], keep: bool, stack: contextlib.ExitStack,
           log: Callable[[str], None]) -> None:
    """Delete what the shards ``paths`` of the complete ``out`` left (unless ``keep``), each under its
    lock, once the metadata they left are found to be of ``out``'s settings; then say so."""
    for p in paths:
        _lock_shard(stack, p, keep)  # (a lock a kill left is taken over, then removed)
    problem = _disagreement(out, kind, paths)
    check(not problem, problem)
    removed = [] if keep else [f for p in paths for f in _remove(p, kind)]
    log(f"{out} is already complete" + (f"; removed the {len(removed)} files its shards left" if removed else ""))


def _disagreement(out: Path, kind: ShardKind, paths: Sequence[Path]) -> str:
    """The error when a shard in ``paths`` records other settings than ``out`` ("" when none does)."""
    meta = read_sidecar(out) or {}
    for p in paths:
        old = read_sidecar(p)
        diff = identity_diff(old, meta, kind.identity) if old is not None else []
        if diff:
            return (f"{out} holds a run with {diff[0]}={meta.get(diff[0])!r}, not {old.get(diff[0])!r} ({p}); "
                    f"pass {setting('overwrite', True)} to replace it or choose another {setting('out')}")
    return ""


def _lock_shard(stack: contextlib.ExitStack, p: Path, keep: bool) -> None:
    """Hold shard ``p``'s lock (no shard is being written, no other merge deletes it); with ``keep``
    a shard in a folder this process cannot write is read unlocked."""
    try:
        stack.enter_context(run_lock(lock_path(p), p))
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        if not keep:
            raise RsmoothError(f"cannot create {lock_path(p)} ({e.strerror}): a merge locks the shards and then "
                               f"deletes them; pass {setting('keep', True, flag='--keep-shards')} to merge without "
                               f"writing beside them") from None


def _checked_shards(out: Path, kind: ShardKind, paths: Sequence[Path], overwrite: bool) -> List[Tuple[Path, dict]]:
    """(shard file, metadata) of the K shards in shard order: all complete, of one run's settings,
    each there once, and of an existing ``out``'s settings unless ``overwrite``."""
    metas = [(p, _shard_meta(p, kind)) for p in paths]
    counts = sorted({m["shard"][1] for _, m in metas})
    check(len(counts) == 1, f"the shard files are from different shard counts ({', '.join(map(str, counts))}); "
                            f"merge the K files of one run")
    first, k = metas[0][1], counts[0]
    for p, meta in metas[1:]:
        diff = identity_diff(meta, first, (*kind.identity, *kind.shard_fields[1:]))
        if diff:
            raise RsmoothError(f"{kind.noun} {_name(meta)} ({p}) was run with {diff[0]}={meta.get(diff[0])!r}, "
                               f"{kind.noun} {_name(first)} with {first.get(diff[0])!r}; rerun it with the others' "
                               f"settings")
    by_shard: Dict[int, Tuple[Path, dict]] = {}
    for p, meta in metas:
        i = meta["shard"][0]
        check(i not in by_shard, f"{kind.noun} {i}/{k} is given twice: {by_shard.get(i, (p,))[0]} and {p}")
        by_shard[i] = (p, meta)
    for i in range(k):
        if i not in by_shard:
            raise _missing(out, kind, (i, k))
    old = read_sidecar(out)
    diff = identity_diff(old, first, kind.identity) if old is not None and not overwrite else []
    if diff:
        raise RsmoothError(f"{out} holds a run with {diff[0]}={old.get(diff[0])!r}, not {first.get(diff[0])!r}; "
                           f"pass {setting('overwrite', True)} to replace it or choose another {setting('out')}")
    return [by_shard[i] for i in range(k)]


def _shard_meta(p: Path, kind: ShardKind) -> dict:
    """The metadata of shard file ``p``, checked to be that of a complete shard."""
    check(p.is_file(), f"shard file {p} not found")
    where = sidecar_path(p)
    try:
        meta = read_sidecar(p)
    except RsmoothError:
        raise RsmoothError(f"{where} is damaged (not a JSON object); rerun its {kind.command} command with "
                           f"--shard I/K --overwrite") from None
    check(meta is not None and "shard" in meta, f"{p} is not a {kind.command} shard (its metadata {where} is "
                                                f"missing or names no shard); rerun its {kind.command} command with "
                                                f"--shard I/K")
    s = meta["shard"]
    check(isinstance(s, list) and len(s) == 2 and all(map(_is_int, s)) and 0 <= s[0] < s[1],
          f"{where} is damaged (its shard is {s!r}, not [I, K] with 0 <= I < K); rerun its {kind.command} command "
          f"with --shard I/K --overwrite")
    damage = kind.damage(meta)
    check(not damage, f"{where} is damaged ({damage}); rerun its {kind.command} command with --shard {_name(meta)}"
                      f" --overwrite")
    if not meta.get("complete"):
        done = kind.progress(p, meta) if kind.progress else ""
        raise RsmoothError(f"{kind.noun} {_name(meta)} ({p}) is incomplete{done}; rerun its {kind.command} command "
                           f"to finish it")
    return meta


def _missing(out: Path, kind: ShardKind, shard: Shard) -> RsmoothError:
    """The error for shard ``shard`` of ``out`` not being among the files to merge."""
    p, name = shard_path(out, shard), f"{shard[0]}/{shard[1]}"
    if sidecar_path(p).is_file():  # started: its metadata (and partial files) are there
        return RsmoothError(f"{kind.noun} {name} ({p}) is incomplete; rerun its {kind.command} command (with --shard "
                            f"{name}) to finish it")
    return RsmoothError(f"{kind.noun} {name} of {out} is missing ({p} not found); run its {kind.command} command "
                        f"with --shard {name}")


def _companions(p: Path, kind: ShardKind) -> List[Path]:
    return [Path(f"{p}{end}") for end in kind.companions]


def _remove(p: Path, kind: ShardKind) -> List[Path]:
    """Delete shard file ``p``: its metadata first, then its data and companions (and temporary
    files a kill left of them); the files that were there."""
    files = [sidecar_path(p), p, *_companions(p, kind)]
    remove_stale_temps(*files)
    removed = []
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
            removed.append(f)
    return removed


def _name(meta: dict) -> str:
    return f"{meta['shard'][0]}/{meta['shard'][1]}"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def int_field(meta: dict, field: str, low: int, default: Optional[int] = None) -> str:
    """What is wrong with ``meta[field]`` as an integer >= ``low`` ("" when nothing)."""
    v = meta.get(field, default)
    if field not in meta and default is None:
        return f"no {field}"
    return "" if _is_int(v) and v >= low else f"{field} is {v!r}, not an integer >= {low}"


# ----------------------------------------------------------------------------- certify


def _certify_damage(meta: dict) -> str:
    """What is wrong with a certify shard's subset fields ("" when nothing)."""
    fields = (("subset_size", 1, None), ("skip", 1, None), ("start", 0, 0), ("num_examples", 0, None))
    wrong = next((w for f, low, default in fields if (w := int_field(meta, f, low, default))), "")
    if wrong:
        return wrong
    (i, k), size = meta["shard"], meta["subset_size"]
    share = len(range(i, size, k))
    if meta["num_examples"] != share:
        return f"num_examples is {meta['num_examples']}, but shard {i}/{k} of subset_size {size} has {share}"
    return ""


def _certify_progress(p: Path, meta: dict) -> str:
    with contextlib.suppress(OSError):
        if p.read_bytes().endswith(b"\n"):
            return f" ({len(read_certify_tsv(p))} of {meta.get('num_examples')} examples)"
    return f" (some of {meta.get('num_examples')} examples)"


def certify_so_far(out: PathLike) -> Tuple[Optional[CertifyResult], Optional[dict]]:
    """(rows, metadata) of a certification as far as it got: ``out``'s and, while it runs as
    shards, the shards' (each example once, sorted by idx; a last line being written left out);
    (None, None) when nothing is there.  The metadata are ``out``'s, or the first shard's as a
    one-process run's (``num_examples``: the whole subset), and say incomplete until merged."""
    out = Path(out)
    meta = read_sidecar(out) if out.is_file() else None
    if meta and meta.get("complete"):
        return read_certify_tsv(out), meta
    parts = [p for p in (out, *shard_names(out, CERTIFY).values()) if p.is_file() and sidecar_path(p).is_file()]
    if not parts:
        return None, meta
    if meta is None:
        first = read_sidecar(parts[0]) or {}
        meta = {**{k: v for k, v in first.items() if k not in SHARD_FIELDS}, "num_examples": first.get("subset_size")}
    found = [read_certify_tsv(p, growing=True) for p in parts]
    cols = {c: np.concatenate([getattr(r, c) for r in found]) for c in TSV_COLUMNS}
    _, first_seen = np.unique(cols["idx"], return_index=True)  # sorted by idx
    return CertifyResult(**{c: v[first_seen] for c, v in cols.items()}, path=out), {**meta, "complete": False}


def sort_rows(out: Path, sequential: bool, two_sided: bool = False) -> None:
    """Rewrite ``out`` (and its OUT.seq) with the rows sorted by idx, as a merge writes them
    (packed certification completes examples out of order); atomic, nothing when already sorted."""
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    idx = read_certify_tsv(out).idx.tolist()
    if idx == sorted(idx):
        return
    if sequential:
        write_seq_rows(sequential_path(out), sorted(seq_rows(sequential_path(out))), two_sided)
    rows = sorted(zip(idx, (ln if ln.endswith("\n") else ln + "\n" for ln in lines[1:] if ln.strip())))
    atomic_write_bytes(out, "".join([lines[0], *(ln for _, ln in rows)]).encode("utf-8"))


def _join_certify(out: Path, shards: List[Tuple[Path, dict]]) -> Tuple[dict, Callable[[], None], str]:
    """OUT's rows sorted by idx (and OUT.seq's for --sequential/--adaptive) and sidecar, from the shards."""
    first = shards[0][1]
    rows = sorted(row for p, meta in shards for row in _rows(p, meta))
    check(len(rows) == first["subset_size"],
          f"the shards of {out} hold {len(rows)} examples, the subset has {first['subset_size']}; "
          f"they were not run on the same subset")
    merged = {key: v for key, v in first.items() if key not in SHARD_FIELDS}
    merged.update(num_examples=len(rows), merged_shards=len(shards),
                  device=", ".join(dict.fromkeys(str(m.get("device")) for _, m in shards)),
                  started=min(str(m.get("started", "")) for _, m in shards),
                  sessions=shard_sessions(shards),
                  finished=datetime.datetime.now().isoformat(timespec="seconds"))
    sequential = first.get("mode") in SEQUENTIAL_MODES
    seq = sorted(row for p, _ in shards for row in seq_rows(adopt_legacy(p))) if sequential else []
    check(not sequential or [i for i, _ in seq] == [i for i, _ in rows],
          f"the shards' {sequential_path(shards[0][0]).name} files do not hold one row per example of their TSVs; "
          f"rerun the shards' certify commands with --overwrite")

    def write() -> None:
        if sequential:
            write_seq_rows(sequential_path(out), seq, bool(first.get("two_sided")))
            legacy_sequential_path(out).unlink(missing_ok=True)  # an earlier version's, now stale
        atomic_write_bytes(out, "".join([TSV_HEADER + "\n"] + [line for _, line in rows]).encode("utf-8"))

    return merged, write, f": {len(rows)} examples"


def _rows(p: Path, meta: dict) -> List[Tuple[int, str]]:
    """(idx, the row's line as written) of a complete shard file, checked to hold its share of the
    subset exactly (by arithmetic: the subset is never listed)."""
    result = read_certify_tsv(p)  # one-line errors for a damaged file (and a repeated idx)
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines(keepends=True)[1:] if ln.strip()]
    (i, k), start, skip = meta["shard"], meta.get("start", 0), meta["skip"]
    share = range(i, meta["subset_size"], k)  # positions in the subset (what certify_indices selects)
    idx = result.idx.tolist()
    outside = [j for j in idx if (j - start) % skip or (j - start) // skip not in share]
    present = set(idx)
    lost = next((start + q * skip for q in share if start + q * skip not in present), None)
    if outside or lost is not None:
        what = f"{min(outside)} is not in it" if outside else f"{lost} is missing"
        raise RsmoothError(f"shard {_name(meta)} ({p}) does not hold exactly its share of the subset (idx {what}); "
                           f"rerun its certify command with --overwrite")
    return [(int(j), ln if ln.endswith("\n") else ln + "\n") for j, ln in zip(idx, lines)]


#: the ``kind`` a targets run's metadata records
TARGETS_KIND = "rsmooth-targets"
#: certify/predict shards (``rsmooth certify|predict --shard I/K``, torchrun ranks)
CERTIFY = ShardKind(command="certify", noun="shard", identity=RUN_IDENTITY, shard_fields=SHARD_FIELDS,
                    companions=(".seq", ".seq.tsv"), damage=_certify_damage, join=_join_certify,
                    progress=_certify_progress)
