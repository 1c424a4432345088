"""Noisy samples per second of ``Smooth.certify`` on CPU, against what no certifier can avoid.

For LeNet on Fashion-MNIST (1x28x28) and CIFAR ResNet-20 (3x32x32), and for each sampling
mode of ``Smooth`` (float32, channels-last, bfloat16, ``torch.compile``), one process
measures:

* ``certify``: noisy samples per second of ``Smooth.certify(x, n0=100, n, alpha=0.001,
  batch_size)``, i.e. (n0 + n) / wall time;
* (a) the unavoidable cost at the same batch size and precision: drawing the noise into a
  preallocated buffer plus the model's forward pass on a preallocated batch (the mode's
  dtype, memory format and, for compiled modes, the compiled model);
* (b) the published algorithm as written in Cohen et al.'s ``core.py``: repeat the input,
  ``randn_like * sigma``, float32, batch 1000, counts in Python on the CPU.

The machine is shared and noisy, so every rate is the best of ``--repeats`` interleaved
runs.  A LeNet trained briefly with Gaussian noise (sigma 0.25) gives the fraction of noisy
samples whose vote differs from float32 in each faster mode.

Usage::

    python bench/certify_throughput.py            # about 10 minutes
    python bench/certify_throughput.py --quick    # about 1 minute, smaller n
    python bench/certify_throughput.py --n 20000 --repeats 2
"""
from __future__ import annotations

import argparse
import copy
import math
import platform
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from rsmooth.data import get_dataset
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth, clopper_pearson_lower
from rsmooth.smoothing.smooth import DEFAULT_BATCH_SIZE, _Frozen

SIGMA = 0.25
N0 = 100
ALPHA = 0.001
COHEN_BATCH = 1000

#: mode name -> Smooth options
MODES = {
    "fp32": dict(),
    "fp32+cl": dict(channels_last=True),
    "bf16+cl": dict(precision="bf16", channels_last=True),
    "fp32+compile": dict(compile=True),
    "fp32+cl+compile": dict(channels_last=True, compile=True),
    "bf16+cl+compile": dict(precision="bf16", channels_last=True, compile=True),
}

#: (arch, dataset, share of --n): ResNet-20 is ~20x slower than LeNet, so it certifies
#: with fewer samples (the rate does not depend on n once n >> batch size)
MODELS = [("lenet", "fashion-mnist", 1.0), ("cifar_resnet20", "cifar10", 0.1)]


# -- (b): the published algorithm ---------------------------------------------------------
class CohenSmooth:
    """The sampling loop of Cohen et al.'s ``code/core.py`` (locuslab/smoothing), on the CPU.

    Kept as published: a repeated copy of x, ``randn_like(batch) * sigma``, a new noisy
    batch per pass, argmax, and counts accumulated in a Python loop over NumPy.
    """

    def __init__(self, model, num_classes, sigma):
        self.base_classifier, self.num_classes, self.sigma = model, num_classes, sigma

    def certify(self, x, n0, n, alpha, batch_size):
        self.base_classifier.eval()
        c_a = self._sample_noise(x, n0, batch_size).argmax().item()
        n_a = self._sample_noise(x, n, batch_size)[c_a].item()
        p_a = clopper_pearson_lower(n_a, n, alpha)
        return (-1, 0.0) if p_a < 0.5 else (c_a, SIGMA * statistics.NormalDist().inv_cdf(p_a))

    def _sample_noise(self, x, num, batch_size):
        with torch.no_grad():
            counts = np.zeros(self.num_classes, dtype=int)
            for _ in range(math.ceil(num / batch_size)):
                this_batch_size = min(batch_size, num)
                num -= this_batch_size
                batch = x.repeat((this_batch_size, 1, 1, 1))
                noise = torch.randn_like(batch) * self.sigma
                predictions = self.base_classifier(batch + noise).argmax(1)
                counts += self._count_arr(predictions.cpu().numpy(), self.num_classes)
            return counts

    @staticmethod
    def _count_arr(arr, length):
        counts = np.zeros(length, dtype=int)
        for idx in arr:
            counts[idx] += 1
        return counts


