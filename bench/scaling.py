"""Scaling of certification with the number of processes W (torchrun, 1 thread per process).

For W = 1 and W = 2 (``--worlds``), ``torchrun --standalone --nproc-per-node W`` runs this file
as a worker: every rank joins the process group, waits for the others, then runs
``run_certification`` exactly as ``torchrun -m rsmooth -- certify`` does (rank r certifies shard
r/W, rank 0 merges); the clock runs from that barrier to the end of the merge, so model loading,
the final barrier and the merge count, the interpreter's start does not.  Throughput is noisy
samples per second, ``examples * (n0 + n) / seconds``; scaling efficiency is
``throughput(W) / (W * throughput(1))`` (target >= 0.8).  Each rank's CPU time over the wall
time tells whether it had a core to itself (below 1: other jobs took the core).  The runs alternate W = 1, 2, 1, 2, ...
(``--repeats`` rounds) and the best of each W counts, as the machine is shared.  The model is a
LeNet trained for one epoch on the built-in digits data (the speed does not depend on training).

Usage::

    python bench/scaling.py                      # about 2 minutes on 2 cores
    python bench/scaling.py --n 20000 --max 40 --repeats 3
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Tuple

N0 = 100


def worker(args: argparse.Namespace) -> None:
    import torch

    from rsmooth.engine import run_certification
    from rsmooth.engine import distributed

    torch.set_num_threads(1)
    w = distributed.world()
    with distributed.process_group(torch.device("cpu")):
        distributed.barrier(w, "the start")
        t0, c0 = time.perf_counter(), time.process_time()
        run_certification(args.checkpoint, args.out, n0=N0, n=args.n, max=args.max, batch_size=args.batch_size,
                          device="cpu", progress=False, log=lambda s: None)
        print(f"CPU {time.process_time() - c0:.4f}", flush=True)
        if w.main:
            print(f"SECONDS {time.perf_counter() - t0:.4f}", flush=True)


def run_world(size: int, checkpoint: Path, out: Path, args: argparse.Namespace) -> Tuple[float, float]:
    """(wall seconds, the ranks' mean CPU seconds / wall seconds) of one run with ``size`` ranks."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = ["torchrun", "--standalone", "--nproc-per-node", str(size), __file__, "--", "--worker",
           "--checkpoint", str(checkpoint), "--out", str(out), "--n", str(args.n), "--max", str(args.max),
           "--batch-size", str(args.batch_size)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("SECONDS ")]
    if done.returncode or not lines:
        sys.exit(f"W={size} failed:\n{done.stderr[-3000:]}")
    wall = float(lines[0].split()[1])
    cpu = [float(ln.split()[1]) for ln in done.stdout.splitlines() if ln.startswith("CPU ")]
    return wall, sum(cpu) / len(cpu) / wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="Monte Carlo samples per example (default: 10000)")
    p.add_argument("--max", type=int, default=24, help="examples certified per run (default: 24)")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=2, help="rounds of W = 1, 2, ... (default: 2)")
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    from rsmooth.engine import TrainConfig, train

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train(TrainConfig(dataset="digits", epochs=1, hparams={"sigma": 0.25}), tmp / "model",
              progress=False, log=lambda s: None)
        best = {}
        for r in range(args.repeats):
            for size in args.worlds:
                out = tmp / f"c{size}-{r}.tsv"
                best[size] = min(best.get(size, (float("inf"), 0.0)), run_world(size, tmp / "model", out, args))
        load = os.getloadavg()
    samples = args.max * (N0 + args.n)
    base = samples / best[args.worlds[0]][0] / args.worlds[0]
    print(f"certify scaling: digits LeNet, {args.max} examples, n0={N0}, n={args.n}, batch {args.batch_size}, "
          f"1 thread per process, best of {args.repeats}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average after the runs {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print("| W | seconds | samples/s | efficiency | CPU time / wall time per rank |")
    print("|---|---|---|---|---|")
    for size in args.worlds:
        wall, cpu_share = best[size]
        rate = samples / wall
        print(f"| {size} | {wall:.2f} | {rate:,.0f} | {rate / (size * base):.2f} | {cpu_share:.2f} |")
    print("\nCPU time / wall time below 1: the rank waited for a core (other jobs on the machine).")


if __name__ == "__main__":
    main()
