"""Where a module named by the user (``--arch module:factory``) is found, the same for every entry point.

``python -m rsmooth`` puts the current folder first on ``sys.path``; the ``rsmooth`` script does
not.  :func:`drop_cwd_when_run` removes that entry at rsmooth's first import when rsmooth is the
module ``python -m`` runs, before rsmooth imports anything else, so both import the same code (a
stray ``typing.py``, ``numpy.py`` or a module left in a run folder is never picked up), and
:func:`import_module` looks for a module the *user* names on ``sys.path`` and then in the current
folder, in both.  A module recorded in a file (a run folder's arch) is looked for on ``sys.path``
only.  rsmooth's own child processes start with :func:`rsmooth_command`, and those of the
``rsmooth`` program inherit ``PYTHONSAFEPATH=1`` (:func:`keep_cwd_off_child_paths`).

This module runs first: it imports only what ``python -m`` has imported before it (no
``typing``, no ``from __future__``), so that nothing is looked up while the current folder is still
on the path.
"""
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["drop_cwd_when_run", "drop_implicit_cwd", "import_module", "cwd_hint", "keep_cwd_off_child_paths",
           "rsmooth_command"]


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


def _python_m_module() -> str | None:
    """MODULE of this process's ``python [OPTIONS] -m MODULE ...`` command line, else None."""
    args = iter(sys.orig_argv[1:])
    for arg in args:
        if arg == "--check-hash-based-pycs":
            next(args, None)
        elif arg in ("-", "--") or not arg.startswith("-"):
            return None  # a script or stdin
        elif not arg.startswith("--"):
            for i, option in enumerate(arg[1:], 2):  # a cluster of short options: -u, -Bm rsmooth, -mrsmooth
                if option in "cm":
                    return (arg[i:] or next(args, None)) if option == "m" else None
                if option in "WX":  # takes a value, here or in the next argument
                    if i == len(arg):
                        next(args, None)
                    break
    return None


def drop_cwd_when_run() -> None:
    """Called at rsmooth's first import: while ``python -m rsmooth[.SUBMODULE]`` locates its module
    (``sys.argv[0]`` is ``"-m"`` until then), drop the current folder it put first on ``sys.path``.
    Another program that imports rsmooth keeps its ``sys.path``."""
    if sys.argv[:1] == ["-m"] and (_python_m_module() or "").partition(".")[0] == "rsmooth":
        drop_implicit_cwd()


def keep_cwd_off_child_paths() -> None:
    """For the ``rsmooth`` program: the Python processes it starts (``reproduce``'s steps, data-loading
    workers under the spawn and forkserver start methods, which run ``python -c``) never put the
    current folder on ``sys.path``: ``PYTHONSAFEPATH=1`` in its environment (Python 3.11+)."""
    os.environ.setdefault("PYTHONSAFEPATH", "1")


def rsmooth_command(argv: list[str]) -> list[str]:
    """The command line that runs ``rsmooth ARGV`` in a new process of this Python: ``python -P -m
    rsmooth`` (3.11+: the current folder never on ``sys.path``); on 3.10 ``python -m rsmooth``,
    which drops it at rsmooth's first import (:func:`drop_cwd_when_run`)."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-m", "rsmooth", *argv]


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
