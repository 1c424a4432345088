"""Train a small epsilon-predicting DDPM (rsmooth.models.unet.TinyUNet, Ho, Jain, Abbeel 2020,
Denoising Diffusion Probabilistic Models, arXiv 2006.11239: the linear schedule of 1000 steps and
L_simple, eq. 14) on a built-in dataset, for ``rsmooth certify --diffusion FILE`` (diffusion
denoised smoothing, Carlini et al. 2023, arXiv 2206.10550) without downloads.

A bench script, not an ``rsmooth train`` method: the one training loop trains classifiers and
denoisers in front of one, scored by accuracy; a DDPM takes a timestep and has no classifier.
The file is rewritten after every epoch with the optimiser state; rerunning the same command
continues it (the batches and noise of epoch e are drawn from (seed, e), so a resumed run is the
uninterrupted one).

Usage::

    python bench/train_ddpm.py --dataset digits --epochs 300 --out runs/ddpm-digits.pt
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from rsmooth.data import get_dataset
from rsmooth.models.unet import TinyUNet, ddpm_loss, linear_schedule, load_ddpm, save_ddpm


def train_ddpm(dataset: str, out: str, epochs: int, batch_size: int = 128, lr: float = 2e-4, width: int = 32,
               seed: int = 0, steps: int = 1000, log=print) -> None:
    """Train (or continue) the DDPM file ``out`` to ``epochs`` epochs of Adam on L_simple."""
    data = get_dataset(dataset, "train")
    x_all, _ = data.get_batch(torch.arange(len(data)))
    abar = linear_schedule(steps)
    model = TinyUNet(x_all.shape[1], width)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    done = 0
    if os.path.exists(out):
        model, abar, blob = load_ddpm(out)
        opt.load_state_dict(blob["optimizer"])
        done = blob["epoch"]
    model.train()
    for epoch in range(done, epochs):
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order, total, start = torch.randperm(len(x_all), generator=g), 0.0, time.time()
        for i in range(0, len(order), batch_size):
            x0 = x_all[order[i:i + batch_size]]
            t = torch.randint(0, steps, (len(x0),), generator=g)
            loss = ddpm_loss(model, x0, t, torch.randn(x0.shape, generator=g), abar)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(x0)
        save_ddpm(out, model, abar, dataset=dataset, epoch=epoch + 1, optimizer=opt.state_dict(), seed=seed, lr=lr,
                  batch_size=batch_size)
        log(f"epoch {epoch + 1}/{epochs}: loss {total / len(x_all):.4f} ({time.time() - start:.1f} s)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--out", required=True, help="the DDPM file (continued when it exists)")
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    train_ddpm(args.dataset, args.out, args.epochs, args.batch_size, args.lr, args.width, args.seed)


if __name__ == "__main__":
    main()
