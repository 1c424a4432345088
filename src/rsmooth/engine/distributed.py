"""torch.distributed for runs launched by ``torchrun`` (one node, several nodes, SLURM).

``torchrun`` starts one process per device and tells each its place in environment variables
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``).  :func:`world`
reads them (a plain process is rank 0 of 1); :func:`process_group` joins the job's process
group (NCCL on CUDA, gloo on CPU) for the length of a run and leaves it after (rank 0 prints
how many processes joined), and is a no-op in a plain process, so the same code runs with and
without ``torchrun``.  Collectives go through :func:`barrier`, which turns a rank that died or
hangs into a one-line :class:`~rsmooth.errors.RsmoothError` saying what to rerun; :func:`agree`
checks right after start-up that the ranks run the same settings on the same data.

:class:`ModelDraws` makes the model's own random draws in a training step (dropout) independent
of the number of processes, as :class:`~rsmooth.methods.StepContext` does for the methods' noise.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import os
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from ..errors import RsmoothError, check, first_line
from ..seeding import derive_seed

#: what to do when a rank is lost (every run under torchrun resumes where it stopped)
RERUN = "rerun the same torchrun command to continue"
#: how long :func:`agree` waits for every rank (they have all just joined the process group)
AGREE_TIMEOUT = datetime.timedelta(seconds=60)


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

    @property
    def note(self) -> str:
        """`` (2 processes)`` for a summary line under torchrun; empty in a plain process."""
        return f" ({self.size} processes)" if self.size > 1 else ""


def quiet(message: str) -> None:
    """The log of ranks other than 0."""


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


def rank_shard(shard: Optional[Tuple[int, int]], verb: str) -> Tuple[World, Optional[Tuple[int, int]]]:
    """(this process's place, the shard it computes): ``shard`` in a plain process, RANK/WORLD_SIZE
    under torchrun, where a ``--shard`` of its own is refused (``verb``: what a rank does)."""
    w = world()
    if w.size == 1:
        return w, shard
    check(shard is None, f"--shard under torchrun: each rank {verb} shard RANK/WORLD_SIZE itself; "
                         f"drop --shard or run without torchrun")
    return w, (w.rank, w.size)


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
    backend = "nccl" if dev.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend, timeout=timeout, **({"device_id": dev} if dev.type == "cuda" else {}))
    except (RuntimeError, ValueError) as e:
        raise RsmoothError(f"{w}: cannot join the torchrun job ({first_line(e)}); {RERUN}") from None
    if w.main:  # the one line that says how many processes run (one process group per command)
        from ..torchrun import processes

        print(processes(w.size, backend, dev.type), flush=True)
    try:
        yield w
    except BaseException as e:  # the frames it unwound may hold DistributedDataParallel (see there)
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def collectives(w: World, what: str, rerun: str = RERUN) -> Iterator[None]:
    """Turn the error of a collective in the body (a rank died, hangs or lost its connection) into
    a one-line :class:`RsmoothError` saying that another rank stopped while waiting for ``what``."""
    try:
        yield
    except RuntimeError as e:
        if w.size == 1 or isinstance(e, RsmoothError) or not _lost_rank(e):
            raise
        detail = re.sub(r"^\[[^\]]*\]\s*", "", first_line(e))  # gloo's source location
        raise RsmoothError(f"{w}: another rank stopped or hangs while waiting for {what} "
                           f"({detail}); {rerun}") from None


def _lost_rank(e: RuntimeError) -> bool:
    import torch.distributed as dist

    text = str(e).lower()
    return isinstance(e, dist.DistError) or any(k in text for k in (
        "gloo", "nccl", "connection", "timed out", "timeout", "socket", "peer", "broken pipe"))


def barrier(w: World, what: str, timeout: Optional[datetime.timedelta] = None) -> None:
    """Wait until every rank is here (at most ``timeout``, else the group's), or raise a one-line
    :class:`RsmoothError` saying that another rank stopped while waiting for ``what``."""
    import torch.distributed as dist

    if w.size == 1:
        return
    with collectives(w, what):
        work = dist.barrier(async_op=True)
        if timeout is None:
            work.wait()
        else:
            work.wait(timeout=timeout)


def share(n: int, w: World) -> Tuple[int, int]:
    """Rows ``lo:hi`` of ``n`` that rank ``w.rank`` takes (``Tensor.tensor_split`` into ``w.size``
    parts: the first ``n % size`` ranks take one more)."""
    q, r = divmod(n, w.size)
    lo = w.rank * q + min(w.rank, r)
    return lo, lo + q + (w.rank < r)


def broadcast(obj: Any, w: World, what: str) -> Any:
    """Rank 0's ``obj`` on every rank (pickled over the job's own process group)."""
    import torch.distributed as dist

    if w.size == 1:
        return obj
    box = [obj]
    with collectives(w, what):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce(t: torch.Tensor, w: World, what: str) -> torch.Tensor:
    """The sum of ``t`` over the ranks, in place (``t`` itself in one process)."""
    import torch.distributed as dist

    if w.size > 1:
        with collectives(w, what):
            dist.all_reduce(t)
    return t


def all_reduce_grads(model: torch.nn.Module, w: World) -> None:
    """Sum the gradients of ``model``'s parameters over the ranks (a missing one counts as 0)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = all_reduce(torch.cat([p.grad.reshape(-1) for p in params]), w, "the other ranks' gradients")
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p.grad))


