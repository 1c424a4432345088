"""JSON-like data: the check that keyword arguments for a factory are data, never code.

At the bottom of the package (imports only :mod:`rsmooth.errors`) so that the models that call
:func:`check_arch_kwargs` and :mod:`rsmooth.trust`, which re-exports it and looks up the models'
registry, import it without a circle.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .errors import RsmoothError

_DATA = (type(None), bool, int, float, str)


def _data_problem(value: Any, at: str) -> Optional[str]:
    """Where ``value`` stops being JSON-like data (None, bool, numbers, str, lists, str-keyed dicts)."""
    if isinstance(value, _DATA):
        return None
    if isinstance(value, (list, tuple)):
        return next((p for i, v in enumerate(value) if (p := _data_problem(v, f"{at}[{i}]"))), None)
    if isinstance(value, Mapping):
        bad = next((k for k in value if not isinstance(k, str)), None)
        if bad is not None:
            return f"{at} has the key {bad!r}, not a string"
        return next((p for k, v in value.items() if (p := _data_problem(v, f"{at}[{k!r}]"))), None)
    return f"{at} is not data but a {type(value).__name__} ({value!r:.40})"


def check_arch_kwargs(kwargs: Any, where: str = "arch_kwargs") -> None:
    """``kwargs`` must be None or a JSON object of data: a dict with str keys whose values are
    None, booleans, numbers, strings, lists or such dicts (what a run records and ``--arch-kwargs``
    parses), so that keyword arguments never carry a callable to a factory."""
    if kwargs is None:
        return
    if not isinstance(kwargs, Mapping):
        raise RsmoothError(f"{where} must be a dict of keyword arguments (a JSON object such as "
                           f"{{\"width\": 64}}), got a {type(kwargs).__name__}: {kwargs!r:.60}")
    problem = _data_problem(kwargs, where)
    if problem is not None:
        raise RsmoothError(f"{problem}; {where} must be JSON-like data (null, true/false, numbers, strings, "
                           f"lists and objects with string keys), never code or other objects")
