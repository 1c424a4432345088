"""The one training loop: methods supply losses, the engine does the rest.

It owns the optimiser (SGD with momentum, weight decay, optional Nesterov), the learning-rate
schedule, chunking (one optimiser step per chunk for chunked methods, as in the Jeong-family
training scripts), devices, evaluation (clean accuracy and accuracy under noise), logging and
atomic checkpoints, and resumes bit-identically: every random stream is derived from
``(seed, epoch, step)``.

Schedule timing (``lr_timing``): the Jeong-family scripts (jh-jeong/smoothing-consistency,
jh-jeong/smoothmix, alinlab/smoothing-catrs) that produced Jeong & Shin 2020 (arXiv
2006.04062), Jeong et al. 2021 (arXiv 2111.09277), Jeong et al. 2022 (OpenReview qLqeb9AjD2o)
and Jeong et al. 2023 (arXiv 2212.09000) call ``scheduler.step(epoch)`` *after* training epoch
``epoch``, so with ``lr_step = 50`` 0-based epochs 0-50 use ``lr`` and epoch 51 is the first at
a reduced rate ("catrs", the default).  Cohen's code steps at the start of each epoch, one epoch
earlier: epoch 50 is the first reduced one ("cohen").

Fast modes (opt-in, fixed for a run, recorded in its config): ``precision`` runs each step's
forward passes and loss, the methods' attacks included, under ``torch.autocast`` (bf16; fp16
on CUDA with a gradient scaler whose state is checkpointed); ``channels_last`` keeps the model
and the input batches in channels-last memory format; ``compile`` trains through
``torch.compile`` of the model.  Checkpoints keep the plain module's weights, and the per-epoch
evaluation runs that plain module in fp32 without autocast, so test accuracies compare across
modes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from .. import __version__
from ..errors import RsmoothError, check
from ..fileio import atomic_write_bytes, naming, remove_stale_temps, run_lock
from ..methods import Batch, Method, StepContext, create_method
from ..paths import check_output_dir
from ..progress import format_duration, progress_bar
from .checkpoint import (CHECKPOINT_NAME, FORMAT, atomic_save, git_commit, read_checkpoint,
                         resolve_device, state_digest, versions)
from .seeding import derive_seed, generator, validate_seed

#: learning rate and epochs when none is given (the CAT-RS authors' scripts); presets refine
#: these per paper
DATASET_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "digits": {"lr": 0.05, "epochs": 30, "lr_step": 20},
    "mnist": {"lr": 0.01, "epochs": 150, "lr_step": 50},
    "fashion-mnist": {"lr": 0.01, "epochs": 150, "lr_step": 50},
    "cifar10": {"lr": 0.1, "epochs": 150, "lr_step": 50},
    "cifar100": {"lr": 0.1, "epochs": 150, "lr_step": 50},
    "imagenet": {"lr": 0.1, "epochs": 90, "lr_step": 30},
}

#: config fields that must not change when a run is resumed
_FIXED_ON_RESUME = ("dataset", "arch", "method", "hparams", "batch_size", "lr", "momentum",
                    "weight_decay", "nesterov", "lr_step", "milestones", "lr_gamma", "lr_timing",
                    "seed", "targets", "precision", "channels_last", "compile")
LR_TIMINGS = ("catrs", "cohen")
#: autocast dtype of each --precision (fp32: no autocast)
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class TrainConfig:
    """Everything that defines a training run (saved, resolved, in every checkpoint)."""

    dataset: str = "digits"
    arch: Optional[str] = None
    method: str = "gaussian"
    hparams: Dict[str, Any] = field(default_factory=dict)  # method hyperparameters, sigma included
    epochs: Optional[int] = None
    batch_size: int = 256
    lr: Optional[float] = None
    momentum: float = 0.9
    weight_decay: float = 1e-4
    nesterov: bool = False
    lr_step: Optional[int] = None  # step schedule: x lr_gamma every lr_step epochs
    milestones: Optional[List[int]] = None  # multistep schedule (overrides lr_step)
    lr_gamma: float = 0.1
    lr_timing: str = "catrs"  # when the lr drops: "catrs" (authors' scripts) or "cohen" (one epoch earlier)
    seed: int = 0
    data_dir: Optional[str] = None
    device: Optional[str] = None
    num_workers: int = 0
    eval_batch_size: int = 500
    targets: Optional[str] = None  # CAT-RS consistency targets file ('rsmooth targets')
    precision: str = "fp32"  # autocast of each step: fp32 (none), bf16, fp16 (CUDA, gradient scaler)
    channels_last: bool = False  # model and batches in channels-last memory format
    compile: bool = False  # train through torch.compile(model)

    def resolved(self) -> "TrainConfig":
        """Fill dataset-dependent defaults (arch, lr, epochs, lr_step) and validate."""
        from ..data import dataset_info
        from ..models import default_arch

        dataset_info(self.dataset)  # unknown dataset -> error listing the valid ones
        d = DATASET_DEFAULTS.get(self.dataset, DATASET_DEFAULTS["cifar10"])
        c = dataclasses.replace(
            self,
            arch=self.arch or default_arch(self.dataset),
            lr=d["lr"] if self.lr is None else self.lr,
            epochs=d["epochs"] if self.epochs is None else self.epochs,
            lr_step=d["lr_step"] if self.lr_step is None else self.lr_step,
            hparams=dict(self.hparams),
            seed=validate_seed(self.seed),
        )
        check(c.epochs >= 1, f"--epochs must be >= 1, got {c.epochs}")
        check(c.batch_size >= 1, f"--batch-size must be >= 1, got {c.batch_size}")
        check(c.lr > 0 and math.isfinite(c.lr), f"--lr must be > 0, got {c.lr}")
        check(0 <= c.momentum < 1, f"--momentum must be in [0, 1), got {c.momentum}")
        check(c.weight_decay >= 0, f"--weight-decay must be >= 0, got {c.weight_decay}")
        check(c.lr_step >= 1, f"--lr-step must be >= 1 epoch, got {c.lr_step}")
        check(0 < c.lr_gamma <= 1, f"--lr-gamma must be in (0, 1], got {c.lr_gamma}")
        check(not c.nesterov or c.momentum > 0, "--nesterov needs --momentum > 0")
        check(c.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}, got {c.precision!r}")
        check(c.lr_timing in LR_TIMINGS, f"--lr-timing must be one of {', '.join(LR_TIMINGS)}, got {c.lr_timing!r}")
        if c.milestones is not None:
            check(all(m >= 1 for m in c.milestones) and list(c.milestones) == sorted(c.milestones),
                  f"--milestones must be increasing epochs >= 1, got {c.milestones}")
        return c

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TrainResult:
    """Where the run wrote its checkpoint, and one dict of figures per epoch."""

    checkpoint: Path
    history: List[Dict[str, Any]]
    model: nn.Module


def lr_factor(epoch: int, c: "TrainConfig") -> float:
    """Multiplier of ``c.lr`` during 0-based ``epoch`` (step or multistep, see ``lr_timing``)."""
    e = max(epoch - 1, 0) if c.lr_timing == "catrs" else epoch
    drops = sum(m <= e for m in c.milestones) if c.milestones else e // c.lr_step
    return c.lr_gamma ** drops


def first_lr_drop(c: "TrainConfig") -> int:
    """The first 0-based epoch trained at a reduced learning rate (MACER's deferred lambda)."""
    first = c.milestones[0] if c.milestones else c.lr_step
    return first + 1 if c.lr_timing == "catrs" else first


def _make_scheduler(opt: torch.optim.Optimizer, c: "TrainConfig"):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: lr_factor(epoch, c))


