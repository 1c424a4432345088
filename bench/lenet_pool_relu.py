"""LeNet with each max-pool before its ReLU (rsmooth's order) against the reference's ReLU then
pool (jh-jeong/smoothing-consistency ``code/archs/lenet.py``): the same bits, and the forward
passes' time of each, interleaved in one run (one thread, batch 128, channels-last as the
fastest certification mode runs it).  Prints the ratio.

Usage::

    OMP_NUM_THREADS=1 python bench/lenet_pool_relu.py [--rounds 30]
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from rsmooth.models import create_model


def reference(net, x):
    x = F.max_pool2d(F.relu(net.conv1(x)), 2, 2)
    x = F.max_pool2d(F.relu(net.conv2(x)), 2, 2)
    return net.fc2(F.relu(net.fc1(torch.flatten(x, 1))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    torch.manual_seed(0)
    net = create_model("lenet", "fashion-mnist")[1].eval().to(memory_format=torch.channels_last)
    x = torch.rand(args.batch, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    ours, ref = (lambda: net(x)), (lambda: reference(net, x))
    with torch.inference_mode():
        assert torch.equal(ours(), ref())
        times = {"reference (ReLU, then pool)": 0.0, "rsmooth (pool, then ReLU)": 0.0}
        for _ in range(args.rounds):
            for name, f in zip(times, (ref, ours)):
                t = time.perf_counter()
                for _ in range(10):
                    f()
                times[name] += time.perf_counter() - t
    n = args.rounds * 10 * args.batch
    print(f"LeNet forward, batch {args.batch}, channels-last, {torch.get_num_threads()} thread(s), "
          f"{args.rounds} interleaved rounds; outputs equal to the bit")
    for name, t in times.items():
        print(f"  {name}: {n / t:,.0f} samples/s")
    a, b = times.values()
    print(f"  ratio: {a / b:.3f}x")


if __name__ == "__main__":
    main()
