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
import functools
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import nn

from ..errors import RsmoothError, check, setting
from ..fileio import atomic_write_bytes, naming, open_nofollow, remove_stale_temps, run_lock
from ..methods import Batch, Method, StepContext, create_method
from ..paths import check_output_dir
from ..progress import Heartbeat, format_duration, progress_bar
from ..seeding import derive_seed, generator
from ..smoothing.noises import Noise, as_noise
from ..version import __version__
from .callbacks import CallbackList, as_callbacks
from .checkpoint import (CHECKPOINT_NAME, FORMAT, atomic_save, git_commit, read_checkpoint,
                         resolve_device, seal, versions)
from . import distributed
from .distributed import World
from .preempt import CheckpointClock, StopSignals
from .sessions import past_sessions, session
from .trainconfig import (PRECISIONS, TrainConfig, TrainResult, _check_resume, first_lr_drop, is_denoiser,
                          lr_factor)

def _make_scheduler(opt: torch.optim.Optimizer, c: "TrainConfig"):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: lr_factor(epoch, c))


class _Interrupted(Exception):
    """The evaluation stopped early (a stop was requested)."""


def evaluate(model: nn.Module, dataset, sigma: Union[float, Noise], seed: int, batch_size: int = 500,
             device: Optional[torch.device] = None, w: World = World(),
             should_stop: Optional[Callable[[], bool]] = None) -> Dict[str, float]:
    """Clean accuracy and accuracy under one draw of the noise per test image: ``sigma``, a
    :class:`~rsmooth.smoothing.noises.Noise` (the training noise) or a number (N(0, sigma^2 I)).

    The noise of each batch is seeded by ``(seed, first index)``; under ``torchrun`` rank r takes
    batches r, r + W, ... and the counts are summed over the ranks, so every rank returns what
    one process does.  ``should_stop`` (one process only) is asked between batches: when it is
    true the evaluation stops (an internal ``_Interrupted``).
    """
    device = device or next(model.parameters()).device
    smoothing = as_noise(sigma)
    was_training = model.training
    model.eval()
    counts = torch.zeros(2, dtype=torch.int64, device=device)
    try:
        with torch.inference_mode():
            for start in range(w.rank * batch_size, len(dataset), w.size * batch_size):
                if should_stop is not None and should_stop():
                    raise _Interrupted
                idx = torch.arange(start, min(start + batch_size, len(dataset)))
                x, y = dataset.get_batch(idx)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                noise = smoothing.like(x, StepContext(generator(seed, "eval", start, device=device)))
                counts[0] += (model(x).argmax(1) == y).sum()
                counts[1] += (model(x + noise).argmax(1) == y).sum()
    finally:
        model.train(was_training)
    correct, noisy = distributed.all_reduce(counts, w, "the other ranks' evaluation").tolist()
    return {"test_acc": correct / len(dataset), "test_acc_noisy": noisy / len(dataset)}


def eval_set(test_set, c: TrainConfig):
    """The test examples the per-epoch evaluation scores: all, or a fixed subset of
    ``c.eval_examples`` (:func:`rsmooth.data.fixed_subset`: the same for every run and seed)."""
    from ..data import SubsetDataset, fixed_subset

    if c.eval_examples is None or c.eval_examples == len(test_set) or not c.evaluates(c.epochs - 1):
        return test_set
    check(c.eval_examples <= len(test_set), f"--eval-examples {c.eval_examples} is more than the "
          f"{len(test_set)} test examples of {c.dataset}; pass at most {len(test_set)} (or drop it for all)")
    return SubsetDataset(test_set, fixed_subset(len(test_set), c.eval_examples))


def steps_per_epoch(n: int, batch_size: int, num_chunks: int) -> int:
    """Optimiser steps of an epoch over ``n`` examples (one per non-empty chunk of each batch)."""
    k = max(1, num_chunks)
    full, rest = divmod(n, batch_size)
    return full * min(k, batch_size) + min(k, rest)


def _batches(dataset, perm: torch.Tensor, batch_size: int, seed: int, epoch: int,
             num_workers: int, pin: bool = False, start: int = 0
             ) -> Iterator[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, idx) per loader batch from batch ``start`` on; augmentation seeded by (seed, epoch,
    step) only, so worker processes, their prefetching and pinned memory (``pin``, for CUDA)
    leave every batch as it is (the loader draws its workers' seeds from its own generator, not
    from the global one, which the steps may use)."""
    chunks = list(perm.split(batch_size))[start:]

    def load(step: int):
        idx = chunks[step]
        x, y = dataset.get_batch(idx, augment=True, generator=generator(seed, "augment", epoch, start + step))
        return x, y, idx

    if num_workers <= 0:
        for step in range(len(chunks)):
            yield load(step)
        return
    loader = torch.utils.data.DataLoader(_Steps(load, len(chunks)), batch_size=None,
                                         num_workers=num_workers, persistent_workers=False,
                                         pin_memory=pin, prefetch_factor=4 if pin else None,
                                         generator=torch.Generator(), worker_init_fn=_ignore_stops)
    yield from loader


def _ignore_stops(worker_id: int) -> None:
    """In a loader worker: leave SIGTERM/SIGINT (sent to the whole job or process group) to the main
    process, which saves the step in progress before it stops (a worker killed by them would
    abort the step); the workers end with the main process's loader."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


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


