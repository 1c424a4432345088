"""What a process started by ``torchrun`` can tell about its job without importing torch: the line
a rank prints when it is stopped (by a signal, or because another rank failed), and the number of
processes.  Kept torch-free so that the command line can use it while it starts or stops.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

RERUN = "rerun the same torchrun command (train: add --resume) to continue"


def _int_env(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _alive_children(pid: int) -> Optional[int]:
    """How many children of ``pid`` are running (zombies excluded); None where /proc cannot tell."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    alive = 0
    for child in children:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile
        alive += state not in ("Z", "X")
    return alive


def another_rank_exited() -> Optional[bool]:
    """Whether a rank on this node has already exited, as when torchrun stops the others after a
    failure: fewer of its workers (the children of this process's parent) run than
    ``LOCAL_WORLD_SIZE``.  None when it cannot tell (not torchrun, one rank per node, no /proc)."""
    local = _int_env("LOCAL_WORLD_SIZE")
    if "TORCHELASTIC_RUN_ID" not in os.environ or local is None or local < 2:
        return None
    alive = _alive_children(os.getppid())
    return None if alive is None else alive < local


def stop_line(signalled: bool) -> str:
    """The one line a rank of a multi-process job prints when SIGTERM (``signalled``) or Ctrl-C
    stops it: whether another rank failed first (torchrun then stops the rest) or a signal came."""
    where = f"rank {os.environ.get('RANK', '?')} of {os.environ.get('WORLD_SIZE', '?')}"
    if not signalled:
        return f"rsmooth: {where}: interrupted; {RERUN}"
    failed = another_rank_exited()
    if failed:
        return (f"rsmooth: {where}: stopped because another rank failed (torchrun stops all ranks when "
                f"one fails; its report names it); {RERUN}")
    size, local = _int_env("WORLD_SIZE"), _int_env("LOCAL_WORLD_SIZE")
    elsewhere = failed is None or (size is not None and local is not None and size > local)
    return (f"rsmooth: {where}: terminated by SIGTERM (from the scheduler or a user; torchrun passes "
            f"it to every rank" + (", and also sends it when a rank on another node, or one it cannot "
                                   "see, failed: then its report names that rank" if elsewhere else "")
            + f"); {RERUN}")


def processes(size: int, backend: str, device: str) -> str:
    """``rsmooth: 2 processes (gloo, cpu)``: the line rank 0 prints when a job starts."""
    local = _int_env("LOCAL_WORLD_SIZE")
    nodes = f" on {size // local} nodes" if local and 0 < local < size and size % local == 0 else ""
    return f"rsmooth: {size} processes{nodes} ({backend}, {device})"
