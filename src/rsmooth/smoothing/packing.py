"""Many images per forward pass: the scheduler behind every certification.

Each image in flight runs a procedure (:mod:`rsmooth.smoothing.procedures`) that asks for noisy
samples and for the bounds of sequential looks.  The scheduler fills every forward pass with the
next samples of as many images as it takes (the n0 selection samples, the estimation samples of
CERTIFY and PREDICT, the increments of the sequential modes), routes the votes back to each
image's counts, reads the counts of the images whose request is complete in one copy to the host,
and computes the looks of all of them at once.  A forward pass thus holds ``batch_size`` samples
however few each image asks for at a time.

Results do not depend on the packing: image i's noise comes from its own generator, drawn in
blocks of :data:`NOISE_BLOCK` copies (a request for m samples: blocks of 256, the last one
partial) whatever the batch size and whatever else shares its forward passes, so its result
equals certifying it alone, as long as the model classifies a row the same whatever batch it is
in (true of the CPU kernels of LeNet and ResNets for batches of :data:`MIN_ROWS` or more, which
is why a shorter pass is padded to that size).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Hashable, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
import torch

from ..errors import check
from .noises import Noise
from .procedures import Procedure
from .sequential import Look, settle_looks

#: copies of an image drawn per call of its generator: the noise of a seed does not depend on the
#: batch size (256 was the default batch size when each forward pass held one image, so results
#: of that default are unchanged)
NOISE_BLOCK = 256
#: the fewest rows a forward pass holds (shorter ones are padded): a CPU GEMM on 1 or 2 rows
#: rounds differently from the same rows in a larger batch
MIN_ROWS = 16

#: (key, image [C x H x W], generator) of one image to certify, or (key, image, generator, label)
#: where its label is known (a procedure's ``skip_wrong`` reads it)
Item = Union[Tuple[Hashable, torch.Tensor, Optional[torch.Generator]],
             Tuple[Hashable, torch.Tensor, Optional[torch.Generator], Optional[int]]]


@dataclass(eq=False)
class _Task:
    """One image in flight: its procedure's generator, the counts row it owns, what it still has
    to draw for its current request, noise drawn for it but not yet classified, and its time."""

    key: Hashable
    x: torch.Tensor
    generator: Optional[torch.Generator]
    steps: Any
    slot: int
    todo: int = 0  # copies of the current request not drawn yet
    later: List[int] = field(default_factory=list)  # the requests asked together with it, still to come
    held: List[torch.Tensor] = field(default_factory=list)  # counts of those finished (on the device)
    staged: Optional[torch.Tensor] = None  # noisy copies drawn but not yet placed in a pass
    fresh_rows: int = 0  # rows classified since the last time was shared out
    seconds: float = 0.0

    @property
    def waiting(self) -> int:
        return self.todo + (0 if self.staged is None else len(self.staged))

    def ask(self, request: Any) -> None:
        """Take a request: a number of samples, or several drawn back to back (a tuple), whose
        counts are sent together once all are drawn (one read of the device)."""
        nums = list(request) if isinstance(request, tuple) else [request]
        check(all(isinstance(m, int) and m >= 1 for m in nums), f"a procedure asked for {request!r} samples")
        self.todo, self.later, self.held = nums[0], nums[1:], []


@dataclass
class Packer:
    """Runs a procedure on a stream of images, ``batch_size`` noisy samples per forward pass.

    ``noise`` draws every noisy copy (:meth:`~rsmooth.smoothing.noises.Noise.draw`: the one place
    smoothing noise is drawn); ``votes(batch)`` classifies a batch of noisy inputs [B x C x H x W] (the model's dtype) and
    returns votes [B] (int64; the index ``num_classes`` for non-finite logits); ``full``: every
    pass runs at ``batch_size`` rows (compiled graphs); ``refuse(bad, total)`` raises when a
    request saw non-finite logits; ``check_image(x)`` validates each image as it is admitted.
    """

    votes: Callable[[torch.Tensor], torch.Tensor]
    noise: Noise
    batch_size: int
    num_classes: int
    device: torch.device
    dtype: torch.dtype
    refuse: Callable[[int, int], None]
    check_image: Callable[[torch.Tensor], torch.Tensor]
    full: bool = False
    buffer: Optional[torch.Tensor] = None
    _owner: Optional[torch.Tensor] = None  # each row's first index in the flat counts
    _tasks: Deque[_Task] = field(default_factory=deque)

    def noisy_votes(self, x: torch.Tensor, out: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
        """Votes [len(out)] (on the device, not waited for) of one forward pass over ``out`` filled
        with noisy copies of ``x``: a pass as :meth:`run` makes them, for timing (the tuner) and for
        comparing two models on the same noisy inputs."""
        return self.votes(self.noise.draw(out, x, generator))

    def run(self, procedure: Procedure, items: Iterable[Item]) -> Iterator[Tuple[Hashable, Any, float]]:
        """(key, result, seconds) of each item as it completes; seconds is the item's share of the
        wall time (the time between reads of the counts, split by rows classified)."""
        items = iter(items)
        self._tasks.clear()
        free = list(range(self.batch_size))[::-1]
        counts = torch.zeros(self.batch_size, self.num_classes + 1, dtype=torch.long, device=self.device)
        on_device = getattr(procedure, "on_device", False)
        kept = torch.zeros(self.num_classes + 1, dtype=torch.long, device=self.device)  # on_device: all counts
        drawn = 0  # on_device: the samples of the images done
        clock = time.perf_counter()
        more = True
        while True:
            more = more and self._admit_until_full(procedure, items, free)
            if not self._tasks:
                break
            self._pass(counts)
            done = [t for t in self._tasks if t.waiting == 0 and not self._next_request(t, counts)]
            if not done:
                continue
            if on_device:  # the counts rows as they are (read by the caller, or never)
                rows = [counts[t.slot].clone() for t in done]
                kept += torch.stack(rows).sum(0)
                drawn += len(done) * procedure.max_samples()
                answers = [(t, row[:-1]) for t, row in zip(done, rows)]
            else:
                host = torch.stack([c for t in done for c in (*t.held, counts[t.slot])]).cpu().numpy()  # the one wait
            for t in done:
                counts[t.slot].zero_()
            now = time.perf_counter()
            self._share_time(now - clock)
            clock = now
            for task, result in answers if on_device else self._answer(done, host):
                self._tasks.remove(task)
                free.append(task.slot)
                yield task.key, result, task.seconds
        if on_device:
            self.refuse(int(kept[-1]), drawn)  # the one wait of an on-device stream

    @staticmethod
    def _next_request(task: _Task, counts: torch.Tensor) -> bool:
        """Start the task's next request of a tuple, keeping the counts of the one just finished on
        the device; False when there is none (its counts are to be read)."""
        if not task.later:
            return False
        task.held.append(counts[task.slot].clone())
        counts[task.slot].zero_()
        task.todo = task.later.pop(0)
        return True

    def _admit_until_full(self, procedure: Procedure, items: Iterator[Item], free: List[int]) -> bool:
        """Admit images until their waiting samples fill a pass; False once ``items`` is exhausted."""
        while free and sum(t.waiting for t in self._tasks) < self.batch_size:
            item = next(items, None)
            if item is None:
                return False
            self._admit(procedure, item, free.pop())
        return True

    def _admit(self, procedure: Procedure, item: Item, slot: int) -> None:
        key, x, generator, *label = item
        x = self.check_image(x)
        task = _Task(key, x, generator, procedure.steps(self.noise, *label), slot)
        task.ask(next(task.steps))
        self._tasks.append(task)

    def _pass(self, counts: torch.Tensor) -> None:
        """One forward pass over the next samples of the tasks in flight, oldest first; the votes
        are added to each task's counts row on the device (nothing is copied to or from the host)."""
        shape = self._tasks[0].x.shape
        if self.buffer is None or self.buffer.shape[1:] != shape or len(self.buffer) < self.batch_size:
            self.buffer = None  # free the old one first
            self.buffer = torch.zeros((self.batch_size, *shape), dtype=self.dtype, device=self.device)
            self._owner = torch.zeros(self.batch_size, dtype=torch.long, device=self.device)
        rows = 0
        for task in self._tasks:
            placed = self._place(task, rows)
            self._owner[rows:rows + placed].fill_(task.slot * (self.num_classes + 1))
            task.fresh_rows += placed
            rows += placed
            if rows == self.batch_size:
                break
        size = self.batch_size if self.full else min(self.batch_size, max(rows, MIN_ROWS))
        index = self._owner[:rows] + self.votes(self.buffer[:size])[:rows]
        counts.view(-1).scatter_add_(0, index, torch.ones_like(index))

    def _place(self, task: _Task, start: int) -> int:
        """Put the task's next noisy copies into buffer rows ``start...`` (as many as fit); drawn
        in blocks of NOISE_BLOCK, a block that does not fit is staged for the next pass."""
        space, placed = self.batch_size - start, 0
        while placed < space and task.waiting:
            if task.staged is None:
                block = min(NOISE_BLOCK, task.todo)
                task.todo -= block
                if block <= space - placed:
                    self.noise.draw(self.buffer[start + placed:start + placed + block], task.x, task.generator)
                    placed += block
                    continue
                task.staged = torch.empty((block, *task.x.shape), dtype=self.dtype, device=self.device)
                self.noise.draw(task.staged, task.x, task.generator)
            k = min(len(task.staged), space - placed)
            self.buffer[start + placed:start + placed + k] = task.staged[:k]
            task.staged = task.staged[k:] if k < len(task.staged) else None
            placed += k
        return placed

    def _share_time(self, seconds: float) -> None:
        rows = sum(t.fresh_rows for t in self._tasks)
        for t in self._tasks:
            t.seconds += seconds * t.fresh_rows / max(rows, 1)
            t.fresh_rows = 0

    def _answer(self, done: List[_Task], host: np.ndarray) -> Iterator[Tuple[_Task, Any]]:
        """Send each finished request its counts (a tuple's, all of them), then all the looks they
        ask for at once; yields the tasks whose procedure returned, with the result."""
        replies: List[Any] = []
        row = 0
        for task in done:
            mine = host[row:row + len(task.held) + 1]
            row += len(mine)
            for counts in mine:
                self.refuse(int(counts[-1]), int(counts.sum()))
            replies.append(tuple(c[:-1] for c in mine) if task.held else mine[0][:-1])
        while done:
            asking, looks = [], []
            for task, reply in zip(done, replies):
                try:
                    request = task.steps.send(reply)
                except StopIteration as stop:
                    yield task, stop.value
                    continue
                if isinstance(request, Look):
                    asking.append(task)
                    looks.append(request)
                else:
                    task.ask(request)
            done, replies = asking, settle_looks(looks) if looks else []