def _fast_modes(model: nn.Module, c: TrainConfig, device: torch.device, w: World):
    """(what the steps call, what attacks call, the autocast context of a step) for the modes in
    ``c``: ``model`` in channels-last format, compiled, and in DistributedDataParallel under
    torchrun (attacks run outside it: no gradient hooks, no all-reduce).  ``model`` stays the
    plain module."""
    if c.channels_last:
        model.to(memory_format=torch.channels_last)
    inner = torch.compile(model) if c.compile else model
    net = inner
    if w.size > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        net = torch.compile(ddp) if c.compile else ddp
    dtype = PRECISIONS[c.precision]
    autocast = functools.partial(torch.autocast, device.type, dtype=dtype) if dtype else contextlib.nullcontext
    return net, inner, autocast


def _exclusive(fn: Callable[..., "TrainResult"]) -> Callable[..., "TrainResult"]:
    """Run ``fn(config, out, ...)`` once ``out`` is known to be a writable folder, holding the lock
    ``out/.lock`` (a second run training into ``out`` is refused), after removing the
    temporary files a killed run left in ``out``; a folder created here and left empty (bad
    settings) is removed."""

    @functools.wraps(fn)
    def locked(config: Optional[TrainConfig], out: str, **kw: Any) -> "TrainResult":
        if not distributed.world().main:  # under torchrun rank 0 alone touches ``out``
            return fn(config, out, **kw)
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
    config: Optional[TrainConfig],
    out: str,
    *,
    resume: bool = False,
    extras: Optional[Dict[str, torch.Tensor]] = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    stop_after_epoch: Optional[int] = None,
    callbacks: Optional[List[Any]] = None,
    trust_code: bool = False,
) -> TrainResult:
    """Train a base classifier with ``config.method``; write ``out/checkpoint.pt`` every epoch,
    and within epochs every ``config.checkpoint_every`` and on SIGTERM/SIGINT (then stop).

    Under ``torchrun`` (W processes) the model is trained with DistributedDataParallel and each
    optimiser step's chunk is split across the ranks (see :class:`~rsmooth.methods.StepContext`),
    so the run takes the steps one process takes; only rank 0 writes, logs and shows progress.

    Args:
        config: the run's settings (unresolved fields get dataset defaults); None with ``resume``:
            those recorded in ``out`` (:meth:`TrainConfig.from_run`).
        out: output folder (checkpoint.pt, config.json, train.log).
        resume: continue from ``out/checkpoint.pt`` (with any number of processes); the result is
            bit-identical to an uninterrupted run.  Without it, an existing checkpoint is an error.
        extras: per-example tensors [N x ...] indexed by training-set index (CAT-RS targets).
        stop_after_epoch: stop (as if killed) after this many epochs; for tests and staging.
        callbacks: objects with any of the methods of :mod:`rsmooth.engine.callbacks` (e.g.
            ``on_epoch_end(record)``), called on rank 0; ``config.tensorboard`` adds
            :class:`~rsmooth.engine.callbacks.TensorBoardLogger` writing ``out/tensorboard``.
        trust_code: run the ``module:factory`` that a file names (the arch recorded in ``out`` when
            ``config`` is None, the ``classifier`` checkpoint's; :mod:`rsmooth.trust`).

    Returns:
        :class:`TrainResult`: the checkpoint's path, the per-epoch history, the trained model.

    Example:
        ```python
        from rsmooth.engine import TrainConfig, train

        config = TrainConfig(dataset="digits", method="gaussian", hparams={"sigma": 0.25}, epochs=5)
        result = train(config, "runs/digits025", resume=True)   # continues the run if it was stopped
        print(result.history[-1])   # {'epoch': 5, 'lr': 0.05, 'loss': ..., 'test_acc': ..., ...}
        ```
    """
    if config is None:
        check(resume, "train(None, out) continues the run recorded in out: pass resume=True, or a TrainConfig")
        config = TrainConfig.from_run(out, trust_code=trust_code)
    c = config.resolved()
    method: Method = create_method(c.method, **c.hparams)
    c.hparams = method.hparams()
    w = distributed.world()
    device = distributed.rank_device(resolve_device(c.device), w)
    _check_precision(c.precision, device)
    check(not (c.sync_bn and w.size > 1 and device.type != "cuda"),
          "--sync-bn needs CUDA devices (SyncBatchNorm runs on GPUs only); drop it to keep per-rank statistics")
    if not w.main:
        progress, log = False, distributed.quiet
    ckpt_path = Path(out) / CHECKPOINT_NAME

    train_set, full_test, test_set, extras = _data(c, method, extras)
    cbs = as_callbacks(callbacks, Path(out) / "tensorboard" if c.tensorboard else None)  # every rank checks
    wants_step = cbs.wants("on_step")  # rank 0's decides (the losses of every rank are summed for it)
    if not w.main:
        cbs = CallbackList()
    torch.manual_seed(c.seed)
    model, scored, recorded = _build_model(c, method, device, trust_code)
    if c.sync_bn and w.size > 1:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    opt = _optimizer(model, c)
    sched = _make_scheduler(opt, c)
    with distributed.process_group(device):
        if w.size > 1:
            distributed.agree(w, _rank_facts(c, train_set, test_set, extras, recorded))
            _warn_own_randomness(model, w)
        ck = _start_state(ckpt_path, c, resume, w, log)
        scaler = torch.amp.GradScaler(device.type, enabled=c.precision == "fp16")
        start_epoch, history = _load_state(ck, model, opt, sched, scaler)
        partial = _partial_of(ck)
        sessions = _sessions(ck, start_epoch, partial, c, w, device)
        run = _Run(c, method, model, *_fast_modes(model, c, device, w), opt, sched, scaler, w, device,
                   {k: v.to(device, non_blocking=True) for k, v in extras.items()})
        spe = steps_per_epoch(len(train_set), c.batch_size, method.num_chunks)

        def save(epochs_done: int, reason: str, position: Optional[Dict[str, Any]] = None) -> None:
            if w.main:
                atomic_save(seal({**_checkpoint(model, opt, sched, scaler, epochs_done, c, method, history,
                                                train_set, w), **recorded, "sessions": sessions,
                                  **({"partial": position} if position is not None else {})}), ckpt_path)
                cbs("on_checkpoint", {"path": str(ckpt_path), "epoch": epochs_done,
                                      "step": position["steps"] if position else 0, "reason": reason})

        with run, _run_log(Path(out), c, history, sessions, w) as write, StopSignals() as stop, \
                distributed.collectives(w, "the other ranks' steps", f"rerun the same torchrun command with "
                                        f"{setting('resume', True)} to continue from the last checkpoint"):
            control = _Control(run, save, CheckpointClock(c.checkpoint_every, start_epoch * spe + (
                partial["steps"] if partial else 0)), stop, w, spe, log, str(ckpt_path), progress)
            if distributed.broadcast(wants_step, w, "rank 0's callbacks"):
                run.on_step = lambda pos, loss: cbs("on_step", {
                    "epoch": pos.epoch + 1, "step": pos.steps, "global_step": pos.epoch * spe + pos.steps,
                    "loss": float(loss), "lr": opt.param_groups[0]["lr"]})
            cbs("on_train_begin", {"config": c.to_dict(), "out": str(out), "start_epoch": start_epoch,
                                   "world_size": w.size, "steps_per_epoch": spe,
                                   "global_step": start_epoch * spe + (partial["steps"] if partial else 0)})
            completed = False
            try:
                for epoch in range(start_epoch, c.epochs):
                    if stop_after_epoch is not None and epoch >= stop_after_epoch:
                        break
                    record = run.epoch(train_set, epoch, progress, partial, control.after_batch)
                    partial = None
                    distributed.broadcast_buffers(model, w)  # rank 0's batch-norm statistics are the model's
                    if c.evaluates(epoch):
                        try:
                            record.update(evaluate(scored, test_set, method.smoothing_noise, derive_seed(c.seed, epoch),
                                                   c.eval_batch_size, device, w,
                                                   should_stop=control.requested if w.size == 1 else None))
                        except _Interrupted:  # stopped while evaluating: the epoch's steps are saved
                            control.stop_now(run.position)
                        record["eval_examples"] = len(test_set)
                    sched.step()
                    record["time"] = time.time() - run.position.started
                    history.append(record)
                    save(epoch + 1, "epoch")
                    control.clock.reset((epoch + 1) * spe)
                    log(epoch_line(record, c.epochs, len(full_test), history))
                    write(record)
                    cbs("on_epoch_end", record)
                    if epoch + 1 < c.epochs:
                        control.after_epoch(epoch)
                completed = len(history) >= c.epochs
            finally:
                cbs("on_train_end", {"checkpoint": str(ckpt_path), "history": history, "completed": completed})
        distributed.barrier(w, "rank 0's checkpoint")  # every rank returns once it is written
    return TrainResult(ckpt_path, history, model)


