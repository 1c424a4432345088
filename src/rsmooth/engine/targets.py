"""CAT-RS consistency targets y_hat (Jeong et al. 2023, CAT-RS, arXiv 2212.09000, App. C.5, eq. 10).

For every training image, the vote frequencies over all K classes of the smoothed classifier
of a Gaussian-trained model (at sigma0 = 0.25 in the papers) with N noises per image
(10,000; 500 for ImageNet): one (N_train x K) float32 array, computed once and cached, shared
by every training sigma.

Reference behaviour (default, ``augment=True``): the targets are computed on training images
with the training augmentation drawn once (the authors ran their smoothed predictor over the
augmenting training loader); ``augment=False`` uses the un-augmented images.

Files: ``OUT`` is a ``.npy`` array (float32 [N x K], rows in dataset index order, each row sums
to 1) and ``OUT.json`` records the dataset fingerprint, checkpoint sha256, sigma, sample count,
augmentation and seed.  While running, counts go to ``OUT.partial.npy`` with a done-mask
``OUT.done.npy`` (written after each block of images), so a killed run loses at most the block
in flight and resumes where it stopped with identical results.  The run is complete when
``OUT`` appears (its metadata says ``complete`` before that); a rerun of the same command
finishes or tidies up whatever state a kill left, and two runs on one ``OUT`` are refused.

Shards: ``shard=(I, K)`` computes the blocks b with ``b % K == I`` into ``OUT`` with
``.shard-I-of-K`` before its suffix (only those blocks' rows, in block order; resumable on its
own); :func:`merge_targets` joins the K shards into the ``OUT`` a one-process run writes (each
block's noise and augmentation are seeded by ``(seed, block)``).  Under ``torchrun`` rank r
computes shard r/W and rank 0 merges.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import RsmoothError, check, first_line, setting
from ..fileio import atomic_write, atomic_write_bytes, naming, open_nofollow, remove_stale_temps, run_lock
from ..metrics import read_sidecar
from ..paths import check_output_file
from ..progress import Heartbeat, heartbeat_interval, progress_bar
from ..smoothing import DEFAULT_BATCH_SIZE, Smooth, validate_count, validate_sigma
from .checkpoint import file_sha256, git_commit, resolve_checkpoint_path, resolve_device, load_model, versions
from . import distributed
from ..seeding import generator, validate_seed
from .sessions import past_sessions, session, shard_sessions
from .shards import (CERTIFY, PathLike, ShardKind, TARGETS_KIND, clean_merged, identity_diff, int_field, lock_path,
                     merge_shards, parse_shard, shard_names, shard_path, shard_share)

#: images per resumable block (fixed, so seeds and augmentation do not depend on restarts)
BLOCK = 256
#: metadata fields that must agree for a run to continue partial files
_IDENTITY = ("dataset", "split", "data_fingerprint", "checkpoint_sha256", "sigma", "num_samples",
             "augment", "seed")
#: what each invocation that computed into a targets file records in its ``sessions``
_SESSION_FIELDS = ("git_commit", "versions", "channels_last", "compile")


def _meta_path(out: Path) -> Path:
    return out.with_name(out.name + ".json")


def compute_targets(
    checkpoint: str,
    out: str,
    *,
    dataset: Optional[str] = None,
    num_samples: int = 10_000,
    sigma: Optional[float] = None,
    batch_size: Optional[int] = None,
    augment: bool = True,
    seed: int = 0,
    precision: str = "fp32",
    channels_last: bool = False,
    data_dir: Optional[str] = None,
    device: Optional[str] = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    stop_after_blocks: Optional[int] = None,
    overwrite: bool = False,
    shard: Optional[Union[str, Sequence[int]]] = None,
    trust_pickle: bool = False,
    trust_code: bool = False,
    model_options: Optional[Dict[str, Any]] = None,
    train_subset: Optional[int] = None,
    heartbeat: Optional[float] = None,
) -> Path:
    """Compute (or continue computing) the consistency targets of ``checkpoint``'s model.

    Args:
        checkpoint: a Gaussian-trained model (rsmooth or public checkpoint).
        out: output ``.npy`` path.
        dataset: default the checkpoint's.
        num_samples: N noises per image (10,000 in CAT-RS, Jeong, Kim, Shin 2023, arXiv
            2212.09000, App. C.5; 500 for ImageNet).
        sigma: the noise of the smoothed predictions, in [0, 1] pixel units; default the
            checkpoint's (0.25 in the papers).
        batch_size: noisy inputs per forward pass (default 256).
        augment: targets on augmented training images, drawn once (reference) or not.
        stop_after_blocks: stop as if killed after this many blocks (tests).
        overwrite: recompute even if ``out`` exists (otherwise a finished file with the same
            settings is returned as is, and one with other settings is an error).
        shard: ``(I, K)`` or ``"I/K"``: compute only blocks ``b % K == I``, into ``out`` with
            ``.shard-I-of-K`` before its suffix (see :func:`merge_targets`); under torchrun each
            rank computes shard RANK/WORLD_SIZE and rank 0 merges them into ``out``.
        trust_pickle: unpickle a checkpoint that needs more than tensors and
            ``argparse.Namespace`` (can run arbitrary code; see :func:`read_checkpoint`).
        trust_code: build the ``module:factory`` the checkpoint names without ``arch`` naming it
            (:mod:`rsmooth.trust`).
        model_options: keyword arguments of :func:`~rsmooth.engine.checkpoint.load_model` (arch,
            arch_kwargs, mean, std, num_classes) for a checkpoint that does not record its model.
        train_subset: targets of that many training examples (``rsmooth train --train-subset``,
            the same examples).
        heartbeat: seconds between progress lines where no bar is drawn (a log file); default
            ``$RSMOOTH_HEARTBEAT`` or 60, 0 for none (:class:`~rsmooth.progress.Heartbeat`).

    The keywords are the fields of :class:`TargetsJob`: this is ``TargetsJob(...).run()``.

    Example:
        ```python
        from rsmooth.engine import TrainConfig, train
        from rsmooth.engine.targets import compute_targets

        compute_targets("runs/fm-gauss025", "runs/fm-gauss025/targets.pt")   # a Gaussian-trained run
        train(TrainConfig(dataset="fashion-mnist", method="catrs", hparams={"sigma": 0.25},
                          targets="runs/fm-gauss025/targets.pt"), "runs/fm-catrs025")
        ```
    """
    return TargetsJob(**locals()).run()  # locals(): exactly the arguments, at the first line


@dataclass(frozen=True)
class TargetsJob:
    """Every setting of one targets computation: the keywords of :func:`compute_targets` (which says
    what each does), checked and normalised when the job is made.  :meth:`run` computes (or
    continues) it."""

    checkpoint: str  # a Gaussian-trained model: checkpoint file or run folder
    out: str  # the .npy; OUT.json beside it
    dataset: Optional[str] = None  # default: the checkpoint's
    num_samples: int = 10_000  # noises per training image
    sigma: Optional[float] = None  # default: the checkpoint's
    batch_size: Optional[int] = None  # noisy inputs per forward pass; None: DEFAULT_BATCH_SIZE
    augment: bool = True  # the training augmentation, drawn once per image (the authors' targets)
    seed: int = 0
    precision: str = "fp32"
    channels_last: bool = False
    data_dir: Optional[str] = None
    device: Optional[str] = None
    progress: bool = True
    log: Callable[[str], None] = print
    stop_after_blocks: Optional[int] = None  # stop as if killed (tests)
    overwrite: bool = False
    shard: Optional[Union[str, Sequence[int]]] = None  # "I/K" or (I, K): blocks b % K == I
    trust_pickle: bool = False
    trust_code: bool = False
    model_options: Optional[Dict[str, Any]] = None  # arch, arch_kwargs, mean, std, num_classes
    train_subset: Optional[int] = None
    heartbeat: Optional[float] = None  # seconds between progress lines where no bar is drawn

    def __post_init__(self) -> None:
        batch_size = DEFAULT_BATCH_SIZE if self.batch_size is None else self.batch_size
        for key, value in {"num_samples": validate_count("num_samples", self.num_samples),
                           "batch_size": validate_count("batch_size", batch_size),
                           "sigma": None if self.sigma is None else validate_sigma(self.sigma),
                           "seed": validate_seed(self.seed), "heartbeat": heartbeat_interval(self.heartbeat),
                           "shard": None if self.shard is None else parse_shard(self.shard)}.items():
            object.__setattr__(self, key, value)

    def run(self) -> Path:
        """Compute the targets into ``out`` (continuing what a killed run left); its path."""
        world, shard = distributed.rank_shard(self.shard, "computes")
        progress, log = (self.progress, self.log) if world.main else (False, distributed.quiet)
        check_output_file(self.out, inputs=[resolve_checkpoint_path(self.checkpoint)])
        meta, votes, n, dev = self._resolve(world)
        work = _Work(n, meta["num_classes"], votes, self.overwrite, progress, log, self.stop_after_blocks,
                     self.heartbeat)
        out_path = Path(self.out)
        blocks = list(range((n + BLOCK - 1) // BLOCK))
        if shard is None:
            return _compute(out_path, blocks, meta, work)
        share = shard_share(blocks, shard)
        if world.size == 1:
            return _compute(shard_path(out_path, shard), share, {**meta, "shard": list(shard), "num_rows": n}, work)
        return _compute_on_ranks(out_path, share, meta, work, world, dev)

    def _resolve(self, world) -> Tuple[Dict[str, Any], Callable[[int], np.ndarray], int, "torch.device"]:
        """(the identity metadata, the vote counts of a block, the training images, this rank's
        device): the model loaded, sigma and the data resolved."""
        from ..data import get_dataset

        loaded = load_model(self.checkpoint, dataset=self.dataset, trust_pickle=self.trust_pickle,
                            trust_code=self.trust_code, **(self.model_options or {}))
        check(self.sigma is not None or loaded.sigma is not None,
              f"checkpoint {loaded.path} does not record sigma; pass --sigma (0.25 in the papers)")
        sigma = validate_sigma(self.sigma if self.sigma is not None else loaded.sigma)
        dev = distributed.rank_device(resolve_device(self.device), world)
        data = get_dataset(loaded.dataset, "train", data_dir=self.data_dir, subset=self.train_subset)
        smooth = Smooth(loaded.model.to(dev), loaded.num_classes, sigma, precision=self.precision,
                        channels_last=self.channels_last)
        meta = {"kind": TARGETS_KIND, "dataset": loaded.dataset, "split": "train",
                "data_fingerprint": data.fingerprint(), "checkpoint": str(loaded.path),
                "checkpoint_sha256": file_sha256(loaded.path), "arch": loaded.arch, "sigma": sigma,
                "num_samples": self.num_samples, "augment": bool(self.augment), "seed": self.seed,
                "num_classes": loaded.num_classes, **smooth.mode(), "versions": versions(),
                "git_commit": git_commit()}
        n, seed = len(data), self.seed

        def votes(b: int) -> np.ndarray:
            idx = torch.arange(b * BLOCK, min((b + 1) * BLOCK, n))
            x, _ = data.get_batch(idx, augment=self.augment, generator=generator(seed, "targets-augment", b))
            g = generator(seed, "targets", b, device=dev)
            return smooth.count_votes(x, self.num_samples, self.batch_size, generator=g).cpu().numpy()

        return meta, votes, n, dev


@dataclass
class _Work:
    """What every part of a targets computation shares: ``n`` training images, ``k`` classes, the
    vote counts of a block (``votes(b)`` [rows x k]) and how to run."""

    n: int
    k: int
    votes: Callable[[int], np.ndarray]
    overwrite: bool
    progress: bool
    log: Callable[[str], None]
    stop_after_blocks: Optional[int]
    heartbeat: Optional[float]


def _compute_on_ranks(out_path: Path, share: List[int], meta: dict, work: _Work, world, dev) -> Path:
    """Under torchrun: each rank computes its shard (blocks ``share``), then rank 0 merges them into
    ``out_path`` (every rank returns once it is there)."""
    shards = [shard_path(out_path, (r, world.size)) for r in range(world.size)]
    with distributed.process_group(dev, timeout=datetime.timedelta(days=7)):
        distributed.agree(world, {**{f: meta.get(f) for f in _IDENTITY}, "out": str(out_path)})
        old = _read_meta(_meta_path(out_path))
        diff = identity_diff(old, meta, _IDENTITY) if old is not None else []
        if not work.overwrite and out_path.exists():  # now, not after every shard is computed
            if diff:
                raise RsmoothError(f"{out_path} exists with {diff[0]}={old.get(diff[0])!r}, not "
                                   f"{meta.get(diff[0])!r}; pass {setting('overwrite', True)} or choose another {setting('out')}")
            if old is not None and old.get("complete"):  # rank 0 deletes what a kill in the merge left
                if world.main:
                    clean_merged(out_path, TARGETS, shards, log=work.log)
                return out_path
        _compute(shards[world.rank], share, {**meta, "shard": [world.rank, world.size], "num_rows": work.n}, work)
        distributed.barrier(world, "the other ranks' shards")
        if world.main:
            merge_targets(out_path, shards, overwrite=work.overwrite, log=work.log)
        distributed.barrier(world, "rank 0's merge")  # every rank returns once OUT is there
    return out_path



def _block_rows(n: int, blocks: Sequence[int]) -> Tuple[List[int], int]:
    """The first row of each of ``blocks`` in an array holding only their rows, and its length."""
    offsets, rows = [], 0
    for b in blocks:
        offsets.append(rows)
        rows += min(BLOCK, n - b * BLOCK)
    return offsets, rows


def _compute(out_path: Path, blocks: List[int], meta: dict, work: _Work) -> Path:
    """Compute ``blocks`` (of the ``work.n`` training images) into ``out_path``: their rows, in block
    order, with partial files for resuming, under ``out_path``'s lock."""
    n, k, log = work.n, work.k, work.log
    offsets, rows = _block_rows(n, blocks)
    num_samples = meta["num_samples"]
    with run_lock(lock_path(out_path), out_path):
        files = _Files(out_path)
        remove_stale_temps(out_path, files.meta, files.partial, files.done)
        old = _read_meta(files.meta)
        diff = identity_diff(old, meta, (*_IDENTITY, "shard")) if old is not None else []
        if work.overwrite:
            files.remove(out_path)
        elif out_path.exists():
            if old is None or diff:
                what = f"{diff[0]}={old.get(diff[0])!r}, not {meta.get(diff[0])!r}" if diff else "no metadata"
                raise RsmoothError(f"{out_path} exists with {what}; pass {setting('overwrite', True)} or choose another {setting('out')}")
            if old.get("complete"):
                files.remove()  # partial files of a run killed right after it finished
                log(f"{out_path} is already computed")
                return out_path
        done = None
        if old is not None and not work.overwrite and files.partial.exists() and files.done.exists():
            if diff:
                raise RsmoothError(f"{files.partial} was started with {diff[0]}={old.get(diff[0])!r}, not "
                                   f"{meta.get(diff[0])!r}; delete {files.partial} and {files.done} to start over")
            done = files.read_done(rows, k, len(blocks))
            if done is None:
                log(f"{files.partial} or {files.done} is unreadable (left by an interrupted run); "
                    f"starting over")
            else:
                log(f"continuing {out_path}: {int(done.sum())} of {len(done)} blocks done")
        meta = {**meta, "sessions": past_sessions(None if done is None else old, {"blocks_done": 0}, _SESSION_FIELDS)}
        if done is None:
            _write_json(files.meta, {**meta, "complete": False})
            done = files.create(rows, k, len(blocks))
        todo = [j for j in range(len(done)) if not done[j]]
        if todo:
            where = {"blocks_done": len(done) - len(todo)}
            meta["sessions"].append(session(where, {f: meta.get(f) for f in _SESSION_FIELDS}))
            _write_json(files.meta, {**meta, "complete": False})
        left = sum(min(BLOCK, n - blocks[j] * BLOCK) for j in todo)
        bar = progress_bar(total=rows, initial=rows - left, desc="targets", enabled=work.progress)
        desc = "targets" if meta.get("shard") is None else f"targets (shard {meta['shard'][0]}/{meta['shard'][1]})"
        beat = Heartbeat(rows, desc=desc, unit="images", done=rows - left, interval=work.heartbeat,
                         enabled=work.progress, log=log)
        for i, j in enumerate(todo):
            if work.stop_after_blocks is not None and i >= work.stop_after_blocks:
                return out_path
            counts = work.votes(blocks[j])
            files.write_rows(offsets[j], counts)
            done[j] = 1
            files.write_done(done)
            bar.update(len(counts))
            beat.update(len(counts), len(counts) * num_samples)
        bar.close()
        counts = np.load(files.partial, mmap_mode="r")
        freqs = (np.asarray(counts, dtype=np.float64) / num_samples).astype(np.float32)
        del counts
        # completion is the appearance of out_path: its metadata says complete before it
        _write_json(files.meta, {**meta, "complete": True})
        atomic_write(out_path, lambda f: np.save(f, freqs))
        files.remove()
    return out_path


