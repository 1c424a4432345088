"""Per-epoch noisy test accuracy of the Table 4 Gaussian runs beside the CAT-RS authors' released logs.

Reads each run's ``train.log`` (one JSON line per epoch: ``test_acc_noisy`` on the whole test set,
one noise draw per image) and the authors' ``test acc`` column (alinlab/smoothing-catrs,
``data/fmnist/noise_<sigma>/cohen/log.txt``, copied with its commit into
``docs/reproductions/authors/``; their epochs count from 0, ours from 1) and draws both in one PNG.

Usage::

    python bench/table4_curves.py runs/table4-gaussian --out docs/reproductions/fashion-mnist-table4-curves.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rsmooth.report.plots import plot_curves

AUTHORS = Path(__file__).resolve().parents[1] / "docs" / "reproductions" / "authors"
#: (sigma as the authors' files name it, our run folder)
RUNS = (("0.25", "gaussian_0.25"), ("0.50", "gaussian_0.50"))


def ours(run: Path):
    rows = [json.loads(line) for line in (run / "train.log").read_text().splitlines() if line.startswith("{")]
    rows = [r for r in rows if "test_acc_noisy" in r]  # evaluated epochs
    return [r["epoch"] for r in rows], [100 * r["test_acc_noisy"] for r in rows]


def authors(sigma: str):
    lines = (AUTHORS / f"catrs_fmnist_noise_{sigma}_cohen_test_acc.tsv").read_text().splitlines()
    rows = [line.split("\t") for line in lines if line[:1].isdigit()]
    return [int(e) + 1 for e, _ in rows], [float(a) for _, a in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="the --out folder of 'rsmooth reproduce catrs:table4 --methods gaussian'")
    p.add_argument("--out", default="docs/reproductions/fashion-mnist-table4-curves.png")
    args = p.parse_args()
    curves = []
    for sigma, folder in RUNS:
        run = Path(args.root) / "runs" / "fashion-mnist" / folder / "seed0"
        if (run / "train.log").is_file():
            curves.append((f"rsmooth, sigma {sigma}", *ours(run)))
        curves.append((f"CAT-RS authors' log, sigma {sigma}", *authors(sigma)))
    print(plot_curves(curves, args.out, ylabel="noisy test accuracy (%)",
                      title="Fashion-MNIST LeNet, Gaussian training (Jeong, Kim, Shin 2023, arXiv 2212.09000)"))


if __name__ == "__main__":
    main()
