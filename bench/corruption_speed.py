"""How much generating corruptions on the fly costs next to certifying the images.

For every corruption of both suites: images per second of ``rsmooth.corruptions.corrupt`` (one
process, one thread) on Fashion-MNIST test images (``mnist-c`` suite, 1x28x28) and on 3x32x32
colour images (``cifar10-c`` suite; CIFAR-10 itself is not on this machine, so Fashion-MNIST
images tinted per channel stand in), and the ratio of generating one image to certifying it
(a LeNet, n0 = 100, n = --n, measured in the same run).

Usage::

    python bench/corruption_speed.py            # about 2 minutes
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from rsmooth.corruptions import SUITES, corrupt
from rsmooth.data import get_dataset
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth


def _rate(images: np.ndarray, name: str, suite: str, level) -> float:
    t0 = time.perf_counter()
    corrupt(images, name, level, suite=suite, seed=0, indices=range(len(images)))
    return len(images) / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=200, help="images per corruption (default 200)")
    p.add_argument("--n", type=int, default=10_000, help="certification samples per image (default 10000)")
    args = p.parse_args()
    torch.set_num_threads(1)
    data = get_dataset("fashion-mnist", "test")
    grey = data.get_batch(torch.arange(args.images))[0].numpy()
    tint = np.array([1.0, 0.8, 0.6], dtype=np.float32).reshape(1, 3, 1, 1)
    colour = np.pad(grey, ((0, 0), (0, 0), (2, 2), (2, 2))) * tint  # 3x32x32

    model = create_model("lenet", "fashion-mnist").eval()
    smooth = Smooth(model, 10, 0.25, channels_last=True)
    x = torch.from_numpy(grey[0])
    smooth.certify(x, 100, 1000, 0.001, 256)  # warm up
    t0 = time.perf_counter()
    for i in range(3):
        smooth.certify(torch.from_numpy(grey[i]), 100, args.n, 0.001, 256, generator=torch.Generator().manual_seed(i))
    cert_s = (time.perf_counter() - t0) / 3
    print(f"certifying one Fashion-MNIST image (LeNet, n0 100, n {args.n}): {cert_s:.2f} s\n")
    corrupt(grey[:2], "identity", None, suite="mnist-c", seed=0, indices=range(2))  # warm up
    print("| suite | corruption | level | images/s | generate / certify |")
    print("| --- | --- | ---: | ---: | ---: |")
    for suite, images in (("mnist-c", grey), ("cifar10-c", colour)):
        for c in SUITES[suite].corruptions.values():
            level = c.default if c.default is not None else (c.severities[-1] if c.severities else None)
            rate = _rate(images, c.name, suite, level)
            print(f"| {suite} | {c.name} | {'-' if level is None else level} | {rate:,.0f} | "
                  f"{1 / rate / cert_s:.5f} |")


if __name__ == "__main__":
    main()