# -- (a): forward pass + noise, nothing else ----------------------------------------------
class Unavoidable:
    """Draw noise into a preallocated buffer and run the forward pass on a preallocated batch.

    Both in the mode's dtype and memory format; compiled modes compile the model the way
    ``Smooth`` does (inductor, frozen weights, static shape).
    """

    def __init__(self, smooth: Smooth, item_shape, batch_size):
        fmt = torch.channels_last if smooth.channels_last else torch.contiguous_format
        dtype = torch.bfloat16 if smooth.precision.value == "bf16" else torch.float32
        self.noise = torch.empty((batch_size, *item_shape), dtype=dtype).contiguous(memory_format=fmt)
        self.batch = torch.rand((batch_size, *item_shape), dtype=dtype).contiguous(memory_format=fmt)
        model = smooth._model.eval()  # the mode's converted copy of the model
        if smooth.compile:
            model = _Frozen(model)  # compiled as Smooth compiles
        self.model, self.sigma = model, smooth.sigma
        self.generator = torch.Generator().manual_seed(0)
        with torch.inference_mode():
            self.model(self.batch)  # compile / oneDNN warm-up

    def run(self, num):
        with torch.inference_mode():
            for _ in range(math.ceil(num / self.batch.shape[0])):
                self.noise.normal_(0.0, self.sigma, generator=self.generator)
                self.model(self.batch)