def evaluate(model: nn.Module, dataset, sigma: float, seed: int, batch_size: int = 500,
             device: Optional[torch.device] = None) -> Dict[str, float]:
    """Clean accuracy and accuracy under one draw of N(0, sigma^2 I) per test image."""
    device = device or next(model.parameters()).device
    g = generator(seed, "eval", device=device)
    was_training = model.training
    model.eval()
    correct = noisy = 0
    try:
        with torch.inference_mode():
            for start in range(0, len(dataset), batch_size):
                idx = torch.arange(start, min(start + batch_size, len(dataset)))
                x, y = dataset.get_batch(idx)
                x, y = x.to(device), y.to(device)
                correct += int((model(x).argmax(1) == y).sum())
                noise = torch.randn(x.shape, generator=g, device=device).mul_(sigma)
                noisy += int((model(x + noise).argmax(1) == y).sum())
    finally:
        model.train(was_training)
    return {"test_acc": correct / len(dataset), "test_acc_noisy": noisy / len(dataset)}


def _batches(dataset, perm: torch.Tensor, batch_size: int, seed: int, epoch: int,
             num_workers: int, pin: bool = False) -> Iterator[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, idx) per loader batch; augmentation seeded by (seed, epoch, step) only, so worker
    processes, their prefetching and pinned memory (``pin``, for CUDA) leave every batch as it is."""
    chunks = list(perm.split(batch_size))

    def load(step: int):
        idx = chunks[step]
        x, y = dataset.get_batch(idx, augment=True, generator=generator(seed, "augment", epoch, step))
        return x, y, idx

    if num_workers <= 0:
        for step in range(len(chunks)):
            yield load(step)
        return
    loader = torch.utils.data.DataLoader(_Steps(load, len(chunks)), batch_size=None,
                                         num_workers=num_workers, persistent_workers=False,
                                         pin_memory=pin, prefetch_factor=4 if pin else None)
    yield from loader


class _Steps(torch.utils.data.Dataset):
    def __init__(self, fn: Callable[[int], Any], n: int) -> None:
        self.fn, self.n = fn, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.fn(i)


def _check_precision(precision: str, device: torch.device) -> None:
    check(precision != "fp16" or device.type == "cuda", f"--precision fp16 needs a CUDA device "
          f"(training here is on {device.type}); use --precision bf16 or fp32")


def _fast_modes(model: nn.Module, c: TrainConfig, device: torch.device):
    """(the module the steps call, the autocast context of a step, the gradient scaler) of the
    modes in ``c``; the scaler passes through unless fp16.  ``model`` stays the plain module."""
    if c.channels_last:
        model.to(memory_format=torch.channels_last)
    net = torch.compile(model) if c.compile else model
    dtype = PRECISIONS[c.precision]
    autocast = functools.partial(torch.autocast, device.type, dtype=dtype) if dtype else contextlib.nullcontext
    return net, autocast, torch.amp.GradScaler(device.type, enabled=c.precision == "fp16")


def _check_resume(saved: Dict[str, Any], c: TrainConfig, path: Path) -> None:
    for key in _FIXED_ON_RESUME:  # a field newer than the checkpoint had its default
        old, new = saved.get(key, getattr(TrainConfig, key, None)), getattr(c, key)
        if old != new:
            raise RsmoothError(f"cannot resume {path}: it was trained with {key}={old!r}, now {new!r}; "
                               f"use the same settings or a new --out")


def _exclusive(fn: Callable[..., "TrainResult"]) -> Callable[..., "TrainResult"]:
    """Run ``fn(config, out, ...)`` once ``out`` is known to be a writable folder, holding the lock
    ``out/.lock`` (a second process training into ``out`` is refused), after removing the
    temporary files a killed run left in ``out``; a folder created here and left empty (bad
    settings) is removed."""

    @functools.wraps(fn)
    def locked(config: TrainConfig, out: str, **kw: Any) -> "TrainResult":
        out_dir = check_output_dir(out)
        created = not out_dir.exists()
        try:
            with run_lock(out_dir / ".lock", out_dir):
                remove_stale_temps(*(out_dir / name for name in (CHECKPOINT_NAME, "config.json", "train.log")))
                return fn(config, out, **kw)
        finally:
            if created:
                with contextlib.suppress(OSError):  # not empty: the run wrote something
                    out_dir.rmdir()

    return locked


@_exclusive
def train(
    config: TrainConfig,
    out: str,
    *,
    resume: bool = False,
    extras: Optional[Dict[str, torch.Tensor]] = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    stop_after_epoch: Optional[int] = None,
) -> TrainResult:
    """Train a base classifier with ``config.method``; write ``out/checkpoint.pt`` every epoch.

    Args:
        config: the run's settings (unresolved fields get dataset defaults).
        out: output folder (checkpoint.pt, config.json, train.log).
        resume: continue from ``out/checkpoint.pt``; the result is bit-identical to an
            uninterrupted run.  Without it, an existing checkpoint is an error (nothing lost).
        extras: per-example tensors [N x ...] indexed by training-set index (CAT-RS targets).
        stop_after_epoch: stop (as if killed) after this many epochs; for tests and staging.
    """
    from ..data import get_dataset
    from ..models import create_model

    c = config.resolved()
    method: Method = create_method(c.method, **c.hparams)
    c.hparams = method.hparams()
    device = resolve_device(c.device)
    _check_precision(c.precision, device)
    out_dir = Path(out)
    ckpt_path = out_dir / CHECKPOINT_NAME

    train_set = get_dataset(c.dataset, "train", data_dir=c.data_dir)
    test_set = get_dataset(c.dataset, "test", data_dir=c.data_dir)
    extras = {k: v for k, v in (extras or {}).items()}
    if c.targets:
        from .targets import load_targets

        extras["targets"] = load_targets(c.targets, train_set)
    for name in method.requires:
        check(name in extras, f"method {c.method} needs --{name} FILE (make it with 'rsmooth {name}')")
    for name, v in extras.items():
        check(v.shape[0] == len(train_set), f"{name} has {v.shape[0]} rows but the {c.dataset} "
              f"training set has {len(train_set)} examples")

    torch.manual_seed(c.seed)
    model = create_model(c.arch, c.dataset).to(device)
    net, autocast, scaler = _fast_modes(model, c, device)
    opt = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=c.momentum,
                          weight_decay=c.weight_decay, nesterov=c.nesterov)
    sched = _make_scheduler(opt, c)
    start_epoch, history = 0, []

    if ckpt_path.exists() and not resume:
        raise RsmoothError(f"{ckpt_path} already exists; pass --resume to continue that run "
                           f"or choose another --out")
    if resume and ckpt_path.exists():
        ck = read_checkpoint(ckpt_path)
        check(ck.get("format") == FORMAT, f"{ckpt_path} is not an rsmooth training checkpoint")
        _check_resume(ck["config"], c, ckpt_path)
        model.load_state_dict(ck["state_dict"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        if scaler.is_enabled():
            scaler.load_state_dict(ck["scaler"])
        start_epoch, history = int(ck["epoch"]), list(ck.get("history", []))
        if start_epoch > c.epochs:
            raise RsmoothError(f"cannot resume {ckpt_path} with --epochs {c.epochs}: it has already "
                               f"trained {start_epoch} epochs; pass --epochs {start_epoch} or more, "
                               f"or choose another --out")
        if start_epoch == c.epochs:
            log(f"{ckpt_path} has already trained all {c.epochs} epochs; nothing to do "
                f"(pass a larger --epochs to train further)")
        torch.set_rng_state(ck["rng"]["torch"])
        log(f"resuming {ckpt_path} after epoch {start_epoch}")

    atomic_write_bytes(out_dir / "config.json", (json.dumps(
        {"config": c.to_dict(), "versions": versions(), "git_commit": git_commit()}, indent=2) + "\n").encode())
    # one line per finished epoch: a kill between a checkpoint and its log line lost that line
    log_path = atomic_write_bytes(out_dir / "train.log", "".join(json.dumps(r) + "\n" for r in history).encode())
    log_file = open(log_path, "a")
    lr_drop = first_lr_drop(c)
    noise_gen = torch.Generator(device=device)
    extras = {k: v.to(device) for k, v in extras.items()}
    memory_format = torch.channels_last if c.channels_last else torch.preserve_format

    run_start, first_epoch = time.time(), start_epoch
    try:
        for epoch in range(start_epoch, c.epochs):
            if stop_after_epoch is not None and epoch >= stop_after_epoch:
                break
            t0 = time.time()
            torch.manual_seed(derive_seed(c.seed, "global", epoch))
            model.train()
            perm = torch.randperm(len(train_set), generator=generator(c.seed, "order", epoch))
            sums: Dict[str, torch.Tensor] = {}
            steps = 0
            bar = progress_bar(total=len(train_set), desc=f"epoch {epoch + 1}/{c.epochs}",
                               enabled=progress, leave=False)
            for b, (x, y, idx) in enumerate(_batches(train_set, perm, c.batch_size, c.seed, epoch,
                                                     c.num_workers, pin=device.type == "cuda")):
                batch = Batch(x.to(device, non_blocking=True, memory_format=memory_format),
                              y.to(device, non_blocking=True), idx,
                              {k: v[idx.to(device)] for k, v in extras.items()})
                for j, chunk in enumerate(batch.chunks(method.num_chunks)):
                    noise_gen.manual_seed(derive_seed(c.seed, "noise", epoch, b, j))
                    ctx = StepContext(noise_gen, epoch, c.epochs, steps, lr_drop)
                    opt.zero_grad(set_to_none=True)
                    with autocast():
                        loss, stats = method.loss(net, chunk, ctx)
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                    steps += 1
                    for k, v in {"loss": loss, **stats}.items():
                        v = v.detach().float() if isinstance(v, torch.Tensor) else torch.tensor(float(v))
                        sums[k] = sums[k] + v if k in sums else v
                bar.update(len(idx))
                if bar.n and not bar.disable:
                    bar.set_postfix(loss=f"{float(loss.detach()):.4f}")
            bar.close()
            lr = opt.param_groups[0]["lr"]
            sched.step()
            record = {"epoch": epoch + 1, "lr": lr, **{k: float(v) / max(steps, 1) for k, v in sums.items()}}
            if not all(math.isfinite(v) for v in record.values()):
                raise RsmoothError(f"training diverged at epoch {epoch + 1} (loss {record.get('loss')}); "
                                   f"lower --lr (now {c.lr}) or check the data")
            record.update(evaluate(model, test_set, method.sigma, derive_seed(c.seed, epoch),
                                   c.eval_batch_size, device))
            record["time"] = time.time() - t0
            history.append(record)
            atomic_save(_checkpoint(model, opt, sched, scaler, epoch + 1, c, method, history, train_set),
                        ckpt_path)
            line = (f"epoch {epoch + 1}/{c.epochs}  lr {lr:.4g}  loss {record['loss']:.4f}  "
                    f"test acc {record['test_acc']:.4f}  noisy {record['test_acc_noisy']:.4f}  "
                    f"{record['time']:.1f}s")
            if epoch + 1 < c.epochs:  # the whole run's remaining time, from this session's epochs
                per_epoch = (time.time() - run_start) / (epoch + 1 - first_epoch)
                line += f"  eta {format_duration(per_epoch * (c.epochs - epoch - 1))}"
            log(line)
            with naming(log_path):
                log_file.write(json.dumps(record) + "\n")
                log_file.flush()
    finally:
        with contextlib.suppress(OSError):  # a failed write has raised already
            log_file.close()
    return TrainResult(ckpt_path, history, model)


def _checkpoint(model, opt, sched, scaler, epoch, c: TrainConfig, method: Method, history,
                train_set) -> Dict[str, Any]:
    from ..data import dataset_info

    info = dataset_info(c.dataset)
    return {
        "format": FORMAT,
        "rsmooth_version": __version__,
        "epoch": epoch,
        "arch": c.arch,
        "dataset": c.dataset,
        "num_classes": info.num_classes,
        "input_shape": list(info.input_shape),
        "sigma": float(method.sigma),
        "method": c.method,
        "seed": c.seed,
        "config": c.to_dict(),
        "data_fingerprint": train_set.fingerprint(),
        "state_dict": model.state_dict(),
        "state_sha256": state_digest(model.state_dict()),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        **({"scaler": scaler.state_dict()} if scaler.is_enabled() else {}),
        "rng": {"torch": torch.get_rng_state()},
        "history": history,
        "versions": versions(),
        "git_commit": git_commit(),
    }
