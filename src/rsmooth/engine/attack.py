"""The attack driver: SmoothAdv's evaluation attack at each eps, then PREDICT at the attacked point.

For each test image and each eps of a list, :func:`~rsmooth.attacks.evaluate.attack_smoothed`
(PGD or DDN on the soft-smoothed classifier with m noises, the settings of Salman et al. 2019,
arXiv 1906.04584, ``code/predict.py``) finds x' with ||x' - x||_2 <= eps, and PREDICT (n, alpha)
(Cohen, Rosenfeld & Kolter 2019, arXiv 1902.02918) classifies x'.  The fraction of images still
classified correctly is the *empirical* robust accuracy at eps, an upper bound (for this attack)
of what certificates can show.

The row of image i at eps e draws everything (the attack's noises, a zero gradient's direction,
PREDICT's noise) from one generator seeded by ``(seed, "attack", i, repr(e))``, so rows do not
depend on the order, on interruptions or on the split into shards: a killed run resumes where it
stopped (rows in the TSV are skipped), ``shard=(I, K)`` attacks every K-th image of the subset
into ``OUT.shard-I-of-K`` (merged by ``rsmooth merge OUT``, :data:`ATTACK`), and under
``torchrun`` each rank takes shard RANK/WORLD_SIZE and rank 0 merges.  TSV columns: see
:mod:`rsmooth.metrics.attack_io`; settings go to the sidecar ``OUT.json``.
"""
from __future__ import annotations

import contextlib
import datetime
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..attacks.evaluate import EVAL_ATTACKS, EVAL_NUM_NOISE, EVAL_STEPS, attack_smoothed, validate_eps
from ..errors import RsmoothError, check, setting
from ..fileio import atomic_write_bytes, remove_stale_temps, run_lock
from ..metrics import read_sidecar, sidecar_path, write_sidecar
from ..metrics.attack_io import ATTACK_HEADER, AttackWriter, empirical_accuracy, read_attack_tsv
from ..paths import check_output_file
from ..progress import Heartbeat, emit, heartbeat_interval, progress_bar
from ..seeding import generator, validate_seed
from ..smoothing import Smooth, validate_alpha, validate_count, validate_sigma
from ..smoothing.noises import Noise, make_noise, noise_from_spec
from ..smoothing.procedures import Predict
from . import distributed
from .certify import trained_noise
from .checkpoint import file_sha256, git_commit, load_model, resolve_checkpoint_path, resolve_device, versions
from .shards import (SHARD_FIELDS, ShardKind, continue_as_shards, identity_diff, lock_path, merge_shards, parse_shard,
                     shard_path, shard_share)

#: what the sidecar's ``kind`` says of an attack file
ATTACK_KIND = "rsmooth-attack"
#: sidecar fields that must agree for a run to continue a file, and for shards to merge
ATTACK_IDENTITY = ("kind", "attack", "eps", "num_steps", "num_noise", "n", "alpha", "dataset", "split", "noise",
                   "sigma", "noise_params", "start", "skip", "max", "seed", "checkpoint_sha256")
#: the default eps: Table 4's radii
DEFAULT_EPS = (0.25, 0.5, 0.75, 1.0)


def predict_votes(smooth: Smooth, x: torch.Tensor, n: int, alpha: float, batch_size: int,
                  gen: Optional[torch.Generator]) -> Tuple[int, np.ndarray]:
    """PREDICT (:class:`~rsmooth.smoothing.procedures.Predict`) at one image x [C, H, W]: (the class
    or -1, the n votes per class [K])."""
    counts = smooth.count_votes(x.unsqueeze(0), n, batch_size, generator=gen)[0].cpu().numpy()
    steps = Predict(n, alpha).steps(smooth.noise)
    next(steps)
    try:
        steps.send(counts)
    except StopIteration as done:
        return int(done.value), counts
    raise RsmoothError("Predict asked for more samples than n")  # pragma: no cover


