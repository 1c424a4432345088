"""Counts (samples, examples, batch sizes, epochs, seeds, indices) checked in one place.

A leaf module (it imports only :mod:`rsmooth.errors`), so that every layer, seeding included,
checks counts the same way without importing the smoothing package.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

from .errors import RsmoothError, check, setting

#: the largest count (samples, examples, batch size, epochs, ...) and index accepted: 2**40, about
#: 1.1e12, far above any run's (the papers draw n = 1e5 samples per image), while n votes summed over
#: 2**23 examples still fit int64 and every count is exact in float64 (the confidence bounds' input)
MAX_COUNT = 2 ** 40
#: MAX_COUNT as the errors write it
MAX_COUNT_TEXT = "2**40 (1,099,511,627,776)"


def validate_count(name: str, value: int, minimum: int = 1, maximum: Optional[int] = MAX_COUNT) -> int:
    """Return a count as int, or raise unless it is an integer in [``minimum``, ``maximum``]
    (``maximum`` None: no upper limit).

    Accepts Python and NumPy integers and integer-valued floats (``1e5``); refuses ``None``,
    ``bool``, strings and fractions (``2.7`` is not silently truncated).
    ``name``: a keyword (``"batch_size"``), which a command's message writes as its flag
    (``--batch-size``), or a flag itself (``"--epochs"``).
    """
    name = name if name.startswith("-") else setting(name)
    integral = isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer())
    check(integral and not isinstance(value, bool), f"{name} must be an integer, got {value!r}")
    check(int(value) >= minimum, f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and int(value) > maximum:
        limit = MAX_COUNT_TEXT if maximum == MAX_COUNT else f"{maximum:,}"
        raise RsmoothError(f"{name} must be at most {limit}, got {int(value)}; lower it")
    return int(value)
