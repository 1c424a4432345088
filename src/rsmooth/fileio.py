"""Writing files safely: atomic replacement with the usual permissions, and run locks.

Every file rsmooth replaces as a whole (checkpoints, sidecars, targets, logs rebuilt on resume)
goes through :func:`atomic_write`: a temporary file ``.NAME.XXXXXXXX.tmp`` in the same folder,
fsynced, given the mode a plain ``open()`` would give it (``0o666`` minus the umask, so
colleagues on a shared cluster can read results) and renamed over ``NAME``.  A kill at any
moment leaves the old file or the new one; the temporary file a kill leaves behind is removed
by the next run on the same output (:func:`remove_stale_temps`, called under the run's lock).

A run holds :func:`run_lock` on its output from before it reads or writes anything there until
it ends, so two processes never write the same output; the lock is released by the kernel when
a process dies, however it dies.

rsmooth never writes through a symbolic link at the file it writes (a link placed in a shared
output folder would redirect the write to a file of the link's choosing): a file written whole
replaces the link itself (the rename above), and a lock or a file written incrementally
(:func:`open_nofollow`) refuses it with a one-line error, as does a folder rsmooth makes inside
the output (:func:`make_folder_nofollow`).  This holds for the file the user names
too, since its lock and side files lie beside it; folders on the way are followed as usual.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Union

from .errors import RsmoothError, setting

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking
    fcntl = None

PathLike = Union[str, "os.PathLike[str]"]


def umask() -> int:
    """The process's umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not atomic with other threads)
    os.umask(mask)
    return mask


def _os_error(e: Optional[BaseException]) -> Optional[OSError]:
    """``e`` or the OSError it was raised while handling (torch.save wraps write errors in a
    RuntimeError); None for an RsmoothError, which already says what to do."""
    seen = set()
    while e is not None and id(e) not in seen and not isinstance(e, RsmoothError):
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return None


@contextlib.contextmanager
def naming(path: PathLike, always: bool = False) -> Iterator[None]:
    """Re-raise an OSError (also one wrapped by another exception, as torch.save does) as an
    OSError naming ``path`` (unless it names a file already and not ``always``), so the command
    line can say which file could not be written."""
    try:
        yield
    except Exception as e:
        cause = _os_error(e)
        if cause is None or (cause is e and e.filename is not None and not always):
            raise
        raise OSError(cause.errno, cause.strerror, os.fspath(path)) from e


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Replace ``path`` with what ``write(f)`` writes into a binary file object, atomically.

    Parent folders are created.  The file gets mode ``0o666 & ~umask`` (``mkstemp`` would leave
    0600).  On any error the temporary file is removed, ``path`` is unchanged and write errors
    are raised as an OSError naming ``path``.
    """
    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    with naming(path, always=True):  # not the temporary file's name
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fchmod(f.fileno(), 0o666 & ~umask())
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: PathLike, text: str) -> Path:
    """:func:`atomic_write` of ``text`` in UTF-8 (``Path.write_text``, atomically)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


#: the temporary names atomic_write gives (tempfile's 8 random characters)
_TEMP_NAME = r"\.{}\.[a-z0-9_]{{8}}\.tmp"


def remove_stale_temps(*paths: PathLike) -> int:
    """Delete the temporary files a killed :func:`atomic_write` of ``paths`` left behind.

    Call it only while holding the run's lock (another process's write in flight would lose its
    file).  Returns the number of files removed.
    """
    removed = 0
    for path in map(Path, paths):
        pattern = re.compile(_TEMP_NAME.format(re.escape(path.name)))
        if not path.parent.is_dir():
            continue
        for p in path.parent.iterdir():
            if pattern.fullmatch(p.name):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    removed += 1
    return removed


#: open() modes of :func:`open_nofollow` and their os.open flags
_MODES = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "r+b": os.O_RDWR}


def _link_error(path: PathLike) -> RsmoothError:
    return RsmoothError(f"{path} is a symbolic link; rsmooth does not write through links (it would write "
                        f"wherever the link points): remove it or choose another --out")


def _open_fd(path: PathLike, flags: int) -> int:
    """``os.open(path, flags)`` that refuses a symbolic link at ``path`` (``O_NOFOLLOW``)."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError:
        if os.path.islink(path):  # ELOOP (EMLINK on BSD)
            raise _link_error(path) from None
        raise


def make_folder_nofollow(path: PathLike) -> Path:
    """Create folder ``path`` (and its parents) unless it exists, refusing a symbolic link at
    ``path`` itself with a one-line error: a folder of outputs rsmooth makes inside ``--out``
    (e.g. ``OUT/tensorboard``), where a planted link would send every file in it elsewhere."""
    p = Path(path)
    if not p.is_symlink():
        p.mkdir(parents=True, exist_ok=True)
    if p.is_symlink():
        raise _link_error(p)
    return p


def open_nofollow(path: PathLike, mode: str = "a", **kwargs) -> IO:
    """``open(path, mode, **kwargs)`` for a file written incrementally (``mode`` one of ``w``,
    ``a``, ``ab``, ``r+b``), refusing a symbolic link at ``path`` with a one-line error."""
    return os.fdopen(_open_fd(path, _MODES[mode]), mode, **kwargs)


@contextlib.contextmanager
def run_lock(lock_file: PathLike, target: PathLike) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (created, with this pid in it) while the body runs.

    A second process asking for the same lock gets a one-line :class:`RsmoothError` naming the
    holder's pid and ``target`` (the output being written).  The lock file is removed on a clean
    exit; one left by a killed process is stale and simply taken over; a symbolic link there is
    refused (:func:`open_nofollow`), never followed.  On a file system without
    locks (Lustre mounted without ``flock``) the body runs unlocked, with a warning.
    """
    lock_file = Path(lock_file)
    if fcntl is None:  # pragma: no cover
        yield
        return
    with naming(lock_file):
        lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(lock_file, target)
    try:
        if fd is not None:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        # unlink while still holding the lock: a process that opened the old file then finds
        # it is no longer the one at lock_file and retries (see _acquire)
        with contextlib.suppress(OSError):
            os.unlink(lock_file)
        if fd is not None:
            os.close(fd)


#: flock errors that mean "this file system has no locks", not "someone holds it"
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def _acquire(lock_file: Path, target: PathLike) -> Optional[int]:
    """The locked descriptor of ``lock_file``, or None where the file system cannot lock."""
    while True:
        fd = _open_fd(lock_file, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno in _NO_LOCKS:
                warnings.warn(f"cannot lock {lock_file} ({e.strerror}); nothing keeps a second "
                              f"process from writing {target} at the same time", stacklevel=4)
                return None
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise OSError(e.errno, e.strerror, os.fspath(lock_file)) from None
            raise RsmoothError(f"another rsmooth process (pid {holder}) is writing {target}; "
                               f"wait for it to finish or choose another {setting('out')}") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock_file))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the previous holder removed the file between our open and flock