def broadcast_buffers(model: torch.nn.Module, w: World) -> None:
    """Give every rank rank 0's buffers (batch-norm running statistics) of ``model``."""
    import torch.distributed as dist

    if w.size > 1:
        with collectives(w, "rank 0's batch-norm statistics"):
            for b in model.buffers():
                dist.broadcast(b, src=0)


def agree(w: World, facts: Dict[str, Any], timeout: datetime.timedelta = AGREE_TIMEOUT) -> None:
    """Check that every rank has the same ``facts`` (settings, data fingerprints, versions: what
    the ranks must share), waiting at most ``timeout`` for them; raise a one-line
    :class:`RsmoothError` on every rank naming the facts that differ and each rank's value,
    instead of collectives that mismatch later and hang until the group's timeout."""
    import torch.distributed as dist

    if w.size == 1:
        return
    barrier(w, "the other ranks to start", timeout)
    everyone: List[Any] = [None] * w.size
    with collectives(w, "the other ranks' settings"):
        dist.all_gather_object(everyone, facts)
    problem = disagreement(everyone)
    if problem:
        raise RsmoothError(f"{w}: the ranks disagree on {problem}; start every rank with the same "
                           f"command, data and rsmooth version, then rerun")


def disagreement(everyone: List[Dict[str, Any]]) -> Optional[str]:
    """``train_subset (rank 0: None, rank 1: 500)`` for the facts whose values differ between the
    ranks' dicts ``everyone`` (dicts in them compared key by key: ``training data length``),
    the first three joined by ``; ``; None when they all agree."""
    flat = [_flatten(facts) for facts in everyone]
    keys = list(dict.fromkeys(k for facts in flat for k in facts))
    bad = [k for k in keys if any(f.get(k, _ABSENT) != flat[0].get(k, _ABSENT) for f in flat)]

    def value(v: Any) -> str:
        text = "absent" if v is _ABSENT else repr(v)
        return text if len(text) <= 60 else text[:57] + "..."

    text = "; ".join(f"{k} ({', '.join(f'rank {r}: {value(f.get(k, _ABSENT))}' for r, f in enumerate(flat))})"
                     for k in bad[:3])
    return text + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "") if bad else None


_ABSENT = object()


def _flatten(facts: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in facts.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k} "))
        else:
            out[f"{prefix}{k}"] = v
    return out


#: torch's dropout modules: :class:`ModelDraws` draws their masks per example row
DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
_ALPHA = (nn.AlphaDropout, nn.FeatureAlphaDropout)  # they set dropped values to a constant, not 0
_FEATURE = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.FeatureAlphaDropout)  # one draw per channel


def own_randomness(model: nn.Module) -> List[str]:
    """The modules of ``model`` whose random draws in training :class:`ModelDraws` cannot split by
    example (attention dropout, RReLU's slopes), as ``name (Type)``."""
    return [f"{name or 'model'} ({type(m).__name__})" for name, m in model.named_modules()
            if isinstance(m, nn.RReLU) or (isinstance(m, nn.MultiheadAttention) and m.dropout > 0)]


