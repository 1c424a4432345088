"""Training cost of each registered method: seconds per optimiser step and per epoch, and the
ratio to Gaussian training, on LeNet with Fashion-MNIST shapes.

Every method in ``rsmooth.methods.METHODS`` (except test-only names starting with "_") runs at
the hyperparameters of its paper preset (``--preset-dataset``/method/``--sigma``, by default
the MNIST presets at sigma 0.25; methods without one use their defaults), on random tensors of
the Fashion-MNIST shape (1x28x28, 10 classes), through the engine's own path
(``engine/train.py``): a loader batch is split into ``method.num_chunks`` chunks and each chunk
is one optimiser step, ``zero_grad`` -> ``method.loss(model, chunk, ctx)`` -> ``backward`` ->
``SGD.step`` (under the engine's fast modes when asked, see ``bench/train_modes.py``), statistics detached as the engine does; timings run over consecutive chunks.  The step context is epoch 40 of 90
with the first learning-rate drop at 30, so every warm-up is over and MACER's deferred lambda is
on.  Per-example extras a method ``requires`` (e.g. CAT-RS consistency targets) are random
probability vectors.

Per epoch = seconds per step x steps per epoch, with ceil(60000 / batch) loader batches and
``num_chunks`` steps each; the batch is the preset's (256, MACER 64) unless ``--batch-size``.
The machine is shared and noisy: repeats are interleaved (the method order rotates) and every
figure is a median over repeats.

Usage::

    python bench/train_step.py                   # 7 repeats x 2 steps per method
    python bench/train_step.py --quick           # 3 repeats x 1 step
    python bench/train_step.py --preset-dataset cifar10 --sigma 0.5   # the cifar10/*/0.50 presets
    python bench/train_step.py --device cuda
"""
from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import torch

from rsmooth.data import dataset_info
from rsmooth.engine import TrainConfig
from rsmooth.seeding import derive_seed
from rsmooth.engine.distributed import World
from rsmooth.engine.train import _fast_modes, _Run
from rsmooth.methods import METHODS, Batch, StepContext, create_method
from rsmooth.models import create_model
from rsmooth.presets import PRESETS

TRAIN_SIZE = 60_000  # Fashion-MNIST / MNIST training set
NUM_CLASSES = 10
SHAPE = (1, 28, 28)
EPOCH, NUM_EPOCHS, LR_DROP = 40, 90, 30


def setting(name: str, dataset: str, sigma: float, batch_size: int | None):
    """(method, SGD settings, batch size, where the hyperparameters come from)."""
    key = f"{dataset}/{name}/{sigma:.2f}"
    if key in PRESETS:
        p = PRESETS.get(key)
        kw = p.train_config()
        method = create_method(name, **kw["hparams"])
        sgd = dict(lr=kw["lr"], momentum=kw["momentum"], weight_decay=kw["weight_decay"],
                   nesterov=kw["nesterov"])
        return method, sgd, batch_size or kw["batch_size"], key
    method = create_method(name, sigma=sigma)
    return method, dict(lr=0.01, momentum=0.9, weight_decay=1e-4), batch_size or 256, "defaults"


def fake_extras(method, b: int, device, g: torch.Generator, num_classes: int = NUM_CLASSES):
    """Random per-example extras for the names a method ``requires`` ([B x K] probabilities)."""
    out = {}
    for name in method.requires:
        p = torch.rand((b, num_classes), generator=g).to(device)
        out[name] = p / p.sum(1, keepdim=True)
    return out


