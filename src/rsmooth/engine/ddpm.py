"""Train rsmooth's small DDPM for diffusion denoised smoothing (``python -m rsmooth.train_ddpm``).

An epsilon-predicting UNet (:class:`rsmooth.models.unet.TinyUNet`) trained with Ho, Jain, Abbeel
2020 (Denoising Diffusion Probabilistic Models, arXiv 2006.11239) L_simple (eq. 14) on the linear
schedule of 1000 steps, on a built-in dataset, for ``rsmooth certify --diffusion FILE`` (Carlini
et al. 2023, arXiv 2206.10550) without downloads.

Not an ``rsmooth train`` method: the one training loop trains classifiers and denoisers in front
of one, scored by accuracy; a DDPM takes a timestep and has no classifier.  The file is rewritten
(atomically) after every epoch with the optimiser state; the same call continues it (the batches
and noise of epoch e are drawn from (seed, e), so a resumed run is the uninterrupted one).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, Union

import torch

from ..data import get_dataset
from ..errors import check
from ..models.unet import TinyUNet, ddpm_loss, linear_schedule, load_ddpm, save_ddpm
from ..paths import check_output_file
from ..smoothing.stats import validate_count


def train_ddpm(dataset: str, out: Union[str, Path], epochs: int = 300, *, batch_size: int = 128,
               lr: float = 2e-4, width: int = 32, seed: int = 0, steps: int = 1000,
               data_dir: Optional[str] = None, log: Callable[[str], None] = print) -> Path:
    """Train (or continue) the DDPM file ``out`` to ``epochs`` epochs of Adam on L_simple.

    Args:
        dataset: a built-in dataset (``digits`` needs no download; ``mnist``, ``fashion-mnist``,
            ``cifar10`` are downloaded once).
        out: the DDPM file, continued when it exists (its recorded dataset must be ``dataset``).
        epochs: the total number of epochs (a finished file asked for more is extended).
        batch_size: images per optimiser step.
        lr: Adam's learning rate.
        width: the UNet's base channels, a multiple of 8 (0.1M parameters at 16).
        seed: the seed of the initialisation, batches and noise.
        steps: the timesteps T of the linear schedule (beta 1e-4 to 0.02).
        data_dir: where the dataset is read from or downloaded to.
        log: where the line of each epoch goes.

    Returns:
        ``out``, a file ``rsmooth certify --diffusion`` reads.

    Example:
        ```python
        from rsmooth.engine.ddpm import train_ddpm

        train_ddpm("digits", "runs/ddpm.pt", epochs=300, width=16, lr=5e-4)
        ```
    """
    epochs, batch_size = validate_count("--epochs", epochs), validate_count("--batch-size", batch_size)
    width, steps = validate_count("--width", width), validate_count("--steps", steps, minimum=2)
    check(width % 8 == 0, f"--width must be a multiple of 8 (the UNet's group norms), got {width}")
    check(isinstance(lr, (int, float)) and 0 < lr < float("inf"), f"--lr must be > 0, got {lr!r}")
    out = check_output_file(out)
    resumed = load_ddpm(out) if out.exists() else None  # checked before any data is read
    recorded = resumed[2].get("dataset") if resumed else dataset
    check(recorded == dataset, f"{out} is a DDPM of {recorded!r}, not {dataset!r}: use another --out")
    data = get_dataset(dataset, "train", data_dir)
    x_all, _ = data.get_batch(torch.arange(len(data)))
    torch.manual_seed(seed)
    model, abar, blob = resumed or (TinyUNet(x_all.shape[1], width), linear_schedule(steps), {"epoch": 0})
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    if "optimizer" in blob:
        opt.load_state_dict(blob["optimizer"])
    done = blob["epoch"]
    model.train()
    for epoch in range(done, epochs):
        loss, seconds = _epoch(model, opt, x_all, abar, batch_size, torch.Generator().manual_seed(seed * 100_003 + epoch))
        save_ddpm(out, model, abar, dataset=dataset, epoch=epoch + 1, optimizer=opt.state_dict(), seed=seed, lr=lr,
                  batch_size=batch_size)
        log(f"epoch {epoch + 1}/{epochs}: loss {loss:.4f} ({seconds:.1f} s)")
    return out


def _epoch(model: TinyUNet, opt: torch.optim.Optimizer, x_all: torch.Tensor, abar: torch.Tensor, batch_size: int,
           g: torch.Generator) -> tuple:
    """One epoch of L_simple over ``x_all`` in the order and noise ``g`` draws: (mean loss, seconds)."""
    order, total, start = torch.randperm(len(x_all), generator=g), 0.0, time.time()
    for i in range(0, len(order), batch_size):
        x0 = x_all[order[i:i + batch_size]]
        t = torch.randint(0, len(abar), (len(x0),), generator=g)
        loss = ddpm_loss(model, x0, t, torch.randn(x0.shape, generator=g), abar)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += float(loss.detach()) * len(x0)
    return total / len(x_all), time.time() - start
