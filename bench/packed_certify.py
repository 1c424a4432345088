"""Certification with many images per forward pass (issue 23), measured in one run.

Part A, samples/s: fixed CERTIFY and sequential certification of LeNet (Fashion-MNIST, trained)
and ResNet-20 (CIFAR-10 shapes, random weights), each one image at a time (``Smooth.certify`` /
``certify_sequential`` per image: what every path did before packing), packed (``Smooth.stream``,
same batch 256 and format), and packed in the fastest exact mode (``--batch-size auto
--channels-last`` measured, :mod:`rsmooth.smoothing.tuning`).

Part B, a certified-accuracy table (radii 0.25/0.5/0.75, 100 Fashion-MNIST test images, every
100th): wall time and certified counts of Cohen et al.'s published algorithm at n = 100,000
(``core.py``'s loop, bench/certify_throughput.py's CohenSmooth, batch 1000; timed on
``--cohen-images`` of the images and scaled to 100), rsmooth fixed n = 100,000 (packed, fastest
mode), rsmooth sequential one image at a time (batch 256, NCHW) and rsmooth sequential packed in
its fastest mode.

Part C, achieved FLOP/s of the packed fastest mode against the CPU's float32 peak, taken as the
best of 5 products of two 2048 x 2048 float32 matrices (torch.mm, same threads).

Usage::

    python bench/packed_certify.py --checkpoint runs/fm025/checkpoint.pt     # about 25 minutes
    python bench/packed_certify.py --quick                                  # about 3 minutes
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from certify_throughput import CohenSmooth, cpu_name, train_lenet  # noqa: E402

from rsmooth.data import get_dataset  # noqa: E402
from rsmooth.engine.checkpoint import load_model  # noqa: E402
from rsmooth.models import create_model  # noqa: E402
from rsmooth.smoothing import Smooth  # noqa: E402
from rsmooth.smoothing.procedures import Certify, Sequential  # noqa: E402
from rsmooth.smoothing.tuning import fastest  # noqa: E402

RADII = (0.25, 0.5, 0.75)


def gen(i):
    return torch.Generator().manual_seed(i)


def one_at_a_time(smooth, procedure, xs, batch_size):
    """(results, samples, seconds) certifying each image by itself."""
    t0 = time.perf_counter()
    results = [[r for _, r, _ in smooth.stream(procedure, [(i, x, gen(i))], batch_size)][0] for i, x in enumerate(xs)]
    return results, sum(procedure.samples(r) for r in results), time.perf_counter() - t0


def packed(smooth, procedure, xs, batch_size):
    """(results in order, samples, seconds) with every image in one stream."""
    t0 = time.perf_counter()
    got = {i: r for i, r, _ in smooth.stream(procedure, ((i, x, gen(i)) for i, x in enumerate(xs)), batch_size)}
    results = [got[i] for i in range(len(xs))]
    return results, sum(procedure.samples(r) for r in results), time.perf_counter() - t0


def part_a(model, xs, sigma, num_classes, n, n_max, log):
    base = Smooth(model, num_classes, sigma)
    fast, tuning = fastest(model, num_classes, sigma, xs[0], samples=10 ** 9)
    log(f"  fastest exact mode: batch {tuning.batch_size}, {'channels-last' if tuning.channels_last else 'NCHW'} "
        f"{tuning.note}")
    rows = []
    for name, procedure in (("certify n=%d" % n, Certify(100, n, 0.001)),
                            ("sequential n_max=%d" % n_max, Sequential(100, 0.001, n_max, 0.05, RADII))):
        runs = {"one image at a time": one_at_a_time(base, procedure, xs, 256),
                "packed": packed(base, procedure, xs, 256),
                "packed, fastest mode": packed(fast, procedure, xs, tuning.batch_size)}
        ref = runs["one image at a time"]
        for how, (results, samples, seconds) in runs.items():
            same = "yes" if _same(results, ref[0]) else "NO"
            rows.append((name, how, samples / seconds, samples / seconds / (ref[1] / ref[2]), same))
            log(f"  {name:22s} {how:22s} {samples / seconds:10,.0f} samples/s  x{rows[-1][3]:.2f}  same results: {same}")
    return rows, tuning


def _same(a, b):
    return all((x.prediction, x.radius, x.n) == (y.prediction, y.radius, y.n) if hasattr(x, "n") else x == y
               for x, y in zip(a, b))


def certified(results, labels):
    """Certified counts at RADII (radius > r, or >= r for a sequential radius decided robust)."""
    out = []
    for r in RADII:
        out.append(sum(1 for res, y in zip(results, labels)
                       if (res.prediction if hasattr(res, "prediction") else res[0]) == y
                       and (res.radius >= r if hasattr(res, "prediction") else res[1] >= r)))
    return out


def part_b(model, sigma, num_classes, cohen_images, log, images=100):
    data = get_dataset("fashion-mnist", "test")
    idx = list(range(0, 10000, 10000 // images))
    xs = [data[i][0] for i in idx]
    labels = [int(data[i][1]) for i in idx]
    rows = []
    cohen = CohenSmooth(model, num_classes, sigma)
    t0 = time.perf_counter()
    for x in xs[:cohen_images]:
        cohen.certify(x, 100, 100_000, 0.001, 1000)
    cohen_wall = (time.perf_counter() - t0) * len(xs) / cohen_images
    log(f"  Cohen et al. core.py, n=100,000, batch 1000: {cohen_wall:,.0f} s for {len(xs)} images "
        f"(timed on {cohen_images})")
    rows.append(("Cohen et al.'s published algorithm, n = 100,000", cohen_wall, None))
    fast, tuning = fastest(model, num_classes, sigma, xs[0], samples=10 ** 9)
    for name, smooth, procedure, batch, run in (  # sequential first: back to back with Cohen's
            ("rsmooth sequential, one image at a time (batch 256, NCHW)", Smooth(model, num_classes, sigma),
             Sequential(100, 0.001, 100_000, 0.05, RADII), 256, one_at_a_time),
            ("rsmooth sequential, packed, fastest mode", fast, Sequential(100, 0.001, 100_000, 0.05, RADII),
             tuning.batch_size, packed),
            ("rsmooth fixed n = 100,000 (packed, fastest mode)", fast, Certify(100, 100_000, 0.001),
             tuning.batch_size, packed)):
        results, samples, seconds = run(smooth, procedure, xs, batch)
        rows.append((name, seconds, certified(results, labels)))
        log(f"  {name:60s} {seconds:9,.1f} s  x{cohen_wall / seconds:7.1f}  certified {rows[-1][2]}  "
            f"{samples:,} samples ({samples / seconds:,.0f}/s)")
    return rows, tuning


def flops_per_sample(model, shape):
    """2 x multiply-adds of the convolutions and linear layers for one input."""
    total = [0]

    def hook(m, inp, out):
        if isinstance(m, nn.Conv2d):
            total[0] += 2 * out.numel() * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, nn.Linear):
            total[0] += 2 * out.numel() * m.in_features
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.inference_mode():
        model(torch.zeros(1, *shape))
    for h in handles:
        h.remove()
    return total[0]


def peak_flops(size=2048, repeats=5):
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size ** 3 / best


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", help="a trained Fashion-MNIST LeNet (default: 400 SGD steps here)")
    p.add_argument("--quick", action="store_true", help="part B on 20 images, Cohen's algorithm timed on 2")
    p.add_argument("--cohen-images", type=int, default=10, help="images Cohen's algorithm is timed on (default 10)")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads (default 1: on a shared 2-core machine 2 threads run erratically; 0: torch's)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    log = print
    isa = "AVX512-BF16" if "avx512_bf16" in open("/proc/cpuinfo").read() else "no AVX512-BF16"
    log(f"machine: {cpu_name()} ({os.cpu_count()} cores, {isa}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    if args.checkpoint:
        loaded = load_model(args.checkpoint)
        lenet, sigma = loaded.model.eval(), loaded.sigma
    else:
        lenet, sigma = train_lenet(400), 0.25
    data = get_dataset("fashion-mnist", "test")
    log("Part A: LeNet, Fashion-MNIST, 20 test images")
    a_lenet, _ = part_a(lenet, [data[i][0] for i in range(0, 2000, 100)], sigma, 10, 10_000, 20_000, log)
    log("Part A: ResNet-20, CIFAR-10 shapes (random weights and images), 5 images")
    torch.manual_seed(0)
    resnet = create_model("cifar_resnet20", "cifar10").eval()
    part_a(resnet, list(torch.rand(5, 3, 32, 32)), 0.25, 10, 1000, 2000, log)
    images = 20 if args.quick else 100
    log(f"Part B: certified-accuracy table, {images} Fashion-MNIST test images, radii 0.25/0.5/0.75")
    part_b(lenet, sigma, 10, 2 if args.quick else args.cohen_images, log, images)
    flops = flops_per_sample(lenet, (1, 28, 28))
    fastest_rate = max(rate for _, how, rate, _, _ in a_lenet if how == "packed, fastest mode")
    peak = peak_flops()
    log(f"Part C: LeNet {flops / 1e6:.2f} MFLOP per sample; packed fastest mode {fastest_rate:,.0f} samples/s = "
        f"{flops * fastest_rate / 1e9:.1f} GFLOP/s; float32 peak (2048^3 sgemm, best of 5) {peak / 1e9:.1f} GFLOP/s "
        f"-> {100 * flops * fastest_rate / peak:.1f}% of peak")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
