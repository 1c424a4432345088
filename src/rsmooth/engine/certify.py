"""The certification driver: CERTIFY, PREDICT or sequential certification over a test subset.

A certification is a :class:`CertifyJob`, every setting checked once; :func:`run_certification`
takes them as keywords.  ``job.run()`` resolves it (:func:`resolve`: this process's place and
shard, device, model, sigma, data, examples, the identity metadata) and runs it on one of three
paths: one process, one shard, or the ranks of a ``torchrun`` job and rank 0's merge.  Every path
writes its rows with :func:`_certify_into`, and each example's work, in every mode, is done by
:meth:`Resolved.certify` (the job's procedure, many examples per forward pass).

Each example's noise comes from a generator seeded by ``(seed, mode, idx)``, so results do not
depend on the order, on interruptions or on how the work is split: a killed run resumes
where it stopped (rows already in the TSV are skipped) and gives the same file, and shards
(``shard=(I, K)``, or the ranks of a ``torchrun`` job) merge into that same file.
Run metadata (sigma, n0, n, alpha, subset, precision, seed, checkpoint hash, versions) goes
to the sidecar JSON so the TSV stays readable by every public codebase.  The sequential modes
write what each example used (samples, bounds, decisions) to a second file, ``OUT.seq``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union


from ..errors import RsmoothError, check, setting, spelled
from ..fileio import remove_stale_temps, run_lock
from ..metrics import (CertifyWriter, acr, certified_accuracy, read_certify_tsv, read_sidecar, sidecar_path,
                       write_sidecar)
from ..metrics.certify_io import TSV_HEADER
from ..paths import check_output_file
from ..smoothing import Smooth, clopper_pearson_lower, validate_alpha, validate_count, validate_precision, validate_sigma
from ..smoothing.noises import DEFAULT_NOISE, NOISES, Noise, make_noise, noise_from_spec
from ..smoothing.packing import NOISE_BLOCK
from ..smoothing.procedures import Adaptive, Certify, Predict, Procedure, Sequential, Skipped
from ..smoothing.tuning import Tuning, fastest, sample_rate
from ..smoothing.sequential import (ALPHA_SHARE, CONFIDENCE_SEQUENCE, FUTILITY, LEGACY_SHARE,
                                    SequentialCertificate, largest_radius, validate_futility, validate_radii, validate_radius_tol,
                                    validate_sequential_alpha, validate_share)
from . import distributed
from .checkpoint import (LoadedModel, file_sha256, git_commit, load_model, resolve_checkpoint_path,
                         resolve_device, versions)
from .diffusion import check_compilable, log_diffusion, with_diffusion
from ..seeding import generator, validate_seed
from .seqfile import SEQUENTIAL_MODES, SeqWriter, adopt_legacy, seq_rows, sequential_path, write_seq_rows
from .sessions import past_sessions, session
from .shards import (CERTIFY, RUN_IDENTITY, clean_merged, continue_as_shards, identity_diff, lock_path, merge_certify,
                     parse_shard, shard_path, shard_share, sort_rows)
from ..progress import Heartbeat, emit, format_duration, heartbeat_interval, progress_bar

if TYPE_CHECKING:
    import torch

    from ..data import Dataset

#: how long a rank that finished its shard waits for the others, at least
_MIN_WAIT = datetime.timedelta(minutes=30)
#: the modes of a certification (the last two sequential: they draw samples until they can stop)
MODES = ("certify", "predict", *SEQUENTIAL_MODES)
Shard = Tuple[int, int]


@dataclass(frozen=True)
class CertifyJob:
    """Every setting of one certification: the keywords of :func:`run_certification` (which says
    what each does), checked and normalised once, when the job is made; ``dataclasses.replace(job,
    out=..., corruption=...)`` makes another checked job.  :meth:`run` resolves and runs it."""

    checkpoint: str  # a checkpoint file or a run folder
    out: str  # the TSV; OUT.json beside it, and OUT.seq in the sequential modes
    mode: str = "certify"  # one of MODES
    dataset: Optional[str] = None  # default: the checkpoint's
    split: str = "test"
    sigma: Optional[float] = None  # default: the checkpoint's
    noise: Optional[str] = None  # a name of NOISES; default: the checkpoint's training noise (gaussian)
    n0: int = 100  # selection samples (predict draws none)
    n: Optional[int] = 100_000  # estimation samples of certify and predict; None in the sequential modes
    alpha: float = 0.001
    radii: Optional[Sequence[float]] = None  # sequential: the radii decided (sorted, each once)
    n_max: int = 100_000  # sequential modes: the cap on estimation samples
    radius_tol: Optional[float] = 0.05  # adaptive: the radius tolerance; None in the other modes
    futility: float = FUTILITY  # sequential modes: the upper bound's level that gives up radii
    batch_size: Optional[Union[int, str]] = None  # noisy inputs per forward pass; None or "auto": measured
    start: int = 0  # the subset: split examples start, start + skip, ..., at most max of them
    skip: int = 1
    max: Optional[int] = None
    shard: Optional[Union[str, Sequence[int]]] = None  # "I/K" or (I, K): every K-th subset example from I
    seed: int = 0  # example i's noise is drawn from (seed, mode, i)
    precision: str = "fp32"  # the fast modes of Smooth
    channels_last: Optional[bool] = None  # None: measured (kept when faster and its votes equal NCHW's)
    compile: bool = False
    data_dir: Optional[str] = None
    device: Optional[str] = None  # default: CUDA when there is one (resolve_device)
    overwrite: bool = False
    trust_pickle: bool = False  # how load_model may read the checkpoint and build its model
    trust_code: bool = False
    model_options: Optional[Dict[str, Any]] = None  # arch, arch_kwargs, mean, std, num_classes
    corruption: Optional[str] = None  # one corrupted test set (get_dataset)
    severity: Optional[int] = None
    corruption_seed: int = 0
    corruption_suite: Optional[str] = None
    progress: bool = True  # a progress bar where one can be drawn
    log: Callable[[str], None] = print
    heartbeat: Optional[float] = None  # seconds between progress lines where no bar is drawn
    diffusion: Optional[str] = None  # a diffusion denoiser in front of the model (engine/diffusion.py)
    diffusion_steps: int = 1  # its reverse steps from t* (1: one-shot)
    diffusion_other_dataset: bool = False  # use a DDPM file that records another dataset
    diffusion_rounding: str = "up"  # t*: the first step at or above 2 sigma (the authors') or "nearest"
    diffusion_noise: str = "step"  # D's input at the step's own level (the authors') or at "sigma"
    classifier_input: Optional[str] = None  # resize/normalise before the classifier (models/adapter.py)
    skip_wrong: bool = False  # stop an example after its n0 samples when c_A is not its label (certify modes)
    two_sided: bool = False  # bound the runner-up's p_B too (p_A and p_B at alpha/2 each)
    alpha_share: Optional[float] = None  # sequential: alpha's share on the anytime bounds; None: the file's, else
    # ALPHA_SHARE

    def __post_init__(self) -> None:
        for key, value in {**self._checked_sampling(), **self._checked_run()}.items():
            object.__setattr__(self, key, value)

    def _checked_sampling(self) -> Dict[str, Any]:
        """The mode, its sample counts, radii and levels, checked in this order (the first error
        found is the one reported)."""
        mode = self.mode
        check(mode in MODES, f"mode must be certify, predict, sequential or adaptive, got {mode!r}")
        sequential = mode in SEQUENTIAL_MODES
        v: Dict[str, Any] = {"n": None if sequential else validate_count("n", self.n)}
        if mode != "predict":
            v["n0"] = validate_count("n0", self.n0)
        if mode == "certify":
            check(v["n"] >= v["n0"], f"--n {v['n']} is below --n0 {v['n0']}: the n0 samples only pick the class, "
                                     f"the n fresh ones certify it (the papers: n0 100, n 100000); raise --n or "
                                     f"lower --n0")
        if mode == "sequential":
            check(self.radii is not None, "sequential certification needs the radii to decide: --radii 0.25 0.5 0.75")
            v["radii"] = sorted(set(validate_radii(self.radii)))
        else:
            sequential_mode = spelled("--sequential", "mode='sequential'")
            check(self.radii is None, f"{setting('radii')} goes with {sequential_mode} (the radii to decide); "
                                      f"drop it or pass {sequential_mode}")
        if sequential:
            n_max = v["n_max"] = validate_count("n_max", self.n_max)
            n0 = v["n0"]
            check(n_max >= n0, f"--n-max {n_max} is below --n0 {n0}: it caps the estimation samples, as --n does "
                               f"for certify (default 100000)")
            v["futility"] = validate_futility(self.futility)
        v["radius_tol"] = validate_radius_tol(self.radius_tol) if mode == "adaptive" else None
        check(not (self.skip_wrong and mode == "predict"), f"{setting('skip_wrong', True)} stops an example after "
                                                           f"its n0 selection samples; predict draws none: drop it")
        v["skip_wrong"] = bool(self.skip_wrong)
        v["two_sided"] = bool(self.two_sided)
        check(self.alpha_share is None or sequential, f"{setting('alpha_share')} goes with the sequential modes "
                                                      f"(how their alpha is split); drop it")
        v["alpha_share"] = None if self.alpha_share is None else validate_share(self.alpha_share)
        v["alpha"] = validate_sequential_alpha(self.alpha) if sequential else validate_alpha(self.alpha)
        return v

    def _checked_run(self) -> Dict[str, Any]:
        """The batch size, subset, shard, seed, heartbeat, sigma and precision, checked in this order."""
        return {
            "batch_size": None if self.batch_size in (None, "auto") else validate_count("batch_size", self.batch_size),
            "start": validate_count("start", self.start, minimum=0),
            "skip": validate_count("skip", self.skip),
            "max": None if self.max is None else validate_count("max", self.max),
            "shard": None if self.shard is None else parse_shard(self.shard),
            "seed": validate_seed(self.seed),
            "heartbeat": heartbeat_interval(self.heartbeat),
            "sigma": None if self.sigma is None else validate_sigma(self.sigma),
            "noise": None if self.noise is None else NOISES.get(self.noise).name,
            "precision": validate_precision(self.precision).value,
            "diffusion_steps": validate_count("diffusion_steps", self.diffusion_steps),
        }

    @property
    def sequential(self) -> bool:
        """Whether the mode draws samples until it can stop (writing OUT.seq)."""
        return self.mode in SEQUENTIAL_MODES

    def load(self) -> LoadedModel:
        """The checkpoint's model, built with the job's model options (dataset: the job's, else the
        checkpoint's)."""
        return load_model(self.checkpoint, dataset=self.dataset, trust_pickle=self.trust_pickle,
                          trust_code=self.trust_code, **(self.model_options or {}))

    def run(self) -> Path:
        """Resolve the job and run it; returns the TSV written (the shard's file for ``--shard``)."""
        return _run(resolve(self))


def run_certification(
    checkpoint: str,
    out: str,
    *,
    mode: str = "certify",
    dataset: Optional[str] = None,
    split: str = "test",
    sigma: Optional[float] = None,
    noise: Optional[str] = None,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    radii: Optional[Sequence[float]] = None,
    n_max: int = 100_000,
    radius_tol: float = 0.05,
    futility: float = FUTILITY,
    batch_size: Optional[Union[int, str]] = None,
    start: int = 0,
    skip: int = 1,
    max: Optional[int] = None,
    shard: Optional[Union[str, Sequence[int]]] = None,
    seed: int = 0,
    precision: str = "fp32",
    channels_last: Optional[bool] = None,
    compile: bool = False,
    data_dir: Optional[str] = None,
    device: Optional[str] = None,
    overwrite: bool = False,
    trust_pickle: bool = False,
    trust_code: bool = False,
    model_options: Optional[Dict[str, Any]] = None,
    corruption: Optional[str] = None,
    severity: Optional[int] = None,
    corruption_seed: int = 0,
    corruption_suite: Optional[str] = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    heartbeat: Optional[float] = None,
    diffusion: Optional[str] = None,
    diffusion_steps: int = 1,
    diffusion_other_dataset: bool = False,
    diffusion_rounding: str = "up",
    diffusion_noise: str = "step",
    classifier_input: Optional[str] = None,
    skip_wrong: bool = False,
    two_sided: bool = False,
    alpha_share: Optional[float] = None,
) -> Path:
    """Certify (or predict) the ``split`` examples ``start, start+skip, ...``, at most ``max``.

    sigma and dataset default to the checkpoint's; ``noise`` (a name of
    :data:`~rsmooth.smoothing.noises.NOISES`) to the one its model was trained with, else Gaussian
    (the radii are in that noise's norm, recorded in the sidecar).  Writes ``out`` (TSV, one row per
    example, flushed as it goes; PREDICT rows carry radius 0) and ``out.json`` (metadata).
    An existing ``out`` from the same settings is continued; from other settings it is an
    error unless ``overwrite``.

    ``shard=(I, K)`` (or ``"I/K"``) certifies only every K-th example of the subset from
    position I, into ``out`` with ``.shard-I-of-K`` before its suffix (resumable on its own);
    :func:`~rsmooth.engine.shards.merge_certify` joins the K shards into ``out``.  Under
    ``torchrun`` each rank certifies shard RANK/WORLD_SIZE and rank 0 merges them into ``out``
    (only rank 0 logs); rerunning the same ``torchrun`` command continues every shard.  Shards of
    an ``out`` that one process left part-way start with its rows of their share (so more processes
    take over a run midway), and their merge replaces it.
    ``trust_pickle``: unpickle a checkpoint that needs more than tensors and
    ``argparse.Namespace`` (can run arbitrary code; see :func:`~rsmooth.engine.checkpoint.read_checkpoint`).
    ``trust_code``: build the ``module:factory`` a checkpoint names without ``arch`` naming it
    (:mod:`rsmooth.trust`).
    ``model_options`` (keyword arguments of :func:`~rsmooth.engine.checkpoint.load_model`: arch,
    arch_kwargs, mean, std, num_classes) build the model of a checkpoint that does not record it.
    ``corruption``/``severity`` (and ``corruption_seed``, ``corruption_suite`` for a generated
    copy) certify one corrupted test set (:func:`~rsmooth.data.get_dataset`); see
    :func:`certify_corruptions` for many.

    ``mode="sequential"`` decides robustness at each of ``radii`` with
    :meth:`~rsmooth.smoothing.Smooth.certify_sequential`, ``mode="adaptive"`` estimates the
    radius with :meth:`~rsmooth.smoothing.Smooth.certify_adaptive` (tolerance ``radius_tol``;
    ``futility`` is the level of the upper bound that stops hopeless radii early);
    both draw at most ``n_max`` estimation samples (``n`` is unused) and write the TSV's
    ``radius`` as the certified radius (the largest robust one of ``radii``; 0 with predict -1
    when none), and each example's samples, bounds and decisions to ``OUT.seq``.
    Their failure probability alpha covers all radii and every stopping time at once.

    Where no progress bar is drawn (a log file), a progress line is logged every ``heartbeat``
    seconds (default ``$RSMOOTH_HEARTBEAT`` or 60; 0: none; :class:`~rsmooth.progress.Heartbeat`),
    and every run ends with a one-line summary of ``out`` (:func:`summary_line`).

    ``diffusion`` (a diffusers folder or cached hub id, rsmooth's DDPM file, or a
    ``package.module:factory``) certifies the checkpoint's classifier behind a diffusion denoiser
    run ``diffusion_steps`` reverse steps from the timestep matching sigma
    (:mod:`rsmooth.models.diffusion`, :mod:`rsmooth.engine.diffusion`); a DDPM file that records
    another dataset than the one certified is refused unless ``diffusion_other_dataset``;
    ``diffusion_rounding`` and ``diffusion_noise`` pick t* and the noise D's input carries (the
    defaults are the authors': :class:`rsmooth.models.diffusion.DiffusionDenoiser`).
    ``classifier_input`` (``"size=512,mode=bicubic,mean=0.5,std=0.5"``) resizes and normalises
    what the classifier gets (:func:`rsmooth.models.adapter.parse_classifier_input`).

    ``skip_wrong`` (certify and the sequential modes): an example whose n0 selection samples pick a
    class c_A other than its label stops there.  Such an example counts at no radius whatever more
    samples show (the certificate is c_A, wrong, or an abstention), so the certified-accuracy table
    and ACR are exactly those of running every example to the end, at a fraction of the cost; its
    row is predict c_A, radius 0, correct 0 (its OUT.seq row: the n0 samples and the decisions
    ``skipped``), and the sidecar records ``skip_wrong``.  Use it where only the table is wanted:
    the rows of wrong predictions lose their radius.

    ``two_sided`` (every mode but predict): bound p_A below and the runner-up's p_B above, each at
    alpha/2 (Bonferroni), and certify the noise's radius of both (Cohen et al.'s Theorem 1:
    sigma/2 (Phi^-1(p_A) - Phi^-1(p_B)) for Gaussian noise): larger where the other classes share
    the rest, slightly smaller where every vote is for c_A; the TSV keeps its columns, OUT.seq
    adds ``n_b`` and ``p_b_upper``, the sidecar records ``two_sided``.  ``alpha_share`` (sequential
    modes): the share of alpha spent on the anytime bounds, which decide the easy radii early; the
    rest goes to Clopper-Pearson over all n_max samples where a radius is still open at the cap
    (a union bound; :func:`~rsmooth.smoothing.sequential.split_levels`).  Default: the share of
    the file being continued (runs made before the split: 1, the anytime bound alone), else
    :data:`~rsmooth.smoothing.sequential.ALPHA_SHARE`; recorded in the sidecar.

    The keywords are the fields of :class:`CertifyJob`: this is ``CertifyJob(...).run()``.

    Returns:
        the path of the TSV written (``out``).

    Example:
        ```python
        from rsmooth.engine import run_certification

        tsv = run_certification("runs/digits025", "runs/digits025/certify.tsv", n=10_000, skip=4)
        seq = run_certification("runs/digits025", "seq.tsv", mode="sequential", radii=[0.25, 0.5])
        print(rsmooth.analyze([tsv]))
        ```
    """
    return CertifyJob(**locals()).run()  # locals(): exactly the arguments, at the first line


@dataclass
class Resolved:
    """A job made concrete (:func:`resolve`): this process's place and shard, its device, the
    smoothed model, the data and the subset's indices, the identity metadata (the sidecar JSON),
    and where this process logs (only rank 0 of a torchrun job does)."""

    job: CertifyJob
    world: distributed.World
    shard: Optional[Shard]
    device: "torch.device"
    smooth: Smooth
    procedure: Procedure
    batch_size: int
    data: "Dataset"
    indices: List[int]
    meta: Dict[str, Any]
    log: Callable[[str], None]
    progress: bool
    rate: Optional[float]  # samples/s of the tuner's timed passes at the run's batch size and format (None: not timed)

    @property
    def out(self) -> Path:
        return Path(self.job.out)

    def certify(self, indices: Sequence[int]) -> Iterator[Tuple[int, int, int, float, Optional[SequentialCertificate],
                                                               int, float]]:
        """(i, label, prediction, radius, the sequential modes' certificate, samples drawn, seconds) of
        each example of ``indices`` as it completes: many examples share each forward pass
        (:meth:`Smooth.stream`), and example ``i``'s noise is drawn from ``(seed, mode, i)``, so its
        row is what certifying it alone gives."""
        job, procedure, labels = self.job, self.procedure, {}

        def items():
            for i in indices:
                x, labels[i] = self.data[i]
                yield (i, x, generator(job.seed, job.mode, i, device=self.device),
                       *([int(labels[i])] if job.skip_wrong else []))

        for i, result, seconds in self.smooth.stream(procedure, items(), self.batch_size):
            cert = result if isinstance(result, (SequentialCertificate, Skipped)) else None
            if isinstance(result, Skipped):  # c_A is not the label: no radius, whatever more samples show
                pred, radius = result.c_a, 0.0
            elif cert is not None:
                pred, radius = cert.prediction, cert.radius
            else:
                pred, radius = result if job.mode == "certify" else (result, 0.0)
            yield i, int(labels.pop(i)), pred, radius, cert, procedure.samples(result), seconds


def procedure_of(job: CertifyJob) -> Procedure:
    """What each example of ``job`` runs: its mode with its settings."""
    kw = {"skip_wrong": job.skip_wrong, "two_sided": job.two_sided}
    share = {"alpha_share": ALPHA_SHARE if job.alpha_share is None else job.alpha_share}
    if job.mode == "sequential":
        return Sequential(job.n0, job.alpha, job.n_max, job.futility, job.radii, **kw, **share)
    if job.mode == "adaptive":
        return Adaptive(job.n0, job.alpha, job.n_max, job.futility, job.radius_tol, **kw, **share)
    return Certify(job.n0, job.n, job.alpha, **kw) if job.mode == "certify" else Predict(job.n, job.alpha)


def continued_share(job: CertifyJob, shard: Optional[Shard]) -> Optional[float]:
    """The alpha share of a sequential job: the job's, else that of the file it continues (OUT or
    its shard, of the same mode; a sidecar written before the split records none: 1, the anytime
    bound alone), else None (the default, ALPHA_SHARE)."""
    if not job.sequential or job.alpha_share is not None or job.overwrite:
        return job.alpha_share
    for path in ([shard_path(job.out, shard)] if shard else []) + [Path(job.out)]:
        old = read_sidecar(path) if path.is_file() else None
        if old is not None and old.get("mode") == job.mode:
            return float(old.get("alpha_share", LEGACY_SHARE))
    return None


def resolve(job: CertifyJob) -> Resolved:
    """Make ``job`` concrete, checking on the way that its outputs may be written before the model
    and the data are read: under ``torchrun`` this rank certifies shard RANK/WORLD_SIZE and only
    rank 0 logs; sigma is the checkpoint's unless the job gives one (with a warning when it is not
    the one the model was trained at, and another when the sample budget is too small)."""
    from ..data import certify_indices, get_dataset

    world, shard = distributed.rank_shard(job.shard, "certifies")
    log, progress = (job.log, job.progress) if world.main else (distributed.quiet, False)
    dev = distributed.rank_device(resolve_device(job.device), world)
    for out in [job.out] + ([] if shard is None else [str(shard_path(job.out, shard))]):
        _check_out(out, resolve_checkpoint_path(job.checkpoint), job.overwrite)
    job = dataclasses.replace(job, alpha_share=continued_share(job, shard))  # the continued file's rule
    loaded = job.load()
    if job.sigma is not None and world.main:
        _warn_other_sigma(loaded, job.sigma)
    sigma = validate_sigma(job.sigma if job.sigma is not None else _require_sigma(loaded))
    noise = make_noise(job.noise or trained_noise(loaded), sigma)
    check(not job.diffusion or noise.norm == "l2", f"--diffusion denoises Gaussian noise; {noise.name} noise "
                                                   f"cannot go through it: drop --diffusion or pass --noise gaussian")
    if job.mode == "certify":
        _warn_small_n(job.n, job.alpha, noise, log)
    elif job.sequential:
        _warn_small_n_max(job.n_max, job.alpha, noise, job.radii, log, job.two_sided, job.alpha_share)
    model, diffusion = with_diffusion(loaded.model.to(dev), job.diffusion, sigma, loaded.dataset,
                                      steps=job.diffusion_steps, other_dataset=job.diffusion_other_dataset,
                                      rounding=job.diffusion_rounding, noise=job.diffusion_noise,
                                      classifier_input=job.classifier_input)
    if job.compile and "diffusion" in diffusion:
        check_compilable(diffusion, sigma)
    data = get_dataset(loaded.dataset, job.split, data_dir=job.data_dir, corruption=job.corruption,
                       severity=job.severity, corruption_seed=job.corruption_seed,
                       corruption_suite=job.corruption_suite)
    indices = certify_indices(len(data), skip=job.skip, max=job.max, start=job.start)
    check(bool(indices), f"--start {job.start} is past the last {job.split} example (index {len(data) - 1})")
    procedure = procedure_of(job)
    examples = len(shard_share(indices, shard) if shard else indices)
    smooth, tuning = fastest(model, loaded.num_classes, noise, data[indices[0]][0], precision=job.precision,
                             compile=job.compile, batch_size=job.batch_size, channels_last=job.channels_last,
                             samples=examples * procedure.max_samples())
    if "measured" in tuning.how.values():
        emit(f"measured on {dev}: {tuning.batch_size} noisy inputs per forward pass, "
             f"{'channels-last' if tuning.channels_last else 'NCHW'}{'; ' + tuning.note if tuning.note else ''}", log)
    meta = {**_identity(job, loaded, data, smooth, tuning, indices, dev), **diffusion}
    if "diffusion" in diffusion:
        log_diffusion(diffusion, sigma, log)
    return Resolved(job, world, shard, dev, smooth, procedure, tuning.batch_size, data, indices, meta, log, progress,
                    tuning.rate)


def _identity(job: CertifyJob, loaded: LoadedModel, data: "Dataset", smooth: Smooth, tuning: Tuning,
              indices: List[int], dev: "torch.device") -> Dict[str, Any]:
    """The run's metadata, the sidecar JSON's fields in their order: what a resumed run or a shard
    must share (:data:`~rsmooth.engine.shards.RUN_IDENTITY`) and what describes the run."""
    return {
        "mode": job.mode, "dataset": loaded.dataset, "corruption": data.corruption, "split": job.split,
        **smooth.noise.spec(), "norm": smooth.noise.norm, "n0": job.n0 if job.mode != "predict" else None, "n": job.n, "alpha": job.alpha,
        "batch_size": tuning.batch_size, "noise_block": NOISE_BLOCK, "tuning": tuning.record(),
        **({"radii": job.radii, "n_max": job.n_max, "radius_tol": job.radius_tol, "futility": job.futility,
            "confidence_sequence": CONFIDENCE_SEQUENCE,
            "alpha_share": ALPHA_SHARE if job.alpha_share is None else job.alpha_share}
           if job.sequential else {}),
        "skip_wrong": job.skip_wrong, "two_sided": job.two_sided,
        "start": job.start, "skip": job.skip, "max": job.max, "num_examples": len(indices), "seed": job.seed,
        **smooth.mode(), "checkpoint": str(loaded.path), "checkpoint_sha256": file_sha256(loaded.path),
        "arch": loaded.arch, "method": loaded.meta.get("method"),
        "hparams": (loaded.meta.get("config") or {}).get("hparams"), "data_fingerprint": data.fingerprint(),
        "device": str(dev), "versions": versions(), "git_commit": git_commit(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }


# -- the three paths ------------------------------------------------------------------------

def _run(r: Resolved) -> Path:
    """Run a resolved job on its path: one process, one shard, or this rank of a torchrun job."""
    if r.shard is None:
        return _run_one_process(r)
    if r.world.size == 1:
        return _run_shard(r)
    return _run_ranks(r)


def _run_one_process(r: Resolved) -> Path:
    """The whole subset into OUT."""
    done = _certify_into(r, r.out, r.indices, r.meta)
    emit(summary_line(done), r.log)
    return done


def _run_shard(r: Resolved) -> Path:
    """Shard I/K of the subset into its own file (``OUT`` with ``.shard-I-of-K``), merged later by
    :func:`~rsmooth.engine.shards.merge_certify`."""
    _continue_as_shards(r, [r.shard])
    done = _certify_into(r, shard_path(r.out, r.shard), shard_share(r.indices, r.shard), _shard_meta(r))
    emit(summary_line(done), r.log)
    return done


def _run_ranks(r: Resolved) -> Path:
    """This rank of a torchrun job: the ranks agree on the run, each certifies its shard, they
    wait for each other and rank 0 merges the shards into OUT; every rank returns once OUT is
    there.  A finished job run again only tidies up what a kill in the merge left."""
    world, out, overwrite = r.world, r.out, r.job.overwrite
    shards = [shard_path(out, (k, world.size)) for k in range(world.size)]
    shard_meta = _shard_meta(r)
    with distributed.process_group(r.device, timeout=datetime.timedelta(days=7)):
        distributed.agree(world, {**{f: r.meta.get(f) for f in RUN_IDENTITY}, "out": str(out),
                                  "data_fingerprint": r.meta["data_fingerprint"]})
        if not overwrite and _finished(out, r.meta):  # rank 0 deletes what a kill in the merge left
            if world.main:
                clean_merged(out, CERTIFY, shards, log=r.log)
                emit(summary_line(out), r.log)
            return out
        if world.main:
            _continue_as_shards(r, [(k, world.size) for k in range(world.size)])
        distributed.barrier(world, "rank 0's start of the shards")
        t0 = time.perf_counter()
        share = shard_share(r.indices, r.shard)
        todo = _certify_into(r, shard_path(out, r.shard), share, shard_meta, count_todo=True)
        distributed.barrier(world, "the other ranks' shards",
                            timeout=_wait_for_others(time.perf_counter() - t0, todo, len(share)))
        if world.main:
            merge_certify(out, shards, overwrite=overwrite, log=r.log)
            emit(summary_line(out), r.log)
        distributed.barrier(world, "rank 0's merge")  # every rank returns once OUT is there
    return out


def _continue_as_shards(r: Resolved, shards: Sequence[Tuple[int, int]]) -> None:
    """Start each of ``shards`` not yet begun with the rows OUT holds of its share, where OUT is an
    interrupted one-process certification of the same settings (:func:`~rsmooth.engine.shards.
    continue_as_shards`); the shard's sessions begin with OUT's, each marked ``"from": OUT``."""
    if r.job.overwrite:
        return

    def begin(path: Path, old: dict, mine: List[Tuple[int, str]]) -> Dict[str, Any]:
        if r.job.sequential:
            seq = dict(seq_rows(adopt_legacy(r.out)))
            write_seq_rows(sequential_path(path), [(i, seq[i]) for i, _ in mine if i in seq], r.job.two_sided)
        return {"sessions": [{**e, "from": r.out.name} for e in past_sessions(old, {"done": 0}, SESSION_FIELDS)]}

    continue_as_shards(r.out, r.meta, r.indices, shards, identity=RUN_IDENTITY, header=TSV_HEADER,
                       units=lambda p: read_certify_tsv(p, growing=True).idx.tolist(), begin=begin, log=r.log)


def _shard_meta(r: Resolved) -> Dict[str, Any]:
    """The metadata of this shard's file: the run's, with the shard and its share of the subset."""
    return {**r.meta, "shard": list(r.shard), "subset_size": len(r.indices),
            "num_examples": len(shard_share(r.indices, r.shard))}


def summary_line(out: Union[str, Path]) -> str:
    """One line on the certification in ``out`` (what a log's last line says): the examples, the
    smoothed classifier's accuracy on them with its abstentions and, for certify, ACR; for
    ``--sequential`` the certified accuracy at each decided radius, for ``--adaptive`` the largest
    radius it can certify."""
    res, meta = read_certify_tsv(out), read_sidecar(out) or {}
    mode = meta.get("mode") or "certify"
    name = _run_name(mode)
    if res.n == 0:
        return f"{name}: no examples in {out}"
    pct = 100.0 * res.correct.mean()
    abstained = int((res.predict < 0).sum())
    if mode == "sequential":
        radii = meta.get("radii") or []
        accs = certified_accuracy(res.radius, res.correct, radii)
        cells = [f"{100 * a:.1f}% at {'r = ' if k == 0 else ''}{r:g}" for k, (r, a) in enumerate(zip(radii, accs))]
        return (f"{name}: {res.n} examples, certified accuracy {', '.join(cells)} ({abstained} not certified at "
                f"any radius" + ("" if 0 in radii else "; add 0 to --radii for the smoothed accuracy") + ")")
    line = f"{name}: {res.n} examples, smoothed accuracy {pct:.1f}% ({abstained} abstained)"
    if mode != "predict":
        line += f", ACR {acr(res.radius, res.correct):.3f}"
    if mode == "adaptive" and all(isinstance(meta.get(k), (int, float)) for k in ("n_max", "alpha", "sigma")):
        top = largest_radius(meta["n_max"], meta["alpha"], noise_from_spec(meta), meta.get("alpha_share", LEGACY_SHARE),
                             bool(meta.get("two_sided")))
        line += f"; certifiable radii up to {top:.3g}"
    return line


def _run_name(mode: str) -> str:
    """How logs name a run of ``mode``: certify, predict, certify --sequential, certify --adaptive."""
    return f"certify --{mode}" if mode in SEQUENTIAL_MODES else mode


def _wait_for_others(seconds: float, done_here: int, share: int) -> Optional[datetime.timedelta]:
    """How long a rank that certified ``done_here`` examples in ``seconds`` waits for the others:
    each has at most ``share + 1`` examples, so a few times what a whole share takes here (at
    least half an hour); None (the process group's timeout) when nothing was certified here."""
    if not done_here:
        return None
    return max(_MIN_WAIT, datetime.timedelta(seconds=3 * seconds / done_here * (share + 1)))


def _finished(out: Path, meta: dict) -> bool:
    """Whether ``out`` holds a complete run of the same settings (a finished torchrun job rerun);
    an ``out`` of other settings is an error now rather than after the shards are done."""
    old = read_sidecar(out)
    diff = [] if old is None else identity_diff(old, meta)
    if diff:
        raise _other_run(out, old, meta, diff[0])
    return old is not None and bool(old.get("complete")) and out.exists()


def _other_run(out: Path, old: dict, meta: dict, key: str) -> RsmoothError:
    """The error for an ``out`` that holds a run whose ``key`` differs from this one's."""
    return RsmoothError(f"{out} holds a run with {key}={old.get(key)!r}, not {meta.get(key)!r}; "
                        f"pass {setting('overwrite', True)} to replace it or choose another {setting('out')}")


def _certify_into(r: Resolved, out_path: Path, indices: List[int], meta: dict,
                  count_todo: bool = False) -> Union[Path, int]:
    """Certify ``indices`` into ``out_path`` (continuing it when it holds the same run) under its
    lock, with a progress bar or heartbeat lines; returns ``out_path``, or the number of examples
    certified here if ``count_todo``."""
    sequential = r.job.sequential
    with run_lock(lock_path(out_path), out_path):
        remove_stale_temps(out_path, sidecar_path(out_path), sequential_path(out_path))
        if sequential:
            adopt_legacy(out_path)  # OUT.seq.tsv of an earlier version
        resume = _start_sidecar(out_path, meta, r.job.overwrite)
        with CertifyWriter(out_path, resume=resume) as writer, contextlib.ExitStack() as stack:
            seq = (stack.enter_context(SeqWriter(sequential_path(out_path), writer.done_indices, r.job.two_sided))
                   if sequential else None)
            todo = [i for i in indices if i not in writer.done_indices]
            if resume and writer.done_indices:
                r.log(f"continuing {out_path}: {len(indices) - len(todo)} of {len(indices)} examples done")
            if todo:  # timed here when the tuner did not: nothing to time for a finished file
                rate = r.rate or sample_rate(r.smooth, r.data[todo[0]][0], r.batch_size)
                emit(estimate_line(len(todo), r.procedure.max_samples(), rate, r.device, r.batch_size,
                                   at_most=sequential), r.log)
                where = {"done": len(indices) - len(todo)}
                meta["sessions"].append(session(where, {k: meta.get(k) for k in SESSION_FIELDS}))
                write_sidecar(out_path, {**meta, "complete": False})
            shard = meta.get("shard")
            desc = _run_name(r.job.mode) + ("" if shard is None else f" (shard {shard[0]}/{shard[1]})")
            beat = Heartbeat(len(indices), desc=desc, done=len(indices) - len(todo), interval=r.job.heartbeat,
                             enabled=r.progress, log=r.log)
            rows = r.certify(todo)
            for i, label, pred, radius, cert, samples, seconds in progress_bar(rows, total=len(todo), desc=r.job.mode,
                                                                               enabled=r.progress):
                if seq is not None:  # first, so every row of OUT has its row in OUT.seq
                    seq.write(i, cert)
                writer.write(i, label, pred, radius, pred == label, seconds)
                beat.update(1, samples)
        sort_rows(out_path, sequential, r.job.two_sided)  # packing completes examples out of order
        meta["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        write_sidecar(out_path, {**meta, "complete": True})
    return len(todo) if count_todo else out_path


def estimate_line(examples: int, samples: int, rate: float, device: "torch.device", batch_size: int, *,
                  at_most: bool = False) -> str:
    """The line a run prints before its work: ``examples`` images x ``samples`` noise samples each
    (at most, in the sequential modes) at ``rate`` samples/s measured on ``device``, and the wall
    time that makes."""
    total = examples * samples
    return (f"estimate: {examples:,} images x {samples:,} samples = {total:.3g} samples at {rate:,.0f} samples/s "
            f"(measured on {device}, batch {batch_size}): about {format_duration(total / max(rate, 1e-9))}"
            f"{' at most' if at_most else ''}")


#: what each invocation that certified into a file records in its sidecar's ``sessions``
SESSION_FIELDS = ("git_commit", "versions", "device", "batch_size", "channels_last", "compile")


def _start_sidecar(out_path: Path, meta: dict, overwrite: bool) -> bool:
    """Write ``out_path``'s sidecar as incomplete; returns whether the run continues the one there
    (which must be the same run: it keeps its start time and its ``sessions``)."""
    resume = out_path.exists() and not overwrite
    old = None
    if resume:
        old = read_sidecar(out_path)
        if old is None:
            raise RsmoothError(f"{out_path} exists without its metadata {sidecar_path(out_path)}; "
                               f"pass {setting('overwrite', True)} to replace it or choose another {setting('out')}")
        diff = identity_diff(old, meta) + (["shard"] if old.get("shard") != meta.get("shard") else [])
        if diff:
            raise _other_run(out_path, old, meta, diff[0])
        meta["started"] = old.get("started", meta["started"])
    meta["sessions"] = past_sessions(old, {"done": 0}, SESSION_FIELDS)
    write_sidecar(out_path, {**meta, "complete": False})
    return resume


def _check_out(out: str, checkpoint: Path, overwrite: bool) -> None:
    """``out`` must be a writable file path, not the checkpoint, and --overwrite replaces only a
    certify TSV (a typo must not destroy a model or another file)."""
    path = check_output_file(out, inputs=[checkpoint])
    if overwrite and path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            first = f.read(len(TSV_HEADER) + 2).decode("utf-8", "replace").splitlines()[:1]
        check(first == [TSV_HEADER], f"--out {out} exists and is not a certify TSV; --overwrite replaces only "
                                     f"certify results: choose another {setting('out')} or delete the file yourself")


def _warn_small_n(n: int, alpha: float, noise: Noise, log: Callable[[str], None]) -> None:
    """Say when n is too small for a useful radius: at most the noise's radius of alpha^(1/n)
    (sigma * Phi^-1(alpha^(1/n)) for Gaussian noise)."""
    r_max = noise.radius(clopper_pearson_lower(n, n, alpha))
    if r_max <= 0:
        log(f"warning: with n={n} and alpha={alpha} no radius can be certified (every example abstains: "
            f"all n votes for one class give a lower bound alpha^(1/n) < 0.5); raise --n")
    elif r_max < noise.sigma:
        log(f"warning: with n={n} and alpha={alpha} the largest certifiable radius is {r_max:.4g} "
            f"({'sigma * Phi^-1(alpha^(1/n))' if noise.name == DEFAULT_NOISE else 'its radius of alpha^(1/n)'}, "
            f"sigma={noise.sigma}); raise --n for larger radii (papers: 100000)")


def _warn_small_n_max(n_max: int, alpha: float, noise: Noise, radii: Optional[Sequence[float]],
                      log: Callable[[str], None], two_sided: bool = False,
                      alpha_share: Optional[float] = None) -> None:
    """Say which radii no example can reach: with every one of n_max samples a vote for c_A, the
    anytime lower bound certifies at most the radius of its bound (sigma * Phi^-1(lower), Gaussian)."""
    r_max = largest_radius(n_max, alpha, noise, ALPHA_SHARE if alpha_share is None else alpha_share, two_sided)
    beyond = [r for r in radii or () if r >= r_max]
    if beyond or r_max <= 0:
        log(f"warning: with n_max={n_max} and alpha={alpha} the largest certifiable radius is {r_max:.4g}"
            + (f", so radii {', '.join(f'{r:g}' for r in beyond)} are never certified" if beyond else "")
            + "; raise --n-max")


#: (checkpoint, trained sigma, sigma) already warned about: a folder of corruptions certifies one
#: model at one sigma many times, and says so once
_WARNED_SIGMA: Set[Tuple[str, float, float]] = set()


def _warn_other_sigma(loaded, sigma: float) -> None:
    """Warn, once per process and model, when ``sigma`` is not the noise the model was trained with;
    silent when the checkpoint records none, or records only certify's default (``--method
    standard`` trains without noise)."""
    import math
    import warnings

    trained = loaded.sigma
    key = (str(loaded.path), trained, sigma)
    if (trained is None or loaded.meta.get("method") == "standard" or math.isclose(trained, sigma)
            or key in _WARNED_SIGMA):
        return
    _WARNED_SIGMA.add(key)
    warnings.warn(f"certifying at --sigma {sigma:g} a model trained at sigma {trained:g} ({loaded.path}): "
                  f"the certificate holds for sigma {sigma:g}, but a model is usually much weaker at a noise "
                  f"it was not trained for; drop --sigma to use {trained:g}")


def trained_noise(loaded: LoadedModel) -> str:
    """The noise the checkpoint's model was trained with (its method's ``noise``), else Gaussian."""
    hparams = (loaded.meta.get("config") or {}).get("hparams") or {}
    name = hparams.get("noise") if isinstance(hparams, dict) else None
    return name if isinstance(name, str) and name in NOISES else DEFAULT_NOISE


def _require_sigma(loaded) -> float:
    if loaded.sigma is None:
        raise RsmoothError(f"checkpoint {loaded.path} does not record sigma; pass --sigma "
                           f"(noise std in [0,1] pixel units, e.g. 0.25)")
    return loaded.sigma
