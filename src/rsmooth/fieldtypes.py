"""Checking values read from a file against a dataclass field's type annotation.

Config files (``rsmooth train --config``) and recorded run configs are JSON or YAML: this module
accepts what those formats give for the annotations the settings use (``int``, ``float``,
``bool``, ``str``, ``Optional[...]``, ``List[...]``, ``Dict[str, ...]``, ``Any``), turns an integer
into a float where a float is expected, and names the expected type when a value does not fit.
Integers must fit 64 bits and numbers be finite (YAML's ``.inf``, JSON's ``NaN``): nothing a setting
means is stored otherwise; each setting's own range is checked where it is used.
"""
from __future__ import annotations

import math
import typing
from typing import Any, Dict, Mapping, Tuple

from .errors import RsmoothError

_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_INT64 = 2 ** 63


def describe(hint: Any) -> str:
    """The type ``hint`` in words (``"an integer or null"``, ``"a list of numbers"``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any value"
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        text = " or ".join(describe(a) for a in inner)
        return text + " or null" if len(inner) < len(args) else text
    if origin in (list, tuple):
        item = describe(args[0]) if args else "any value"
        return "a list of " + (item.split(" ", 1)[1] + "s" if item.startswith(("a ", "an ")) else item)
    if origin is dict or hint is dict:
        return "a mapping"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def convert(value: Any, hint: Any) -> Tuple[bool, Any]:
    """(whether ``value`` fits ``hint``, the value with integers made floats where floats are expected)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True, value
    if origin is typing.Union:
        if value is None:
            return type(None) in args, None
        for a in args:
            if a is not type(None):
                ok, v = convert(value, a)
                if ok:
                    return True, v
        return False, value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False, value
        items = [convert(v, args[0]) if args else (True, v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if origin is dict or hint is dict:
        return isinstance(value, Mapping) and all(isinstance(k, str) for k in value), \
            dict(value) if isinstance(value, Mapping) else value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return ok, float(value) if ok else value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and -_INT64 < value < _INT64, value
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value


def _why(value: Any) -> str:
    """What is wrong with a number that has the right type."""
    if isinstance(value, int) and not isinstance(value, bool):
        return ", which does not fit 64 bits; lower it"
    if isinstance(value, float) and not math.isfinite(value):
        return ", which is not finite"
    return ""


def check_values(values: Mapping[str, Any], hints: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """``values`` checked against ``hints`` (every key has one); the first misfit is a one-line
    error naming ``where``, the key and the expected type."""
    out: Dict[str, Any] = {}
    for key, value in values.items():
        ok, out[key] = convert(value, hints[key])
        if not ok:
            raise RsmoothError(f"{where}: {key} must be {describe(hints[key])}, got {value!r}{_why(value)}")
    return out
