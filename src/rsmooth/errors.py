"""User-facing errors: one line that says what is wrong and how to fix it.

The CLI prints ``rsmooth: error: <message>`` for an :class:`RsmoothError` and
exits with status 2, never a traceback.  A message names a setting as its reader gives it
(:func:`setting`): a flag inside a command (:func:`command_line`), a keyword argument from Python.
"""
import contextlib
import contextvars
from typing import Any, Iterator, Optional

#: whether the messages formed now are read by a command's user (flags) or a Python caller (keywords)
_COMMAND_LINE: "contextvars.ContextVar[bool]" = contextvars.ContextVar("rsmooth_command_line", default=False)
_NO_VALUE: Any = object()


class RsmoothError(ValueError):
    """A problem with the user's input (arguments, files, data), not a bug.

    Its message is one line saying what is wrong and how to fix it; the command line prints it as
    ``rsmooth: error: <message>`` and exits with status 2, without a traceback.  A subclass of
    ``ValueError``, so ``except ValueError`` catches it too.

    Example:
        ```python
        try:
            rsmooth.get_dataset("digits", "validation")
        except rsmooth.RsmoothError as e:
            print(e)          # one line naming the splits there are
        ```
    """


def check(condition: bool, message: str) -> None:
    """Raise :class:`RsmoothError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise RsmoothError(message)


def first_line(e: BaseException, limit: int = 160) -> str:
    """The first non-blank line of an exception's message (its type name if none), without terminal
    escapes (torch colours some), shortened."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(e))
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)[:limit]


def unpickle_refusal(e: BaseException) -> "str | None":
    """The global that ``torch.load(weights_only=True)`` refused to unpickle, as its error ``e`` names
    it (with the module when torch blocks that module outright: os, posix, sys, nt), else None."""
    import re

    found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)"
                      r"(?: whose module ([\w.]+) is blocked)?", str(e))
    if found is None:
        return None
    return found.group(1) + (f" (module {found.group(2)}, which torch blocks outright)" if found.group(2) else "")


def did_you_mean(name: str, choices, n: int = 3) -> str:
    """``" (did you mean 'a' or 'b'?)"`` for the ``choices`` closest to ``name`` (difflib), else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Inside, :func:`setting` names command-line flags (the ``rsmooth`` command runs in it)."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def spelled(flag: str, keyword: str) -> str:
    """What a message tells its reader to pass: ``flag`` in a command, ``keyword`` from Python."""
    return flag if _COMMAND_LINE.get() else keyword


def setting(name: str, value: Any = _NO_VALUE, *, flag: Optional[str] = None) -> str:
    """How a message names setting ``name`` (with ``value``): ``--epochs 5`` in a command (``flag``,
    default the name with dashes; a true bool is the bare flag), ``epochs=5`` from Python."""
    flag = flag or "--" + name.replace("_", "-")
    if value is _NO_VALUE:
        return spelled(flag, name)
    return spelled(flag if value is True else f"{flag} {value}", f"{name}={value!r}")
