"""rsmooth: certified robustness by randomized smoothing.

Certify (Cohen, Rosenfeld, Kolter 2019, Certified Adversarial Robustness via Randomized
Smoothing, arXiv 1902.02918), train base classifiers (Gaussian, SmoothAdv, MACER, Consistency,
SmoothMix, CAT-RS, ...), evaluate and reproduce the papers' tables.

``Smooth``, ``create_model``, ``register_model``, ``get_dataset``, ``load_model`` and the results'
``summarize`` / ``records`` / ``analyze`` are imported on first use, so ``import rsmooth`` (and the
command line's start) does not wait for PyTorch.
"""
from .imports import drop_cwd_when_run as _drop_cwd_when_run

_drop_cwd_when_run()  # python -m rsmooth: the current folder leaves sys.path before anything else is imported

from .version import __version__  # noqa: E402

import typing as _typing  # noqa: E402 (private: dir(rsmooth) and __all__ list only the API)

from .errors import RsmoothError  # noqa: E402

#: public name -> the module that defines it (imported on first access, PEP 562)
_LAZY = {"Smooth": ".smoothing", "create_model": ".models", "register_model": ".models",
         "get_dataset": ".data", "load_model": ".engine.checkpoint"}
# results as data: FileSummary objects, plain records (pandas.DataFrame(records(...)) after pip install pandas), the table text
_LAZY.update({"summarize": ".report.summary", "records": ".report.summary", "FileSummary": ".report.summary",
              "analyze": ".report.summary"})

__all__ = ["__version__", "RsmoothError", *_LAZY]

if _typing.TYPE_CHECKING:
    from .data import get_dataset
    from .engine.checkpoint import load_model
    from .models import create_model, register_model
    from .report.summary import FileSummary, analyze, records, summarize
    from .smoothing import Smooth


def __getattr__(name: str) -> _typing.Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> _typing.List[str]:
    """The public API and the submodules imported so far (no private or typing names)."""
    return sorted({n for n in globals() if not n.startswith("_")} | set(__all__))
