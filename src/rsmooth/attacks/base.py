"""The context every attack runs in."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from torch import nn


@contextmanager
def frozen_eval(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode and ``requires_grad = False`` on every parameter, restored on exit.

    Gradients then flow to the attacked input only, BatchNorm statistics are not updated, and
    the parameters' ``.grad`` stays untouched for the optimiser step that follows.
    """
    was_training = {m: m.training for m in model.modules()}
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.eval()
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        for m, training in was_training.items():
            m.train(training)
