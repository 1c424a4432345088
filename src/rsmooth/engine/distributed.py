"""torch.distributed for runs launched by ``torchrun`` (one node, several nodes, SLURM).

``torchrun`` starts one process per device and tells each its place in environment variables
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``).  :func:`world`
reads them (a plain process is rank 0 of 1); :func:`process_group` joins the job's process
group (NCCL on CUDA, gloo on CPU) for the length of a run and leaves it after, and is a no-op
in a plain process, so the same code runs with and without ``torchrun``.  Collectives go
through :func:`barrier`, which turns a rank that died or hangs into a one-line
:class:`~rsmooth.errors.RsmoothError` saying what to rerun.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import re
from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from ..errors import RsmoothError, check, first_line

#: what to do when a rank is lost (every run under torchrun resumes where it stopped)
RERUN = "rerun the same torchrun command to continue"


@dataclass(frozen=True)
class World:
    """This process's place in the job: ``rank`` of ``size`` processes, ``local_rank`` on its node."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the one process that logs, shows progress and writes shared outputs."""
        return self.rank == 0

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.size}"


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise RsmoothError(f"environment variable {name}={text!r} is not an integer (torchrun sets it)") from None


def world() -> World:
    """The job as ``torchrun`` describes it in the environment (rank 0 of 1 without torchrun)."""
    w = World(_env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0))
    check(w.size >= 1 and 0 <= w.rank < w.size, f"RANK={w.rank} is not below WORLD_SIZE={w.size}")
    return w


def rank_device(dev: torch.device, w: World) -> torch.device:
    """``dev`` for this rank: a CUDA device without an index becomes ``cuda:LOCAL_RANK``."""
    if dev.type == "cuda" and dev.index is None and w.size > 1:
        return torch.device("cuda", w.local_rank)
    return dev


@contextlib.contextmanager
def process_group(dev: torch.device, timeout: datetime.timedelta = datetime.timedelta(minutes=30)
                  ) -> Iterator[World]:
    """Join the job's process group for the body (NCCL when ``dev`` is CUDA, else gloo).

    ``timeout`` bounds every collective.  Without torchrun (one process), or when the group is
    already initialised by the caller, nothing is initialised or destroyed.
    """
    import torch.distributed as dist

    w = world()
    if w.size == 1 or dist.is_initialized():
        yield w
        return
    check(dist.is_available(), "this PyTorch build has no torch.distributed; run without torchrun")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    try:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=timeout,
                                **({"device_id": dev} if dev.type == "cuda" else {}))
    except (RuntimeError, ValueError) as e:
        raise RsmoothError(f"{w}: cannot join the torchrun job ({first_line(e)}); {RERUN}") from None
    try:
        yield w
    finally:
        dist.destroy_process_group()


def barrier(w: World, what: str, timeout: Optional[datetime.timedelta] = None) -> None:
    """Wait until every rank is here (at most ``timeout``, else the group's), or raise a one-line
    :class:`RsmoothError` saying that another rank stopped while waiting for ``what``."""
    import torch.distributed as dist

    if w.size == 1:
        return
    try:
        work = dist.barrier(async_op=True)
        if timeout is None:
            work.wait()
        else:
            work.wait(timeout=timeout)
    except RuntimeError as e:
        detail = re.sub(r"^\[[^\]]*\]\s*", "", first_line(e))  # gloo's source location
        raise RsmoothError(f"{w}: another rank stopped or hangs while waiting for {what} "
                           f"({detail}); {RERUN}") from None
