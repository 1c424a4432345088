"""A certified-accuracy table with the alpha split and --skip-wrong (issue 39 items 2-3), one run.

100 Fashion-MNIST test images (every 100th), radii 0.25/0.5/0.75, alpha 0.001, n_max 100,000:
``rsmooth certify --sequential`` (packed, fastest mode: ``run_certification`` with the tuner) with
the anytime bound alone (``alpha_share 1``, the rule before issue 39), with the default split, and
with the split and ``skip_wrong``; against Cohen et al.'s published loop at n = 100,000
(bench/certify_throughput.py's CohenSmooth, batch 1000, timed on ``--cohen-images`` images and
scaled to the table's).  Per row: wall time, its ratio to Cohen's, the certified counts at each
radius and the samples per image (n0 + n; fixed n draws 100,100).

Usage::

    python bench/table_split.py --checkpoint runs/fm025 --data-dir /usr/share/datasets
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
from certify_throughput import CohenSmooth  # noqa: E402

from rsmooth.data import get_dataset  # noqa: E402
from rsmooth.engine import load_model, run_certification  # noqa: E402
from rsmooth.metrics import certified_accuracy, read_certify_tsv  # noqa: E402
from rsmooth.smoothing.sequential import ALPHA_SHARE  # noqa: E402

RADII = [0.25, 0.5, 0.75]


def seq_samples(out: Path):
    """{idx: (c_a, samples)} from OUT.seq."""
    rows = [ln.split("\t") for ln in Path(f"{out}.seq").read_text().splitlines()[1:]]
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data-dir")
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--n-max", type=int, default=100_000)
    ap.add_argument("--cohen-images", type=int, default=2)
    ap.add_argument("--shares", type=float, nargs="+", default=[1.0, ALPHA_SHARE])
    ap.add_argument("--compile", action="store_true",
                    help="add a row: the last share with --skip-wrong and --compile (inductor)")
    ap.add_argument("--fixed", action="store_true",
                    help="add a row: fixed n = n_max (CERTIFY, packed fastest mode) on the same images, "
                         "whose certified counts the sequential rows must equal within one image")
    args = ap.parse_args()
    loaded = load_model(args.checkpoint)
    data = get_dataset(loaded.dataset, "test", data_dir=args.data_dir)
    skip = len(data) // args.images
    common = dict(mode="sequential", radii=RADII, n_max=args.n_max, skip=skip, max=args.images,
                  data_dir=args.data_dir, progress=False, log=lambda s: None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(f"sequential, alpha_share {s:g}", dict(alpha_share=s)) for s in args.shares]
        runs.append((f"sequential, alpha_share {args.shares[-1]:g}, --skip-wrong",
                     dict(alpha_share=args.shares[-1], skip_wrong=True)))
        if args.compile:
            runs.append((f"sequential, alpha_share {args.shares[-1]:g}, --skip-wrong --compile",
                         dict(alpha_share=args.shares[-1], skip_wrong=True, compile=True)))
        if args.fixed:
            runs.append((f"fixed n = {args.n_max:,} (CERTIFY), packed fastest mode",
                         dict(mode="certify", n=args.n_max, radii=None)))
        for name, kw in runs:
            out = Path(tmp) / f"{len(rows)}.tsv"
            t0 = time.perf_counter()
            run_certification(args.checkpoint, str(out), **{**common, **kw})
            wall = time.perf_counter() - t0
            res = read_certify_tsv(out)
            fixed = kw.get("mode") == "certify"
            seq = ({i: (p, 100 + args.n_max) for i, p in zip(res.idx, res.predict)} if fixed
                   else seq_samples(out))
            counts = [int(round(a * res.n)) for a in certified_accuracy(res.radius, res.correct, RADII)]
            samples = sum(s for _, s in seq.values())
            # what --skip-wrong would draw on the same noise: n0 for an image whose c_A is not its label
            skipped = sum(100 if c != lab else s for (c, s), lab in zip((seq[i] for i in res.idx), res.label))
            rows.append((name, wall, counts, samples / res.n, skipped / res.n))
            print(f"  {name}: {wall:,.0f} s, certified {counts}, {samples / res.n:,.0f} samples/image "
                  f"({skipped / res.n:,.0f} with --skip-wrong)", flush=True)
    smooth = CohenSmooth(loaded.model, loaded.num_classes, loaded.sigma)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    for k in range(args.cohen_images):
        smooth.certify(data[k * skip][0], 100, 100_000, 0.001, 1000)
    cohen = (time.perf_counter() - t0) * args.images / args.cohen_images
    print(f"\n{loaded.dataset} sigma {loaded.sigma:g}, {args.images} test images (every {skip}th), radii "
          f"{'/'.join(map(str, RADII))}, alpha 0.001, n_max {args.n_max:,}; torch threads {torch.get_num_threads()}\n")
    print("| how | wall | vs Cohen et al. | certified at 0.25 / 0.5 / 0.75 | samples per image | vs fixed n |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    print(f"| Cohen et al.'s loop, n = 100,000, batch 1000 | {cohen:,.0f} s (timed on {args.cohen_images} images) "
          f"| 1 | - | 100,100 | 1 |")
    for name, wall, counts, per_image, _ in rows:
        print(f"| {name} | {wall:,.0f} s | {cohen / wall:.1f}x | {' / '.join(map(str, counts))} "
              f"| {per_image:,.0f} | {100_100 / per_image:.1f}x fewer |")


if __name__ == "__main__":
    main()
