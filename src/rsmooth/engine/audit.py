"""The audit: attack every certificate of a certify file just inside its radius, and check points a
user gives, looking for counterexamples.

A certify row (class c, radius r) says: with probability >= 1 - alpha over CERTIFY's noise,
g(x + d) = c for every ||d||_2 < r (Cohen, Rosenfeld & Kolter 2019, arXiv 1902.02918, Thm. 1).
A point x' with ||x' - x||_2 < r where PREDICT (n, alpha_p) returns a class other than c (not an
abstention) is a *counterexample*.  A sound certificate still gives one with probability at most
alpha + k alpha_p per image (the certificate wrong, or one of the k PREDICT checks at its points
wrong), so over m images the count is dominated by Binomial(m, alpha + k alpha_p); the audit
reports the count, its Clopper-Pearson interval, and the (1 - beta) quantile of that binomial
(:func:`~rsmooth.metrics.intervals.wrong_certificates_bound`): more counterexamples than that say
the certificates are not sound (a pipeline bug, or floating point: Voracek & Hein 2023, Sound
Randomized Smoothing in Floating-Point Arithmetic, arXiv 2207.07209).

Each counterexample is written so it can be replayed: ``counterexamples/idx-I.npy`` (delta = x' - x,
float32), ``idx-I.point.npy`` (x' itself: x + delta in float32 need not give x' back to the bit,
and bits are what the float attack reads) and ``idx-I.json`` (class, radius, norm, PREDICT's answer
and its votes, the seed).  ``counterexamples.json`` lists them all and ``audit.json`` holds the
settings and the summary; ``audit.tsv`` has one row per image (resumable), its sidecar
``audit.tsv.json`` the settings and whether it is complete.  Every image's randomness is drawn
from ``(seed, "audit", image, attack, round)``, so the audit can be split into shards
(``shard=(I, K)``, torchrun ranks) whose merge (:data:`AUDIT`) gives the one-process files.
"""
from __future__ import annotations

import datetime
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..attacks.evaluate import EVAL_ATTACKS, EVAL_NUM_NOISE, EVAL_STEPS, attack_smoothed
from ..errors import RsmoothError, check, setting
from ..fileio import atomic_write_bytes, make_folder_nofollow, open_nofollow, remove_stale_temps, run_lock
from ..metrics import read_certify_tsv, read_sidecar, sidecar_path, write_sidecar
from ..metrics.intervals import clopper_pearson_interval, wrong_certificates_bound
from ..paths import check_output_dir
from ..progress import Heartbeat, emit, progress_bar
from ..seeding import generator, validate_seed
from ..smoothing import Smooth, validate_alpha, validate_count
from ..smoothing.procedures import ABSTAIN
from ..smoothing.noises import Noise
from . import distributed
from .attack import attack_noise, predict_votes
from .shards import (SHARD_FIELDS, ShardKind, continue_as_shards, identity_diff, int_field, lock_path, merge_shards,
                     parse_shard, shard_names, shard_path, shard_share)

PathLike = Union[str, Path]
AUDIT_COLUMNS = ("idx", "label", "class", "radius", "eps", "checks", "counterexample", "predict", "norm", "time")
AUDIT_HEADER = "\t".join(AUDIT_COLUMNS)
#: the attacks' eps is the radius times (1 - this): just inside the certified ball
DEFAULT_SHRINK = 1e-3
#: the rows' file in OUT; a shard's is ``audit.shard-I-of-K.tsv``, each with its sidecar ``NAME.json``
AUDIT_TSV = "audit.tsv"
#: where audits before sidecars kept their settings (read to continue them)
LEGACY_SETTINGS = "audit.settings.json"
#: what the sidecar's ``kind`` says of an audit file
AUDIT_KIND = "rsmooth-audit"
#: sidecar fields that must agree for an audit to continue its file, and for shards to merge
AUDIT_IDENTITY = ("kind", "certify_sha256", "checkpoint_sha256", "noise", "sigma", "noise_params", "n",
                  "alpha_predict", "alpha", "seed", "beta", "attacks", "restarts", "num_steps", "num_noise", "shrink")
#: sidecar fields that are not settings (audit.json has the settings)
_RUN_FIELDS = ("kind", "num_examples", "started", "finished", "complete", "merged_shards", *SHARD_FIELDS)


@dataclass
class PointCheck:
    """PREDICT at one point x' near a certified image: ``inside`` when ||x' - x||_2 < radius."""

    idx: int
    certified: int
    radius: float
    norm: float
    predict: int
    votes: List[int]
    seed: List[Any] = field(default_factory=list)

    @property
    def inside(self) -> bool:
        return self.norm < self.radius

    @property
    def counterexample(self) -> bool:
        return self.inside and self.predict not in (self.certified, ABSTAIN)


