"""Our Table 4 Gaussian certifications beside the CAT-RS authors' released ones, image by image.

The authors released the certify TSV of every Fashion-MNIST row (alinlab/smoothing-catrs,
``data/fmnist/noise_<sigma>/cohen/noise_<sigma>.tsv``, all 10,000 test images); the rows of the
images we certify (every 10th, idx 0, 10, ..., 9990) are copied in ``docs/reproductions/authors/``.
On the same images the two models' certificates are paired, so the comparison is free of the
test-subset's sampling error that the intervals against the paper's 10,000-image figures carry:

- certified accuracy at each radius of the table, ours and the authors' on the same images, and
  the paper's (all 10,000 images);
- the discordant images (certified at r by one model only) and the exact McNemar test of "the
  two models certify as often" (two-sided binomial test of the discordant counts at 1/2);
- ACR on the same images and the paired difference with its 95% interval (normal, per image);

all computed by ``rsmooth.metrics.paired`` (``rsmooth analyze A B --paired``).

The authors' script prints radii with 3 significant digits (``{:.3}``: 1.7496 -> 1.75), which the
paper's figures were computed from; ours are written at full precision.  The table gives ours both
ways: as written, and rounded as the authors' script prints them (what the paper's numbers mean).

Usage::

    python bench/table4_paired.py runs/table4-gaussian
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import List

import numpy as np

from rsmooth.engine.shards import certify_so_far
from rsmooth.metrics import read_certify_tsv
from rsmooth.metrics.paired import compare_paired, printed_radii
from rsmooth.report.paper import paper_table

ROOT = Path(__file__).resolve().parents[1]
AUTHORS = ROOT / "docs" / "reproductions" / "authors"
#: (sigma as printed, our run folder, the authors' file of every 10th image)
RUNS = (("0.25", "gaussian_0.25", "catrs_fmnist_noise_0.25_cohen_certify_every10th.tsv"),
        ("0.50", "gaussian_0.50", "catrs_fmnist_noise_0.50_cohen_certify_every10th.tsv"))


def paper_row(sigma: str):
    """The paper's Gaussian row of Table 4 at ``sigma`` (as printed, e.g. "0.50")."""
    return next(p for p in paper_table("catrs:table4") if p.method == "gaussian"
                and math.isclose(p.sigma, float(sigma)) and p.dataset == "fashion-mnist")


def table_radii(sigma: str) -> List[float]:
    """The table's radii that n = 100,000 can certify at ``sigma`` (below 3.8115 sigma)."""
    return sorted(r for r in paper_row(sigma).accuracy if r < 3.8115 * float(sigma))


def paired(root: Path) -> List[str]:
    """The markdown lines of the paired comparison (empty when either side is missing)."""
    lines: List[str] = []
    for sigma, folder, name in RUNS:
        ours, _ = certify_so_far(root / "runs" / "fashion-mnist" / folder / "seed0" / "certify.tsv")
        if ours is None or not (AUTHORS / name).is_file():
            continue
        theirs = read_certify_tsv(AUTHORS / name)
        paper, radii = paper_row(sigma), table_radii(sigma)
        c = compare_paired(ours, theirs, radii)
        printed = compare_paired(dataclasses.replace(ours, radius=printed_radii(ours.radius)), theirs, radii)
        for r, row, p in zip(radii, c.radii, printed.radii):
            lines.append(f"| {sigma} | {r:g} | {c.images:,} | {100 * row.accuracy_a:.1f} | {100 * p.accuracy_a:.1f} | "
                         f"{100 * row.accuracy_b:.1f} | {paper.accuracy_at(r):.1f} | {p.only_a} | {p.only_b} | "
                         f"{p.p_value:.2g} |")
        lo, hi = c.acr_interval
        lines.append(f"| {sigma} | ACR | {c.images:,} | {c.acr_a:.3f} | {printed.acr_a:.3f} | {c.acr_b:.3f} | "
                     f"{paper.acr:.3f} | difference {c.acr_difference:+.3f} | 95% [{lo:+.3f}, {hi:+.3f}] | |")
    if not lines:
        return []
    return ["| sigma | radius | images | ours | ours, radii as the authors' script prints them | authors' (same "
            "images) | paper (10,000 images) | certified by ours only | by the authors' only | exact McNemar p |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *lines]


def _authors_full(sigma: str):
    """(radius, correct) of the authors' certification of all 10,000 test images (idx order), or None."""
    import csv

    path = AUTHORS / f"catrs_fmnist_noise_{sigma}_cohen_radius_correct.tsv"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [int(r["idx"]) for r in rows] == list(range(10_000)), path
    return np.array([float(r["radius"]) for r in rows]), np.array([r["correct"] == "1" for r in rows])


def subsets() -> List[str]:
    """The markdown lines of the authors' certification over all 10,000 images against the paper's
    figures (which it reproduces), and over each of the ten every-10th subsets (start 0..9)."""
    lines: List[str] = []
    for sigma, _, _ in RUNS:
        full = _authors_full(sigma)
        if full is None:
            continue
        radius, correct = full
        paper = paper_row(sigma)
        columns = ["ACR", *table_radii(sigma)]

        def figures(mask):
            return [(radius * correct)[mask].mean() if c == "ACR" else 100 * (correct & (radius >= c))[mask].mean()
                    for c in columns]

        every = np.arange(10_000)
        by_start = np.array([figures(every % 10 == k) for k in range(10)])
        cells = [("paper (as printed)", [paper.acr, *(paper.accuracy_at(c) for c in columns[1:])]),
                 ("authors' TSV, all 10,000 images", figures(every >= 0)),
                 ("authors' TSV, every 10th from 0 (the images certified here)", by_start[0]),
                 ("authors' TSV, the ten every-10th subsets: lowest", by_start.min(axis=0)),
                 ("authors' TSV, the ten every-10th subsets: highest", by_start.max(axis=0))]
        lines.append(f"| sigma {sigma} | " + " | ".join(str(c) if c == "ACR" else f"{c:g}" for c in columns) + " |")
        lines.append("|---|" + "---:|" * len(columns))
        lines += [f"| {name} | " + " | ".join(f"{v:.3f}" if c == "ACR" else f"{v:.1f}" for c, v in zip(columns, vals))
                  + " |" for name, vals in cells]
        lines.append("")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="the --out folder of the reproduction")
    print("\n".join([*paired(Path(p.parse_args().root)), "", *subsets()]))


if __name__ == "__main__":
    main()