# -- helpers ------------------------------------------------------------------------------
def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def train_lenet(steps, batch_size=128, seed=0):
    """LeNet trained with Gaussian noise augmentation (sigma 0.25), plain SGD."""
    torch.manual_seed(seed)
    train = get_dataset("fashion-mnist", "train", download=False)
    model = create_model("lenet", "fashion-mnist")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        x, y = train.get_batch(torch.randint(len(train), (batch_size,), generator=g))
        loss = F.cross_entropy(model(x + SIGMA * torch.randn_like(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def noisy_accuracy(model, xs, ys):
    with torch.inference_mode():
        return float((model(xs + SIGMA * torch.randn_like(xs)).argmax(1) == ys).float().mean())


def vote_disagreement(smooths, xs, batch_size, batches):
    """Fraction of noisy samples whose vote differs from float32, per mode.

    Every mode classifies the same noisy inputs through ``Smooth``'s own noisy forward unit
    (the one ``certify`` runs, compiled where the mode compiles), one image per pass.
    """
    g = torch.Generator().manual_seed(1)
    differ = {name: 0 for name in smooths}
    total = 0
    with torch.inference_mode():
        for x in xs:
            x = x[None, None]
            for _ in range(batches):
                noise = torch.randn((1, batch_size, *x.shape[2:]), generator=g) * SIGMA
                ref = smooths["fp32"]._votes(noise, x)
                for name, s in smooths.items():
                    differ[name] += int((s._votes(noise, x) != ref).sum())
                total += ref.numel()
    return {name: d / total for name, d in differ.items()}, total


def bench_model(arch, dataset, model, x, n, repeats, batch_size):
    """Interleaved repeats of certify / (a) per mode and of (b); best rate of each."""
    item_shape = tuple(x.shape)
    smooths, unavoidable, warmup = {}, {}, {}
    for name, opts in MODES.items():
        s = Smooth(model, 10, SIGMA, **opts)
        # first call: compiles (compiled modes) and creates the oneDNN primitives
        warmup[name] = timed(lambda: s.certify(x, N0, batch_size, ALPHA, batch_size))
        smooths[name] = s
        unavoidable[name] = Unavoidable(s, item_shape, batch_size)
    cohen = CohenSmooth(model, 10, SIGMA)
    cohen.certify(x, N0, COHEN_BATCH, ALPHA, COHEN_BATCH)

    rates = {name: [] for name in MODES}
    rates_a = {name: [] for name in MODES}
    rates_b = []
    names = list(MODES)
    for r in range(repeats):
        rates_b.append((N0 + n) / timed(lambda: cohen.certify(x, N0, n, ALPHA, COHEN_BATCH)))
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order
            g = torch.Generator().manual_seed(r)
            s = smooths[name]
            rates[name].append((N0 + n) / timed(lambda: s.certify(x, N0, n, ALPHA, batch_size, g)))
            rates_a[name].append((N0 + n) / timed(lambda: unavoidable[name].run(N0 + n)))
    best_b = max(rates_b)
    rows = []
    for name in MODES:
        best, best_a = max(rates[name]), max(rates_a[name])
        rows.append(dict(mode=name, rate=best, rate_a=best_a, vs_a=best / best_a, vs_b=best / best_b,
                         warmup=warmup[name], spread=min(rates[name]) / best))
    return rows, best_b, min(rates_b) / best_b, smooths


def print_table(arch, dataset, n, batch_size, rows, rate_b, spread_b):
    print(f"\n### {arch} on {dataset} {'x'.join(map(str, INPUT_SHAPES[dataset]))}: "
          f"certify n0={N0}, n={n}, batch_size={batch_size}\n")
    print("| mode | samples/s | (a) samples/s | vs (a) | vs (b) | first call (s) | worst/best |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['mode']} | {r['rate']:,.0f} | {r['rate_a']:,.0f} | {r['vs_a']:.2f} | "
              f"{r['vs_b']:.2f} | {r['warmup']:.1f} | {r['spread']:.2f} |")
    print(f"| (b) Cohen core.py, fp32, batch {COHEN_BATCH} | {rate_b:,.0f} | | | 1.00 | | {spread_b:.2f} |")


INPUT_SHAPES = {"fashion-mnist": (1, 28, 28), "cifar10": (3, 32, 32)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="about 1 minute: small n, 1 repeat")
    p.add_argument("--n", type=int, default=None, help="certify n for LeNet (ResNet-20: n / 10); "
                   "default 100000 (quick: 10000)")
    p.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 2; quick 1)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--train-steps", type=int, default=None, help="LeNet SGD steps (default 400; quick 100)")
    args = p.parse_args()
    n = args.n or (10_000 if args.quick else 100_000)
    repeats = args.repeats or (1 if args.quick else 2)
    steps = args.train_steps or (100 if args.quick else 400)
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
          f"bf16 AMX: {torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()}")

    t = time.perf_counter()
    lenet = train_lenet(steps)
    test = get_dataset("fashion-mnist", "test", download=False)
    xs, ys = test.get_batch(torch.arange(2000))
    print(f"LeNet trained {steps} SGD steps with sigma={SIGMA} noise in {time.perf_counter() - t:.0f} s; "
          f"accuracy on noisy test images {noisy_accuracy(lenet, xs, ys):.3f}")

    results = {}
    for arch, dataset, share in MODELS:
        model = lenet if arch == "lenet" else create_model(arch, dataset).eval()
        x = xs[0] if arch == "lenet" else torch.rand(INPUT_SHAPES[dataset], generator=torch.Generator().manual_seed(0))
        n_model = max(1000, int(n * share))
        rows, rate_b, spread_b, smooths = bench_model(arch, dataset, model, x, n_model, repeats, args.batch_size)
        print_table(arch, dataset, n_model, args.batch_size, rows, rate_b, spread_b)
        results[arch] = rows
        if arch == "lenet":
            lenet_smooths = smooths

    images, batches = (20, 1) if args.quick else (100, 4)
    frac, total = vote_disagreement(lenet_smooths, xs[:images], args.batch_size, batches)
    print(f"\n### Votes that differ from float32 (trained LeNet, {images} test images x "
          f"{batches * args.batch_size} noises = {total} noisy samples)\n")
    print("| mode | fraction of votes differing from fp32 |")
    print("| --- | ---: |")
    for name, f in frac.items():
        if name != "fp32":
            print(f"| {name} | {f:.2e} |")

    print("\n### Targets\n")
    fp32 = {arch: next(r for r in rows if r["mode"] == "fp32") for arch, rows in results.items()}
    for arch, need in (("lenet", 3.0), ("cifar_resnet20", 5.0)):
        print(f"- {arch}: fp32 path / (a) = {fp32[arch]['vs_a']:.2f} (target >= 0.9: "
              f"{'met' if fp32[arch]['vs_a'] >= 0.9 else 'NOT met'})")
        best = max(results[arch], key=lambda r: r["vs_b"])
        print(f"- {arch}: fastest mode {best['mode']} / (b) = {best['vs_b']:.2f} (target >= {need:g}: "
              f"{'met' if best['vs_b'] >= need else 'NOT met'})")
    print(f"\ntotal bench time {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