@dataclass(frozen=True)
class AttackJob:
    """The settings of :func:`run_attack` (which says what each does), checked when made."""

    checkpoint: str
    out: str
    eps: Sequence[float] = DEFAULT_EPS
    attack: str = "pgd"
    num_steps: int = EVAL_STEPS
    num_noise: int = EVAL_NUM_NOISE
    n: int = 100_000
    alpha: float = 0.001
    dataset: Optional[str] = None
    split: str = "test"
    sigma: Optional[float] = None
    noise: Optional[str] = None  # default: the checkpoint's trained noise, else Gaussian
    batch_size: int = 1000
    start: int = 0
    skip: int = 1
    max: Optional[int] = None
    shard: Optional[Union[str, Sequence[int]]] = None
    seed: int = 0
    data_dir: Optional[str] = None
    device: Optional[str] = None
    overwrite: bool = False
    trust_pickle: bool = False
    trust_code: bool = False
    model_options: Optional[Dict[str, Any]] = None
    progress: bool = True
    log: Callable[[str], None] = print
    heartbeat: Optional[float] = None

    def __post_init__(self) -> None:
        check(self.attack in EVAL_ATTACKS, f"--attack must be one of {', '.join(EVAL_ATTACKS)}, got {self.attack!r}")
        eps = [self.eps] if isinstance(self.eps, (int, float)) else list(self.eps)
        check(bool(eps), "--eps needs at least one radius (e.g. --eps 0.25 0.5)")
        values = {
            "eps": sorted({validate_eps(e) for e in eps}),
            "num_steps": validate_count("num_steps", self.num_steps),
            "num_noise": _noise_count(self.num_noise),
            "n": validate_count("n", self.n), "alpha": validate_alpha(self.alpha),
            "sigma": None if self.sigma is None else validate_sigma(self.sigma),
            "noise": None if self.noise is None else make_noise(self.noise, 1.0).name,
            "batch_size": validate_count("batch_size", self.batch_size),
            "start": validate_count("start", self.start, minimum=0), "skip": validate_count("skip", self.skip),
            "max": None if self.max is None else validate_count("max", self.max),
            "shard": None if self.shard is None else parse_shard(self.shard),
            "seed": validate_seed(self.seed), "heartbeat": heartbeat_interval(self.heartbeat),
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def run(self) -> Path:
        return _run(self)


def _noise_count(m: Any) -> int:
    ok = isinstance(m, int) and not isinstance(m, bool) and m >= 1
    check(ok, f"--num-noise (m, the noises each attack step averages over) must be an integer >= 1, got {m!r}")
    return m


def run_attack(checkpoint: str, out: str, *, eps: Sequence[float] = DEFAULT_EPS, attack: str = "pgd",
               num_steps: int = EVAL_STEPS, num_noise: int = EVAL_NUM_NOISE, n: int = 100_000,
               alpha: float = 0.001, dataset: Optional[str] = None, split: str = "test",
               sigma: Optional[float] = None, noise: Optional[str] = None, batch_size: int = 1000, start: int = 0,
               skip: int = 1,
               max: Optional[int] = None, shard: Optional[Union[str, Sequence[int]]] = None, seed: int = 0,
               data_dir: Optional[str] = None, device: Optional[str] = None, overwrite: bool = False,
               trust_pickle: bool = False, trust_code: bool = False,
               model_options: Optional[Dict[str, Any]] = None, progress: bool = True,
               log: Callable[[str], None] = print, heartbeat: Optional[float] = None) -> Path:
    """Attack the smoothed classifier of ``checkpoint`` on the ``split`` examples ``start, start +
    skip, ...`` (at most ``max``) at each of ``eps``, and PREDICT (``n``, ``alpha``) at each attacked
    point; write ``out`` (TSV: idx label eps predict correct norm time) and ``out.json``.

    ``attack``: ``"pgd"`` or ``"ddn"`` with ``num_steps`` steps and ``num_noise`` noises per step
    (SmoothAdv's evaluation settings by default: T = 20, m = 32; :mod:`rsmooth.attacks.evaluate`).
    sigma and dataset default to the checkpoint's; ``noise`` names the smoothing noise
    (:data:`~rsmooth.smoothing.noises.NOISES`; default: the one the checkpoint was trained with,
    else Gaussian), which the attack draws its m
    noises from and PREDICT smooths with.  An existing ``out`` of
    the same settings is continued; ``shard``, ``torchrun``, ``heartbeat`` as for
    :func:`~rsmooth.engine.run_certification`.  Returns the TSV written (a shard's own file).

    Example:
        ```python
        from rsmooth.engine.attack import run_attack

        run_attack("runs/fmnist025", "attack.tsv", eps=[0.25, 0.5], max=20, n=10_000)
        ```
    """
    return AttackJob(**locals()).run()


# -- one run ------------------------------------------------------------------------------

def _run(job: AttackJob) -> Path:
    from ..data import certify_indices, get_dataset

    world, shard = distributed.rank_shard(job.shard, "attacks")
    log, show = (job.log, job.progress) if world.main else (distributed.quiet, False)
    dev = distributed.rank_device(resolve_device(job.device), world)
    target = Path(job.out) if shard is None else shard_path(job.out, shard)
    ckpt = resolve_checkpoint_path(job.checkpoint)
    for p in {Path(job.out), target}:
        path = check_output_file(str(p), inputs=[ckpt])
        if job.overwrite and path.is_file() and path.stat().st_size > 0:
            with open(path, "rb") as f:
                first = f.read(len(ATTACK_HEADER) + 2).decode("utf-8", "replace").splitlines()[:1]
            check(first == [ATTACK_HEADER], f"--out {p} exists and is not an attack TSV; --overwrite replaces only "
                                            f"attack results: choose another {setting('out')} or delete the file")
    loaded = load_model(job.checkpoint, dataset=job.dataset, trust_pickle=job.trust_pickle,
                        trust_code=job.trust_code, **(job.model_options or {}))
    sigma = job.sigma if job.sigma is not None else loaded.sigma
    check(sigma is not None, f"checkpoint {loaded.path} does not record sigma; pass --sigma (e.g. 0.25)")
    noise = make_noise(job.noise if job.noise is not None else trained_noise(loaded), sigma)
    model = loaded.model.to(dev).eval()
    smooth = Smooth(model, loaded.num_classes, noise)
    data = get_dataset(loaded.dataset, job.split, data_dir=job.data_dir)
    indices = certify_indices(len(data), skip=job.skip, max=job.max, start=job.start)
    check(bool(indices), f"--start {job.start} is past the last {job.split} example (index {len(data) - 1})")
    meta = {"kind": ATTACK_KIND, "attack": job.attack, "eps": job.eps, "num_steps": job.num_steps,
            "num_noise": job.num_noise, "n": job.n, "alpha": job.alpha, "dataset": loaded.dataset,
            "split": job.split, **noise.spec(), "norm": noise.norm, "start": job.start, "skip": job.skip, "max": job.max,
            "num_examples": len(indices), "seed": job.seed, "batch_size": job.batch_size,
            "checkpoint": str(loaded.path), "checkpoint_sha256": file_sha256(loaded.path), "arch": loaded.arch,
            "method": loaded.meta.get("method"), "device": str(dev), "versions": versions(),
            "git_commit": git_commit(), "started": datetime.datetime.now().isoformat(timespec="seconds")}
    mine = indices if shard is None else shard_share(indices, shard)
    if shard is not None and not job.overwrite and (world.size == 1 or world.main):
        # a shard job starts its own shard; under torchrun rank 0 starts them all
        begun = [shard] if world.size == 1 else [(k, world.size) for k in range(world.size)]
        continue_as_shards(Path(job.out), meta, indices, begun, identity=ATTACK_IDENTITY, header=ATTACK_HEADER,
                           units=lambda p: read_attack_tsv(p, growing=True).idx.tolist(),
                           begin=lambda path, old, mine: {}, log=log)
    if shard is not None:
        meta.update(shard=list(shard), subset_size=len(indices), num_examples=len(mine))
    work = _Work(job, model, smooth, noise, data, dev, log, show)
    if world.size == 1:
        done = work.into(target, mine, meta)
        emit(summary_line(done), log)
        return done
    shards = [shard_path(job.out, (k, world.size)) for k in range(world.size)]
    with distributed.process_group(dev, timeout=datetime.timedelta(days=7)):
        distributed.barrier(world, "rank 0's start of the shards")
        work.into(target, mine, meta)
        distributed.barrier(world, "the other ranks' attack shards")
        if world.main:
            merge_attack(job.out, shards, overwrite=job.overwrite, log=log)
            emit(summary_line(job.out), log)
        distributed.barrier(world, "rank 0's merge")
    return Path(job.out)


@dataclass
class _Work:
    job: AttackJob
    model: torch.nn.Module
    smooth: Smooth
    noise: Noise
    data: Any
    device: torch.device
    log: Callable[[str], None]
    progress: bool

    def row(self, i: int, x: torch.Tensor, label: int, eps: float) -> Tuple[int, float]:
        """(PREDICT at the attacked point, ||delta||_2) of image i at eps."""
        job = self.job
        gen = generator(job.seed, "attack", i, repr(float(eps)), device=self.device)
        x = x.to(self.device).unsqueeze(0)
        y = torch.tensor([label], device=self.device)
        adv = attack_smoothed(self.model, x, y, self.noise, eps=eps, attack=job.attack, num_steps=job.num_steps,
                              num_noise=job.num_noise, generator=gen)
        pred, _ = predict_votes(self.smooth, adv[0], job.n, job.alpha, job.batch_size, gen)
        return pred, float((adv - x).double().flatten().norm())

    def into(self, out: Path, indices: List[int], meta: dict) -> Path:
        """Attack ``indices`` into ``out`` (continuing it when it holds the same run), under its lock."""
        job = self.job
        with run_lock(lock_path(out), out):
            remove_stale_temps(out, sidecar_path(out))
            resume = _start_sidecar(out, meta, job.overwrite)
            with AttackWriter(out, resume=resume) as writer:
                todo = [i for i in indices if any((i, e) not in writer.done for e in job.eps)]
                if resume and writer.done:
                    self.log(f"continuing {out}: {len(indices) - len(todo)} of {len(indices)} images done")
                shard = meta.get("shard")
                desc = "attack" + ("" if shard is None else f" (shard {shard[0]}/{shard[1]})")
                beat = Heartbeat(len(indices), desc=desc, unit="images", done=len(indices) - len(todo),
                                 interval=job.heartbeat, enabled=self.progress, log=self.log)
                for i in progress_bar(todo, total=len(todo), desc="attack", enabled=self.progress):
                    x, label = self.data[i]
                    for eps in job.eps:
                        if (i, eps) in writer.done:
                            continue
                        t0 = time.perf_counter()
                        pred, norm = self.row(i, x, int(label), eps)
                        writer.write(i, int(label), eps, pred, norm, time.perf_counter() - t0)
                    beat.update(1, job.n * len(job.eps))
            _sort_rows(out)
            meta["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
            write_sidecar(out, {**meta, "complete": True})
        return out


def _start_sidecar(out: Path, meta: dict, overwrite: bool) -> bool:
    """Write ``out``'s sidecar as incomplete; whether the run continues the one there."""
    resume = out.exists() and not overwrite
    if resume:
        old = read_sidecar(out)
        if old is None:
            raise RsmoothError(f"{out} exists without its metadata {sidecar_path(out)}; pass "
                               f"{setting('overwrite', True)} to replace it or choose another {setting('out')}")
        diff = identity_diff(old, meta, ATTACK_IDENTITY) + (["shard"] if old.get("shard") != meta.get("shard") else [])
        if diff:
            raise RsmoothError(f"{out} holds a run with {diff[0]}={old.get(diff[0])!r}, not {meta.get(diff[0])!r}; "
                               f"pass {setting('overwrite', True)} to replace it or choose another {setting('out')}")
        meta["started"] = old.get("started", meta["started"])
    write_sidecar(out, {**meta, "complete": False})
    return resume


def _sort_rows(out: Path) -> None:
    """Rows by (idx, eps), as an uninterrupted run writes them (a resumed image adds its eps last)."""
    text = out.read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines(keepends=True)[1:] if ln.strip()]
    keyed = [((int(ln.split("\t")[0]), float(ln.split("\t")[2])), ln) for ln in lines]
    if [k for k, _ in keyed] != sorted(k for k, _ in keyed):
        atomic_write_bytes(out, "".join([ATTACK_HEADER + "\n", *(ln for _, ln in sorted(keyed))]).encode("utf-8"))


def summary_line(out: Union[str, Path]) -> str:
    """One line on the attack file ``out``: images and the empirical accuracy at each eps."""
    res = read_attack_tsv(out)
    if res.n == 0:
        return f"attack: no rows in {out}"
    acc = empirical_accuracy(res, res.radii())
    cells = ", ".join(f"{100 * a:.1f}% at {'eps = ' if k == 0 else ''}{e:g}" for k, (e, a) in enumerate(acc.items()))
    return f"attack: {len(set(res.idx.tolist()))} images, empirical accuracy {cells}"


# -- shards -------------------------------------------------------------------------------

def _join(out: Path, shards: List[Tuple[Path, dict]]) -> Tuple[dict, Callable[[], None], str]:
    first = shards[0][1]
    lines = []
    for p, _ in shards:
        read_attack_tsv(p)  # checked
        lines += [ln if ln.endswith("\n") else ln + "\n" for ln in p.read_text(encoding="utf-8").splitlines()[1:]
                  if ln.strip()]
    keyed = sorted(((int(ln.split("\t")[0]), float(ln.split("\t")[2])), ln) for ln in lines)
    expected = first["subset_size"] * len(first["eps"])
    check(len(keyed) == expected and len({k for k, _ in keyed}) == expected,
          f"the shards of {out} hold {len(keyed)} rows, the subset has {expected} (images x eps); rerun the shards "
          f"with --overwrite")
    merged = {k: v for k, v in first.items() if k not in SHARD_FIELDS}
    merged.update(num_examples=first["subset_size"], merged_shards=len(shards),
                  started=min(str(m.get("started", "")) for _, m in shards),
                  finished=datetime.datetime.now().isoformat(timespec="seconds"))

    def write() -> None:
        atomic_write_bytes(out, "".join([ATTACK_HEADER + "\n", *(ln for _, ln in keyed)]).encode("utf-8"))

    return merged, write, f": {len(keyed)} rows"


def _damage(meta: dict) -> str:
    ok = isinstance(meta.get("subset_size"), int) and isinstance(meta.get("eps"), list)
    return "" if ok else "no subset_size or eps"


#: attack shards (``rsmooth attack --shard I/K``, torchrun ranks), merged by ``rsmooth merge``
ATTACK = ShardKind(command="attack", noun="attack shard", identity=ATTACK_IDENTITY, shard_fields=SHARD_FIELDS,
                   companions=(), damage=_damage, join=_join)


def merge_attack(out: Union[str, Path], shards: Optional[Sequence[Union[str, Path]]] = None, *,
                 overwrite: bool = False, keep: bool = False, log: Callable[[str], None] = print) -> Path:
    """Join the K shard files of an attack into ``out`` (rows by idx and eps), as one process writes it."""
    return merge_shards(out, ATTACK, shards, overwrite=overwrite, keep=keep, log=log)


def is_attack_file(path: Union[str, Path]) -> bool:
    """Whether the sidecar of ``path`` says it is an attack file (False when unreadable)."""
    with contextlib.suppress(RsmoothError):
        meta = read_sidecar(path)
        return bool(meta) and meta.get("kind") == ATTACK_KIND
    return False


def merges_attack(out: Union[str, Path], shards: Sequence[Union[str, Path]] = ()) -> bool:
    """Whether the shards that merge into ``out`` (given, or found beside it) are an attack's."""
    from .shards import shard_names

    return any(is_attack_file(p) for p in [*map(Path, shards), *shard_names(Path(out), ATTACK).values(), Path(out)])


def attack_noise(meta: dict) -> Noise:
    """The noise an attack or certify sidecar records (Gaussian at its sigma when it names none)."""
    return noise_from_spec(meta)