class ModelDraws:
    """The model's own random draws in a training step, independent of the number of processes.

    While a step runs (:meth:`step`) the global generators are seeded by the step and this
    process's rows of it, and every forward of one of ``model``'s dropout modules
    (:data:`DROPOUTS`) in training mode draws its mask for all ``n`` examples of the step, from
    the global generator seeded by the step and the call's number and restored after, and keeps
    rows ``lo:hi``: each example gets the mask it gets in one process, whichever process
    computes it.  This holds when the dropout's input has the examples along its first
    dimension (``B``, or ``B * m`` copies image-major); for another layout (a first dimension
    that is not a multiple of the rows) the mask comes from this process's seeded generator
    instead, with a warning under torchrun (``warn``).  Other draws (``torch.rand*`` in a
    model's own code, :func:`own_randomness`) depend on the rows, hence on the number of processes.
    Cost: one mask of ``n`` rows per dropout call instead of ``hi - lo``.  A context manager;
    leaving it restores the modules.
    """

    def __init__(self, model: nn.Module, warn: Optional[Callable[[str], None]] = None) -> None:
        self.modules = [m for m in model.modules() if isinstance(m, DROPOUTS)]
        self.warn, self._step = warn, None
        compiling = "torch._dynamo" in sys.modules  # torch.compile in use: keep the draws out of its graphs
        for m in self.modules:
            forward = functools.partial(self._forward, m)
            m.forward = torch.compiler.disable(forward) if compiling else forward

    def __enter__(self) -> "ModelDraws":
        return self

    def __exit__(self, *exc: Any) -> None:
        for m in self.modules:
            m.__dict__.pop("forward", None)

    @contextlib.contextmanager
    def step(self, seed: int, rows: Tuple[int, int, int]) -> Iterator[None]:
        """The body is the step seeded ``seed`` whose rows ``lo:hi`` of ``n`` this process computes."""
        torch.manual_seed(derive_seed(seed, "rows", rows[0], rows[1]))
        self._step = [seed, rows, 0]
        try:
            yield
        finally:
            self._step = None

    def _forward(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self._step is None or not m.training or m.p == 0:
            return type(m).forward(m, x)
        seed, (lo, hi, n), call = self._step
        self._step[2] += 1
        per, rest = divmod(x.shape[0], hi - lo) if x.dim() else (0, 1)
        if rest:
            if self.warn is not None:
                self.warn(f"{type(m).__name__} on an input of shape {tuple(x.shape)} whose first dimension "
                          f"does not run over the examples: its masks depend on the number of processes")
                self.warn = None  # once
            return type(m).forward(m, x)
        scale, shift = _affine(m, x, derive_seed(seed, "dropout", call), n * per, (lo * per, hi * per))
        return x * scale if shift is None else x * scale + shift


def _affine(m: nn.Module, x: torch.Tensor, seed: int, rows: int, keep: Tuple[int, int]
            ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(scale, shift or None): dropout module ``m`` seeded ``seed`` maps ``x`` to ``x * scale + shift``
    (``f(1) - f(0)`` and ``f(0)``; a plain dropout has ``f(0) = 0``), drawn for ``rows`` rows
    like ``x``'s, of which those in ``keep`` are returned, with the global generator restored."""
    shape = (rows, *x.shape[1:])
    if isinstance(m, _FEATURE) and x.dim() > 2:  # (N, C, 1, ...): its draws, at a fraction of the work
        shape = (rows, x.shape[1], *(1,) * (x.dim() - 2))
    outs = []
    with torch.no_grad(), torch.random.fork_rng(devices=[] if x.device.type == "cpu" else [x.device],
                                                device_type=x.device.type):
        for fill in (0.0, 1.0) if isinstance(m, _ALPHA) else (1.0,):
            torch.manual_seed(seed)
            outs.append(type(m).forward(m, x.new_full(shape, fill))[keep[0]:keep[1]])
    if keep[1] - keep[0] < rows:  # not views of the whole step's masks
        outs = [o.clone() for o in outs]
    return (outs[1] - outs[0], outs[0]) if len(outs) == 2 else (outs[0], None)
