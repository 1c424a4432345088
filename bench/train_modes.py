"""The fast training modes against fp32 eager: optimiser steps per second of each mode, and the
effect of bf16 on accuracy.

Speed: Gaussian and CAT-RS steps of LeNet (Fashion-MNIST shapes, the fashion-mnist/*/0.50
presets' hyperparameters) and CIFAR ResNet-20 (CIFAR-10 shapes, the cifar10/*/0.50 presets'),
on random tensors, through the engine's own step and modes (``bench/train_step.py``'s Runner:
``engine.train._fast_modes`` and ``_Run.step``: autocast around ``method.loss``, the gradient scaler).  Each mode
(fp32 eager, bf16, channels-last, compile; fp16 on CUDA) has its own model; the first step of
each is a warm-up (for compile: the compilation, reported as "first step s").  Repeats are
interleaved, the mode order rotating, and every figure is a median.

Accuracy: the first ``--epochs`` (2) epochs of preset ``fashion-mnist/gaussian/0.50`` trained
by the engine in fp32 and in bf16 (same seed, same batches and noise); the evaluation after
each epoch is fp32 (clean accuracy and accuracy under one noise draw per test image).

Usage::

    python bench/train_modes.py                      # everything, 1 thread
    python bench/train_modes.py --skip-accuracy --repeats 3
    python bench/train_modes.py --device cuda        # adds fp16
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import tempfile
import time

import torch

from train_step import Runner, sync
from rsmooth.engine import TrainConfig, train
from rsmooth.presets import get_preset

#: (label, arch, data shapes, preset dataset, sigma, default batch)
SETTINGS = [("LeNet", "lenet", "fashion-mnist", "fashion-mnist", 0.5, 256),
            ("ResNet-20", "cifar_resnet20", "cifar10", "cifar10", 0.5, 64)]
MODES = {"fp32": {}, "bf16": {"precision": "bf16"}, "channels-last": {"channels_last": True},
         "compile": {"compile": True}, "fp16": {"precision": "fp16"}}
ACCURACY_PRESET = "fashion-mnist/gaussian/0.50"


def cpu_name() -> str:
    """The CPU's model name and whether it has bf16 arithmetic (AMX or AVX512-BF16)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")), platform.machine())
    bf16 = [flag for flag in ("amx_bf16", "avx512_bf16") if flag in info]
    return f"{name} ({', '.join(bf16) if bf16 else 'no AMX or AVX512-BF16: bf16 is emulated'})"


def speed(args, device, modes) -> None:
    print("| model | method | batch | chunks | mode | steps/s | (min-max) | x fp32 | first step s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, arch, data, preset_data, sigma, default_batch in SETTINGS:
        batch = args.batch_size or default_batch
        for method in args.methods:
            torch._dynamo.reset()  # one compiled model at a time: no cache limit reached across blocks
            runners, first = {}, {}
            for m in modes:
                runners[m] = Runner(method, preset_data, sigma, batch, device, arch=arch, data=data, **MODES[m])
                sync(device)
                t0 = time.perf_counter()
                runners[m].step()  # warm-up; compile compiles here
                sync(device)
                first[m] = time.perf_counter() - t0
            rates = {m: [] for m in modes}
            for r in range(args.repeats):
                for m in modes[r % len(modes):] + modes[:r % len(modes)]:
                    rates[m].append(1 / runners[m].time_per_step(args.steps))
            base = statistics.median(rates["fp32"])
            for m in modes:
                med = statistics.median(rates[m])
                print(f"| {label} | {method} | {batch} | {len(runners[m].chunks)} | {m} | {med:.3g} | "
                      f"{min(rates[m]):.3g}-{max(rates[m]):.3g} | {med / base:.2f} | {first[m]:.1f} |", flush=True)


def accuracy(args, device) -> None:
    base = TrainConfig(**get_preset(ACCURACY_PRESET).train_config())
    base = dataclasses.replace(base, epochs=args.epochs, device=str(device), data_dir=args.data_dir)
    print(f"\n{ACCURACY_PRESET}, first {args.epochs} epochs (fp32 evaluation after each):")
    print("| precision | epoch | loss | test acc | noisy test acc | s/epoch |")
    print("|---|---|---|---|---|---|")
    final = {}
    for precision in ("fp32", "bf16"):
        with tempfile.TemporaryDirectory() as out:
            res = train(dataclasses.replace(base, precision=precision), out, progress=False, log=lambda s: None)
        for h in res.history:
            print(f"| {precision} | {h['epoch']} | {h['loss']:.4f} | {100 * h['test_acc']:.2f} | "
                  f"{100 * h['test_acc_noisy']:.2f} | {h['time']:.0f} |", flush=True)
        final[precision] = res.history[-1]["test_acc_noisy"]
    print(f"noisy test accuracy, bf16 - fp32: {100 * (final['bf16'] - final['fp32']):+.2f} points")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    ap.add_argument("--steps", type=int, default=1, help="optimiser steps per timing (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--batch-size", type=int, help="loader batch (default: LeNet 256, ResNet-20 64)")
    ap.add_argument("--methods", nargs="+", default=["gaussian", "catrs"])
    ap.add_argument("--modes", nargs="+", choices=list(MODES), help="default: all this device runs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--epochs", type=int, default=2, help="epochs of the accuracy comparison (default 2)")
    ap.add_argument("--data-dir", help="where Fashion-MNIST is (default: the usual places)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    modes = args.modes or [m for m in MODES if m != "fp16" or device.type == "cuda"]
    modes = ["fp32", *[m for m in modes if m != "fp32"]]
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{cpu_name()}, {torch.get_num_threads()} thread(s)"
    print(f"# torch {torch.__version__}, {dev}; random data, {args.repeats} interleaved repeats x "
          f"{args.steps} step(s), medians")
    if not args.skip_speed:
        speed(args, device, modes)
    if not args.skip_accuracy:
        accuracy(args, device)


if __name__ == "__main__":
    main()
