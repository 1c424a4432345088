"""Randomized smoothing: the smoothed classifier and its statistics (Cohen et al. 2019)."""
from .smooth import Precision, Smooth
from .stats import (
    binom_pvalue,
    certified_radius,
    clopper_pearson_lower,
    max_certifiable_radius,
    validate_alpha,
    validate_count,
    validate_sigma,
)

#: noisy samples per forward pass when none is given (see BENCHMARKS.md)
DEFAULT_BATCH_SIZE = 400

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "Smooth", "Precision", "binom_pvalue", "certified_radius", "clopper_pearson_lower",
    "max_certifiable_radius", "validate_alpha", "validate_count", "validate_sigma",
]
