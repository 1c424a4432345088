"""Calibrate the CPU cost model of ``rsmooth reproduce`` (``rsmooth.reproduce.cost.CPU_THROUGHPUT``
and ``CPU_STEP_SECONDS``) from the log of a reproduction run one step after another (``--jobs 1``,
which logs ``TITLE: done in 12s`` after each step), and print the model's estimate beside the
time each kind of step took.

Training: a least-squares fit of each train step's seconds = overhead + passes / rate (the passes
of the step's command, ``cost.step_passes``).  Forward passes: the median samples/s that the
certify steps' estimate lines measured; the certify and targets overheads are the median of
seconds - passes / that rate.  The machine is shared: expect the figures to move by 2x with the
load.

Usage::

    rsmooth reproduce catrs:table4 --budget smoke --out t4 > t4.log
    python bench/reproduce_cpu_cost.py t4.log --table catrs:table4 --budget smoke
"""
from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

import numpy as np

from rsmooth.reproduce import get_table, parse_budget, plan
from rsmooth.reproduce.cost import cpu_seconds, step_passes


def seconds(text: str) -> float:
    """``1h02m``, ``3m12s`` or ``42s`` (progress.format_duration) in seconds."""
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    h, mi, s = (int(g or 0) for g in m.groups())
    return 3600 * h + 60 * mi + s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--table", default="catrs:table4")
    ap.add_argument("--budget", default="smoke")
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args()
    text = Path(args.log).read_text()
    took = {m[1]: seconds(m[2]) for m in re.finditer(r"^   (.+): done in (\S+)$", text, re.M)}
    rates = [float(r.replace(",", "")) for r in re.findall(r"^estimate: .* at ([\d,]+) samples/s", text, re.M)]
    steps = plan(get_table(args.table), parse_budget(args.budget), list(range(args.seeds)), Path("OUT"))
    rows = [(s.title, kind, passes, arch, took[s.title]) for s, kind, passes, arch in step_passes(steps)
            if s.title in took]
    print(f"{len(rows)} of {len(steps)} steps timed in {args.log}")
    train = [(p, t) for _, k, p, _, t in rows if k == "train"]
    if len(train) >= 2:
        a = np.array([[1.0, p] for p, _ in train])
        (overhead, per_pass), *_ = np.linalg.lstsq(a, np.array([t for _, t in train]), rcond=None)
        print(f"train: overhead {overhead:.1f} s per step, {1 / per_pass:,.0f} images/s (forward + backward)")
    if rates:
        forward = statistics.median(rates)
        print(f"forward: {forward:,.0f} samples/s (median of {len(rates)} certify estimate lines)")
        for kind in ("targets", "certify"):
            rest = [t - p / forward for _, k, p, _, t in rows if k == kind]
            if rest:
                print(f"{kind}: overhead {statistics.median(rest):.1f} s per step (median of {len(rest)})")
    print("\nkind      steps  took (s)  model (s)")
    for kind in ("train", "targets", "certify"):
        mine = [r for r in rows if r[1] == kind]
        if mine:
            print(f"{kind:9} {len(mine):5}  {sum(r[4] for r in mine):8.0f}  "
                  f"{sum(cpu_seconds(kind, r[2], r[3]) for r in mine):9.0f}")
    print(f"{'all':9} {len(rows):5}  {sum(r[4] for r in rows):8.0f}  "
          f"{sum(cpu_seconds(r[1], r[2], r[3]) for r in rows):9.0f}")


if __name__ == "__main__":
    main()
