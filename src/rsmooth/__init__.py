"""rsmooth: certified robustness by randomized smoothing.

Certify (Cohen et al. 2019), train base classifiers (Gaussian, ...), evaluate
and reproduce the papers' tables.  See ``shared/papers`` for the sources.
"""
__version__ = "0.1.0"

from .errors import RsmoothError  # noqa: E402

__all__ = ["__version__", "RsmoothError"]
