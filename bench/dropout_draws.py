"""What drawing dropout masks per example row costs (issue 21, item 2).

Under ``torchrun`` each rank computes rows ``lo:hi`` of a step's ``n`` examples; to give every
example the mask it gets in one process, :class:`~rsmooth.engine.distributed.ModelDraws` draws
each dropout layer's mask for all ``n`` rows and keeps the rank's.  This times one training step
(forward, backward, SGD step) of a small network with dropout on the rows a rank of W processes
computes, with those draws and with plain ``nn.Dropout`` (the code before), alternated step by
step so that both see the same load, and prints the ratio of the medians (1.0 = free).  The
networks are dropout-heavy on purpose (dropout after every layer, little compute): the worst
case; a convolutional network spends far more of a step outside dropout.

Usage::

    python bench/dropout_draws.py                  # about a minute on one thread
    python bench/dropout_draws.py --steps 200 --batch-size 512
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from rsmooth.engine.distributed import ModelDraws, World, share

#: (name, factory) of networks on 1x28x28 inputs, 10 classes
NETS = {
    "mlp 784-512-512-10, 2 x Dropout": lambda: nn.Sequential(
        nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.5), nn.Linear(512, 512), nn.ReLU(),
        nn.Dropout(0.5), nn.Linear(512, 10)),
    "cnn 2 conv + Dropout2d + Dropout": lambda: nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Dropout2d(0.2), nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(), nn.Linear(32 * 49, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10)),
}


def _step(model, opt, x, y, draws, rows) -> float:
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    if draws is None:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
    else:
        with draws.step(1, rows):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
    opt.step()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60, help="alternated pairs of steps per setting")
    p.add_argument("--batch-size", type=int, default=256, help="examples per step (n)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 8], help="W: a rank computes n / W rows")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    n = args.batch_size
    print(f"one training step on rank 0's rows of {n} examples, median of {args.steps} alternated pairs, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}")
    print("| network | W | rows | per-row masks (ms) | plain dropout (ms) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, factory in NETS.items():
        for w in args.ranks:
            lo, hi = share(n, World(0, w))
            models = {}
            for key in ("rows", "plain"):  # the same network twice: with the draws, and untouched
                torch.manual_seed(0)
                models[key] = factory().train()
            opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
            x, y = torch.rand(hi - lo, 1, 28, 28), torch.randint(10, (hi - lo,))
            timed = {"rows": [], "plain": []}
            with ModelDraws(models["rows"]) as draws:
                for i in range(args.steps + 5):
                    for key in (("rows", "plain") if i % 2 else ("plain", "rows")):
                        t = _step(models[key], opts[key], x, y, draws if key == "rows" else None, (lo, hi, n))
                        if i >= 5:  # warm-up
                            timed[key].append(t)
            a, b = (1000 * statistics.median(timed[k]) for k in ("rows", "plain"))
            print(f"| {name} | {w} | {hi - lo} | {a:.2f} | {b:.2f} | {a / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
