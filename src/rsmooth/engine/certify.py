"""The certification driver: CERTIFY, PREDICT or sequential certification over a test subset.

Each example's noise comes from a generator seeded by ``(seed, idx)``, so results do not
depend on the order, on interruptions or on how the work is split: a killed run resumes
where it stopped (rows already in the TSV are skipped) and gives the same file, and shards
(``shard=(I, K)``, or the ranks of a ``torchrun`` job) merge into that same file.
Run metadata (sigma, n0, n, alpha, subset, precision, seed, checkpoint hash, versions) goes
to the sidecar JSON so the TSV stays readable by every public codebase.  The sequential modes
write what each example used (samples, bounds, decisions) to a second file, ``OUT.seq``.
"""
from __future__ import annotations

import contextlib
import datetime
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union


from ..errors import RsmoothError, check
from ..fileio import remove_stale_temps, run_lock
from ..metrics import (CertifyWriter, acr, certified_accuracy, read_certify_tsv, read_sidecar, sidecar_path,
                       write_sidecar)
from ..metrics.certify_io import TSV_HEADER
from ..paths import check_output_file
from ..smoothing import Smooth, max_certifiable_radius, validate_alpha, validate_count, validate_sigma
from ..smoothing.sequential import (CONFIDENCE_SEQUENCE, FUTILITY, largest_radius, validate_futility,
                                    validate_radii, validate_radius_tol, validate_sequential_alpha)
from . import distributed
from .checkpoint import (file_sha256, git_commit, load_model, resolve_checkpoint_path, resolve_device,
                         versions)
from .seeding import generator, validate_seed
from .seqfile import SEQUENTIAL_MODES, SeqWriter, adopt_legacy, sequential_path
from .shards import (CERTIFY, RUN_IDENTITY, clean_merged, identity_diff, lock_path, merge_certify, parse_shard,
                     shard_path, shard_share)
from ..progress import Heartbeat, emit, heartbeat_interval, progress_bar

#: how long a rank that finished its shard waits for the others, at least
_MIN_WAIT = datetime.timedelta(minutes=30)