def check_point(smooth: Smooth, x: torch.Tensor, point: torch.Tensor, idx: int, certified: int, radius: float, *,
                n: int, alpha: float, batch_size: int, gen: Optional[torch.Generator]) -> PointCheck:
    """PREDICT (n, alpha) at ``point`` [C, H, W] for the image ``x`` certified as ``certified`` at ``radius``.
    The point is first moved to the nearest input the noise certifies (``Noise.nearest_input``: the
    8-bit image for the sound Gaussian, whose certificates speak of 8-bit images only); the norm is
    computed in float64 from the two float32 tensors as they are then."""
    check(point.shape == x.shape, f"a point for image {idx} has shape {tuple(point.shape)}, the image "
                                  f"{tuple(x.shape)}")
    point = smooth.noise.nearest_input(point)
    norm = float((point.double() - x.double()).flatten().norm())
    pred, votes = predict_votes(smooth, point, n, alpha, batch_size, gen)
    return PointCheck(int(idx), int(certified), float(radius), norm, int(pred), [int(v) for v in votes])


@dataclass
class AuditSummary:
    """The count of images with a counterexample among ``images`` audited, and what alpha allows."""

    images: int
    counterexamples: int
    checks_per_image: int
    alpha: float  # the certificates'
    alpha_predict: float  # each check's
    beta: float = 0.05
    interval: Tuple[float, float] = (0.0, 0.0)
    per_image: float = 0.0  # alpha + checks_per_image * alpha_predict
    expected: float = 0.0  # images * per_image
    allowed: int = 0  # the (1 - beta) quantile of Binomial(images, per_image)

    def __post_init__(self) -> None:
        self.per_image = min(1.0, self.alpha + self.checks_per_image * self.alpha_predict)
        self.expected = self.images * self.per_image
        if self.images:
            self.interval = clopper_pearson_interval(self.counterexamples, self.images, self.beta)
            self.allowed = wrong_certificates_bound(self.images, self.per_image, self.beta) \
                if self.per_image < 1 else self.images

    @property
    def consistent(self) -> bool:
        return self.counterexamples <= self.allowed

    def line(self) -> str:
        lo, hi = self.interval
        verdict = ("consistent with alpha" if self.consistent
                   else "MORE than alpha allows: the certificates are not sound")
        return (f"audit: {self.counterexamples} counterexamples in {self.images} certified images "
                f"({100 * lo:.2f}%-{100 * hi:.2f}%, {100 * (1 - self.beta):g}% Clopper-Pearson); alpha allows "
                f"{self.expected:.3g} expected, at most {self.allowed} at {100 * (1 - self.beta):g}% "
                f"(alpha {self.alpha:g} + {self.checks_per_image} checks x {self.alpha_predict:g} per image): "
                f"{verdict}")


def write_counterexample(folder: Path, c: PointCheck, x: torch.Tensor, point: torch.Tensor, name: str) -> dict:
    """``folder/NAME.npy`` (delta), ``NAME.point.npy`` (x'), ``NAME.json``; returns the record."""
    import io

    make_folder_nofollow(folder)
    for suffix, arr in ((".npy", (point - x).cpu().numpy()), (".point.npy", point.cpu().numpy())):
        buf = io.BytesIO()
        np.save(buf, arr)
        atomic_write_bytes(folder / f"{name}{suffix}", buf.getvalue())
    record = {**asdict(c), "delta": f"{name}.npy", "point": f"{name}.point.npy"}
    atomic_write_bytes(folder / f"{name}.json", (json.dumps(record, indent=2) + "\n").encode("utf-8"))
    return record


# -- the audit of a certify file ---------------------------------------------------------

@dataclass(frozen=True)
class AuditJob:
    """The settings of :func:`run_audit` (which says what each does), checked when made."""

    checkpoint: str
    certify: str
    out: str
    attacks: Sequence[str] = EVAL_ATTACKS
    restarts: int = 1
    num_steps: int = EVAL_STEPS
    num_noise: int = EVAL_NUM_NOISE
    shrink: float = DEFAULT_SHRINK
    n: Optional[int] = None
    alpha: Optional[float] = None
    points: Optional[str] = None
    indices: Optional[Union[Sequence[int], str]] = None  # or a .npy of them
    beta: float = 0.05
    batch_size: int = 1000
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
        attacks = [self.attacks] if isinstance(self.attacks, str) else list(self.attacks)
        for a in attacks:
            check(a in EVAL_ATTACKS, f"--attack must be one of {', '.join(EVAL_ATTACKS)}, got {a!r}")
        check(0 < self.shrink < 1, f"--shrink must be in (0, 1) (the attacks' eps is radius x (1 - shrink)), "
                                   f"got {self.shrink!r}")
        check((self.points is None) == (self.indices is None),
              "--points and --indices go together: the perturbed inputs and the test index of each")
        check(self.points is None or self.shard is None,
              "--points are checked in one process: drop --shard (it splits the attacks of the certified images)")
        values = {"indices": _indices(self.indices), "attacks": tuple(dict.fromkeys(attacks)),
                  "restarts": validate_count("restarts", self.restarts, minimum=0),
                  "num_steps": validate_count("num_steps", self.num_steps),
                  "num_noise": validate_count("num_noise", self.num_noise),
                  "n": None if self.n is None else validate_count("n", self.n),
                  "alpha": None if self.alpha is None else validate_alpha(self.alpha),
                  "batch_size": validate_count("batch_size", self.batch_size),
                  "max": None if self.max is None else validate_count("max", self.max),
                  "shard": None if self.shard is None else parse_shard(self.shard),
                  "seed": validate_seed(self.seed)}
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def run(self) -> AuditSummary:
        return _run(self)


