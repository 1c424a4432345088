"""Training callbacks: hooks into :func:`rsmooth.engine.train` for loggers (TensorBoard, W&B,
MLflow, ...) without rsmooth depending on them.

A callback is any object with some of these methods (each optional; only rank 0 calls them):

- ``on_train_begin(info)``: ``{"config": dict, "out": str, "start_epoch": int, "world_size": int,
  "steps_per_epoch": int, "global_step": optimiser steps already taken}`` once the run (fresh
  or resumed) starts;
- ``on_step(record)``: after each optimiser step, ``{"epoch": 1-based, "step": 1-based within the
  epoch, "global_step": over the run, "loss": float, "lr": float}``, the loss over the step's whole
  batch (under torchrun: every rank's, summed by an all-reduce per step).  Defining it makes the
  loop read each step's loss (a device synchronisation per step);
- ``on_epoch_end(record)``: the epoch's record as ``train.log`` holds it (``epoch``, ``lr``, the
  method's statistics, ``time``, and ``test_acc``/``test_acc_noisy``/``eval_examples`` on
  evaluated epochs only);
- ``on_checkpoint(info)``: ``{"path": str, "epoch": finished epochs, "step": step within the
  epoch in progress (0 at an epoch's end), "reason": "epoch" | "every" | "signal"}`` after each
  checkpoint is written;
- ``on_train_end(info)``: ``{"checkpoint": str, "history": list, "completed": bool}`` when the
  run ends, also when it stops early (a signal, an error: ``completed`` False).

:class:`TensorBoardLogger` (``rsmooth train --tensorboard``) is one such callback.
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from ..errors import RsmoothError
from ..fileio import make_folder_nofollow

EVENTS = ("on_train_begin", "on_step", "on_epoch_end", "on_checkpoint", "on_train_end")


class CallbackList:
    """Calls each event on the callbacks that define it (none: a no-op)."""

    def __init__(self, callbacks: Optional[Iterable[Any]] = None) -> None:
        self.callbacks: List[Any] = list(callbacks or [])
        for cb in self.callbacks:
            if not any(callable(getattr(cb, e, None)) for e in EVENTS):
                raise RsmoothError(f"callback {cb!r} has none of the methods {', '.join(EVENTS)}")

    def wants(self, event: str) -> bool:
        return any(callable(getattr(cb, event, None)) for cb in self.callbacks)

    def __call__(self, event: str, payload: Dict[str, Any]) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, event, None)
            if callable(fn):
                fn(dict(payload))  # a copy each: a callback cannot change what the others see


class TensorBoardLogger:
    """Writes every figure of the train log to ``log_dir`` with
    ``torch.utils.tensorboard.SummaryWriter`` (as the Jeong-family training scripts do): each
    numeric field of an epoch's record as ``epoch/<field>`` at step = epoch (``test_acc`` only on
    evaluated epochs), and each optimiser step's loss and lr as ``step/loss``, ``step/lr`` at the
    run's global step.  Needs the tensorboard package (``pip install rsmooth[tensorboard]``)."""

    def __init__(self, log_dir: Union[str, Path], steps: bool = True) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch raises this when the tensorboard package is missing
            raise RsmoothError("--tensorboard needs the tensorboard package: pip install tensorboard "
                               "(or rsmooth[tensorboard])") from None
        self.log_dir, self.steps = Path(log_dir), steps
        self._writer_cls, self.writer = SummaryWriter, None

    def on_train_begin(self, info: Dict[str, Any]) -> None:
        # purge_step: a resumed run hides the steps the stopped one logged after its checkpoint
        done = int(info.get("global_step", 0))
        # never through a link: the folder is refused, and a random suffix gives the events file a
        # name nobody can plant a link at in advance (tensorboard opens it anew at every flush)
        self.writer = self._writer_cls(str(make_folder_nofollow(self.log_dir)), purge_step=done + 1 if done else None,
                                       filename_suffix="." + secrets.token_hex(8))
        if not done:
            self.writer.add_text("config", "```\n" + _json(info.get("config")) + "\n```", 0)

    def on_step(self, record: Dict[str, Any]) -> None:
        if self.steps and self.writer is not None:
            for key in ("loss", "lr"):
                self.writer.add_scalar(f"step/{key}", record[key], record["global_step"])

    def on_epoch_end(self, record: Dict[str, Any]) -> None:
        if self.writer is None:
            return
        for key, value in record.items():
            if key != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"epoch/{key}", value, record["epoch"])
        self.writer.flush()

    def on_train_end(self, info: Dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2, default=str)


def as_callbacks(callbacks: Optional[Sequence[Any]], tensorboard_dir: Optional[Path]) -> CallbackList:
    """The run's callbacks: the user's, and TensorBoard's when ``tensorboard_dir`` is given."""
    cbs = list(callbacks or [])
    if tensorboard_dir is not None:
        cbs.append(TensorBoardLogger(tensorboard_dir))
    return CallbackList(cbs)
