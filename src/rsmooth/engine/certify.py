"""The certification driver: CERTIFY or PREDICT over a test subset, written as it goes.

Each example's noise comes from a generator seeded by ``(seed, idx)``, so results do not
depend on the order, on interruptions or on how the work is split: a killed run resumes
where it stopped (rows already in the TSV are skipped) and gives the same file.
Run metadata (sigma, n0, n, alpha, subset, precision, seed, checkpoint hash, versions) goes
to the sidecar JSON so the TSV stays readable by every public codebase.
"""
from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Callable, Optional


from ..errors import RsmoothError, check
from ..fileio import remove_stale_temps, run_lock
from ..metrics import CertifyWriter, read_sidecar, sidecar_path, write_sidecar
from ..metrics.certify_io import TSV_HEADER
from ..paths import check_output_file
from ..smoothing import Smooth, max_certifiable_radius, validate_alpha, validate_count, validate_sigma
from .checkpoint import (file_sha256, git_commit, load_model, resolve_checkpoint_path, resolve_device,
                         versions)
from .seeding import generator, validate_seed
from ..progress import progress_bar

#: sidecar fields that must agree for a run to continue an existing TSV
_RUN_IDENTITY = ("mode", "dataset", "split", "sigma", "n0", "n", "alpha", "skip", "max", "seed",
                 "checkpoint_sha256", "precision", "channels_last")


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
    batch_size: Optional[int] = None,
    skip: int = 1,
    max: Optional[int] = None,
    seed: int = 0,
    precision: str = "fp32",
    channels_last: bool = False,
    compile: bool = False,
    data_dir: Optional[str] = None,
    device: Optional[str] = None,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """Certify (or predict) every ``skip``-th ``split`` example, at most ``max`` of them.

    sigma and dataset default to the checkpoint's.  Writes ``out`` (TSV, one row per
    example, flushed as it goes; PREDICT rows carry radius 0) and ``out.json`` (metadata).
    An existing ``out`` from the same settings is continued; from other settings it is an
    error unless ``overwrite``.
    """
    from ..data import certify_indices, get_dataset
    from ..smoothing import DEFAULT_BATCH_SIZE

    check(mode in ("certify", "predict"), f"mode must be certify or predict, got {mode!r}")
    n = validate_count("n", n)
    if mode == "certify":
        n0 = validate_count("n0", n0)
    alpha = validate_alpha(alpha)
    batch_size = validate_count("batch_size", DEFAULT_BATCH_SIZE if batch_size is None else batch_size)
    skip = validate_count("skip", skip)
    max = None if max is None else validate_count("max", max)
    seed = validate_seed(seed)
    if sigma is not None:
        sigma = validate_sigma(sigma)
    dev = resolve_device(device)
    _check_out(out, resolve_checkpoint_path(checkpoint), overwrite)
    loaded = load_model(checkpoint, dataset=dataset)
    sigma = validate_sigma(sigma if sigma is not None else _require_sigma(loaded))
    if mode == "certify":
        _warn_small_n(n, alpha, sigma, log)
    model = loaded.model.to(dev)
    data = get_dataset(loaded.dataset, split, data_dir=data_dir)
    indices = certify_indices(len(data), skip=skip, max=max)
    smooth = Smooth(model, loaded.num_classes, sigma, precision=precision,
                    channels_last=channels_last, compile=compile)

    out_path = Path(out)
    meta = {
        "mode": mode, "dataset": loaded.dataset, "split": split, "sigma": sigma,
        "n0": n0 if mode == "certify" else None, "n": n, "alpha": alpha, "batch_size": batch_size,
        "skip": skip, "max": max, "num_examples": len(indices), "seed": seed,
        **smooth.mode(), "checkpoint": str(loaded.path), "checkpoint_sha256": file_sha256(loaded.path),
        "arch": loaded.arch, "data_fingerprint": data.fingerprint(), "device": str(dev),
        "versions": versions(), "git_commit": git_commit(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    with run_lock(Path(f"{out_path}.lock"), out_path):
        remove_stale_temps(out_path, sidecar_path(out_path))
        resume = out_path.exists() and not overwrite
        if resume:
            old = read_sidecar(out_path)
            if old is None:
                raise RsmoothError(f"{out_path} exists without its metadata {sidecar_path(out_path)}; "
                                   f"pass --overwrite to replace it or choose another --out")
            diff = [k for k in _RUN_IDENTITY if old.get(k) != meta.get(k)]
            if diff:
                k = diff[0]
                raise RsmoothError(f"{out_path} holds a run with {k}={old.get(k)!r}, not {meta.get(k)!r}; "
                                   f"pass --overwrite to replace it or choose another --out")
            meta["started"] = old.get("started", meta["started"])
        write_sidecar(out_path, {**meta, "complete": False})

        with CertifyWriter(out_path, resume=resume) as writer:
            todo = [i for i in indices if i not in writer.done_indices]
            if resume and writer.done_indices:
                log(f"continuing {out_path}: {len(indices) - len(todo)} of {len(indices)} examples done")
            bar = progress_bar(todo, desc=mode, enabled=progress)
            for i in bar:
                x, label = data[i]
                g = generator(seed, mode, i, device=dev)
                t0 = time.perf_counter()
                if mode == "certify":
                    pred, radius = smooth.certify(x, n0, n, alpha, batch_size, generator=g)
                else:
                    pred, radius = smooth.predict(x, n, alpha, batch_size, generator=g), 0.0
                writer.write(i, int(label), pred, radius, pred == int(label), time.perf_counter() - t0)
        meta["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        write_sidecar(out_path, {**meta, "complete": True})
    return out_path


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


def _require_sigma(loaded) -> float:
    if loaded.sigma is None:
        raise RsmoothError(f"checkpoint {loaded.path} does not record sigma; pass --sigma "
                           f"(noise std in [0,1] pixel units, e.g. 0.25)")
    return loaded.sigma