def run_audit(checkpoint: str, certify: str, out: str, *, attacks: Sequence[str] = EVAL_ATTACKS,
              restarts: int = 1, num_steps: int = EVAL_STEPS, num_noise: int = EVAL_NUM_NOISE,
              shrink: float = DEFAULT_SHRINK, n: Optional[int] = None, alpha: Optional[float] = None,
              points: Optional[str] = None, indices: Optional[Union[Sequence[int], str]] = None,
              beta: float = 0.05,
              batch_size: int = 1000, max: Optional[int] = None, shard: Optional[Union[str, Sequence[int]]] = None,
              seed: int = 0, data_dir: Optional[str] = None, device: Optional[str] = None,
              overwrite: bool = False, trust_pickle: bool = False, trust_code: bool = False,
              model_options: Optional[Dict[str, Any]] = None, progress: bool = True,
              log: Callable[[str], None] = print, heartbeat: Optional[float] = None) -> AuditSummary:
    """Audit the certificates of the certify TSV ``certify`` (made from ``checkpoint``) into the folder ``out``.

    For each row certified (class c >= 0, radius r > 0; at most ``max`` of them), ``restarts``
    rounds of each of ``attacks`` (SmoothAdv's evaluation PGD/DDN, ``num_steps``, ``num_noise``)
    attack c at eps = r (1 - ``shrink``), and PREDICT (``n``, ``alpha``: default the certify file's)
    checks each point; the first counterexample of an image ends its search.  With ``points`` (a
    .npy [N, C, H, W]) and ``indices`` (N test indices, or a .npy of them), those points are checked instead.  The
    noise is the certify file's (its sidecar's ``noise`` and ``sigma``).  Returns the
    :class:`AuditSummary` (also in ``out/audit.json``); see the module docstring for the files.

    ``shard=(I, K)`` (or ``"I/K"``) audits positions I, I+K, ... of the certified images into
    ``out/audit.shard-I-of-K.tsv`` (its counterexamples into ``out/counterexamples/``);
    :func:`merge_audit` (``rsmooth merge OUT``) joins the K shards into the files one process
    writes, and returns this shard's summary.  Under ``torchrun`` each rank audits shard
    RANK/WORLD_SIZE and rank 0 merges (and returns the whole summary).

    An ``out`` holding an audit of the same settings is continued; one of other settings (its rows
    and counterexamples) is an error unless ``overwrite``.

    Example:
        ```python
        from rsmooth.engine.audit import run_audit

        print(run_audit("runs/fm025", "runs/fm025/certify.tsv", "audit", restarts=2).line())
        ```
    """
    return AuditJob(**locals()).run()


def _certified(cert_path: str) -> Tuple[dict, Dict[int, Tuple[int, int, float]]]:
    """(the certify sidecar, idx -> (label, class, radius) of every row)."""
    check(Path(cert_path).is_file(), f"--certify {cert_path} not found; give the --out of 'rsmooth certify'")
    meta = read_sidecar(cert_path)
    check(meta is not None, f"{cert_path} has no sidecar {cert_path}.json; the audit needs the run's noise, "
                            f"dataset and checkpoint: give a file written by 'rsmooth certify'")
    check(meta.get("mode", "certify") != "predict", f"{cert_path} is a predict file: it certifies nothing to audit")
    res = read_certify_tsv(cert_path)
    rows = {int(i): (int(lab), int(p), float(r)) for i, lab, p, r in zip(res.idx, res.label, res.predict, res.radius)}
    return meta, rows


