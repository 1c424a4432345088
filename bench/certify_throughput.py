"""Noisy samples per second of ``Smooth.certify`` on CPU, against what no certifier can avoid.

For LeNet on Fashion-MNIST (1x28x28) and CIFAR ResNet-20 (3x32x32), and for each sampling
mode of ``Smooth`` (float32, channels-last, bfloat16, compiled), one process measures:

* certify: noisy samples per second of ``Smooth.certify(x, n0=100, n, alpha=0.001,
  batch_size)``, i.e. (n0 + n) / wall time, best of ``--repeats`` runs interleaved with
  (b)'s (mode order rotated);
* (a) the unavoidable cost at the same batch size and precision: drawing the noise into a
  preallocated buffer plus the model's forward pass on a preallocated batch (the mode's
  dtype and memory format; compiled modes compile the model as ``Smooth`` does);
* (b) the published algorithm as in Cohen et al.'s ``code/core.py``: repeat the input,
  ``randn_like * sigma``, float32, batch 1000, counts in Python on the CPU.

The machine is shared: its speed drifts by 10-30% within seconds as other jobs come and go,
more than the gap between Smooth and (a).  So "pass / (a)" alternates one pass of Smooth's
sampling path (``count_votes`` of ``batch_size`` copies: per-call checks, noise, forward,
counting) with one (a) pass, ``--pairs`` times, and compares medians.  A LeNet trained
briefly with Gaussian noise (sigma 0.25) gives the fraction of noisy samples whose vote
differs from float32 in each mode.  ``--sweep`` times one pass per batch size instead (what
``DEFAULT_BATCH_SIZE`` is chosen from).

Usage::

    python bench/certify_throughput.py            # about 9 minutes
    python bench/certify_throughput.py --quick    # about 2 minutes: n 10000, one repeat
    python bench/certify_throughput.py --sweep    # about 3 minutes
    python bench/certify_throughput.py --n 20000 --repeats 3 --threads 0
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from rsmooth.data import get_dataset
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth, clopper_pearson_lower
from rsmooth.smoothing.smooth import DEFAULT_BATCH_SIZE, _Compiled

SIGMA, N0, ALPHA = 0.25, 100, 0.001
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

#: (arch, dataset, input shape, share of --n): ResNet-20 is ~10x slower than LeNet, so it
#: certifies with n / 20 samples (the rate does not depend on n once n >> batch size)
MODELS = [("lenet", "fashion-mnist", (1, 28, 28), 1.0), ("cifar_resnet20", "cifar10", (3, 32, 32), 0.05)]
TARGETS = {"lenet": 3.0, "cifar_resnet20": 5.0}  # fastest mode / (b)


class CohenSmooth:
    """(b): the sampling loop of Cohen et al.'s ``code/core.py`` (locuslab/smoothing), on CPU.

    As published: a repeated copy of x, ``randn_like(batch) * sigma``, a new noisy batch per
    pass, argmax, counts accumulated by a Python loop into NumPy.
    """

    def __init__(self, base_classifier, num_classes, sigma):
        self.base_classifier, self.num_classes, self.sigma = base_classifier, num_classes, sigma

    def certify(self, x, n0, n, alpha, batch_size):
        self.base_classifier.eval()
        c_a = self._sample_noise(x, n0, batch_size).argmax().item()
        n_a = self._sample_noise(x, n, batch_size)[c_a].item()
        p_a = clopper_pearson_lower(n_a, n, alpha)
        return (-1, 0.0) if p_a < 0.5 else (c_a, self.sigma * statistics.NormalDist().inv_cdf(p_a))

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


class Unavoidable:
    """(a): noise drawn into a preallocated buffer of the mode's dtype + the forward pass of
    the mode's (compiled) model on a preallocated batch of the mode's dtype and memory format.

    The noise buffer is contiguous: torch draws ~7x slower into a channels-last tensor of
    more than one channel, a cost that a certifier can avoid (the noise is i.i.d.).  The
    batch holds noisy copies of x, as certify's do: the forward pass is slightly
    data-dependent (LeNet runs ~5% faster on uniform [0, 1] pixels than on noisy images).
    """

    def __init__(self, smooth: Smooth, x, batch_size):
        dtype = torch.bfloat16 if smooth.precision.value == "bf16" else torch.float32
        fmt = torch.channels_last if smooth.channels_last else torch.contiguous_format
        self.noise = torch.empty((batch_size, *x.shape), dtype=dtype)
        noise = torch.randn((batch_size, *x.shape), generator=torch.Generator().manual_seed(0))
        noisy = x + smooth.sigma * noise
        self.batch = noisy.to(dtype).contiguous(memory_format=fmt)
        model = smooth._model.eval()  # the mode's converted copy of the model
        self.model = _Compiled(model) if smooth.compile else model  # compiled as Smooth does
        self.sigma = smooth.sigma
        self.generator = torch.Generator().manual_seed(0)
        with torch.inference_mode():
            self.model(self.batch)  # compiles / creates the oneDNN primitives

    def run(self, batches):
        with torch.inference_mode():
            for _ in range(batches):
                self.noise.normal_(0.0, self.sigma, generator=self.generator)
                self.model(self.batch)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def train_lenet(steps, batch_size=128, seed=0):
    """LeNet trained on Fashion-MNIST with Gaussian noise (sigma 0.25), plain SGD."""
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


def paired_pass_rates(smooth, unavoidable, x, batch_size, pairs):
    """Median samples/s of one pass through Smooth's sampling path (``count_votes`` of
    ``batch_size`` noisy copies: noise, forward, counting, as certify runs it) and of one (a)
    pass, alternated pass by pass so that both see the same load on a shared machine."""
    g = torch.Generator().manual_seed(0)
    t_smooth, t_a = [], []
    for _ in range(pairs):
        t_smooth.append(timed(lambda: smooth.count_votes(x[None], batch_size, batch_size, g)))
        t_a.append(timed(lambda: unavoidable.run(1)))
    return batch_size / statistics.median(t_smooth), batch_size / statistics.median(t_a)


def bench_model(model, x, n, repeats, pairs, batch_size):
    """Per mode: certify's rate (best of interleaved repeats, mode order rotated), the paired
    per-pass rates of Smooth's path and of (a); (b)'s rate, best of the same repeats."""
    smooths, unavoidable, first_call = {}, {}, {}
    for name, opts in MODES.items():
        s = smooths[name] = Smooth(model, 10, SIGMA, **opts)
        # the first call compiles (compiled modes) and creates the oneDNN primitives
        first_call[name] = timed(lambda: s.certify(x, N0, batch_size, ALPHA, batch_size))
        unavoidable[name] = Unavoidable(s, x, batch_size)
    cohen = CohenSmooth(model, 10, SIGMA)
    cohen.certify(x, N0, COHEN_BATCH, ALPHA, COHEN_BATCH)

    rate = {name: [] for name in MODES}
    rate_b = []
    names = list(MODES)
    for r in range(repeats):
        rate_b.append((N0 + n) / timed(lambda: cohen.certify(x, N0, n, ALPHA, COHEN_BATCH)))
        for name in names[r % len(names):] + names[:r % len(names)]:
            s, g = smooths[name], torch.Generator().manual_seed(r)
            rate[name].append((N0 + n) / timed(lambda: s.certify(x, N0, n, ALPHA, batch_size, g)))
    rows = []
    for name in MODES:
        pass_rate, rate_a = paired_pass_rates(smooths[name], unavoidable[name], x, batch_size, pairs)
        rows.append(dict(mode=name, rate=max(rate[name]), pass_rate=pass_rate, rate_a=rate_a,
                         first_call=first_call[name], spread=min(rate[name]) / max(rate[name])))
    return rows, max(rate_b), min(rate_b) / max(rate_b), smooths


def vote_disagreement(smooths, xs, batch_size, batches):
    """Fraction of noisy samples whose vote differs from float32's, per mode.

    Every mode classifies the same noisy inputs through ``Smooth``'s own noisy forward unit
    (the one certify runs, compiled where the mode compiles), one image per pass.
    """
    g = torch.Generator().manual_seed(1)
    differ, total = dict.fromkeys(smooths, 0), 0
    with torch.inference_mode():
        for x in xs:
            x = x[None, None]
            for _ in range(batches):
                noise = SIGMA * torch.randn((1, batch_size, *x.shape[2:]), generator=g)
                ref = smooths["fp32"]._votes(noise, x)
                for name, s in smooths.items():
                    differ[name] += int((s._votes(noise, x) != ref).sum())
                total += ref.numel()
    return {name: d / total for name, d in differ.items() if name != "fp32"}, total


def batch_sweep(model, x, rounds, sizes=(64, 128, 256, 400, 1000),
                modes=("fp32", "bf16+cl", "bf16+cl+compile")):
    """Samples/s of one pass through Smooth's sampling path per batch size (median of rounds
    in which every mode and size runs once): what DEFAULT_BATCH_SIZE is chosen from."""
    smooths = {(m, b): Smooth(model, 10, SIGMA, **MODES[m]) for m in modes for b in sizes}
    for (m, b), s in smooths.items():
        s.count_votes(x[None], b, b)  # compile / warm up
    per_sample = {key: [] for key in smooths}
    for _ in range(rounds):
        for (m, b), s in smooths.items():
            per_sample[m, b].append(timed(lambda: s.count_votes(x[None], b, b)) / b)
    print(f"| batch_size | {' | '.join(modes)} |")
    print(f"| ---: |{' ---: |' * len(modes)}")
    for b in sizes:
        rates = (1 / statistics.median(per_sample[m, b]) for m in modes)
        print(f"| {b} | " + " | ".join(f"{r:,.0f}" for r in rates) + " |")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short run: n 10000, 1 repeat, 60 SGD steps")
    p.add_argument("--n", type=int, default=None,
                   help="certify n for LeNet, ResNet-20 uses n / 20 (default 100000; quick 10000)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved certify repeats (default 2; quick 1)")
    p.add_argument("--pairs", type=int, default=None,
                   help="alternated pass pairs for / (a) (default 30; quick 10)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads (default 1: the machine is shared; 0 = torch's default)")
    p.add_argument("--train-steps", type=int, default=None, help="LeNet SGD steps (default 400; quick 60)")
    p.add_argument("--sweep", action="store_true",
                   help="only the batch-size sweep behind DEFAULT_BATCH_SIZE (--pairs rounds)")
    args = p.parse_args()
    n = args.n or (10_000 if args.quick else 100_000)
    repeats = args.repeats or (1 if args.quick else 2)
    pairs = args.pairs or (10 if args.quick else 30)
    steps = args.train_steps or (60 if args.quick else 400)
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    print(f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} "
          f"intra-op threads, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"load average {os.getloadavg()[0]:.1f}")

    if args.sweep:
        for arch, dataset, shape, _ in MODELS:
            model = create_model(arch, dataset).eval()
            x = torch.rand(shape, generator=torch.Generator().manual_seed(0))
            print(f"\n{arch}: samples/s of one pass by batch_size, medians of {pairs} rounds\n")
            batch_sweep(model, x, pairs)
        print(f"\ntotal {time.perf_counter() - t_start:.0f} s, load average {os.getloadavg()[0]:.1f}")
        return

    t = time.perf_counter()
    lenet = train_lenet(steps)
    test = get_dataset("fashion-mnist", "test", download=False)
    xs, ys = test.get_batch(torch.arange(1000))
    with torch.inference_mode():
        acc = float((lenet(xs + SIGMA * torch.randn_like(xs)).argmax(1) == ys).float().mean())
    print(f"LeNet: {steps} SGD steps of 128 images with sigma={SIGMA} noise "
          f"({time.perf_counter() - t:.0f} s), accuracy {acc:.3f} on 1000 noisy test images")

    results, lenet_smooths = {}, None
    for arch, dataset, shape, share in MODELS:
        model = lenet if arch == "lenet" else create_model(arch, dataset).eval()
        x = xs[0] if arch == "lenet" else torch.rand(shape, generator=torch.Generator().manual_seed(0))
        n_model = max(1000, int(n * share))
        rows, rate_b, spread_b, smooths = bench_model(model, x, n_model, repeats, pairs, args.batch_size)
        results[arch] = rows, rate_b
        lenet_smooths = lenet_smooths or smooths
        print(f"\n{arch} ({dataset}, {'x'.join(map(str, shape))}), batch_size={args.batch_size}: certify "
              f"n0={N0}, n={n_model}, best of {repeats} (worst/best); one pass of Smooth and of (a), "
              f"medians of {pairs} alternated pairs\n")
        print("| mode | certify samples/s | / (b) | pass samples/s | (a) samples/s | pass / (a) "
              "| first call s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['mode']} | {r['rate']:,.0f} ({r['spread']:.2f}) | {r['rate'] / rate_b:.2f} | "
                  f"{r['pass_rate']:,.0f} | {r['rate_a']:,.0f} | {r['pass_rate'] / r['rate_a']:.2f} | "
                  f"{r['first_call']:.1f} |")
        print(f"| (b) core.py, fp32, batch {COHEN_BATCH} | {rate_b:,.0f} ({spread_b:.2f}) | 1.00 | | | | |")

    images, batches = (20, 1) if args.quick else (100, 2)
    frac, total = vote_disagreement(lenet_smooths, xs[:images], args.batch_size, batches)
    print(f"\nVotes differing from fp32 (trained LeNet, {images} test images x {batches * args.batch_size} "
          f"noises = {total} noisy samples): "
          + ", ".join(f"{name} {f:.2e}" for name, f in frac.items()))

    print("\nTargets:")
    for arch, (rows, rate_b) in results.items():
        fp32, best = rows[0], max(rows, key=lambda r: r["rate"])
        print(f"- {arch}: fp32 pass / (a) = {fp32['pass_rate'] / fp32['rate_a']:.2f} (>= 0.9: "
              f"{'met' if fp32['pass_rate'] >= 0.9 * fp32['rate_a'] else 'NOT met'}); "
              f"certify, fastest ({best['mode']}) / (b) = "
              f"{best['rate'] / rate_b:.1f} (>= {TARGETS[arch]:g}: "
              f"{'met' if best['rate'] >= TARGETS[arch] * rate_b else 'NOT met'})")
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