def targets_summary(out: Union[str, Path]) -> str:
    """The closing line of a targets run: ``targets: OUT: 60,000 images x 10 classes, 10,000 noises
    each; top class 93.1% of the votes on average, below half of them on 2.3% of the images``
    (a low share says the sigma0 model is unsure: CAT-RS trusts these targets)."""
    out = Path(out)
    freqs = np.load(out, mmap_mode="r")
    top = np.asarray(freqs.max(axis=1), dtype=np.float64)
    num = (_read_meta(_meta_path(out)) or {}).get("num_samples")
    noises = f", {num:,} noises each" if isinstance(num, int) else ""
    return (f"targets: {out}: {freqs.shape[0]:,} images x {freqs.shape[1]} classes{noises}; top class "
            f"{100 * top.mean():.1f}% of the votes on average, below half of them on {100 * np.mean(top < 0.5):.1f}% "
            f"of the images")


def merge_targets(out: Union[str, Path], shards: Optional[Sequence[Union[str, Path]]] = None, *,
                  overwrite: bool = False, keep: bool = False, log: Callable[[str], None] = print) -> Path:
    """:func:`~rsmooth.engine.shards.merge_shards` of targets shards (``shard=(I, K)``): ``out`` and
    its metadata, the files a one-process run writes."""
    return merge_shards(out, TARGETS, shards, overwrite=overwrite, keep=keep, log=log)


