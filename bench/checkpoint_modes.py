"""Samples/s of one trained checkpoint's noisy forward passes in each float32 sampling mode.

For deciding a long run's mode on the machine it runs on: ``Smooth.count_votes`` of one test-sized
input (uniform pixels) in channels-last, channels-last + compile and compile, the modes timed in
turn in each round (the machine's drift hits them alike), one intra-op thread.  Prints each mode's
first-call seconds (compiling) and its samples/s per round.

Usage::

    python bench/checkpoint_modes.py runs/table4-gaussian/runs/fashion-mnist/gaussian_0.25/seed0 --batch-size 128
"""
from __future__ import annotations

import argparse
import time

import torch

from rsmooth.data import dataset_info
from rsmooth.engine import load_model
from rsmooth.smoothing import Smooth

MODES = {"channels_last": dict(channels_last=True), "channels_last+compile": dict(channels_last=True, compile=True),
         "compile": dict(compile=True)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a checkpoint file or run folder")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--samples", type=int, default=12_800, help="noisy samples per round and mode")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    loaded = load_model(args.checkpoint)
    x = torch.rand(1, *dataset_info(loaded.dataset).input_shape)
    smooths = {k: Smooth(loaded.model, loaded.num_classes, loaded.sigma, **v) for k, v in MODES.items()}
    for name, s in smooths.items():
        t = time.perf_counter()
        s.count_votes(x, 2 * args.batch_size, args.batch_size)
        print(f"{name}: first call {time.perf_counter() - t:.1f} s", flush=True)
    rates = {k: [] for k in smooths}
    for r in range(args.rounds):
        for name, s in smooths.items():
            t = time.perf_counter()
            s.count_votes(x, args.samples, args.batch_size, generator=torch.Generator().manual_seed(r))
            rates[name].append(args.samples / (time.perf_counter() - t))
    for name, rs in rates.items():
        print(f"{name}: " + ", ".join(f"{v:,.0f}" for v in rs) + " samples/s")


if __name__ == "__main__":
    main()