def run_certification(
    checkpoint: str,
    out: str,
    *,
    mode: str = "certify",
    dataset: Optional[str] = None,
    split: str = "test",
    sigma: Optional[float] = None,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    radii: Optional[Sequence[float]] = None,
    n_max: int = 100_000,
    radius_tol: float = 0.05,
    futility: float = FUTILITY,
    batch_size: Optional[int] = None,
    start: int = 0,
    skip: int = 1,
    max: Optional[int] = None,
    shard: Optional[Union[str, Sequence[int]]] = None,
    seed: int = 0,
    precision: str = "fp32",
    channels_last: bool = False,
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
) -> Path:
    """Certify (or predict) the ``split`` examples ``start, start+skip, ...``, at most ``max``.

    sigma and dataset default to the checkpoint's.  Writes ``out`` (TSV, one row per
    example, flushed as it goes; PREDICT rows carry radius 0) and ``out.json`` (metadata).
    An existing ``out`` from the same settings is continued; from other settings it is an
    error unless ``overwrite``.

    ``shard=(I, K)`` (or ``"I/K"``) certifies only every K-th example of the subset from
    position I, into ``out`` with ``.shard-I-of-K`` before its suffix (resumable on its own);
    :func:`~rsmooth.engine.shards.merge_certify` joins the K shards into ``out``.  Under
    ``torchrun`` each rank certifies shard RANK/WORLD_SIZE and rank 0 merges them into ``out``
    (only rank 0 logs); rerunning the same ``torchrun`` command continues every shard.
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
    """
    from ..data import certify_indices, get_dataset
    from ..smoothing import DEFAULT_BATCH_SIZE

    check(mode in ("certify", "predict", *SEQUENTIAL_MODES),
          f"mode must be certify, predict, sequential or adaptive, got {mode!r}")
    sequential = mode in SEQUENTIAL_MODES
    n = None if sequential else validate_count("n", n)
    if mode != "predict":
        n0 = validate_count("n0", n0)
    if mode == "sequential":
        check(radii is not None, "sequential certification needs the radii to decide: --radii 0.25 0.5 0.75")
        radii = sorted(set(validate_radii(radii)))
    else:
        check(radii is None, "--radii goes with --sequential (the radii to decide); drop it or add --sequential")
    if sequential:
        n_max = validate_count("n_max", n_max)
        check(n_max >= n0, f"--n-max {n_max} is below --n0 {n0}: it caps the estimation samples, as --n does "
                           f"for certify (default 100000)")
        futility = validate_futility(futility)
    radius_tol = validate_radius_tol(radius_tol) if mode == "adaptive" else None
    alpha = validate_sequential_alpha(alpha) if sequential else validate_alpha(alpha)
    batch_size = validate_count("batch_size", DEFAULT_BATCH_SIZE if batch_size is None else batch_size)
    start = validate_count("start", start, minimum=0)
    skip = validate_count("skip", skip)
    max = None if max is None else validate_count("max", max)
    shard = None if shard is None else parse_shard(shard)
    seed = validate_seed(seed)
    heartbeat = heartbeat_interval(heartbeat)
    if sigma is not None:
        sigma = validate_sigma(sigma)
    world, shard = distributed.rank_shard(shard, "certifies")
    if not world.main:
        progress, log = False, distributed.quiet
    dev = distributed.rank_device(resolve_device(device), world)
    _check_out(out, resolve_checkpoint_path(checkpoint), overwrite)
    if shard is not None:
        _check_out(str(shard_path(out, shard)), resolve_checkpoint_path(checkpoint), overwrite)
    loaded = load_model(checkpoint, dataset=dataset, trust_pickle=trust_pickle, trust_code=trust_code,
                        **(model_options or {}))
    if sigma is not None and world.main:
        _warn_other_sigma(loaded, sigma)
    sigma = validate_sigma(sigma if sigma is not None else _require_sigma(loaded))
    if mode == "certify":
        _warn_small_n(n, alpha, sigma, log)
    elif sequential:
        _warn_small_n_max(n_max, alpha, sigma, radii, log)
    model = loaded.model.to(dev)
    data = get_dataset(loaded.dataset, split, data_dir=data_dir, corruption=corruption, severity=severity,
                       corruption_seed=corruption_seed, corruption_suite=corruption_suite)
    indices = certify_indices(len(data), skip=skip, max=max, start=start)
    check(bool(indices), f"--start {start} is past the last {split} example (index {len(data) - 1})")
    smooth = Smooth(model, loaded.num_classes, sigma, precision=precision,
                    channels_last=channels_last, compile=compile)

    out_path = Path(out)
    meta = {
        "mode": mode, "dataset": loaded.dataset, "corruption": data.corruption, "split": split, "sigma": sigma,
        "n0": n0 if mode != "predict" else None, "n": n, "alpha": alpha, "batch_size": batch_size,
        **({"radii": radii, "n_max": n_max, "radius_tol": radius_tol, "futility": futility,
            "confidence_sequence": CONFIDENCE_SEQUENCE}
           if sequential else {}),
        "start": start, "skip": skip, "max": max, "num_examples": len(indices), "seed": seed,
        **smooth.mode(), "checkpoint": str(loaded.path), "checkpoint_sha256": file_sha256(loaded.path),
        "arch": loaded.arch, "method": loaded.meta.get("method"),
        "hparams": (loaded.meta.get("config") or {}).get("hparams"), "data_fingerprint": data.fingerprint(), "device": str(dev),
        "versions": versions(), "git_commit": git_commit(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }

    def certify_one(i: int):
        x, label = data[i]
        g = generator(seed, mode, i, device=dev)
        if mode == "sequential":
            cert = smooth.certify_sequential(x, n0, radii, alpha, n_max, batch_size, g, futility)
            return int(label), cert.prediction, cert.radius, cert
        if mode == "adaptive":
            cert = smooth.certify_adaptive(x, n0, alpha, radius_tol, n_max, batch_size, g, futility)
            return int(label), cert.prediction, cert.radius, cert
        if mode == "certify":
            pred, radius = smooth.certify(x, n0, n, alpha, batch_size, generator=g)
        else:
            pred, radius = smooth.predict(x, n, alpha, batch_size, generator=g), 0.0
        return int(label), pred, radius, None

    beat = {"progress": progress, "log": log, "heartbeat": heartbeat}
    if shard is None:
        _certify_into(out_path, indices, meta, certify_one, overwrite, **beat)
        emit(summary_line(out_path), log)
        return out_path
    shard_meta = {**meta, "shard": list(shard), "subset_size": len(indices),
                  "num_examples": len(shard_share(indices, shard))}
    if world.size == 1:
        done = _certify_into(shard_path(out_path, shard), shard_share(indices, shard), shard_meta,
                             certify_one, overwrite, **beat)
        emit(summary_line(done), log)
        return done
    with distributed.process_group(dev, timeout=datetime.timedelta(days=7)):
        distributed.agree(world, {**{f: meta.get(f) for f in RUN_IDENTITY}, "out": str(out_path),
                                  "data_fingerprint": meta["data_fingerprint"]})
        if not overwrite and _finished(out_path, meta):  # rank 0 deletes what a kill in the merge left
            if world.main:
                clean_merged(out_path, CERTIFY, [shard_path(out_path, (r, world.size)) for r in range(world.size)],
                             log=log)
                emit(summary_line(out_path), log)
            return out_path
        t0 = time.perf_counter()
        share = shard_share(indices, shard)
        todo = _certify_into(shard_path(out_path, shard), share, shard_meta, certify_one, overwrite,
                             count_todo=True, **beat)
        distributed.barrier(world, "the other ranks' shards",
                            timeout=_wait_for_others(time.perf_counter() - t0, todo, len(share)))
        if world.main:
            merge_certify(out_path, [shard_path(out_path, (r, world.size)) for r in range(world.size)],
                          overwrite=overwrite, log=log)
            emit(summary_line(out_path), log)
        distributed.barrier(world, "rank 0's merge")  # every rank returns once OUT is there
    return out_path


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
        line += f"; certifiable radii up to {largest_radius(meta['n_max'], meta['alpha'], meta['sigma']):.3g}"
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
        raise RsmoothError(f"{out} holds a run with {diff[0]}={old.get(diff[0])!r}, not {meta.get(diff[0])!r}; "
                           f"pass --overwrite to replace it or choose another --out")
    return old is not None and bool(old.get("complete")) and out.exists()


def _certify_into(out_path: Path, indices: List[int], meta: dict, certify_one: Callable[[int], Tuple],
                  overwrite: bool, progress: bool, log: Callable[[str], None], count_todo: bool = False,
                  heartbeat: Optional[float] = None):
    """Certify ``indices`` into ``out_path`` (continuing it when it holds the same run) under its
    lock, with a progress bar or heartbeat lines; returns ``out_path``, or the number of examples
    certified here if ``count_todo``."""
    mode = meta["mode"]
    with run_lock(lock_path(out_path), out_path):
        remove_stale_temps(out_path, sidecar_path(out_path), sequential_path(out_path))
        if mode in SEQUENTIAL_MODES:
            adopt_legacy(out_path)  # OUT.seq.tsv of an earlier version
        resume = out_path.exists() and not overwrite
        if resume:
            old = read_sidecar(out_path)
            if old is None:
                raise RsmoothError(f"{out_path} exists without its metadata {sidecar_path(out_path)}; "
                                   f"pass --overwrite to replace it or choose another --out")
            diff = identity_diff(old, meta) + (["shard"] if old.get("shard") != meta.get("shard") else [])
            if diff:
                k = diff[0]
                raise RsmoothError(f"{out_path} holds a run with {k}={old.get(k)!r}, not {meta.get(k)!r}; "
                                   f"pass --overwrite to replace it or choose another --out")
            meta["started"] = old.get("started", meta["started"])
        write_sidecar(out_path, {**meta, "complete": False})

        with CertifyWriter(out_path, resume=resume) as writer, contextlib.ExitStack() as stack:
            seq = (stack.enter_context(SeqWriter(sequential_path(out_path), writer.done_indices))
                   if mode in SEQUENTIAL_MODES else None)
            todo = [i for i in indices if i not in writer.done_indices]
            if resume and writer.done_indices:
                log(f"continuing {out_path}: {len(indices) - len(todo)} of {len(indices)} examples done")
            shard = meta.get("shard")
            desc = _run_name(mode) + ("" if shard is None else f" (shard {shard[0]}/{shard[1]})")
            beat = Heartbeat(len(indices), desc=desc, done=len(indices) - len(todo), interval=heartbeat,
                             enabled=progress, log=log)
            fixed = {"certify": (meta.get("n0") or 0) + (meta.get("n") or 0), "predict": meta.get("n") or 0}
            for i in progress_bar(todo, desc=mode, enabled=progress):
                t0 = time.perf_counter()
                label, pred, radius, cert = certify_one(i)
                if seq is not None:  # first, so every row of OUT has its row in OUT.seq
                    seq.write(i, cert)
                writer.write(i, label, pred, radius, pred == label, time.perf_counter() - t0)
                beat.update(1, cert.samples if cert is not None else fixed.get(mode, 0))
        meta["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        write_sidecar(out_path, {**meta, "complete": True})
    return len(todo) if count_todo else out_path


def _check_out(out: str, checkpoint: Path, overwrite: bool) -> None:
    """``out`` must be a writable file path, not the checkpoint, and --overwrite replaces only a
    certify TSV (a typo must not destroy a model or another file)."""
    path = check_output_file(out, inputs=[checkpoint])
    if overwrite and path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            first = f.read(len(TSV_HEADER) + 2).decode("utf-8", "replace").splitlines()[:1]
        check(first == [TSV_HEADER], f"--out {out} exists and is not a certify TSV; --overwrite replaces only "
                                     f"certify results: choose another --out or delete the file yourself")


def _warn_small_n(n: int, alpha: float, sigma: float, log: Callable[[str], None]) -> None:
    """Say when n is too small for a useful radius: at most sigma * Phi^-1(alpha^(1/n))."""
    r_max = max_certifiable_radius(n, alpha, sigma)
    if r_max <= 0:
        log(f"warning: with n={n} and alpha={alpha} no radius can be certified (every example abstains: "
            f"all n votes for one class give a lower bound alpha^(1/n) < 0.5); raise --n")
    elif r_max < sigma:
        log(f"warning: with n={n} and alpha={alpha} the largest certifiable radius is {r_max:.4g} "
            f"(sigma * Phi^-1(alpha^(1/n)), sigma={sigma}); raise --n for larger radii (papers: 100000)")


def _warn_small_n_max(n_max: int, alpha: float, sigma: float, radii: Optional[Sequence[float]],
                      log: Callable[[str], None]) -> None:
    """Say which radii no example can reach: with every one of n_max samples a vote for c_A, the
    anytime lower bound certifies at most sigma * Phi^-1(lower)."""
    r_max = largest_radius(n_max, alpha, sigma)
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


def _require_sigma(loaded) -> float:
    if loaded.sigma is None:
        raise RsmoothError(f"checkpoint {loaded.path} does not record sigma; pass --sigma "
                           f"(noise std in [0,1] pixel units, e.g. 0.25)")
    return loaded.sigma