#: the run's eta is at the median pace of this many last epochs
ETA_EPOCHS = 5


def epoch_pace(history: List[Dict[str, Any]]) -> float:
    """Seconds per epoch for the run's eta: the median time of the last :data:`ETA_EPOCHS` epochs
    (earlier sessions' included), so one epoch slowed by a busy machine, a suspended job or a
    resumed half epoch does not set the pace of the rest."""
    import statistics

    return statistics.median(float(r["time"]) for r in history[-ETA_EPOCHS:])


def epoch_line(record: Dict[str, Any], epochs: int, test_size: int, history: List[Dict[str, Any]]) -> str:
    """The console line of a finished epoch, ``history`` the run's epochs up to it (for the eta)."""
    line = f"epoch {record['epoch']}/{epochs}  lr {record['lr']:.4g}  loss {record['loss']:.4f}  "
    if "test_acc" in record:
        line += f"test acc {record['test_acc']:.4f}  noisy {record['test_acc_noisy']:.4f}  "
        if record.get("eval_examples", test_size) != test_size:
            line += f"(on {record['eval_examples']} test examples)  "
    else:
        line += "(not evaluated)  "
    line += f"{record['time']:.1f}s"
    left = epochs - record["epoch"]
    return line + f"  eta {format_duration(epoch_pace(history) * left)}" if left > 0 else line


