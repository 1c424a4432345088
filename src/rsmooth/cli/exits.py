"""How a command ends: the one line an exception becomes (and its exit status), warnings as one
line, and a stdout pipe closed early (``rsmooth list | head``) told from a real error."""
from __future__ import annotations

import sys
import typing
from typing import Any, Optional

from ..errors import RsmoothError


def silence_closed_stdout() -> bool:
    """Whether stdout is a pipe whose reader is gone (``rsmooth list | head``); if so, point it at
    /dev/null so that nothing more fails on it (Python's docs, "Note on SIGPIPE")."""
    import os
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poller.poll(0)):  # the write end of a
            return False  # pipe polls POLLERR once its read end is closed
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no file descriptor (captured), no poll
        return False
    return True


def show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Optional[str] = None) -> None:
    """Warnings as one line ``rsmooth: warning: ...`` (not Python's file:line and source line)."""
    print(f"rsmooth: warning: {message}", file=sys.stderr if file is None else file)


def explain(e: Exception) -> typing.Tuple[int, str]:
    """(exit status, the one line to print) for an exception that ended a command."""
    import errno

    first = (str(e).strip().splitlines() or [""])[0][:200]
    if isinstance(e, RsmoothError):
        return 2, f"rsmooth: error: {e}"
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in first:
        return 2, (f"rsmooth: error: out of memory ({first or type(e).__name__}); lower --batch-size "
                   f"and rerun the same command to continue")
    if isinstance(e, OSError):
        full = "free some space or choose another --out, then rerun the same command to continue"
        hint = {errno.ENOSPC: full, getattr(errno, "EDQUOT", errno.ENOSPC): full,
                errno.EFBIG: "the file system or a limit (ulimit -f) allows no file this large; " + full,
                errno.EROFS: "choose another --out on a writable file system",
                errno.EACCES: "fix the permissions (or, for an output, choose another --out)",
                errno.EPERM: "fix the permissions (or, for an output, choose another --out)"}.get(e.errno)
        where = f"{e.filename}: " if e.filename else ""
        return 2, f"rsmooth: error: {where}{e.strerror or first}" + (f"; {hint}" if hint else "")
    return 1, (f"rsmooth: internal error: {type(e).__name__}: {first} (rerun with --debug or "
               f"RSMOOTH_DEBUG=1 to see the traceback; please report it)")




def flushed_at_exit() -> bool:
    """Flush stdout as ``--help``, ``--version`` or a usage error exits: False when done, True when
    stdout was a pipe closed early (then silenced; exit quietly with 141)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        if silence_closed_stdout():
            return True
    return False


def stopped(terminated: bool, hint: str = "") -> int:
    """Print the one line of a command stopped by Ctrl-C or (``terminated``) SIGTERM, ending in
    ``rerun the same command`` and the subcommand's ``hint`` (`` with --resume to continue ...``);
    its status."""
    import os

    how = "terminated" if terminated else "interrupted"
    size = os.environ.get("WORLD_SIZE", "1")
    if size not in ("", "1"):  # a signal, or torchrun stopping the ranks after one failed
        from ..torchrun import stop_line

        print(stop_line(terminated, hint), file=sys.stderr, flush=True)  # before torchrun's report
    else:
        print(f"rsmooth: {how}; rerun the same command{hint}", file=sys.stderr)
    return 143 if terminated else 130
