"""CAT-RS consistency targets y_hat (papers/000 App. C.5, eq. 10; SPEC.md 2).

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
``OUT.done.npy`` (memory-mapped, flushed after each block of images), so a killed run loses at
most the block in flight and resumes where it stopped with identical results.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from ..errors import RsmoothError, check
from ..progress import progress_bar
from ..smoothing import Smooth, validate_count, validate_sigma
from .checkpoint import file_sha256, resolve_device, load_model, versions
from .seeding import generator

#: images per resumable block (fixed, so seeds and augmentation do not depend on restarts)
BLOCK = 256
#: metadata fields that must agree for a run to continue partial files
_IDENTITY = ("dataset", "split", "data_fingerprint", "checkpoint_sha256", "sigma", "num_samples",
             "augment", "seed")


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
) -> Path:
    """Compute (or continue computing) the consistency targets of ``checkpoint``'s model.

    Args:
        checkpoint: a Gaussian-trained model (rsmooth or public checkpoint).
        out: output ``.npy`` path.
        dataset: default the checkpoint's; sigma: default the checkpoint's (0.25 in papers).
        num_samples: N noises per image (10,000 in papers/000; 500 for ImageNet).
        augment: targets on augmented training images, drawn once (reference) or not.
        stop_after_blocks: stop as if killed after this many blocks (tests).
        overwrite: recompute even if ``out`` exists (otherwise a finished file with the same
            settings is returned as is, and one with other settings is an error).
    """
    from ..data import get_dataset
    from ..smoothing import DEFAULT_BATCH_SIZE

    num_samples = validate_count("num_samples", num_samples)
    batch_size = validate_count("batch_size", batch_size or DEFAULT_BATCH_SIZE)
    loaded = load_model(checkpoint, dataset=dataset)
    check(sigma is not None or loaded.sigma is not None,
          f"checkpoint {loaded.path} does not record sigma; pass --sigma (0.25 in the papers)")
    sigma = validate_sigma(sigma if sigma is not None else loaded.sigma)
    dev = resolve_device(device)
    data = get_dataset(loaded.dataset, "train", data_dir=data_dir)
    smooth = Smooth(loaded.model.to(dev), loaded.num_classes, sigma, precision=precision,
                    channels_last=channels_last)
    out_path = Path(out)
    meta = {"kind": "rsmooth-targets", "dataset": loaded.dataset, "split": "train",
            "data_fingerprint": data.fingerprint(), "checkpoint": str(loaded.path),
            "checkpoint_sha256": file_sha256(loaded.path), "arch": loaded.arch, "sigma": sigma,
            "num_samples": num_samples, "augment": bool(augment), "seed": seed,
            "num_classes": loaded.num_classes, **smooth.mode(), "versions": versions()}
    partial, done_path = out_path.with_name(out_path.name + ".partial.npy"), out_path.with_name(out_path.name + ".done.npy")
    n, k = len(data), loaded.num_classes
    out_path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(_meta_path(out_path).read_text()) if _meta_path(out_path).exists() else None
    diff = [f for f in _IDENTITY if old is not None and old.get(f) != meta.get(f)]
    if out_path.exists() and not overwrite:
        if old is None or diff:
            what = f"{diff[0]}={old.get(diff[0])!r}, not {meta.get(diff[0])!r}" if diff else "no metadata"
            raise RsmoothError(f"{out_path} exists with {what}; pass --overwrite or choose another --out")
        log(f"{out_path} is already computed")
        return out_path
    if partial.exists() and done_path.exists() and old is not None and not overwrite:
        if diff:
            raise RsmoothError(f"{partial} was started with {diff[0]}={old.get(diff[0])!r}, not "
                               f"{meta.get(diff[0])!r}; delete {partial} and {done_path} to start over")
        counts = np.load(partial, mmap_mode="r+")
        done = np.load(done_path, mmap_mode="r+")
        log(f"continuing {out_path}: {int(done.sum())} of {len(done)} blocks done")
    else:
        _write_json(_meta_path(out_path), {**meta, "complete": False})
        counts = np.lib.format.open_memmap(partial, mode="w+", dtype=np.int32, shape=(n, k))
        done = np.lib.format.open_memmap(done_path, mode="w+", dtype=np.uint8, shape=((n + BLOCK - 1) // BLOCK,))
    todo = [b for b in range(len(done)) if not done[b]]
    bar = progress_bar(total=n, initial=n - sum(min(BLOCK, n - b * BLOCK) for b in todo), desc="targets",
                       enabled=progress)
    for i, b in enumerate(todo):
        if stop_after_blocks is not None and i >= stop_after_blocks:
            return out_path
        idx = torch.arange(b * BLOCK, min((b + 1) * BLOCK, n))
        x, _ = data.get_batch(idx, augment=augment, generator=generator(seed, "targets-augment", b))
        votes = smooth.count_votes(x, num_samples, batch_size, generator=generator(seed, "targets", b, device=dev))
        counts[idx.numpy()] = votes.cpu().numpy()
        counts.flush()
        done[b] = 1
        done.flush()
        bar.update(len(idx))
    bar.close()
    freqs = (np.asarray(counts, dtype=np.float64) / num_samples).astype(np.float32)
    tmp = out_path.with_name(f".{out_path.name}.tmp.npy")
    np.save(tmp, freqs)
    os.replace(tmp, out_path)
    _write_json(_meta_path(out_path), {**meta, "complete": True})
    del counts, done
    partial.unlink()
    done_path.unlink()
    return out_path


def load_targets(path: str, dataset) -> torch.Tensor:
    """Read a targets file and check it was made for ``dataset`` (a training-split Dataset).

    Returns float32 [N x K].  A file made for another dataset, split, size, class count or
    example order is refused with a one-line error.
    """
    from ..data import check_fingerprint

    p = Path(path)
    check(p.exists(), f"targets file {p} does not exist; make it with 'rsmooth targets'")
    mp = _meta_path(p)
    check(mp.exists(), f"targets file {p} has no metadata {mp}; make it with 'rsmooth targets'")
    try:
        meta = json.loads(mp.read_text())
        arr = np.load(p, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise RsmoothError(f"cannot read targets file {p}: {str(e).splitlines()[0][:120]}") from None
    check(meta.get("complete", False), f"targets file {p} is incomplete; rerun 'rsmooth targets' to finish it")
    check_fingerprint(meta.get("data_fingerprint", {}), dataset.fingerprint(), f"targets file {p}")
    check(arr.ndim == 2 and arr.shape == (len(dataset), dataset.num_classes),
          f"targets file {p} has shape {arr.shape}, expected ({len(dataset)}, {dataset.num_classes})")
    check(bool(np.isfinite(arr).all()) and bool(np.allclose(arr.sum(1), 1.0, atol=1e-4)),
          f"targets file {p} does not hold frequencies (rows must sum to 1)")
    return torch.from_numpy(arr.astype(np.float32))


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
