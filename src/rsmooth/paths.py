"""Output paths checked before any work: one-line errors instead of a failure hours later.

``os.access`` is not reliable (root passes it on read-only mounts and under ``/proc``), so
writability is tested by creating and removing a probe file in the nearest existing folder;
nothing else is created.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional, Union

from .errors import RsmoothError, setting

PathLike = Union[str, "os.PathLike[str]"]


def _named(path: PathLike, flag: Optional[str]) -> str:
    """``--plot p.png`` for a ``flag`` given; else ``--out p`` in a command, ``out='p'`` from Python."""
    return f"{flag} {path}" if flag else setting("out", str(path))


def _check_writable_folder(path: Path, flag: Optional[str], shown: PathLike) -> None:
    """Raise unless ``path`` is, or can be created as, a folder we may write files in."""
    folder, named, flag = path, _named(shown, flag), flag or setting("out")
    while not folder.exists():
        if folder.is_symlink():  # a dangling link: nothing can be created through it
            raise RsmoothError(f"cannot write {named}: {folder} is a broken link")
        folder = folder.parent
    if not folder.is_dir():
        raise RsmoothError(f"cannot write {named}: {folder} is a file, not a folder; "
                           f"choose another {flag}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".rsmooth-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise RsmoothError(f"cannot write {named}: {folder} is not writable "
                           f"({e.strerror or e}); choose another {flag}") from None


def check_output_file(path: PathLike, flag: Optional[str] = None, *, inputs: Iterable[PathLike] = ()) -> Path:
    """Check that ``path`` can be written as a file; return it as a Path.  Messages name it as
    ``flag`` (default: ``--out`` in a command, the keyword ``out`` from Python).

    Refuses an existing folder or special file, a folder that cannot be created or written,
    and any of ``inputs`` (files the run reads, e.g. the checkpoint: writing there would
    destroy them).
    """
    p, named, other = Path(path), _named(path, flag), flag or setting("out")
    if p.is_dir():
        raise RsmoothError(f"{named} is a folder; it must name a file (e.g. {p / 'certify.tsv'})")
    if p.exists() and not p.is_file():
        raise RsmoothError(f"{named} exists and is not a regular file; choose another {other}")
    for src in inputs:
        if p.exists() and Path(src).exists() and os.path.samefile(p, src):
            raise RsmoothError(f"{named} is the input file {src}; writing there would destroy it: "
                               f"choose another {other}")
    _check_writable_folder(Path(os.path.abspath(p)).parent, flag, path)
    return p


def check_output_dir(path: PathLike, flag: Optional[str] = None) -> Path:
    """Check that ``path`` is, or can be created as, a writable folder; return it as a Path
    (messages as :func:`check_output_file`'s)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise RsmoothError(f"{_named(path, flag)} is an existing file; it must name a folder (e.g. runs/my_run)")
    _check_writable_folder(Path(os.path.abspath(p)), flag, path)
    return p