def _data(c: TrainConfig, method: Method, extras: Optional[Dict[str, torch.Tensor]]):
    """(training set, test set, the examples evaluated each epoch, the per-example tensors the method
    gets: ``extras`` and ``c.targets``, each checked to have a row per training example)."""
    from ..data import get_dataset

    train_set = get_dataset(c.dataset, "train", data_dir=c.data_dir, subset=c.train_subset)
    full_test = get_dataset(c.dataset, "test", data_dir=c.data_dir)
    extras = dict(extras or {})
    if c.targets:
        from .targets import load_targets

        extras["targets"] = load_targets(c.targets, train_set)
    for name in method.requires:
        check(name in extras, f"method {c.method} needs --{name} FILE (make it with 'rsmooth {name}')")
    for name, v in extras.items():
        check(v.shape[0] == len(train_set), f"{name} has {v.shape[0]} rows but the {c.dataset} "
              f"training set has {len(train_set)} examples")
    return train_set, full_test, eval_set(full_test, c), extras


def _optimizer(model: nn.Module, c: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if c.optimizer == "adam":
        return torch.optim.Adam(params, lr=c.lr, weight_decay=c.weight_decay)
    return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay, nesterov=c.nesterov)


def _load_state(ck: Optional[Dict[str, Any]], model: nn.Module, opt, sched, scaler) -> Tuple[int, List[Dict[str, Any]]]:
    """Load a checkpoint's states (and torch's random state) into the run's objects; (epochs done,
    history).  (0, []) without one."""
    if ck is None:
        return 0, []
    model.load_state_dict(ck["state_dict"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    if scaler.is_enabled():
        scaler.load_state_dict(ck["scaler"])
    torch.set_rng_state(ck["rng"]["torch"])
    return int(ck["epoch"]), list(ck.get("history", []))


def _sessions(ck: Optional[Dict[str, Any]], start_epoch: int, partial: Optional[Dict[str, Any]], c: TrainConfig,
              w: World, device: torch.device) -> List[Dict[str, Any]]:
    """The run's ``sessions`` (checkpoint and config.json): every invocation that trained it, with
    where it began (epoch, step), when, and its code, world size and device; this one appended when
    it has epochs to train."""
    past = past_sessions(ck, {"epoch": 0, "step": 0}, ("git_commit", "versions", "world_size"))
    if start_epoch < c.epochs:
        past.append(session({"epoch": start_epoch, "step": partial["steps"] if partial else 0},
                            {"git_commit": git_commit(), "versions": versions(), "world_size": w.size,
                             "device": str(device)}))
    return past


def _partial_of(ck: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The position of a mid-epoch checkpoint (None: an epoch's end, or a fresh run)."""
    partial = ck.get("partial") if ck is not None else None
    return partial if isinstance(partial, dict) else None


@dataclass
class _Control:
    """What happens between two loader batches: a mid-epoch checkpoint when one is due
    (``--checkpoint-every``) or a stop was asked for (SIGTERM/SIGINT: then stop), decided
    together by all ranks; and, in a log, a heartbeat line."""

    run: "_Run"
    save: Callable[..., None]
    clock: CheckpointClock
    stop: StopSignals
    w: World
    steps_per_epoch: int
    log: Callable[[str], None]
    path: str
    progress: bool
    beat: Optional[Heartbeat] = None

    def requested(self) -> bool:
        return self.stop.signum is not None

    def _agree(self, stop: bool, due: bool) -> Tuple[bool, bool]:
        """(stop, checkpoint) of any rank, on every rank (one small all-reduce per batch)."""
        if self.w.size == 1:
            return stop, due
        flags = torch.tensor([int(stop), int(due)], device=self.run.device)
        stop_n, due_n = distributed.all_reduce(flags, self.w, "the other ranks' steps").tolist()
        return stop_n > 0, due_n > 0

    def after_batch(self, pos: "_Position") -> None:
        global_step = pos.epoch * self.steps_per_epoch + pos.steps
        stop, due = self._agree(self.requested(), self.clock.due(global_step))
        if stop:
            self.stop_now(pos)
        if due:
            self.save(pos.epoch, "every", self.run.partial_state())
            self.clock.reset(global_step)
        self._heartbeat(pos)

    def stop_now(self, pos: "_Position") -> None:
        """Save the epoch in progress, say how to continue, and stop (as the signal asked)."""
        self.save(pos.epoch, "signal", self.run.partial_state())
        self.log(f"stopped in epoch {pos.epoch + 1}/{self.run.c.epochs} after step {pos.steps}/"
                 f"{self.steps_per_epoch}: saved {self.path}; rerun with {setting('resume', True)} to continue "
                 f"from this step")
        self.stop.resend()

    def after_epoch(self, epoch: int) -> None:
        """Stop after an epoch's checkpoint when asked during its evaluation or its writing."""
        stop, _ = self._agree(self.requested(), False)
        if stop:
            self.log(f"stopped after epoch {epoch + 1}/{self.run.c.epochs}: saved {self.path}; "
                     f"rerun with {setting('resume', True)} to continue")
            self.stop.resend()

    def _heartbeat(self, pos: "_Position") -> None:
        """In a log (no bar drawn), rank 0's progress line of the epoch every ``$RSMOOTH_HEARTBEAT``
        seconds (:class:`~rsmooth.progress.Heartbeat`, the one certify uses)."""
        if self.beat is None or self.beat.desc != f"epoch {pos.epoch + 1}/{self.run.c.epochs}":
            self.beat = Heartbeat(self.steps_per_epoch, desc=f"epoch {pos.epoch + 1}/{self.run.c.epochs}",
                                  unit="steps", done=pos.first_steps, log=self.log, enabled=self.w.main)
        self.beat.update(pos.steps - self.beat.done)


def _build_model(c: TrainConfig, method: Method, device: torch.device, trust_code: bool = False
                 ) -> Tuple[nn.Module, nn.Module, Dict[str, Any]]:
    """(the model trained, the classifier the evaluation scores, what the checkpoint records
    besides).  A denoiser method trains D in front of the frozen ``--classifier`` f (set as
    ``method.classifier``; its recorded ``module:factory`` only with ``trust_code``) and scores
    f(D(x)); its checkpoint records f's path, sha256 and classes.  A ``module:factory`` arch is
    imported from ``sys.path`` only: it may come from a file (the CLI imports the ``--arch`` typed,
    looking in the current folder too, before it calls :func:`train`)."""
    from ..models import create_model, resolve_arch

    if ":" in c.arch:
        resolve_arch(c.arch, search_cwd=False)  # imported once, so the builders below find it
    if not is_denoiser(c.method):
        model = create_model(c.arch, c.dataset, **c.model_options()).to(device)
        return model, model, {}
    check(c.classifier is not None, f"--method {c.method} trains a denoiser in front of a classifier: "
          f"pass --classifier CKPT_OR_RUN (e.g. a run of --method standard)")
    from ..data import dataset_info
    from ..methods.denoise import DenoisedClassifier
    from ..models.dncnn import create_denoiser
    from .checkpoint import file_sha256, load_classifier

    f = load_classifier(c.classifier, c.dataset, "--classifier", trust_code=trust_code)
    method.classifier = f.model.to(device).requires_grad_(False).eval()
    shape = dataset_info(c.dataset).input_shape
    model = create_denoiser(c.arch, shape[0], tuple(shape[1:]), c.arch_kwargs).to(device)
    if c.init:
        init = read_checkpoint(c.init)
        check(isinstance(init.get("classifier"), dict) and init.get("arch") == c.arch,
              f"--init {c.init} is not a {c.arch} denoiser run; pass the run folder of a denoise-mse "
              f"or denoise-stab run with the same --arch")
        model.load_state_dict(init["state_dict"])
    path = f.path.resolve()
    return model, DenoisedClassifier(model, method.classifier), {
        "classifier": {"path": str(path), "sha256": file_sha256(path), "arch": f.arch},
        "num_classes": f.num_classes}


def _rank_facts(c: TrainConfig, train_set, test_set, extras: Dict[str, torch.Tensor],
                recorded: Dict[str, Any]) -> Dict[str, Any]:
    """What every rank of a torchrun job must share (:func:`~rsmooth.engine.distributed.agree`): the
    settings (but where each finds the data, its loader workers and device), the data, the
    per-example extras and the frozen classifier (their digests), the versions.  The resumed
    state needs no check: rank 0 alone reads the checkpoint and sends it to the others."""
    local = ("data_dir", "num_workers", "device")
    return {**{k: v for k, v in c.to_dict().items() if k not in local},
            "training data": train_set.fingerprint(), "test data": test_set.fingerprint(),
            **{f"{k} (shape, sum)": (list(v.shape), float(v.sum(dtype=torch.float64))) for k, v in extras.items()},
            "classifier sha256": (recorded.get("classifier") or {}).get("sha256"),
            "rsmooth": __version__, "torch": torch.__version__}


def _warn_own_randomness(model: nn.Module, w: World) -> None:
    """Rank 0 warns about modules whose random draws depend on the number of processes."""
    odd = distributed.own_randomness(model)
    if odd and w.main:
        warnings.warn(f"{', '.join(odd[:3])}{' ...' if len(odd) > 3 else ''} draw random numbers that depend "
                      f"on the number of processes: this run's weights will differ from a one-process run's")


def _start_state(ckpt_path: Path, c: TrainConfig, resume: bool, w: World,
                 log: Callable[[str], None]) -> Optional[Dict[str, Any]]:
    """The checkpoint to resume from (None: a fresh run), read by rank 0 and sent to the others;
    a refusal on rank 0 stops every rank."""
    answer: Tuple[Optional[str], Optional[Dict[str, Any]]] = (None, None)
    if w.main:
        try:
            answer = (None, _read_resume(ckpt_path, c, resume, log))
        except RsmoothError as e:
            answer = (str(e), None)
    error, ck = distributed.broadcast(answer, w, "rank 0 to read the run folder")
    if error is not None:
        raise RsmoothError(error if w.main else f"{w}: rank 0 refused the run: {error}")
    return ck


def _read_resume(ckpt_path: Path, c: TrainConfig, resume: bool, log: Callable[[str], None]
                 ) -> Optional[Dict[str, Any]]:
    if ckpt_path.exists() and not resume:
        raise RsmoothError(f"{ckpt_path} already exists; pass {setting('resume', True)} to continue that "
                           f"run or choose another {setting('out')}")
    if not (resume and ckpt_path.exists()):
        return None
    ck = read_checkpoint(ckpt_path)
    check(ck.get("format") == FORMAT, f"{ckpt_path} is not an rsmooth training checkpoint")
    _check_resume(ck["config"], c, ckpt_path)
    start_epoch = int(ck["epoch"])
    partial = _partial_of(ck)
    if partial is not None:
        check(int(partial.get("epoch", -1)) == start_epoch, f"{ckpt_path} is damaged: its mid-epoch "
              f"position is not in epoch {start_epoch + 1}; restore it from a copy or choose another "
              f"{setting('out')}")
        if c.epochs <= start_epoch:
            raise RsmoothError(f"cannot resume {ckpt_path} with {setting('epochs', c.epochs)}: it stopped "
                               f"inside epoch {start_epoch + 1}; pass {setting('epochs', start_epoch + 1)} or more")
        log(f"resuming {ckpt_path} in epoch {start_epoch + 1} after step {partial['steps']}")
        return ck
    if start_epoch > c.epochs:
        raise RsmoothError(f"cannot resume {ckpt_path} with {setting('epochs', c.epochs)}: it has already "
                           f"trained {start_epoch} epochs; pass {setting('epochs', start_epoch)} or more, "
                           f"or choose another {setting('out')}")
    if start_epoch == c.epochs:
        log(f"{ckpt_path} has already trained all {c.epochs} epochs; nothing to do (to train further, "
            f"pass more epochs, e.g. {setting('epochs', c.epochs + 1)})")
    else:
        log(f"resuming {ckpt_path} after epoch {start_epoch}")
    return ck


@contextlib.contextmanager
def _run_log(out_dir: Path, c: TrainConfig, history: List[Dict[str, Any]], sessions: List[Dict[str, Any]],
             w: World):
    """Rank 0 writes config.json and train.log (one line per finished epoch: a kill between a
    checkpoint and its log line lost that line) and yields the writer of an epoch's line."""
    if not w.main:
        yield lambda record: None
        return
    atomic_write_bytes(out_dir / "config.json", (json.dumps(
        {"config": c.to_dict(), "world_size": w.size, "versions": versions(), "git_commit": git_commit(),
         "sessions": sessions}, indent=2) + "\n").encode())
    log_path = atomic_write_bytes(out_dir / "train.log", "".join(json.dumps(r) + "\n" for r in history).encode())
    log_file = open_nofollow(log_path, "a")

    def write(record: Dict[str, Any]) -> None:
        with naming(log_path):
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()

    try:
        yield write
    finally:
        with contextlib.suppress(OSError):  # a failed write has raised already
            log_file.close()


@dataclass
class _Position:
    """Where an epoch is: loader batches and optimiser steps done, the per-step statistics summed
    so far (this rank's), and when it started (wall clock, less the time a stopped run spent)."""

    epoch: int
    batch: int = 0
    steps: int = 0
    sums: Dict[str, torch.Tensor] = field(default_factory=dict)
    elapsed: float = 0.0
    started: float = field(default=0.0, init=False)
    first_steps: int = field(default=0, init=False)  # steps done before this session

    def __post_init__(self) -> None:
        self.started, self.first_steps = time.time() - self.elapsed, self.steps


@dataclass
class _Run:
    """The state of a training run and its epoch: one optimiser step per chunk, each chunk split
    across the ranks (one process: the whole chunk)."""

    c: TrainConfig
    method: Method
    model: nn.Module  # the plain module (checkpointed, evaluated, attacked)
    net: Optional[nn.Module]  # what the steps call: model, compiled and/or in DistributedDataParallel
    inner: Optional[nn.Module]  # what attacks call: model, compiled, outside DistributedDataParallel
    autocast: Callable[[], Any]
    opt: torch.optim.Optimizer
    sched: Any
    scaler: Any
    w: World
    device: torch.device
    extras: Dict[str, torch.Tensor]
    on_step: Optional[Callable[["_Position", torch.Tensor], None]] = None
    position: Optional["_Position"] = None
    draws: Optional[distributed.ModelDraws] = None  # the model's dropout, whatever the number of ranks

    def __enter__(self) -> "_Run":
        warn = warnings.warn if self.w.size > 1 and self.w.main else None  # rank 0, under torchrun
        self.draws = distributed.ModelDraws(self.model, warn)
        return self

    def __exit__(self, *exc: Any) -> None:
        # DistributedDataParallel must go while the process group lives: freed after it, its
        # reducer joins gloo's threads holding the GIL they wait for, and the process hangs
        self.net = self.inner = None
        if self.draws is not None:
            self.draws.__exit__(*exc)

    def epoch(self, train_set, epoch: int, progress: bool, partial: Optional[Dict[str, Any]] = None,
              after_batch: Optional[Callable[["_Position"], None]] = None) -> Dict[str, Any]:
        """Train one epoch, from the position ``partial`` of a mid-epoch checkpoint when given,
        calling ``after_batch(position)`` after each loader batch; return its log record (lr, and
        each statistic's mean over the steps).  The learning rate is stepped by the caller."""
        c, method, device = self.c, self.method, self.device
        torch.manual_seed(derive_seed(c.seed, "global", epoch))
        self.model.train()
        perm = torch.randperm(len(train_set), generator=generator(c.seed, "order", epoch))
        noise_gen = torch.Generator(device=device)
        memory_format = torch.channels_last if c.channels_last else torch.preserve_format
        pos = self.position = _Position(epoch) if partial is None else self._restore(partial)
        bar = progress_bar(total=len(train_set), initial=min(pos.batch * c.batch_size, len(train_set)),
                           desc=f"epoch {epoch + 1}/{c.epochs}", enabled=progress, leave=False)
        loader = _batches(train_set, perm, c.batch_size, c.seed, epoch, c.num_workers,
                          pin=device.type == "cuda", start=pos.batch)
        for b, (x, y, idx) in enumerate(loader, start=pos.batch):
            batch = Batch(x.to(device, non_blocking=True, memory_format=memory_format),
                          y.to(device, non_blocking=True), idx,
                          {k: v[idx.to(device, non_blocking=True)] for k, v in self.extras.items()})
            for j, chunk in enumerate(batch.chunks(method.num_chunks)):
                noise_gen.manual_seed(derive_seed(c.seed, "noise", epoch, b, j))
                with self.draws.step(derive_seed(c.seed, "model", epoch, b, j),
                                     (*distributed.share(len(chunk), self.w), len(chunk))):
                    loss, stats = self.step(chunk, StepContext(noise_gen, epoch, c.epochs, pos.steps, first_lr_drop(c)))
                pos.steps += 1
                for k, v in stats.items():
                    pos.sums[k] = pos.sums[k] + v if k in pos.sums else v
                if self.on_step is not None:
                    self.on_step(pos, self.chunk_loss(stats["loss"]))
            pos.batch = b + 1
            bar.update(len(idx))
            if not bar.disable and b % 10 == 0:  # reading the loss waits for the device
                bar.set_postfix(loss=f"{float(loss):.4f}")
            if after_batch is not None:
                after_batch(pos)
        bar.close()
        lr = self.opt.param_groups[0]["lr"]
        keys, sums = self.reduced(pos.sums)
        means = sums / max(pos.steps, 1)
        record = {"epoch": epoch + 1, "lr": lr, **dict(zip(keys, means.tolist()))}
        if not all(math.isfinite(v) for v in record.values()):
            raise RsmoothError(f"training diverged at epoch {epoch + 1} (loss {record.get('loss')}); "
                               f"lower --lr (now {c.lr}) or check the data")
        return record

    def chunk_loss(self, weighted: torch.Tensor) -> torch.Tensor:
        """The step's loss over its whole chunk: each rank's loss weighted by its share, summed over
        the ranks (one all-reduce per step under torchrun, only when a callback reads it)."""
        return distributed.all_reduce(weighted.clone(), self.w, "the other ranks' losses")

    def reduced(self, sums: Dict[str, torch.Tensor]) -> Tuple[List[str], torch.Tensor]:
        """(rank 0's statistic names, their sums over the ranks stacked; ``sums`` is left as it is)."""
        keys = distributed.broadcast(list(sums), self.w, "rank 0's statistics")
        zero = torch.zeros((), device=self.device)
        return keys, distributed.all_reduce(torch.stack([sums.get(k, zero) for k in keys]), self.w,
                                            "the other ranks' statistics")

    def _restore(self, partial: Dict[str, Any]) -> "_Position":
        """The position of a mid-epoch checkpoint, with the global random state of its step (rank
        0 carries the statistics summed over the ranks, the other ranks start them at zero)."""
        sums = {k: (v if self.w.main else torch.zeros_like(v)).to(self.device) for k, v in partial["sums"].items()}
        torch.set_rng_state(partial["rng"]["torch"])
        if self.device.type == "cuda" and "cuda" in partial["rng"]:
            torch.cuda.set_rng_state(partial["rng"]["cuda"], self.device)
        return _Position(int(partial["epoch"]), int(partial["batch"]), int(partial["steps"]), sums,
                         float(partial.get("elapsed", 0.0)))

    def partial_state(self) -> Dict[str, Any]:
        """What a mid-epoch checkpoint records to continue the epoch in progress exactly: its
        position, the statistics so far (summed over the ranks: a collective) and the global
        random state of this step."""
        pos = self.position
        keys, sums = self.reduced(pos.sums)
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {"epoch": pos.epoch, "batch": pos.batch, "steps": pos.steps,
                "sums": {k: v.detach().cpu() for k, v in zip(keys, sums)}, "rng": rng,
                "elapsed": time.time() - pos.started}

    def step(self, chunk: Batch, ctx: StepContext) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """One optimiser step on ``chunk``; (this rank's loss, its statistics weighted by its share
        of the chunk, to be summed over the ranks)."""
        w, n = self.w, len(chunk)
        self.opt.zero_grad(set_to_none=True)
        if w.size == 1:
            with self.autocast():
                loss, stats = self.method.loss(self.net, chunk, ctx)
            self.scaler.scale(loss).backward()
            weight = 1.0
        else:
            lo, hi = distributed.share(n, w)
            part = Batch(chunk.x[lo:hi], chunk.y[lo:hi], chunk.idx[lo:hi],
                         {k: v[lo:hi] for k, v in chunk.extras.items()})
            ctx.rows, ctx.module, weight = (lo, hi, n), self.inner, (hi - lo) / n
            if n >= w.size:  # every rank has examples: DDP averages the W gradients
                with self.autocast():
                    loss, stats = self.method.loss(self.net, part, ctx)
                self.scaler.scale(loss * (w.size * weight)).backward()
            else:  # a chunk smaller than the job: the ranks with examples step, gradients summed
                loss, stats = torch.zeros((), device=self.device), {}
                if len(part):
                    with self.autocast():
                        loss, stats = self.method.loss(ctx.module, part, ctx)
                    self.scaler.scale(loss * weight).backward()
                distributed.all_reduce_grads(self.model, w)
        self.scaler.step(self.opt)
        self.scaler.update()
        loss = loss.detach().float()
        stats = {k: v.detach().float() if isinstance(v, torch.Tensor) else torch.full((), float(v), device=self.device)
                 for k, v in {"loss": loss, **stats}.items()}
        return loss, {k: v * weight for k, v in stats.items()} if weight != 1.0 else stats


def _checkpoint(model, opt, sched, scaler, epoch, c: TrainConfig, method: Method, history,
                train_set, w: World) -> Dict[str, Any]:
    from ..data import dataset_info

    info = dataset_info(c.dataset)
    return {
        "format": FORMAT,
        "rsmooth_version": __version__,
        "epoch": epoch,
        "arch": c.arch,
        "dataset": c.dataset,
        "num_classes": c.num_classes or info.num_classes,
        "input_shape": list(info.input_shape),
        "sigma": float(method.sigma),
        "method": c.method,
        "seed": c.seed,
        "config": c.to_dict(),
        "world_size": w.size,
        "data_fingerprint": train_set.fingerprint(),
        "state_dict": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        **({"scaler": scaler.state_dict()} if scaler.is_enabled() else {}),
        "rng": {"torch": torch.get_rng_state()},
        "history": history,
        "versions": versions(),
        "git_commit": git_commit(),
    }
