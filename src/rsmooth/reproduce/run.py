"""Running a reproduction's steps: one after another through a function (the CLI's ``main``), or
``--jobs K`` at a time, each in a process of its own with its log in ``OUT/logs``.

With K processes no core stays idle while a certification runs: a certification started when
more slots are free than other steps are ready runs as shards (``certify --shard I/K``), and
one running as one process when a slot falls idle with nothing ready is stopped and continued
as shards (they take the rows it wrote: :func:`~rsmooth.engine.certify.run_certification`);
the shards are merged into the file one process writes.  Shards a killed reproduction left are
continued with their own count.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..engine.shards import CERTIFY, Shard, merge_certify, shard_names
from ..errors import RsmoothError
from ..fileio import open_nofollow
from ..imports import rsmooth_command
from ..progress import format_duration
from .plan import Step, done

#: how a step runs: its ``rsmooth`` arguments -> its exit status (the CLI hands its ``main``)
RunStep = Callable[[List[str]], int]
#: with --jobs K, the reproduction's own log shows each running step's latest line this often (s)
STATUS_EVERY = 600.0


def run_steps(steps: Sequence[Step], jobs: int, logs: Path, log: Callable[[str], None] = print,
              run_step: Optional[RunStep] = None) -> None:
    """Run ``steps`` (in order, each through ``run_step``, by default :func:`run_in_subprocess`; or
    ``jobs`` at a time as their inputs are ready, each in its own process with its log in ``logs``);
    the first failure stops new steps and is raised."""
    todo = [s for s in steps if not done(s)]
    log(f"{len(steps) - len(todo)} of {len(steps)} steps already done")
    if jobs > 1:
        _Pool(todo, jobs, logs, log).run()
        return
    for k, s in enumerate(todo, 1):
        log(f"== [{k}/{len(todo)}] {s.title}")
        start = time.monotonic()
        count = left_shards(s)
        for argv in [s.argv + ["--shard", f"{i}/{count}"] for i in range(count)] if count else [s.argv]:
            code = (run_step or run_in_subprocess)(argv)
            if code in (130, 143):  # Ctrl-C / SIGTERM: the step stopped cleanly; so does the reproduction
                raise KeyboardInterrupt
            if code != 0:
                raise RsmoothError(f"step '{s.title}' failed (see above); fix it and rerun the same command to continue")
        if count:
            merge_certify(s.out, log=log)
        log(f"   {s.title}: done in {format_duration(time.monotonic() - start)}")


def left_shards(step: Step) -> int:
    """The shard count of the shard files that an earlier run of a certify ``step`` left (0: none)."""
    counts = {k for _, k in shard_names(step.out, CERTIFY)} if step.kind == "certify" else set()
    return max(counts, default=0)


def run_in_subprocess(argv: List[str]) -> int:
    """Run one step as ``python -P -m rsmooth ARGV`` in a process of its own (killed if this one dies),
    its output on ours, and return its exit status; on Ctrl-C (which reaches it too) wait for it to
    stop cleanly.  ``rsmooth reproduce`` runs its steps in its own process instead (the CLI hands
    its ``main`` as ``run_step``)."""
    proc = subprocess.Popen(rsmooth_command(argv),
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    try:
        return proc.wait()
    finally:
        proc.wait()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the child is killed when the reproduce process dies (no orphans writing run folders)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def last_line(path: Path, tail: int = 4096) -> str:
    """The last non-empty line of a step's log (its latest heartbeat or epoch), "" if none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail))
            lines = fh.read().decode(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


@dataclass(frozen=True)
class Task:
    """What one process does: a step, or shard ``shard`` of a certify step."""

    step: Step
    shard: Optional[Shard] = None

    @property
    def title(self) -> str:
        return self.step.title + ("" if self.shard is None else f", shard {self.shard[0]}/{self.shard[1]}")

    def argv(self) -> List[str]:
        return self.step.argv + ([] if self.shard is None else ["--shard", f"{self.shard[0]}/{self.shard[1]}"])

    def log_name(self) -> str:
        return self.title.replace(" ", "_").replace("/", "-").replace(",", "") + ".log"


def _status(running: Dict[object, Tuple[Task, Path]], log: Callable[[str], None]) -> None:
    for task, path in running.values():
        log(f"   {task.title}: {last_line(path) or '(no output yet)'}")


class _Pool:
    """``--jobs K``: tasks started as their inputs are ready (the latest stage first: certificates
    early, the targets -> CAT-RS chain, the longest, soon), at most K processes at once."""

    def __init__(self, todo: List[Step], jobs: int, logs: Path, log: Callable[[str], None]) -> None:
        self.waiting: List[Task] = [Task(s) for s in todo]
        self.jobs, self.logs, self.log = jobs, logs, log
        self.running: Dict[subprocess.Popen, Tuple[Task, Path]] = {}
        self.pending = {s.out for s in todo}  # outputs not yet complete
        self.shards_left: Dict[Path, int] = {}  # a certification run as shards: its shard processes to go
        self.splitting: Set[subprocess.Popen] = set()  # stopped to continue as shards
        self.failed: Optional[Tuple[Task, Path]] = None
        self.begun: Set[Path] = set()  # the steps started, for the log's [k/total]
        self.total, self.t0, self.split_at = len(todo), time.time(), 0.0

    def run(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        status_at = self.t0 + STATUS_EVERY
        while self.waiting or self.running:
            if time.time() >= status_at and self.running:  # a heartbeat for whoever reads this log
                _status(self.running, self.log)
                status_at = time.time() + STATUS_EVERY
            self._start_ready()
            if self.failed is not None and not self.running:
                break
            self._split_idle()
            time.sleep(0.2)
            for proc in [p for p in self.running if p.poll() is not None]:
                self._finished(proc)
        if self.failed is not None:
            task, path = self.failed
            tail = path.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise RsmoothError(f"step '{task.step.title}' failed: {tail[0]} (log {path}); fix it and rerun to continue")

    def _free(self) -> int:
        return self.jobs - len(self.running)

    def _ready(self) -> List[Task]:
        return [t for t in self.waiting if not any(d in self.pending for d in t.step.deps)]

    def _start_ready(self) -> None:
        while self.failed is None and self._free() > 0:
            ready = self._ready()
            if not ready:
                return
            task = max(ready, key=lambda t: t.step.stage)
            self.waiting.remove(task)
            count = self._shard_count(task, len(ready) - 1)
            if count:
                self.shards_left[task.step.out] = count
                self.waiting[:0] = [Task(task.step, (i, count)) for i in range(count)]
                continue
            self._launch(task)

    def _shard_count(self, task: Task, others_ready: int) -> int:
        """How many shards a certify step starts as (0: one process): those a killed run left, or the
        slots no other ready step takes, when two or more."""
        if task.step.kind != "certify" or task.shard is not None:
            return 0
        spare = self._free() - others_ready
        return left_shards(task.step) or (spare if spare >= 2 else 0)

    def _launch(self, task: Task) -> None:
        path = self.logs / task.log_name()
        with open_nofollow(path, "ab") as fh:
            proc = subprocess.Popen(rsmooth_command(task.argv()), stdout=fh,
                                    stderr=subprocess.STDOUT, env=_child_env(self.jobs),
                                    preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.running[proc] = (task, path)
        self.begun.add(task.step.out)
        self.log(f"== [{len(self.begun)}/{self.total}] {task.title} (log: {path})")

    def _split_idle(self) -> None:
        """With a slot idle and nothing ready, stop the one-process certification with the most
        examples to go; :meth:`_finished` continues it as shards."""
        if (self.failed is not None or self._free() < 1 or self._ready() or self.splitting
                or time.time() < self.split_at):
            return
        self.split_at = time.time() + 10.0  # (reads the certifications' files: not every loop)
        alone = [(left, p) for p, (t, _) in self.running.items()
                 if t.step.kind == "certify" and t.shard is None and (left := _examples_left(t.step.out)) >= 2]
        if alone:
            _, proc = max(alone, key=lambda x: x[0])
            self.log(f"   {self._free()} idle: {self.running[proc][0].title} continues as "
                     f"{self._free() + 1} shards")
            self.splitting.add(proc)
            proc.terminate()

    def _finished(self, proc: subprocess.Popen) -> None:
        task, path = self.running.pop(proc)
        out = task.step.out
        if proc in self.splitting:
            self.splitting.discard(proc)
            if not done(task.step):
                count = max(2, self._free())
                self.shards_left[out] = count
                self.waiting[:0] = [Task(task.step, (i, count)) for i in range(count)]
                return
        elif proc.returncode != 0:
            self.failed = self.failed or (task, path)
            return
        if task.shard is not None:
            self.shards_left[out] -= 1
            if self.shards_left[out]:
                return
            try:
                merge_certify(out, log=lambda m: _append(path, m) or self.log(f"   {m}"))
            except RsmoothError as e:
                _append(path, f"rsmooth: error: {e}")
                self.failed = self.failed or (task, path)
                return
        self.pending.discard(out)
        self.log(f"   done: {task.step.title} ({time.time() - self.t0:.0f}s since start)")


def _examples_left(tsv: Path) -> int:
    """How many examples the certification writing ``tsv`` has to go (0 when unknown)."""
    from ..metrics import read_certify_tsv, read_sidecar

    try:
        meta = read_sidecar(tsv) or {}
        total = meta.get("num_examples")
        return max(0, total - read_certify_tsv(tsv, growing=True).n) if isinstance(total, int) else 0
    except (RsmoothError, OSError):
        return 0


def _append(path: Path, line: str) -> None:
    with open_nofollow(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _child_env(jobs: int) -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    return env
