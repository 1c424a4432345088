"""Progress bars for the long loops (training epochs, certification, targets).

One rule for all of them: a bar is drawn when the caller allows it and someone is watching,
i.e. stderr is a terminal or the code runs in a Jupyter kernel (where ``tqdm.auto`` draws a
notebook widget); in logs, pipes and batch jobs nothing is drawn.
"""
from __future__ import annotations

import sys
from typing import Any, Iterable, Optional


def interactive() -> bool:
    """True when stderr is a terminal or a Jupyter (IPython) kernel is running this code."""
    try:
        if sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # stderr replaced or closed
        pass
    ipython = sys.modules.get("IPython")  # never imported here: only if the user's session did
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def progress_bar(iterable: Optional[Iterable] = None, *, total: Optional[int] = None, desc: str = "",
                 unit: str = "img", enabled: bool = True, **kwargs: Any):
    """A ``tqdm.auto`` bar counting ``unit`` (images unless told), disabled unless
    ``enabled`` and :func:`interactive`."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True,
                disable=not (enabled and interactive()), **kwargs)


def format_duration(seconds: float) -> str:
    """``seconds`` as 42s, 3m12s or 2h05m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
