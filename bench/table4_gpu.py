"""The Table 4 Gaussian models certified on all 10,000 Fashion-MNIST test images (a lent GPU).

``bench/gpu_table4.sh`` certified the two models that ``rsmooth reproduce catrs:table4`` trained on
the CPU with the paper's full CERTIFY protocol (n0 = 100, n = 100,000, alpha = 0.001, every test
image) on an H100; the files are in ``docs/reproductions/fashion-mnist-table4/gpu/``.  This prints:

- ours on all the images certified beside the paper's figures (Jeong, Kim, Shin 2023, arXiv
  2212.09000, App. Table 4), each certified accuracy with its 95% Clopper-Pearson interval;
- ours against the authors' released certification (alinlab/smoothing-catrs, commit 3270b65; its
  radius and correct columns in ``docs/reproductions/authors/``) on the same images, paired
  (``rsmooth.metrics.paired``: the ACR difference with its interval, exact McNemar tests);
- the GPU certification against the CPU one of the same model on the images both certified (every
  10th): the same certificates up to the Monte-Carlo noise, which the two devices draw differently.

Usage::

    python bench/table4_gpu.py runs/table4-gaussian
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

import numpy as np

from rsmooth.engine.shards import certify_so_far
from rsmooth.metrics import CertifyResult, acr, clopper_pearson_interval, read_certify_tsv, read_sidecar
from rsmooth.metrics.paired import PairedComparison, compare_paired
from table4_paired import RUNS, _authors_full, paper_row, table_radii  # this folder

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "docs" / "reproductions" / "fashion-mnist-table4" / "gpu"


def _ours(sigma: str) -> Optional[CertifyResult]:
    path = GPU / f"gaussian_{sigma}_all.tsv"
    return read_certify_tsv(path) if path.is_file() else None


def _authors(sigma: str, labels: CertifyResult) -> Optional[CertifyResult]:
    """The authors' certification of all 10,000 images, with the test labels of ``labels``' file
    (their copied columns are idx, radius, correct)."""
    full = _authors_full(sigma)
    if full is None:
        return None
    radius, correct = full  # predict below: the label where correct, else -1 (not copied; unused)
    label = np.full(radius.size, -1, dtype=np.int64)
    label[labels.idx] = labels.label
    idx = np.arange(radius.size)
    return CertifyResult(idx, label, np.where(correct, label, -1), radius, correct, np.zeros(radius.size))


def _summary(c: PairedComparison) -> str:
    lo, hi = c.acr_interval
    worst = min(c.radii, key=lambda r: r.p_value)
    return (f"{c.acr_difference:+.3f} [{lo:+.3f}, {hi:+.3f}] | {max(abs(r.accuracy_a - r.accuracy_b) for r in c.radii) * 100:.1f} "
            f"| {worst.p_value:.2g} (r = {worst.radius:g}) |")


def sessions(sigma: str) -> str:
    """Each certifying session of the GPU file: its device, images, samples/s and batch size, from
    the sidecar's ``sessions`` and the rows' time column (idx in order: each session a prefix)."""
    ours = _ours(sigma)
    if ours is None:
        return ""
    meta = read_sidecar(GPU / f"gaussian_{sigma}_all.tsv") or {}
    marks, per_image = meta.get("sessions", []), meta.get("n0", 0) + meta.get("n", 0)
    starts = [int(e.get("done", 0)) for e in marks] + [ours.n]
    order = np.argsort(ours.idx)
    parts = []
    for e, a, b in zip(marks, starts, starts[1:]):
        seconds, n = float(ours.time[order[a:b]].sum()), b - a
        if n:
            parts.append(f"{n:,} images on {e.get('device', '?')} in {seconds / 60:.1f} min at "
                         f"{n * per_image / seconds / 1e6:.2f}M samples/s (batch {e.get('batch_size'):,})")
    return "; ".join(parts)


def all_images() -> List[str]:
    """Ours on every image certified, beside the paper's figures and the authors' same images."""
    lines: List[str] = []
    for sigma, _, _ in RUNS:
        ours = _ours(sigma)
        if ours is None:
            continue
        paper, radii = paper_row(sigma), table_radii(sigma)
        theirs = _authors(sigma, ours)
        cells = [f"{acr(ours.radius, ours.correct):.3f} ({paper.acr:.3f})"]
        for r in radii:
            k = int((ours.correct & (ours.radius >= r)).sum())
            lo, hi = clopper_pearson_interval(k, ours.n)
            p = paper.accuracy_at(r)
            mark = "" if 100 * lo <= p <= 100 * hi else " **outside**"
            cells.append(f"{100 * k / ours.n:.1f} ({p:.1f}) [{100 * lo:.1f}, {100 * hi:.1f}]{mark}")
        lines.append(f"| {sigma} | {ours.n:,} | " + " | ".join(cells) + " |")
        if theirs is not None:
            c = compare_paired(ours, theirs, radii)
            lines.append(f"| {sigma} | authors' on the same {c.images:,} | {c.acr_b:.3f} | "
                         + " | ".join(f"{100 * r.accuracy_b:.1f}" for r in c.radii) + " |")
    if not lines:
        return []
    radii = table_radii("0.50")
    return ["| sigma | images | ACR (paper) | " + " | ".join(f"r = {r:g} (paper) [95% interval]" for r in radii) + " |",
            "|---:|---|" + "---:|" * (len(radii) + 1), *lines]


def paired_rows(root: Optional[Path]) -> List[str]:
    """Paired comparisons: ours (GPU) vs the authors' on the same images; ours GPU vs ours CPU."""
    lines: List[str] = []
    for sigma, folder, _ in RUNS:
        ours = _ours(sigma)
        if ours is None:
            continue
        radii = table_radii(sigma)
        theirs = _authors(sigma, ours)
        if theirs is not None:
            c = compare_paired(ours, theirs, radii)
            lines.append(f"| {sigma} | ours (GPU) - authors' | {c.images:,} | {_summary(c)}")
        cpu = None if root is None else certify_so_far(root / "runs" / "fashion-mnist" / folder / "seed0" / "certify.tsv")[0]
        if cpu is not None:
            c = compare_paired(ours, cpu, radii)
            lines.append(f"| {sigma} | ours, GPU - CPU (same model and seed, other noise) | {c.images:,} | {_summary(c)}")
    if not lines:
        return []
    return ["| sigma | pair | images | ACR difference [95% interval] | largest gap in certified accuracy (points) "
            "| smallest exact McNemar p |", "|---:|---|---:|---|---:|---|", *lines]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", nargs="?", help="the --out folder of the CPU reproduction (for GPU vs CPU)")
    root = p.parse_args().root
    print("\n".join([*all_images(), "", *paired_rows(Path(root) if root else None)]))


if __name__ == "__main__":
    main()
