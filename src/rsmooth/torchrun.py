"""What a process started by ``torchrun`` can tell about its job without importing torch: the line
a rank prints when it is stopped (by a signal, or because another rank failed), and the number of
processes.  Kept torch-free so that the command line can use it while it starts or stops.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

def _int_env(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _unreaped_children(pid: int) -> Optional[int]:
    """How many children of ``pid`` it has not reaped yet (running, or exited and not yet waited
    for); None where /proc cannot tell."""
    try:
        return len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return None


def another_rank_exited() -> Optional[bool]:
    """Whether a rank on this node exited before this one was stopped, as when torchrun stops the
    others after a failure: it notices the failure by reaping that rank, so fewer of its workers
    (the children of this process's parent) are left than ``LOCAL_WORLD_SIZE``.  A rank that exits
    on the same SIGTERM stays an unreaped child while torchrun stops the rest, so it still counts
    (torchrun reaps the stopped ranks in rank order, so a rank scheduled only after a lower one was
    reaped may still say another rank failed).  None when it cannot tell (not torchrun, one rank per node, no /proc)."""
    local = _int_env("LOCAL_WORLD_SIZE")
    if "TORCHELASTIC_RUN_ID" not in os.environ or local is None or local < 2:
        return None
    left = _unreaped_children(os.getppid())
    return None if left is None else left < local


def stop_line(signalled: bool, hint: str = "") -> str:
    """The one line a rank of a multi-process job prints when SIGTERM (``signalled``) or Ctrl-C
    stops it: whether another rank failed first (torchrun then stops the rest) or a signal came;
    it ends in ``rerun the same torchrun command`` and the subcommand's ``hint``."""
    where = f"rank {os.environ.get('RANK', '?')} of {os.environ.get('WORLD_SIZE', '?')}"
    rerun = f"rerun the same torchrun command{hint}"
    if not signalled:
        return f"rsmooth: {where}: interrupted; {rerun}"
    failed = another_rank_exited()
    if failed:
        return (f"rsmooth: {where}: stopped because another rank failed (torchrun stops all ranks when "
                f"one fails; its report names it); {rerun}")
    size, local = _int_env("WORLD_SIZE"), _int_env("LOCAL_WORLD_SIZE")
    elsewhere = failed is None or (size is not None and local is not None and size > local)
    return (f"rsmooth: {where}: terminated by SIGTERM (from the scheduler or a user; torchrun passes "
            f"it to every rank" + (", and also sends it when a rank on another node, or one it cannot "
                                   "see, failed: then its report names that rank" if elsewhere else "")
            + f"); {rerun}")


def processes(size: int, backend: str, device: str) -> str:
    """``rsmooth: 2 processes (gloo, cpu)``: the line rank 0 prints when a job starts."""
    local = _int_env("LOCAL_WORLD_SIZE")
    nodes = f" on {size // local} nodes" if local and 0 < local < size and size % local == 0 else ""
    return f"rsmooth: {size} processes{nodes} ({backend}, {device})"