class Runner:
    """One method, its own model (LeNet on Fashion-MNIST shapes unless ``arch``/``data`` say
    otherwise) and SGD optimiser, one fixed random loader batch, and the engine's fast
    ``modes`` (TrainConfig fields precision, channels_last, compile; default fp32 eager)."""

    def __init__(self, name, dataset, sigma, batch_size, device, seed=0, arch="lenet",
                 data="fashion-mnist", **modes):
        self.name = name
        self.method, sgd, self.batch_size, self.source = setting(name, dataset, sigma, batch_size)
        torch.manual_seed(seed)
        self.model = create_model(arch, data).to(device).train()
        config, world = TrainConfig(**modes), World()
        opt = torch.optim.SGD(self.model.parameters(), **sgd)
        self.run = _Run(config, self.method, self.model, *_fast_modes(self.model, config, device, world), opt,
                        None, torch.amp.GradScaler(device.type, enabled=config.precision == "fp16"), world,
                        device, {})
        info = dataset_info(data)
        g = torch.Generator().manual_seed(seed)
        b = self.batch_size
        memory_format = torch.channels_last if modes.get("channels_last") else torch.preserve_format
        x = torch.rand((b, *info.input_shape), generator=g).to(device, memory_format=memory_format)
        y = torch.randint(info.num_classes, (b,), generator=g).to(device)
        batch = Batch(x, y, torch.arange(b), fake_extras(self.method, b, device, g, info.num_classes))
        self.chunks = batch.chunks(self.method.num_chunks)  # as the engine splits a loader batch
        self.noise_gen = torch.Generator(device=device)
        self.device = device
        self.steps = 0

    def step(self) -> None:
        """One optimiser step of the engine's inner loop, on the next chunk of the batch."""
        b, j = divmod(self.steps, len(self.chunks))
        self.noise_gen.manual_seed(derive_seed(0, "noise", EPOCH, b, j))
        self.run.step(self.chunks[j], StepContext(self.noise_gen, EPOCH, NUM_EPOCHS, self.steps, LR_DROP))
        self.steps += 1

    def time_per_step(self, steps: int) -> float:
        sync(self.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        sync(self.device)
        return (time.perf_counter() - t0) / steps

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(TRAIN_SIZE / self.batch_size) * len(self.chunks)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(runner: Runner) -> float | None:
    """Peak CUDA memory (MiB) of one loader batch, or None on CPU."""
    if runner.device.type != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats(runner.device)
    runner.step()
    sync(runner.device)
    return torch.cuda.max_memory_allocated(runner.device) / 2**20


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats of 1 step per method")
    ap.add_argument("--repeats", type=int, help="interleaved repeats (default 7; quick 3)")
    ap.add_argument("--steps", type=int, help="optimiser steps per timing (default 2; quick 1)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    ap.add_argument("--preset-dataset", default="mnist", help="presets whose hyperparameters to use (default mnist)")
    ap.add_argument("--sigma", type=float, default=0.25, help="preset sigma (default 0.25)")
    ap.add_argument("--batch-size", type=int, help="loader batch for every method (default: the preset's)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--methods", nargs="+", help="subset of the registered methods")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    steps = args.steps or (1 if args.quick else 2)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)

    names = args.methods or [n for n in METHODS.names() if not n.startswith("_")]
    if "gaussian" not in names:
        names = ["gaussian", *names]
    runners = {n: Runner(n, args.preset_dataset, args.sigma, args.batch_size, device) for n in names}
    for run in runners.values():  # warm-up: allocator, oneDNN primitives, cuDNN autotuning
        run.step()
    memory = {n: peak_memory(r) for n, r in runners.items()}

    times = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(runners[n].time_per_step(steps))

    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    print(f"# torch {torch.__version__}, {dev}; LeNet, {SHAPE} x {NUM_CLASSES} classes, random data; "
          f"{repeats} interleaved repeats x {steps} steps, medians")
    print(f"# per epoch = s/step x steps/epoch (ceil({TRAIN_SIZE}/batch) x chunks); "
          f"context: epoch {EPOCH + 1}/{NUM_EPOCHS}, lr drop at {LR_DROP}")
    g_epoch = statistics.median(times["gaussian"]) * runners["gaussian"].steps_per_epoch
    mem_col = any(m is not None for m in memory.values())
    head = ["method", "hyperparameters", "batch", "chunks", "ms/step", "(min-max)", "steps/epoch",
            "s/epoch", "x gaussian"] + (["peak MiB"] if mem_col else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for n in names:
        run, t = runners[n], times[n]
        med = statistics.median(t)
        per_epoch = med * run.steps_per_epoch
        hp = {k: v for k, v in run.method.hparams().items() if k != "sigma"}
        hp_text = run.source if not hp else f"{run.source}: " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in hp.items())
        row = [n, hp_text, str(run.batch_size), str(len(run.chunks)), f"{1e3 * med:.1f}",
               f"{1e3 * min(t):.1f}-{1e3 * max(t):.1f}", str(run.steps_per_epoch),
               f"{per_epoch:.1f}", f"{per_epoch / g_epoch:.2f}"]
        if mem_col:
            row.append(f"{memory[n]:.0f}")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
