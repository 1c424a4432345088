"""Preemption inside an epoch: when to write a mid-epoch checkpoint, and stops on SIGTERM/SIGINT.

Clusters preempt long jobs with SIGTERM (SLURM, Kubernetes) and users stop them with Ctrl-C.
While training runs, :class:`StopSignals` turns the first of these into a request that the loop
honours after the current optimiser step (saving a mid-epoch checkpoint); a second one stops at
once.  :func:`parse_checkpoint_every` reads ``--checkpoint-every`` (a number of optimiser steps or
a duration) and :class:`CheckpointClock` says when the next mid-epoch checkpoint is due.
"""
from __future__ import annotations

import re
import signal
import threading
import time
from typing import Any, List, Optional, Tuple, Union

from ..errors import RsmoothError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_EVERY = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", re.I)


def parse_checkpoint_every(value: Union[None, int, str]) -> Tuple[Optional[int], Optional[float]]:
    """``--checkpoint-every``: (optimiser steps, seconds), one of them set, or (None, None) for
    none.  ``500`` is every 500 optimiser steps; ``90s``, ``10m``, ``1.5h`` every so long."""
    if value is None:
        return None, None
    text = str(value)
    m = None if isinstance(value, bool) else _EVERY.fullmatch(text)
    error = RsmoothError(f"--checkpoint-every must be a number of optimiser steps (e.g. 500) or a "
                         f"duration (e.g. 600s, 10m, 1h), got {text!r}")
    if m is None:
        raise error
    number, unit = m.group(1), m.group(2).lower()
    if not unit:
        if "." in number or int(number) < 1:
            raise error
        return int(number), None
    seconds = float(number) * _UNITS[unit]
    if not seconds > 0:
        raise error
    return None, seconds


class CheckpointClock:
    """When the next mid-epoch checkpoint is due: ``steps`` optimiser steps or ``seconds`` after
    the last checkpoint (mid-epoch or end of epoch)."""

    def __init__(self, every: Union[None, int, str], global_step: int = 0) -> None:
        self.steps, self.seconds = parse_checkpoint_every(every)
        self.reset(global_step)

    def reset(self, global_step: int) -> None:
        """A checkpoint was written after ``global_step`` optimiser steps of the run."""
        self.last_step, self.last_time = global_step, time.monotonic()

    def due(self, global_step: int) -> bool:
        """Whether a checkpoint is due after ``global_step`` optimiser steps of the run."""
        if self.steps is not None:
            return global_step - self.last_step >= self.steps
        return self.seconds is not None and time.monotonic() - self.last_time >= self.seconds


class StopSignals:
    """While active (in the main thread), the first SIGTERM or SIGINT is recorded instead of
    stopping the process; the training loop asks :attr:`signum` after each step, saves, and
    calls :meth:`resend`.  A second signal stops at once (the previous handler runs)."""

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: List[Tuple[int, Any]] = []

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                old = signal.getsignal(sig)
                if old is not signal.SIG_IGN:  # a job that ignores a signal keeps ignoring it
                    self._previous.append((sig, old))
                    signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # asked twice: stop now, as without this handler
            self._restore()
            signal.raise_signal(signum)
            return
        self.signum = signum

    def _restore(self) -> None:
        while self._previous:
            sig, old = self._previous.pop()
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    def __exit__(self, *exc: Any) -> None:
        self._restore()

    def resend(self) -> None:
        """Give the recorded signal to the handler that was there before (the CLI's, which stops as
        if interrupted; Python's default for SIGINT: KeyboardInterrupt); stop here regardless."""
        signum = self.signum
        self._restore()
        if signum is not None:
            signal.raise_signal(signum)
        raise KeyboardInterrupt
