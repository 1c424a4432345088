"""Progress bars for the long loops (training epochs, certification, targets).

One rule for all of them: a bar is drawn when the caller allows it and someone is watching,
i.e. stderr is a terminal or the code runs in a Jupyter kernel (where ``tqdm.auto`` draws a
notebook widget); in logs, pipes and batch jobs nothing is drawn, and :class:`Heartbeat`
writes a progress line every minute instead (``--heartbeat SECONDS`` or ``$RSMOOTH_HEARTBEAT``).
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Optional

from .errors import RsmoothError


def interactive() -> bool:
    """True when stderr is a terminal or a Jupyter (IPython) kernel is running this code."""
    try:
        if sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # stderr replaced or closed
        pass
    ipython = sys.modules.get("IPython")  # never imported here: only if the user's session did
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def progress_bar(iterable: Optional[Iterable] = None, *, total: Optional[int] = None, desc: str = "",
                 unit: str = "img", enabled: bool = True, **kwargs: Any):
    """A ``tqdm.auto`` bar counting ``unit`` (images unless told), disabled unless
    ``enabled`` and :func:`interactive`."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True,
                disable=not (enabled and interactive()), **kwargs)


def format_duration(seconds: float) -> str:
    """``seconds`` as 42s, 3m12s or 2h05m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


#: the environment variable that sets the heartbeat interval in seconds (0: none)
HEARTBEAT_ENV = "RSMOOTH_HEARTBEAT"
#: seconds between heartbeat lines unless --heartbeat or $RSMOOTH_HEARTBEAT say otherwise
DEFAULT_HEARTBEAT = 60.0
#: the first heartbeat comes after this many seconds at most, so a log shows the pace early
FIRST_HEARTBEAT = 10.0


def heartbeat_interval(seconds: Optional[float] = None) -> float:
    """Seconds between heartbeat lines: ``seconds``, else ``$RSMOOTH_HEARTBEAT``, else 60; 0 turns
    them off.  One-line RsmoothError unless a finite number >= 0."""
    import math
    import os

    where = "--heartbeat"
    if seconds is None:
        text = os.environ.get(HEARTBEAT_ENV, "").strip()
        if not text:
            return DEFAULT_HEARTBEAT
        seconds, where = text, f"${HEARTBEAT_ENV}"
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise RsmoothError(f"{where} must be a number of seconds >= 0 (0 turns the progress lines off), "
                           f"got {seconds!r}")
    return value


class Heartbeat:
    """A progress line every ``interval`` seconds for a loop nobody watches (a log file, a SLURM
    job): ``certify: 120/500 examples (24.0%), 2.1 examples/s, 210,000 samples/s, elapsed 57s, eta 3m01s``.

    Active only when ``enabled``, ``interval > 0`` and no progress bar is drawn (not
    :func:`interactive`); the first line comes after ``min(interval, 10)`` seconds.  Lines are
    checked after each :meth:`update` (no thread), written with ``log`` and stdout flushed.  Rates
    and the eta are the pace since the previous line (the first: since the start; ``done`` items
    were there before it), so a job suspended or slowed for a while tells the right eta again one
    line after it resumes.  ``clock`` is for tests.
    """

    def __init__(self, total: int, *, desc: str, unit: str = "examples", done: int = 0,
                 interval: Optional[float] = None, enabled: bool = True, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.desc, self.unit, self.log, self.clock = total, desc, unit, log, clock
        self.interval = heartbeat_interval(interval)
        self.active = enabled and self.interval > 0 and not interactive()
        self.done, self.new, self.samples = done, 0, 0
        self.start = clock()
        self.next = self.start + min(self.interval, FIRST_HEARTBEAT)
        self.mark = (self.start, 0, 0)  # (time, new, samples) at the previous line

    def update(self, n: int = 1, samples: int = 0) -> None:
        """Count ``n`` more items (and ``samples`` Monte Carlo samples); log a line when due."""
        self.done += n
        self.new += n
        self.samples += samples
        if not self.active:
            return
        now = self.clock()
        if now >= self.next and self.done < self.total:
            emit(self.line(now), self.log)
            self.next = now + self.interval
            self.mark = (now, self.new, self.samples)

    def line(self, now: Optional[float] = None) -> str:
        """The progress line at time ``now`` (default: the clock's)."""
        now = self.clock() if now is None else now
        elapsed = max(now - self.start, 1e-9)
        since, new, samples = self.mark
        window = max(now - since, 1e-9)
        rate = (self.new - new) / window
        parts = [f"{self.desc}: {self.done}/{self.total} {self.unit} ({100 * self.done / max(self.total, 1):.1f}%)",
                 f"{rate:.3g} {self.unit}/s"]
        if self.samples:
            parts.append(f"{(self.samples - samples) / window:,.0f} samples/s")
        parts.append(f"elapsed {format_duration(elapsed)}")
        if rate > 0:
            parts.append(f"eta {format_duration((self.total - self.done) / rate)}")
        return ", ".join(parts)


def emit(line: str, log: Callable[[str], None] = print) -> None:
    """``log(line)``, then flush stdout so that a log file (block-buffered) shows it now."""
    log(line)
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError, OSError):  # stdout replaced or closed
        pass


def line_buffered_stdout() -> None:
    """Make stdout line-buffered when it is a file or pipe (a SLURM log), so each log line appears
    when it is printed rather than when a buffer fills or the process ends."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    try:
        if reconfigure is not None and not sys.stdout.isatty():
            reconfigure(line_buffering=True)
    except (AttributeError, ValueError, OSError):
        pass
