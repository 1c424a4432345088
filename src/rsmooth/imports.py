"""Where a module named by the user (``--arch module:factory``) is found, the same for every entry point.

``python -m rsmooth`` puts the current folder first on ``sys.path``; the ``rsmooth`` script does
not.  :func:`drop_implicit_cwd` removes that entry when rsmooth is the main program, so both
import the same code (a stray ``numpy.py`` or a module left in a run folder is never picked up),
and :func:`import_module` looks for a module the *user* names on ``sys.path`` and then in the
current folder, in both.  A module recorded in a file (a run folder's arch) is looked for on
``sys.path`` only.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["drop_implicit_cwd", "import_module", "cwd_hint"]


def _is_cwd(entry: str) -> bool:
    try:
        return entry == "" or os.path.realpath(entry) == os.path.realpath(os.getcwd())
    except OSError:  # the current folder was deleted
        return entry == ""


def drop_implicit_cwd() -> None:
    """Remove the current folder that ``python -m`` puts first on ``sys.path`` (unless ``-P`` /
    ``PYTHONSAFEPATH`` already left it out).  Call only when rsmooth is the main program."""
    if sys.path and not getattr(sys.flags, "safe_path", False) and _is_cwd(sys.path[0]):
        del sys.path[0]


def _in_cwd(top: str) -> bool:
    """Whether the current folder holds the top-level module or package ``top``."""
    try:
        return importlib.machinery.PathFinder.find_spec(top, [os.getcwd()]) is not None
    except (OSError, ValueError, ImportError):
        return False


def import_module(name: str, *, search_cwd: bool) -> ModuleType:
    """``importlib.import_module(name)``; with ``search_cwd``, a top-level package that is not on
    ``sys.path`` is looked for in the current folder, which is then appended to ``sys.path`` (so
    the module's own later imports of its neighbours work).  Errors propagate unchanged."""
    top = name.partition(".")[0]
    if search_cwd and top not in sys.modules and not any(_is_cwd(p) for p in sys.path):
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found and _in_cwd(top):
            sys.path.append(os.getcwd())
            importlib.invalidate_caches()
    return importlib.import_module(name)


def cwd_hint(name: str, ref: str) -> str:
    """``"; ..."`` telling how to use ``ref`` when module ``name`` is in the current folder but was
    not searched there (a recorded arch), else ``""``."""
    top = name.partition(".")[0]
    if not _in_cwd(top):
        return ""
    return (f"; the current folder has {top}, which rsmooth imports only for a module you name: "
            f"pass --arch {ref} (arch={ref!r} in Python) if you trust it")
