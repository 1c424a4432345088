"""rsmooth: certified robustness by randomized smoothing.

Certify (Cohen, Rosenfeld, Kolter 2019, Certified Adversarial Robustness via Randomized
Smoothing, arXiv 1902.02918), train base classifiers (Gaussian, SmoothAdv, MACER, Consistency,
SmoothMix, CAT-RS, ...), evaluate and reproduce the papers' tables.

``Smooth``, ``create_model``, ``register_model``, ``get_dataset`` and ``load_model`` are imported
on first use, so ``import rsmooth`` (and the command line's start) does not wait for PyTorch.
"""
__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any, List  # noqa: E402

from .errors import RsmoothError  # noqa: E402

#: public name -> the module that defines it (imported on first access, PEP 562)
_LAZY = {"Smooth": ".smoothing", "create_model": ".models", "register_model": ".models",
         "get_dataset": ".data", "load_model": ".engine.checkpoint"}

__all__ = ["__version__", "RsmoothError", *_LAZY]

if TYPE_CHECKING:
    from .data import get_dataset
    from .engine.checkpoint import load_model
    from .models import create_model, register_model
    from .smoothing import Smooth


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
