"""The certification driver: CERTIFY or PREDICT over a test subset, written as it goes.

Each example's noise comes from a generator seeded by ``(seed, idx)``, so results do not
depend on the order, on interruptions or on how the work is split: a killed run resumes
where it stopped (rows already in the TSV are skipped) and gives the same file.
Run metadata (SPEC.md 1: sigma, n0, n, alpha, subset, precision, seed, checkpoint hash,
versions) goes to the sidecar JSON so the TSV stays readable by every public codebase.
"""
from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Callable, Optional


from ..errors import RsmoothError, check
from ..metrics import CertifyWriter, read_sidecar, sidecar_path, write_sidecar
from ..progress import progress_bar
from ..smoothing import Smooth, validate_alpha, validate_count, validate_sigma
from .checkpoint import file_sha256, resolve_device, git_commit, load_model, versions
from .seeding import generator

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
    batch_size = validate_count("batch_size", batch_size or DEFAULT_BATCH_SIZE)
    loaded = load_model(checkpoint, dataset=dataset)
    sigma = validate_sigma(sigma if sigma is not None else _require_sigma(loaded))
    dev = resolve_device(device)
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


def _require_sigma(loaded) -> float:
    if loaded.sigma is None:
        raise RsmoothError(f"checkpoint {loaded.path} does not record sigma; pass --sigma "
                           f"(noise std in [0,1] pixel units, e.g. 0.25)")
    return loaded.sigma
