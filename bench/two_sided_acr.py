"""ACR of two-sided against one-sided certificates on the same votes (issue 39 item 1).

Each image's noise is drawn once (its generator seeded by (seed, "certify", i), as ``rsmooth
certify`` seeds it): c_A from the n0 selection samples, then the n estimation counts give both
certificates: Cohen et al.'s one-sided CERTIFY (p_B = 1 - p_A) and the two-sided one (p_A lower and
the runner-up's p_B upper at alpha/2 each; Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Thm. 1).
Also reports how spread the votes are (the mean share of the estimation votes outside c_A that the
runner-up holds), which decides which certificate is larger.

Usage::

    python bench/two_sided_acr.py --checkpoint runs/digits100 --max 100 --n 100000
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from rsmooth.data import get_dataset
from rsmooth.engine import load_model
from rsmooth.metrics import acr, certified_accuracy
from rsmooth.seeding import generator
from rsmooth.smoothing import Smooth
from rsmooth.smoothing.procedures import Certify, runner_up


class Both(Certify):
    """CERTIFY returning (c_A, one-sided radius or None, two-sided radius or None, runner-up share)."""

    def steps(self, noise, label=None):
        counts0, counts = yield self.n0, self.n
        c_a = int(np.argmax(counts0))
        one = Certify(self.n0, self.n, self.alpha).certificate(noise, counts, c_a)
        two = Certify(self.n0, self.n, self.alpha, two_sided=True).certificate(noise, counts, c_a)
        rest = self.n - int(counts[c_a])
        return c_a, one, two, runner_up(counts, c_a) / rest if rest else 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--n0", type=int, default=100)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--skip", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir")
    args = ap.parse_args()
    loaded = load_model(args.checkpoint)
    data = get_dataset(loaded.dataset, "test", data_dir=args.data_dir)
    smooth = Smooth(loaded.model, loaded.num_classes, loaded.sigma)
    indices = list(range(0, len(data), args.skip))[:args.max]
    labels = {i: int(data[i][1]) for i in indices}
    items = ((i, data[i][0], generator(args.seed, "certify", i)) for i in indices)
    t0 = time.perf_counter()
    rows = {i: r for i, r, _ in smooth.stream(Both(args.n0, args.n, args.alpha), items, args.batch_size)}
    seconds = time.perf_counter() - t0
    out = {}
    for name, k in (("one-sided", 1), ("two-sided", 2)):
        pred = np.array([rows[i][k][0] for i in indices])
        radius = np.array([rows[i][k][1] for i in indices])
        correct = pred == np.array([labels[i] for i in indices])
        out[name] = (acr(radius, correct), certified_accuracy(radius, correct, [0.0, 0.25, 0.5, 0.75, 1.0]),
                     int((pred < 0).sum()))
    spread = np.mean([rows[i][3] for i in indices])
    print(f"{loaded.dataset} sigma {loaded.sigma:g} ({args.checkpoint}), {len(indices)} test images (every "
          f"{args.skip}th), n0 {args.n0}, n {args.n:,}, alpha {args.alpha:g}; {seconds:.0f} s; runner-up's mean share "
          f"of the votes outside c_A: {spread:.2f}\n")
    print("| certificate | ACR | certified accuracy at 0 / 0.25 / 0.5 / 0.75 / 1.0 | abstains |")
    print("| --- | ---: | --- | ---: |")
    for name, (a, accs, abstains) in out.items():
        print(f"| {name} | {a:.4f} | {' / '.join(f'{x:.2f}' for x in accs)} | {abstains} |")
    print(f"\ntwo-sided / one-sided ACR: {out['two-sided'][0] / out['one-sided'][0]:.4f}")


if __name__ == "__main__":
    main()
