"""rsmooth: certified robustness by randomized smoothing.

Certify (Cohen et al. 2019), train base classifiers (Gaussian, ...), evaluate
and reproduce the papers' tables.  See ``shared/papers`` for the sources.
"""
__version__ = "0.1.0"

from .errors import RsmoothError  # noqa: E402
from .smoothing import Smooth  # noqa: E402
from .models import create_model  # noqa: E402
from .data import get_dataset  # noqa: E402
from .engine.checkpoint import load_model  # noqa: E402

__all__ = ["__version__", "RsmoothError", "Smooth", "create_model", "get_dataset", "load_model"]