def _shard_damage(meta: dict) -> str:
    """What is wrong with a targets shard's own metadata fields ("" when nothing)."""
    return int_field(meta, "num_rows", 1) or int_field(meta, "num_classes", 1)


def _join(out: Path, shards: List[Tuple[Path, dict]]) -> Tuple[dict, Callable[[], None], str]:
    """OUT's rows in dataset order and its metadata, from the shards' blocks."""
    first = shards[0][1]
    n, k = first["num_rows"], len(shards)
    blocks = list(range((n + BLOCK - 1) // BLOCK))
    freqs = np.empty((n, first["num_classes"]), dtype=np.float32)
    for i, (p, _) in enumerate(shards):
        share = shard_share(blocks, (i, k))
        offsets, rows = _block_rows(n, share)
        remake = f"rerun its targets command with --shard {i}/{k} --overwrite"
        part = _load_array(p, remake)
        _check_frequencies(part, p, (rows, freqs.shape[1]), remake)
        for b, o in zip(share, offsets):
            freqs[b * BLOCK:min((b + 1) * BLOCK, n)] = part[o:o + min(BLOCK, n - b * BLOCK)]
    merged = {**{f: v for f, v in first.items() if f not in TARGETS.shard_fields}, "sessions": shard_sessions(shards)}
    return merged, lambda: atomic_write(out, lambda f: np.save(f, freqs)), ""


def _load_array(p: Path, remake: str) -> np.ndarray:
    """The array in the .npy file ``p``; a one-line error naming ``p`` and the fix ``remake`` for an
    empty, truncated or pickled file."""
    try:
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise RsmoothError(f"cannot read targets file {p}: empty, truncated or not a .npy array "
                           f"({first_line(e)}); {remake}") from None


def _check_frequencies(arr: np.ndarray, p: Path, shape: Tuple[int, int], remake: str) -> None:
    """``arr`` (read from ``p``) must be ``shape`` vote frequencies: finite, >= 0, rows summing to 1."""
    check(arr.shape == shape, f"targets file {p} has shape {arr.shape}, expected {shape}; {remake}")
    check(np.issubdtype(arr.dtype, np.floating) and bool(np.isfinite(arr).all()) and bool((arr >= 0).all())
          and bool(np.allclose(arr.sum(1), 1.0, atol=1e-4)),
          f"targets file {p} does not hold frequencies (finite, >= 0, rows summing to 1); {remake}")


#: targets shards (``rsmooth targets --shard I/K``, torchrun ranks): blocks of BLOCK images
TARGETS = ShardKind(command="targets", noun="targets shard", identity=_IDENTITY, shard_fields=("shard", "num_rows"),
                    companions=(".partial.npy", ".done.npy"), damage=_shard_damage, join=_join)


class _Files:
    """The files of a targets run beside ``OUT``: metadata, vote counts and done-mask.

    ``OUT.partial.npy`` (int32 [N x K] counts) and ``OUT.done.npy`` (uint8, one flag per block)
    are created whole under temporary names, their space allocated up front; counts are written
    in place with plain writes (a full disk is an OSError, not a SIGBUS in a memory map) and
    fsynced before the done-mask, replaced atomically, marks their block done.
    """

    def __init__(self, out: Path) -> None:
        self.meta = _meta_path(out)
        self.partial = out.with_name(out.name + ".partial.npy")
        self.done = out.with_name(out.name + ".done.npy")

    def create(self, n: int, k: int, blocks: int) -> np.ndarray:
        def zeros(f):
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int32)),
                                                     "fortran_order": False, "shape": (n, k)})
            _allocate(f, f.tell() + n * k * 4)

        atomic_write(self.partial, zeros)
        done = np.zeros(blocks, dtype=np.uint8)
        self.write_done(done)
        return done

    def read_done(self, n: int, k: int, blocks: int) -> Optional[np.ndarray]:
        """The done-mask, or None when either file is unreadable or of the wrong shape."""
        try:
            counts = np.load(self.partial, mmap_mode="r")
            done = np.load(self.done, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if counts.shape != (n, k) or counts.dtype != np.int32 or done.shape != (blocks,):
            return None
        return done.astype(np.uint8)

    def write_rows(self, start: int, rows: np.ndarray) -> None:
        """Write ``rows`` (int32 [B x K]) in place from row ``start``, then fsync."""
        offset = np.load(self.partial, mmap_mode="r").offset + start * rows.shape[1] * 4
        with naming(self.partial), open_nofollow(self.partial, "r+b") as f:
            f.seek(offset)
            f.write(np.ascontiguousarray(rows, dtype=np.int32).tobytes())
            f.flush()
            os.fsync(f.fileno())

    def write_done(self, done: np.ndarray) -> None:
        atomic_write(self.done, lambda f: np.save(f, done))

    def remove(self, *more: Path) -> None:
        for p in (self.partial, self.done, *more):
            p.unlink(missing_ok=True)


def _allocate(f, size: int) -> None:
    """Extend ``f`` to ``size`` zero bytes, allocated now where the file system can (a full disk
    fails here rather than hours later)."""
    f.flush()
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(f.fileno(), 0, size)
            return
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
    f.truncate(size)


def _read_meta(path: Path) -> Optional[dict]:
    """The run's metadata, or None when there is none (or it is unreadable)."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def load_targets(path: str, dataset) -> torch.Tensor:
    """Read a targets file and check it was made for ``dataset`` (a training-split Dataset).

    Returns float32 [N x K].  A file made for another dataset, split, size, class count or
    example order is refused with a one-line error.
    """
    from ..data import check_fingerprint

    p = Path(path)
    check(p.is_file(), f"targets file {p} does not exist; make it with 'rsmooth targets'")
    mp = _meta_path(p)
    check(mp.is_file(), f"targets file {p} has no metadata {mp}; make it with 'rsmooth targets'")
    remake = "rerun 'rsmooth targets' with --overwrite to make it again"
    try:
        meta = json.loads(mp.read_text())
    except (ValueError, OSError) as e:
        raise RsmoothError(f"cannot read the metadata {mp} of targets file {p} ({first_line(e)}); {remake}") from None
    check(isinstance(meta, dict) and isinstance(meta.get("data_fingerprint", {}), dict),
          f"the metadata {mp} of targets file {p} is not an rsmooth targets record; {remake}")
    check(meta.get("complete", False), f"targets file {p} is incomplete; rerun 'rsmooth targets' to finish it")
    arr = _load_array(p, remake)
    check_fingerprint(meta.get("data_fingerprint", {}), dataset.fingerprint(), f"targets file {p}")
    _check_frequencies(arr, p, (len(dataset), dataset.num_classes), remake)
    return torch.from_numpy(arr.astype(np.float32))


def _write_json(path: Path, obj: dict) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def shard_kind(out: PathLike, shards: Sequence[PathLike] = ()) -> ShardKind:
    """Whose shards merge into ``out``: targets' when a shard's metadata (or ``out``'s) says
    ``"kind": "rsmooth-targets"``, or with neither readable when ``out`` ends in ``.npy``;
    certify's otherwise."""
    out = Path(out)
    for p in [*map(Path, shards), *shard_names(out, CERTIFY).values(), out]:
        with contextlib.suppress(RsmoothError):
            meta = read_sidecar(p)
            if meta is not None:
                return TARGETS if meta.get("kind") == TARGETS_KIND else CERTIFY
    return TARGETS if out.suffix == ".npy" else CERTIFY
