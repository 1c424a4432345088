"""How long an ``rsmooth`` command takes to start, against an earlier version, measured in one run.

Every torchrun rank, every ``rsmooth reproduce`` step and every test that runs the CLI starts a
Python process that imports rsmooth and builds the command line; this times that start (``python
-c "import rsmooth.cli; rsmooth.cli.build_parser()"``) for this checkout's ``src`` and for the
``src`` of another git revision (checked out in a temporary worktree), alternating the two so
that a busy machine slows both alike, and prints the medians, their ratio, and torch's own import
time as the floor; then the same start followed by loading the digits training set (what most
test subprocesses and the demo do).

Usage::

    python bench/startup.py --before HEAD~1 --repeats 15
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = "import rsmooth.cli; rsmooth.cli.build_parser()"
DIGITS = START + "; from rsmooth.data import get_dataset; get_dataset('digits', 'train')"


def timed(code: str, src: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="HEAD~1", help="the git revision to compare with (default HEAD~1)")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), args.before], check=True)
        try:
            times = {"before": [], "now": [], "torch": [], "digits before": [], "digits now": []}
            for _ in range(args.repeats):
                times["before"].append(timed(START, old / "src"))
                times["now"].append(timed(START, ROOT / "src"))
                times["torch"].append(timed("import torch", ROOT / "src"))
                times["digits before"].append(timed(DIGITS, old / "src"))
                times["digits now"].append(timed(DIGITS, ROOT / "src"))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"start of an rsmooth command (import rsmooth.cli + build_parser), median of {args.repeats}, "
          f"alternating; {os.cpu_count()} CPUs")
    print(f"  {args.before}: {med['before']:.2f} s")
    print(f"  this checkout: {med['now']:.2f} s  ({med['before'] / med['now']:.2f}x faster, "
          f"{med['before'] - med['now']:.2f} s less per process)")
    print(f"  import torch alone: {med['torch']:.2f} s")
    print(f"the same start, then the digits training set loaded: {args.before} {med['digits before']:.2f} s, "
          f"this checkout {med['digits now']:.2f} s ({med['digits before'] / med['digits now']:.2f}x, "
          f"{med['digits before'] - med['digits now']:.2f} s less)")


if __name__ == "__main__":
    main()
