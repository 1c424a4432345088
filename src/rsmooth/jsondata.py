"""JSON-like data: the check that keyword arguments for a factory are data, never code, and the
bounds on any data read from a file.

At the bottom of the package (imports only :mod:`rsmooth.errors`) so that the models that call
:func:`check_arch_kwargs` and :mod:`rsmooth.trust`, which re-exports it and looks up the models'
registry, import it without a circle.

A small file can hold data that unfolds into exponentially many values: a pickle's memo and
YAML's aliases let a list hold the same list many times over, level after level, or hold itself.
Walking that (to check it, compare it, write it as JSON) would hang, so every walk here counts
each value each time it is reached and stops at :data:`MAX_VALUES` values or :data:`MAX_DEPTH`
levels, with one line.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, List, Optional, Tuple

from .errors import RsmoothError

_DATA = (type(None), bool, int, float, str)
#: the most values (each time a shared one is reached) and levels of nesting data read from a file may have
MAX_VALUES = 100_000
MAX_DEPTH = 64


def _problem(value: Any, at: str, *, data: bool) -> Optional[str]:
    """Where ``value`` exceeds the bounds, or (``data``) stops being JSON-like data (None, bool,
    numbers, str, lists, str-keyed dicts); None when it does neither.  Depth first, in order; the
    path to a value (a linked (parent, key) pair) is spelled out only for the message."""
    stack: List[Tuple[Any, int, Any]] = [(value, 0, None)]
    count = 0
    while stack:
        v, depth, path = stack.pop()
        count += 1
        if count > MAX_VALUES:
            return f"{at} holds more than {MAX_VALUES} values (a part it shares is counted each time it appears)"
        if depth > MAX_DEPTH:
            return f"{at} is nested more than {MAX_DEPTH} levels deep (or holds itself)"
        if isinstance(v, (list, tuple)):
            stack.extend((v[i], depth + 1, (path, i)) for i in reversed(range(len(v))))
        elif isinstance(v, Mapping):
            bad = next((k for k in v if not isinstance(k, str)), None) if data else None
            if bad is not None:
                return f"{_spell(at, path)} has the key {bad!r:.40}, not a string"
            stack.extend((v[k], depth + 1, (path, k)) for k in reversed(list(v)))
        elif data and not isinstance(v, _DATA):
            return f"{_spell(at, path)} is not data but a {type(v).__name__} ({v!r:.40})"
    return None


def _spell(at: str, path: Any) -> str:
    """``at['a'][1]``: the path of (parent, key) pairs after ``at``."""
    keys = []
    while path is not None:
        path, key = path
        keys.append(key)
    return at + "".join(f"[{k!r:.40}]" for k in reversed(keys))


def check_bounded(value: Any, where: str) -> None:
    """Refuse (one line naming ``where``) data read from a file that has more than
    :data:`MAX_VALUES` values or :data:`MAX_DEPTH` levels, before anything else walks it."""
    problem = _problem(value, where, data=False)
    if problem is not None:
        raise RsmoothError(f"{problem}; rsmooth reads no larger or deeper data from a file")


def check_arch_kwargs(kwargs: Any, where: str = "arch_kwargs") -> None:
    """``kwargs`` must be None or a JSON object of data: a dict with str keys whose values are
    None, booleans, numbers, strings, lists or such dicts (what a run records and ``--arch-kwargs``
    parses), so that keyword arguments never carry a callable to a factory; within the bounds of
    :func:`check_bounded`."""
    if kwargs is None:
        return
    if not isinstance(kwargs, Mapping):
        raise RsmoothError(f"{where} must be a dict of keyword arguments (a JSON object such as "
                           f"{{\"width\": 64}}), got a {type(kwargs).__name__}")
    check_bounded(kwargs, where)
    problem = _problem(kwargs, where, data=True)
    if problem is not None:
        raise RsmoothError(f"{problem}; {where} must be JSON-like data (null, true/false, numbers, strings, "
                           f"lists and objects with string keys), never code or other objects")
