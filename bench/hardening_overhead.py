"""What the safety checks of issue 7 cost: non-finite logits in sampling, the checkpoint digest.

* Sampling: ``Smooth`` refuses a model whose logits are NaN/inf.  Each forward pass maps a row
  with non-finite logits to an extra vote column (no host sync per batch).  This times one pass
  of ``count_votes`` (``batch_size`` noisy copies: noise, forward, check, counting) with the
  check and with a plain ``argmax`` (the code before it), alternated pass by pass so that both
  see the same load on a shared machine, and prints the ratio of the medians (1.0 = free).
* Checkpoints: rsmooth stores a sha256 of all a checkpoint holds and checks it on every load.
  This times, for a training checkpoint (weights, SGD momentum, random state, config, history),
  ``check_bounded`` + ``checkpoint_digest`` (now) and ``state_digest`` of the weights (before
  issue 37) beside ``torch.save`` of the same checkpoint (to memory) and ``torch.load``.

Usage::

    python bench/hardening_overhead.py            # 2 minutes with AMX; ~6 where bf16 is emulated
    python bench/hardening_overhead.py --pairs 200 --threads 0
"""
from __future__ import annotations

import argparse
import io
import statistics
import time

import torch

from rsmooth.data import dataset_info
from rsmooth.engine.checkpoint import checkpoint_digest, state_digest
from rsmooth.jsondata import check_bounded
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth
from rsmooth.smoothing import smooth as smooth_module

#: (arch, dataset, input shape)
MODELS = [("lenet", "fashion-mnist", (1, 28, 28)), ("cifar_resnet20", "cifar10", (3, 32, 32))]
MODES = {"fp32": dict(), "bf16+cl": dict(precision="bf16", channels_last=True)}


class _PlainVotes(smooth_module._NoisyVotes):
    """The sampling unit without the non-finite check (argmax only), for comparison."""

    def forward(self, noise: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        batch = (noise + x).flatten(0, 1).to(self.dtype, memory_format=self.memory_format)
        return self.model(batch).argmax(dim=1).view(noise.shape[:2])


def _one_pass(smooth: Smooth, x: torch.Tensor, batch_size: int, g: torch.Generator) -> float:
    t0 = time.perf_counter()
    smooth.count_votes(x[None], batch_size, batch_size, g)
    return time.perf_counter() - t0


def sampling(pairs: int, batch_size: int) -> None:
    print(f"sampling: one count_votes pass of {batch_size} noisy copies, median of {pairs} "
          f"alternated pairs")
    print("| model | mode | with check (samples/s) | plain argmax (samples/s) | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for arch, dataset, shape in MODELS:
        torch.manual_seed(0)
        model = create_model(arch, dataset).eval()
        x = torch.rand(shape)
        for mode, options in MODES.items():
            checked = Smooth(model, 10, 0.25, **options)
            plain = Smooth(model, 10, 0.25, **options)
            plain._votes = _PlainVotes(plain._model, checked._noisy_votes.dtype, plain.channels_last)
            g = torch.Generator().manual_seed(0)
            for s in (checked, plain):  # warm-up (first-shape check, allocator)
                _one_pass(s, x, batch_size, g)
            t_c, t_p = [], []
            for _ in range(pairs):
                t_c.append(_one_pass(checked, x, batch_size, g))
                t_p.append(_one_pass(plain, x, batch_size, g))
            rc, rp = batch_size / statistics.median(t_c), batch_size / statistics.median(t_p)
            print(f"| {arch} | {mode} | {rc:,.0f} | {rp:,.0f} | {rc / rp:.3f} |")


def _training_checkpoint(arch: str, dataset: str) -> dict:
    """What ``rsmooth train`` saves for ``arch`` after one SGD step (momentum buffers filled)."""
    model = create_model(arch, dataset)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.rand(2, *dataset_info(dataset).input_shape)).sum().backward()
    opt.step()
    return {"epoch": 1, "config": {"arch": arch, "lr": 0.1, "hparams": {"sigma": 0.25}},
            "state_dict": model.state_dict(), "optimizer": opt.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
            "history": [{"epoch": e, "loss": 0.1, "train_acc": 0.5} for e in range(150)]}


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def digest(repeats: int) -> None:
    print(f"\ncheckpoint digest of a training checkpoint: best of {repeats}")
    print("| model | MiB | weights' digest (s) | whole digest + bounds (s) | torch.save (s) | torch.load (s) "
          "| save: before -> now | load: before -> now |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arch, dataset in (("cifar_resnet110", "cifar10"), ("resnet50", "imagenet")):
        ck = _training_checkpoint(arch, dataset)
        buf = io.BytesIO()
        torch.save(ck, buf)
        data = buf.getvalue()
        old = _best(lambda: state_digest(ck["state_dict"]), repeats)
        new = _best(lambda: (check_bounded(ck, "c"), checkpoint_digest(ck)), repeats)
        save = _best(lambda: torch.save(ck, io.BytesIO()), repeats)
        load = _best(lambda: torch.load(io.BytesIO(data), weights_only=True), repeats)
        print(f"| {arch} | {len(data) / 2 ** 20:.1f} | {old:.3f} | {new:.3f} | {save:.3f} | {load:.3f} "
              f"| {save + old:.3f} -> {save + new:.3f} | {load + old:.3f} -> {load + new:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=30, help="alternated pass pairs per model and mode")
    p.add_argument("--batch-size", type=int, default=256, help="noisy copies per pass")
    p.add_argument("--repeats", type=int, default=5, help="digest/save/load repeats")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)\n")
    sampling(args.pairs, args.batch_size)
    digest(args.repeats)


if __name__ == "__main__":
    main()
