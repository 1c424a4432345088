"""Samples, wall time and certified accuracy of ``certify --sequential`` / ``--adaptive`` against fixed n.

For one checkpoint and test subset this runs (or continues: the results are ordinary resumable
certify files in ``--out``)

* fixed: ``rsmooth certify --n N`` (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918: n = 100,000);
* sequential: ``rsmooth certify --sequential --radii R... --n-max N``;
* adaptive: ``rsmooth certify --adaptive --radius-tol T --n-max N`` for each ``--tol T``;
* with ``--grid G...``: ``--sequential --radii G...`` once more, a certified-accuracy curve on a grid;

and prints one markdown table: mean samples per image (n0 + n, fixed: n0 + N), how many times
fewer than fixed, wall time (the sum of each TSV's time column: the certification work itself,
so continued runs count what they did before), certified accuracy (%) at each radius (correct
and radius >= r) and its difference from fixed in points, and ACR (for --sequential only the
decided radii are exact, so its ACR is not shown).

Usage::

    python bench/sequential_vs_fixed.py --checkpoint runs/fm025 --skip 100 --out bench_out/fm025
    python bench/sequential_vs_fixed.py --checkpoint runs/fm050 --skip 100 --tol 0.1 0.05 \
        --grid 0 0.25 0.5 0.75 1 1.25 1.5 1.75 --out bench_out/fm050

With ``OMP_NUM_THREADS=1`` each run uses one thread (the BENCHMARKS.md figures).
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import List

import numpy as np

from rsmooth.engine.certify import run_certification
from rsmooth.engine.seqfile import sequential_path
from rsmooth.metrics import read_certify_tsv


def _samples(path: Path) -> np.ndarray:
    with open(sequential_path(path), encoding="utf-8") as f:
        return np.array([int(row["samples"]) for row in csv.DictReader(f, delimiter="\t")])


def main(argv: List[str] = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True, help="folder of the certify files (continued when there)")
    ap.add_argument("--skip", type=int, default=100, help="every K-th test image (default 100)")
    ap.add_argument("--max", type=int, default=None, help="at most this many images")
    ap.add_argument("--radii", type=float, nargs="+", default=[0.25, 0.5, 0.75],
                    help="l2 radii in [0,1] pixel units decided by --sequential and tabulated (default 0.25 0.5 0.75)")
    ap.add_argument("--tol", type=float, nargs="*", default=[0.1, 0.05], help="--radius-tol values of --adaptive")
    ap.add_argument("--grid", type=float, nargs="*", default=[],
                    help="radii of a second --sequential run (a certified-accuracy curve; include --radii)")
    ap.add_argument("--n", type=int, default=100_000, help="fixed n and the sequential modes' n-max (default 100000)")
    ap.add_argument("--n0", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = dict(n0=args.n0, alpha=args.alpha, skip=args.skip, max=args.max, seed=args.seed, log=lambda m: None)
    runs = [("fixed n", out / "fixed.tsv", dict(mode="certify", n=args.n)),
            ("--sequential", out / "seq.tsv", dict(mode="sequential", radii=args.radii, n_max=args.n))]
    runs += [(f"--adaptive tol {t:g}", out / f"adaptive-{t:g}.tsv", dict(mode="adaptive", radius_tol=t, n_max=args.n))
             for t in args.tol]
    if args.grid:
        runs.append((f"--sequential, {len(args.grid)} radii {min(args.grid):g}-{max(args.grid):g}", out / "grid.tsv",
                     dict(mode="sequential", radii=args.grid, n_max=args.n)))
    for name, path, kw in runs:
        print(f"{name}: {path}", file=sys.stderr)
        run_certification(args.checkpoint, str(path), progress=sys.stderr.isatty(), **common, **kw)

    fixed = read_certify_tsv(runs[0][1])
    head = ["mode", "mean samples per image", "fewer than fixed", "wall (s)",
            *[f"cert. acc. {r:g} (%)" for r in args.radii], "ACR"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def accuracy(res, r):
        return 100 * float(np.mean((res.correct == 1) & (res.radius >= r)))

    for name, path, kw in runs:
        res = read_certify_tsv(path)
        if not np.array_equal(res.idx, fixed.idx):
            raise SystemExit(f"{path} and {runs[0][1]} hold different images; remove one and rerun")
        samples = np.full(len(res.idx), args.n0 + args.n) if kw["mode"] == "certify" else _samples(path)
        acc = [accuracy(res, r) for r in args.radii]
        diffs = [a - accuracy(fixed, r) for a, r in zip(acc, args.radii)]
        cells = [f"{a:.1f}" + ("" if kw["mode"] == "certify" else f" ({d:+.1f})") for a, d in zip(acc, diffs)]
        acr = "-" if kw["mode"] == "sequential" else f"{float(np.mean(res.radius * (res.correct == 1))):.3f}"
        lines.append(f"| {name} | {samples.mean():,.0f} | {(args.n0 + args.n) / samples.mean():.1f}x | "
                     f"{float(np.sum(res.time)):.0f} | " + " | ".join(cells) + f" | {acr} |")
    table = f"{len(fixed.idx)} images, {Path(args.checkpoint)}\n\n" + "\n".join(lines)
    print(table)
    return table


if __name__ == "__main__":
    main()