def _indices(indices: Any) -> Optional[List[int]]:
    """The points' test indices: integers, or a .npy file of them."""
    if indices is None:
        return None
    if isinstance(indices, (str, Path)):
        try:
            indices = np.load(indices, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RsmoothError(f"--indices {indices}: not a .npy array of test indices ({e})") from None
        check(indices.ndim == 1 and indices.dtype.kind in "iu", f"--indices: the .npy must hold one integer per "
                                                               f"point, got {indices.dtype} {indices.shape}")
    out = [int(i) for i in indices]
    check(all(i >= 0 for i in out), "--indices are test indices, >= 0")
    return out


def _run(job: AuditJob) -> AuditSummary:
    world, shard = distributed.rank_shard(job.shard, "audits")
    check(job.points is None or shard is None, "--points are checked in one process: drop --shard (or torchrun)")
    ctx, settings = _setup(job, world)
    if not job.overwrite:
        _refuse_other(ctx.out, settings)
    targets = [i for i, (_, c, r) in sorted(ctx.rows.items()) if c >= 0 and r > 0][:job.max]
    meta = {"kind": AUDIT_KIND, **settings, "num_examples": len(targets),
            "started": datetime.datetime.now().isoformat(timespec="seconds")}
    if job.points is not None:
        with run_lock(lock_path(ctx.out / AUDIT_TSV), ctx.out / AUDIT_TSV):
            found, images = ctx.points()
        _write_results(ctx.out, settings, found, _summary(settings, images, len(found)))
    elif shard is None:  # audit.json is written before audit.tsv's sidecar says complete
        images = len(targets)
        found = ctx.into(ctx.out / AUDIT_TSV, targets, meta, then=lambda found: _write_results(
            ctx.out, settings, found, _summary(settings, images, len(found))))
    else:
        return _sharded(ctx, world, shard, targets, meta)
    summary = _summary(settings, images, len(found))
    emit(summary.line(), ctx.log)
    return summary


def _setup(job: AuditJob, world: distributed.World) -> Tuple["_Audit", dict]:
    """The audit's model, noise and data on this rank's device, and the settings its files record."""
    from ..data import get_dataset
    from .checkpoint import file_sha256, load_model, resolve_device

    check_output_dir(job.out)
    meta, rows = _certified(job.certify)
    dev = distributed.rank_device(resolve_device(job.device), world)
    loaded = load_model(job.checkpoint, dataset=meta.get("dataset"), trust_pickle=job.trust_pickle,
                        trust_code=job.trust_code, **(job.model_options or {}))
    sha = meta.get("checkpoint_sha256")
    check(sha is None or sha == file_sha256(loaded.path),
          f"--checkpoint {job.checkpoint} is not the model {job.certify} certified ({meta.get('checkpoint')}); "
          f"audit the certificates with the model they were made with")
    noise = attack_noise(meta)
    model = loaded.model.to(dev).eval()
    smooth = Smooth(model, loaded.num_classes, noise)
    data = get_dataset(loaded.dataset, meta.get("split", "test"), data_dir=job.data_dir,
                       corruption=(meta.get("corruption") or {}).get("name"),
                       severity=(meta.get("corruption") or {}).get("severity"))
    n = job.n if job.n is not None else int(meta.get("n") or 100_000)
    alpha_p = job.alpha if job.alpha is not None else float(meta.get("alpha") or 0.001)
    out = Path(job.out)
    make_folder_nofollow(out)
    settings = {"certify": str(job.certify), "certify_sha256": file_sha256(Path(job.certify)),
                "checkpoint_sha256": file_sha256(loaded.path), **noise.spec(), "n": n, "alpha_predict": alpha_p,
                "alpha": float(meta.get("alpha") or 0.001), "seed": job.seed, "beta": job.beta}
    if job.points is not None:
        settings.update(points=str(job.points), indices=[int(i) for i in job.indices])
    else:
        settings.update(attacks=list(job.attacks), restarts=job.restarts, num_steps=job.num_steps,
                        num_noise=job.num_noise, shrink=job.shrink)
    log, show = (job.log, job.progress) if world.main else (distributed.quiet, False)
    return _Audit(job, smooth, model, noise, data, dev, out, n, alpha_p, rows, log, show), settings


def _sharded(ctx: "_Audit", world: distributed.World, shard: Tuple[int, int], targets: List[int],
             meta: dict) -> AuditSummary:
    """Shard ``shard`` of the certified images into OUT/audit.shard-I-of-K.tsv; under torchrun
    every rank one, then rank 0 merges them."""
    tsv, settings = ctx.out / AUDIT_TSV, {k: v for k, v in meta.items() if k not in _RUN_FIELDS}
    if world.size == 1 or world.main:  # a shard job starts its own shard; under torchrun rank 0 starts them all
        begun = [shard] if world.size == 1 else [(k, world.size) for k in range(world.size)]
        continue_as_shards(tsv, meta, targets, begun, identity=AUDIT_IDENTITY, header=AUDIT_HEADER,
                           units=lambda p: [int(ln.split("\t")[0]) for ln in _complete_lines(p)],
                           begin=lambda path, old, mine: {}, log=ctx.log)
    mine = shard_share(targets, shard)
    smeta = {**meta, "shard": list(shard), "subset_size": len(targets), "num_examples": len(mine)}
    if world.size == 1:
        found = ctx.into(shard_path(tsv, shard), mine, smeta)
        summary = _summary(settings, len(mine), len(found))
        emit(f"shard {shard[0]}/{shard[1]}: {summary.line()}", ctx.log)
        return summary
    with distributed.process_group(ctx.device, timeout=datetime.timedelta(days=7)):
        distributed.barrier(world, "rank 0's start of the shards")
        found = ctx.into(shard_path(tsv, shard), mine, smeta)
        summary = _summary(settings, len(mine), len(found))
        distributed.barrier(world, "the other ranks' audit shards")
        if world.main:
            merge_audit(ctx.out, overwrite=ctx.job.overwrite, log=ctx.log)
            summary = read_summary(ctx.out)
            emit(summary.line(), ctx.log)
        distributed.barrier(world, "rank 0's merge")
    return summary


def _summary(settings: dict, images: int, found: int) -> AuditSummary:
    """The summary of ``found`` counterexamples in ``images`` audited with ``settings``."""
    checks = 1 if "points" in settings else settings["restarts"] * len(settings["attacks"])
    return AuditSummary(images, found, checks, settings["alpha"], settings["alpha_predict"], settings["beta"])


def _write_results(out: Path, settings: dict, found: List[dict], summary: AuditSummary) -> None:
    """Write OUT/counterexamples.json and OUT/audit.json (settings and summary)."""
    atomic_write_bytes(out / "counterexamples.json", (json.dumps(found, indent=2) + "\n").encode("utf-8"))
    record = {**settings, "summary": {**asdict(summary), "consistent": summary.consistent, "line": summary.line()},
              "finished": datetime.datetime.now().isoformat(timespec="seconds")}
    atomic_write_bytes(out / "audit.json", (json.dumps(record, indent=2) + "\n").encode("utf-8"))


def read_summary(out: PathLike) -> AuditSummary:
    """The :class:`AuditSummary` that ``out/audit.json`` records."""
    record = _read_json(Path(out) / "audit.json")
    check(isinstance(record, dict) and isinstance(record.get("summary"), dict),
          f"{Path(out) / 'audit.json'} is missing or damaged; rerun the audit (or 'rsmooth merge {out}')")
    s = record["summary"]
    return AuditSummary(s["images"], s["counterexamples"], s["checks_per_image"], s["alpha"], s["alpha_predict"],
                        s["beta"])


@dataclass
class _Audit:
    job: AuditJob
    smooth: Smooth
    model: torch.nn.Module
    noise: Noise
    data: Any
    device: torch.device
    out: Path
    n: int
    alpha: float
    rows: Dict[int, Tuple[int, int, float]]
    log: Callable[[str], None] = print
    progress: bool = True

    def check(self, x, point, idx, c, r, gen, seed) -> PointCheck:
        pc = check_point(self.smooth, x, point, idx, c, r, n=self.n, alpha=self.alpha,
                         batch_size=self.job.batch_size, gen=gen)
        pc.seed = seed
        return pc

    def into(self, tsv: Path, images: List[int], meta: dict,
             then: Callable[[List[dict]], None] = lambda found: None) -> List[dict]:
        """Attack ``images`` into ``tsv`` (continuing it when it holds the same settings), under its
        lock; the counterexamples among them, given to ``then`` before ``tsv`` is marked complete."""
        with run_lock(lock_path(tsv), tsv):
            remove_stale_temps(tsv, sidecar_path(tsv))
            done = self.start(tsv, images, meta)
            todo = [i for i in images if i not in done]
            shard = meta.get("shard")
            desc = "audit" + ("" if shard is None else f" (shard {shard[0]}/{shard[1]})")
            beat = Heartbeat(len(images), desc=desc, unit="images", done=len(images) - len(todo),
                             interval=self.job.heartbeat, enabled=self.progress, log=self.log)
            with open_nofollow(tsv, "a", encoding="utf-8", newline="\n") as f:
                for i in progress_bar(todo, total=len(todo), desc=desc, enabled=self.progress):
                    f.write(self.image(i))
                    f.flush()
                    beat.update(1, self.job.restarts * len(self.job.attacks) * self.n)
            chosen = set(images)
            found = _found(self.out, [ln for ln in _complete_lines(tsv) if int(ln.split("\t")[0]) in chosen])
            then(found)
            write_sidecar(tsv, {**meta, "finished": datetime.datetime.now().isoformat(timespec="seconds"),
                                "complete": True})
            return found

    def start(self, tsv: Path, images: List[int], meta: dict) -> set:
        """Mark ``tsv`` incomplete; the images its rows hold when it continues a run of ``meta``'s
        settings, else none (its rows and their counterexample files are dropped)."""
        old = _read_json(sidecar_path(tsv)) if sidecar_path(tsv).is_file() else _legacy_settings(tsv)
        keys = (*AUDIT_IDENTITY, *(SHARD_FIELDS if "shard" in meta else ()))
        fresh = not (tsv.is_file() and isinstance(old, dict)) or bool(identity_diff(old, meta, keys))
        if fresh and tsv.is_file() and not self.job.overwrite:
            raise _occupied(tsv, old, meta, keys)
        lines = [] if fresh else _complete_lines(tsv)
        if fresh:
            drop = ["idx-*"] if "shard" not in meta else [f"idx-{i}.*" for i in images]
            folder = make_folder_nofollow(self.out / "counterexamples")  # a planted link: one line, nothing deleted
            for p in [p for pattern in drop for p in folder.glob(pattern)]:
                p.unlink()
        else:
            meta["started"] = old.get("started", meta["started"])
        write_sidecar(tsv, {**meta, "complete": False})
        if tsv.name == AUDIT_TSV:
            (tsv.parent / LEGACY_SETTINGS).unlink(missing_ok=True)  # its sidecar now holds the settings
        atomic_write_bytes(tsv, "".join([AUDIT_HEADER + "\n", *lines]).encode("utf-8"))
        return {int(ln.split("\t")[0]) for ln in lines}

    def image(self, i: int) -> str:
        """Attack image ``i`` (writing a counterexample it finds); its audit.tsv row."""
        job, t0 = self.job, time.perf_counter()
        label, c, r = self.rows[i]
        x = self.data[i][0].to(self.device)
        eps, last, k = r * (1 - job.shrink), None, 0
        for rnd in range(job.restarts):
            for name in job.attacks:
                k += 1
                seed = [job.seed, "audit", i, name, rnd]
                gen = generator(*seed, device=self.device)
                adv = attack_smoothed(self.model, x.unsqueeze(0), torch.tensor([c], device=self.device),
                                      self.noise, eps=eps, attack=name, num_steps=job.num_steps,
                                      num_noise=job.num_noise, generator=gen)[0]
                last = self.check(x, adv, i, c, r, gen, seed)
                if last.counterexample:
                    write_counterexample(self.out / "counterexamples", last, x, adv, f"idx-{i}")
                    break
            if last is not None and last.counterexample:
                break
        return (f"{i}\t{label}\t{c}\t{r!r}\t{eps!r}\t{k}\t{int(bool(last and last.counterexample))}\t"
                f"{last.predict if last else ''}\t{last.norm if last else ''}\t{time.perf_counter() - t0:.3f}\n")

    def points(self) -> Tuple[List[dict], int]:
        """Check the user's points (one PREDICT each)."""
        job = self.job
        try:
            pts = np.load(job.points, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RsmoothError(f"--points {job.points}: not a .npy array ({e})") from None
        idx = [int(i) for i in job.indices]
        check(pts.ndim >= 2 and pts.shape[0] == len(idx),
              f"--points {job.points} holds {pts.shape[0] if pts.ndim else 0} points, --indices names {len(idx)}; "
              f"give one test index per point")
        found, audited = [], set()
        for k, i in enumerate(idx):
            check(i in self.rows, f"--indices: image {i} is not in {job.certify}")
            label, c, r = self.rows[i]
            if c < 0 or r <= 0:
                self.log(f"point {k}: image {i} is not certified (abstained), nothing to break")
                continue
            audited.add(i)
            x = self.data[i][0].to(self.device)
            point = torch.as_tensor(pts[k]).to(self.device, x.dtype)
            seed = [job.seed, "audit-point", i, k]
            pc = self.check(x, point, i, c, r, generator(*seed, device=self.device), seed)
            if not pc.inside:
                self.log(f"point {k}: ||x' - x|| = {pc.norm:.6g} is not below image {i}'s radius {r:.6g}")
            if pc.counterexample:
                found.append(write_counterexample(self.out / "counterexamples", pc, x, point, f"idx-{i}-p{k}"))
        return found, len(audited)


def _complete_lines(p: Path) -> List[str]:
    text = p.read_text(encoding="utf-8")
    text = text[:text.rfind("\n") + 1]
    return [ln + "\n" for ln in text.splitlines()[1:] if ln.strip()]


def _read_json(p: Path) -> Optional[Any]:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


#: the settings in which an audit must agree with the one its OUT holds to continue it
_SETTINGS_IDENTITY = (*(k for k in AUDIT_IDENTITY if k != "kind"), "points", "indices")


def _refuse_other(out: Path, settings: dict) -> None:
    """Refuse an ``out`` holding an audit of other settings: replacing it would delete its rows and
    counterexamples (``overwrite`` does)."""
    for p in (out / "audit.json", sidecar_path(out / AUDIT_TSV), out / LEGACY_SETTINGS):
        old = _read_json(p) if p.is_file() else settings
        if not isinstance(old, dict) or identity_diff(old, settings, _SETTINGS_IDENTITY):
            raise _occupied(p, old, settings, _SETTINGS_IDENTITY)


def _occupied(p: Path, old: Any, new: dict, keys: Sequence[str]) -> RsmoothError:
    """The error for an audit file ``p`` of other settings (``old``) than ``new``, or damaged."""
    diff = identity_diff(old, new, keys) if isinstance(old, dict) else None
    what = (f"holds an audit with {diff[0]}={old.get(diff[0])!r}, not {new.get(diff[0])!r}" if diff
            else "holds an audit whose metadata is missing or damaged")
    return RsmoothError(f"{p} {what}; pass {setting('overwrite', True)} to replace it (its rows and counterexamples "
                        f"are deleted) or choose another {setting('out')}")


def _legacy_settings(tsv: Path) -> Optional[dict]:
    """The settings an audit written before audit.tsv had a sidecar kept in audit.settings.json."""
    old = _read_json(tsv.parent / LEGACY_SETTINGS) if tsv.name == AUDIT_TSV else None
    return {**old, "kind": AUDIT_KIND} if isinstance(old, dict) else None


def _found(out: Path, lines: Sequence[str]) -> List[dict]:
    """The records (OUT/counterexamples/idx-I.json, by file name) of the audit rows ``lines`` that
    found a counterexample."""
    names = sorted(f"idx-{f[0]}.json" for f in (ln.split("\t") for ln in lines) if f[6] == "1")
    records = [_read_json(out / "counterexamples" / name) for name in names]
    for name, record in zip(names, records):
        check(isinstance(record, dict), f"{out / 'counterexamples' / name} is missing or damaged, though audit.tsv "
                                        f"records a counterexample there; delete that image's row and rerun the audit")
    return records


# -- shards ---------------------------------------------------------------------------------

def _shard_rows(p: Path) -> List[Tuple[int, str]]:
    """(idx, line) of the rows of the complete audit shard ``p``, checked to be whole rows."""
    text = p.read_text(encoding="utf-8")
    check(text.split("\n", 1)[0] == AUDIT_HEADER, f"{p} is not an audit TSV (its header is not {AUDIT_HEADER!r}); "
                                                  f"rerun its audit command")
    lines = [ln if ln.endswith("\n") else ln + "\n" for ln in text.splitlines(keepends=True)[1:] if ln.strip()]
    bad = next((ln for ln in lines if len(ln.split("\t")) != len(AUDIT_COLUMNS) or not ln.split("\t")[0].isdigit()),
               None)
    check(bad is None, f"{p} has a damaged row ({(bad or '').strip()[:40]!r}); rerun its audit command")
    return [(int(ln.split("\t")[0]), ln) for ln in lines]


def _join(out: Path, shards: List[Tuple[Path, dict]]) -> Tuple[dict, Callable[[], None], str]:
    """OUT/audit.tsv (rows by idx), counterexamples.json and audit.json from the audit shards."""
    first, k = shards[0][1], len(shards)
    held = [_shard_rows(p) for p, _ in shards]
    rows = sorted(row for part in held for row in part)
    idx = [i for i, _ in rows]
    check(len(set(idx)) == len(idx) == first["subset_size"],
          f"the shards of {out} hold {len(idx)} rows of {len(set(idx))} images, the audit has {first['subset_size']} "
          f"certified images; rerun the shards' audit commands")
    for (p, meta), mine in zip(shards, held):
        check(sorted(i for i, _ in mine) == idx[meta["shard"][0]::k],
              f"audit shard {meta['shard'][0]}/{k} ({p}) does not hold exactly its share of the certified images; "
              f"rerun it")
    settings = {key: v for key, v in first.items() if key not in _RUN_FIELDS}
    found = _found(out.parent, [ln for _, ln in rows])
    summary = _summary(settings, len(rows), len(found))
    merged = {key: v for key, v in first.items() if key not in SHARD_FIELDS}
    merged.update(num_examples=len(rows), merged_shards=k, started=min(str(m.get("started", "")) for _, m in shards),
                  finished=datetime.datetime.now().isoformat(timespec="seconds"))

    def write() -> None:
        folder = make_folder_nofollow(out.parent / "counterexamples")  # a planted link: one line, before any write
        atomic_write_bytes(out, "".join([AUDIT_HEADER + "\n", *(ln for _, ln in rows)]).encode("utf-8"))
        kept = {name for r in found for name in (f"{Path(r['delta']).stem}.json", r["delta"], r["point"])}
        for p in folder.glob("idx-*"):
            if p.name not in kept:  # another run's (the one-process audit starts by deleting them all)
                p.unlink()
        _write_results(out.parent, settings, found, summary)
        (out.parent / LEGACY_SETTINGS).unlink(missing_ok=True)

    return merged, write, f": {len(rows)} images, {len(found)} counterexamples"


def _damage(meta: dict) -> str:
    """What is wrong with an audit shard's own fields ("" when nothing)."""
    wrong = int_field(meta, "subset_size", 0) or int_field(meta, "num_examples", 0)
    if wrong:
        return wrong
    (i, k), size = meta["shard"], meta["subset_size"]
    share = len(range(i, size, k))
    return "" if meta["num_examples"] == share else (f"num_examples is {meta['num_examples']}, but shard {i}/{k} of "
                                                    f"{size} images has {share}")


def _progress(p: Path, meta: dict) -> str:
    rows = len(_complete_lines(p)) if p.is_file() else 0
    return f" ({rows} of {meta.get('num_examples')} images)"


#: audit shards (``rsmooth audit --shard I/K``, torchrun ranks), merged by ``rsmooth merge OUT``
AUDIT = ShardKind(command="audit", noun="audit shard", identity=AUDIT_IDENTITY, shard_fields=SHARD_FIELDS,
                  companions=(), damage=_damage, join=_join, progress=_progress, out_is_folder=True)


def merge_audit(out: PathLike, shards: Optional[Sequence[PathLike]] = None, *, overwrite: bool = False,
                keep: bool = False, log: Callable[[str], None] = print) -> Path:
    """Join the audit shards in the folder ``out`` (``audit.shard-I-of-K.tsv``; or the ``shards``
    given, which must lie there) into the files one process writes: ``audit.tsv`` (rows by idx),
    ``counterexamples.json`` and ``audit.json`` (the summary computed as one process does);
    :func:`~rsmooth.engine.shards.merge_shards` otherwise.  Returns ``out/audit.tsv``."""
    out = Path(out)
    tsv = out if out.suffix == ".tsv" else out / AUDIT_TSV
    for p in map(Path, shards or ()):
        check(p.parent.resolve() == tsv.parent.resolve(), f"audit shard {p} is not in {tsv.parent}: audit shards "
                                                           f"merge in their folder, beside their counterexamples")
    return merge_shards(tsv, AUDIT, shards, overwrite=overwrite, keep=keep, log=log)


def merges_audit(out: PathLike, shards: Sequence[PathLike] = ()) -> bool:
    """Whether ``rsmooth merge`` of ``out`` (a folder or its audit.tsv) and ``shards`` is an audit's."""
    out = Path(out)
    tsv = out / AUDIT_TSV if out.is_dir() else out
    if out.is_dir() and (tsv.exists() or shard_names(tsv, AUDIT)):
        return True  # an audit folder, whatever state its sidecars are in
    for p in [*map(Path, shards), *shard_names(tsv, AUDIT).values(), tsv]:
        meta = _read_json(sidecar_path(p))
        if isinstance(meta, dict) and meta.get("kind") == AUDIT_KIND:
            return True
    return False


def audit_points(smooth: Smooth, images: Sequence[torch.Tensor], points: Sequence[torch.Tensor],
                 classes: Sequence[int], radii: Sequence[float], *, n: int, alpha: float, alpha_certify: float,
                 batch_size: int = 1000, seed: int = 0, beta: float = 0.05,
                 out: Optional[PathLike] = None) -> Tuple[AuditSummary, List[PointCheck]]:
    """The audit's check of points on images in memory: image k (certified ``classes[k]`` at
    ``radii[k]``) against ``points[k]``; PREDICT (n, alpha) at each, drawn from ``(seed,
    "audit-point", k)``.  Counterexamples are written to ``out`` when given.  Returns the summary
    and each point's check."""
    checks = []
    for k, (x, p, c, r) in enumerate(zip(images, points, classes, radii)):
        pc = check_point(smooth, x, p, k, c, r, n=n, alpha=alpha, batch_size=batch_size,
                         gen=generator(seed, "audit-point", k, device=smooth.device))
        pc.seed = [seed, "audit-point", k]
        if pc.counterexample and out is not None:
            write_counterexample(Path(out), pc, x, p, f"idx-{k}")
        checks.append(pc)
    certified = [pc for pc in checks if pc.certified >= 0 and pc.radius > 0]
    summary = AuditSummary(len(certified), sum(pc.counterexample for pc in certified), 1, alpha_certify, alpha, beta)
    return summary, checks
