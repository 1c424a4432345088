"""What the sound Gaussian costs (issue 38, item 3), measured in one run.

Part A, samples/s: PREDICT through the packer (``Smooth.stream``, batch 256, 4 images) with the
float Gaussian and with ``sound-gaussian`` at sigma = 0.25, on LeNet (1x28x28) and ResNet-20
(3x32x32, random weights), alternating the two noises ``--reps`` times and taking each one's
best (per second of wall time, or with ``--cpu-time`` of the process's CPU time: on a loaded
machine, where threads wait for each other, use it with ``--threads 1``); and the draw alone (``Noise.draw`` into a [256 x C x H x W] buffer).

Part B (with ``--checkpoint``): ``rsmooth certify`` of the same Fashion-MNIST test images (every
``--skip``-th, ``--max`` of them) with each noise, then ``rsmooth analyze --paired`` of the two
files: each one's ACR and the difference's 95% interval over the images.

Usage::

    python bench/sound_noise.py                                            # part A, a few minutes
    python bench/sound_noise.py --threads 1 --cpu-time                     # part A on a loaded machine
    python bench/sound_noise.py --checkpoint runs/fm025 --n 1000 --max 500  # and part B
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from rsmooth.cli import main
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth
from rsmooth.smoothing.noises import make_noise
from rsmooth.smoothing.procedures import Predict

SIGMA = 0.25
SHAPES = [("lenet", "fashion-mnist", (1, 28, 28), 4096), ("cifar_resnet20", "cifar10", (3, 32, 32), 1024)]


def samples_per_second(model, shape, noise, n, clock, images=4, batch_size=256):
    smooth = Smooth(model, 10, noise)
    xs = torch.randint(0, 256, (images, *shape), generator=torch.Generator().manual_seed(0)).float() / 255
    items = [(i, xs[i], torch.Generator().manual_seed(i)) for i in range(images)]
    t0 = clock()
    list(smooth.stream(Predict(n, 0.001), items, batch_size))
    return images * n / (clock() - t0)


def draws_per_second(shape, noise, clock, reps=20):
    out, x = torch.empty(256, *shape), torch.randint(0, 256, shape).float() / 255
    gen = torch.Generator().manual_seed(0)
    noise.draw(out, x, gen)
    t0 = clock()
    for _ in range(reps):
        noise.draw(out, x, gen)
    return 256 * reps / (clock() - t0)


def part_a(reps, clock):
    noises = {name: make_noise(name, SIGMA) for name in ("gaussian", "sound-gaussian")}
    for arch, dataset, shape, n in SHAPES:
        model = create_model(arch, dataset).eval()
        best = {name: 0.0 for name in noises}
        for _ in range(reps):
            for name, noise in noises.items():
                best[name] = max(best[name], samples_per_second(model, shape, noise, n, clock))
        draws = {name: draws_per_second(shape, noise, clock) for name, noise in noises.items()}
        print(f"{arch} {shape}: samples/s gaussian {best['gaussian']:,.0f}, sound {best['sound-gaussian']:,.0f}, "
              f"ratio {best['sound-gaussian'] / best['gaussian']:.3f}; draws/s alone gaussian "
              f"{draws['gaussian']:,.0f}, sound {draws['sound-gaussian']:,.0f}, "
              f"ratio {draws['sound-gaussian'] / draws['gaussian']:.3f}", flush=True)


def part_b(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name in ("gaussian", "sound-gaussian"):
        path = out / f"{name}.tsv"
        t0 = time.perf_counter()
        assert main(["certify", "--checkpoint", args.checkpoint, "--noise", name, "--n", str(args.n), "--n0", str(args.n0),
                     "--skip", str(args.skip), "--max", str(args.max), "--batch-size", "1000", "--device", "cpu",
                     "--out", str(path)]) == 0
        print(f"certify --noise {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        files.append(str(path))
    main(["analyze", *files, "--paired", "--labels", "gaussian", "sound-gaussian"])


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--checkpoint", help="a Fashion-MNIST model (run folder or file) for part B")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--n0", type=int, default=100)
    p.add_argument("--skip", type=int, default=20)
    p.add_argument("--max", type=int, default=500)
    p.add_argument("--out", default="runs/bench-sound")
    p.add_argument("--skip-a", action="store_true", help="part B only")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--cpu-time", action="store_true",
                   help="part A per second of this process's CPU time, not of wall time (a loaded machine)")
    return p.parse_args()


if __name__ == "__main__":
    args = parse()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs", flush=True)
    if not args.skip_a:
        part_a(args.reps, time.process_time if args.cpu_time else time.perf_counter)
    if args.checkpoint:
        part_b(args)
