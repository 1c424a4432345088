"""Which test examples to certify: every ``skip``-th, as Cohen et al. 2019 (arXiv 1902.02918) do."""
from __future__ import annotations

import operator
from typing import List, Optional

from ..errors import check


def _as_int(value: object, name: str) -> int:
    check(not isinstance(value, bool), f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        check(False, f"{name} must be an integer, got {value!r}")
        raise  # unreachable


def certify_indices(length: int, skip: int = 1, max: Optional[int] = None, start: int = 0) -> List[int]:
    """Indices ``start, start+skip, start+2*skip, ...`` below ``length``, at most ``max`` of them.

    Cohen et al.'s ``certify.py`` takes every ``skip``-th example and stops when the
    *dataset index* equals ``max``, so a ``max`` that is not a multiple of ``skip``
    never stops early.  Here ``max`` counts certified examples: every 20th
    CIFAR-10 test image with ``max=500`` is indices 0, 20, ..., 9980.  ``start`` is the first
    index, as the ``--start`` of the CAT-RS (Jeong, Kim, Shin 2023, arXiv 2212.09000) and MACER
    (Zhai et al. 2020, arXiv 2001.02378) certification scripts; a start at or past ``length``
    gives no indices.
    """
    length = _as_int(length, "length")
    skip = _as_int(skip, "skip")
    start = _as_int(start, "start")
    check(length >= 0, f"length must be >= 0, got {length}")
    check(skip >= 1, f"skip must be >= 1, got {skip}")
    check(start >= 0, f"start must be >= 0 (the first example's index), got {start}")
    indices = list(range(start, length, skip))
    if max is not None:
        max = _as_int(max, "max")
        check(max >= 1, f"max must be >= 1 (the number of examples to certify), got {max}")
        indices = indices[:max]
    return indices
