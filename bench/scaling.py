"""Scaling of certification and training with the number of processes W (torchrun, 1 thread per process).

Certification: for W = 1 and W = 2 (``--worlds``), ``torchrun --standalone --nproc-per-node W`` runs this file
as a worker: every rank joins the process group, waits for the others, then runs
``run_certification`` exactly as ``torchrun -m rsmooth -- certify`` does (rank r certifies shard
r/W, rank 0 merges); the clock runs from that barrier to the end of the merge, so model loading,
the final barrier and the merge count, the interpreter's start does not.  Throughput is noisy
samples per second, ``examples * (n0 + n) / seconds``; scaling efficiency is
``throughput(W) / (W * throughput(1))`` (target >= 0.8).  Each rank's CPU time over the wall
time tells whether it had a core to itself (below 1: other jobs took the core).  The runs alternate W = 1, 2, 1, 2, ...
(``--repeats`` rounds) and the best of each W counts, as the machine is shared.  The model is a
LeNet trained for one epoch on the built-in digits data (the speed does not depend on training).

Training: the engine's epoch loop (``_Run.epoch``: loader, chunking, DistributedDataParallel
steps, the statistics' all-reduce; no evaluation) over the first ``--train-examples`` Fashion-MNIST
training images with LeNet, for the Gaussian and CAT-RS steps of the presets
fashion-mnist/gaussian/0.50 and fashion-mnist/catrs/0.50 (CAT-RS with random consistency
targets; its speed does not depend on them).  Throughput is training images per second, timed
from a barrier after start-up to the end of the epoch; efficiency as above (target >= 0.7).

Usage::

    python bench/scaling.py                      # about 4 minutes on 2 cores
    python bench/scaling.py --parts train --repeats 3
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Tuple

N0 = 100
#: the training steps measured: method -> preset
TRAIN_SETTINGS = {"gaussian": "fashion-mnist/gaussian/0.50", "catrs": "fashion-mnist/catrs/0.50"}


def train_worker(args: argparse.Namespace) -> None:
    import torch

    from rsmooth.data import get_dataset
    from rsmooth.data.base import InMemoryDataset
    from rsmooth.engine import TrainConfig, distributed
    from rsmooth.engine.train import _fast_modes, _make_scheduler, _Run
    from rsmooth.methods import create_method
    from rsmooth.models import create_model
    from rsmooth.presets import get_preset

    torch.set_num_threads(1)
    w, cpu = distributed.world(), torch.device("cpu")
    full = get_dataset("fashion-mnist", "train")
    k = args.train_examples
    data = InMemoryDataset("train", full.images[:k], full.targets[:k], info=full.dataset_info)
    c = TrainConfig(**get_preset(TRAIN_SETTINGS[args.method]).train_config(), device="cpu").resolved()
    method = create_method(c.method, **c.hparams)
    extras = {"targets": torch.softmax(torch.randn(k, 10, generator=torch.Generator().manual_seed(0)), 1)}
    with distributed.process_group(cpu):
        torch.manual_seed(0)
        model = create_model(c.arch, c.dataset)
        opt = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay)
        run = _Run(c, method, model, *_fast_modes(model, c, cpu, w), opt, _make_scheduler(opt, c),
                   torch.amp.GradScaler("cpu", enabled=False), w, cpu,
                   {k: v for k, v in extras.items() if k in method.requires})
        with run:
            distributed.barrier(w, "the start")
            t0, c0 = time.perf_counter(), time.process_time()
            run.epoch(data, 0, progress=False)
            print(f"CPU {time.process_time() - c0:.4f}", flush=True)
            if w.main:
                print(f"SECONDS {time.perf_counter() - t0:.4f}", flush=True)


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


def run_world(size: int, worker_args) -> Tuple[float, float]:
    """(wall seconds, the ranks' mean CPU seconds / wall seconds) of one run with ``size`` ranks."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = ["torchrun", "--standalone", "--nproc-per-node", str(size), __file__, "--", *map(str, worker_args)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = re.findall(r"SECONDS (\d+\.\d{4})", done.stdout)  # the ranks' lines may interleave
    if done.returncode or not seconds:
        sys.exit(f"W={size} failed:\n{done.stderr[-3000:]}")
    wall = float(seconds[0])
    cpu = [float(t) for t in re.findall(r"CPU (\d+\.\d{4})", done.stdout)]
    return wall, sum(cpu) / len(cpu) / wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="Monte Carlo samples per example (default: 10000)")
    p.add_argument("--max", type=int, default=24, help="examples certified per run (default: 24)")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=2, help="rounds of W = 1, 2, ... (default: 2)")
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--parts", nargs="+", choices=["certify", "train"], default=["certify", "train"])
    p.add_argument("--train-examples", type=int, default=4096,
                   help="Fashion-MNIST training images per timed epoch (default: 4096; CAT-RS: a quarter)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--train-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if args.train_worker:
        return train_worker(args)
    load = os.getloadavg()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average before "
          f"the runs {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    if "certify" in args.parts:
        certify_part(args)
    if "train" in args.parts:
        train_part(args)


def table(unit: str, amount: float, best, worlds) -> None:
    base = amount / best[worlds[0]][0] / worlds[0]
    print(f"| W | seconds | {unit}/s | efficiency | CPU time / wall time per rank |")
    print("|---|---|---|---|---|")
    for size in worlds:
        wall, cpu_share = best[size]
        rate = amount / wall
        print(f"| {size} | {wall:.2f} | {rate:,.0f} | {rate / (size * base):.2f} | {cpu_share:.2f} |")
    print("\nCPU time / wall time below 1: the rank waited for a core (other jobs on the machine).\n")


def train_part(args: argparse.Namespace) -> None:
    for method in TRAIN_SETTINGS:
        examples = args.train_examples // (4 if method == "catrs" else 1)
        best = {}
        for _ in range(args.repeats):
            for size in args.worlds:
                best[size] = min(best.get(size, (float("inf"), 0.0)), run_world(
                    size, ["--train-worker", "--method", method, "--train-examples", examples]))
        print(f"train scaling: {TRAIN_SETTINGS[method]} (LeNet), one epoch of {examples} Fashion-MNIST "
              f"images, 1 thread per process, best of {args.repeats}\n")
        table("images", examples, best, args.worlds)


def certify_part(args: argparse.Namespace) -> None:

    from rsmooth.engine import TrainConfig, train

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train(TrainConfig(dataset="digits", epochs=1, hparams={"sigma": 0.25}), tmp / "model",
              progress=False, log=lambda s: None)
        best = {}
        for r in range(args.repeats):
            for size in args.worlds:
                best[size] = min(best.get(size, (float("inf"), 0.0)), run_world(size, [
                    "--worker", "--checkpoint", tmp / "model", "--out", tmp / f"c{size}-{r}.tsv", "--n", args.n,
                    "--max", args.max, "--batch-size", args.batch_size]))
    print(f"certify scaling: digits LeNet, {args.max} examples, n0={N0}, n={args.n}, batch {args.batch_size}, "
          f"1 thread per process, best of {args.repeats}\n")
    table("samples", args.max * (N0 + args.n), best, args.worlds)


if __name__ == "__main__":
    main()
