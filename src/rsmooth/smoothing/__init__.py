"""Randomized smoothing: the smoothed classifier and its statistics (Cohen et al. 2019, arXiv 1902.02918)."""
from . import l1  # noqa: F401  (registers the uniform and laplace noises)
from .sequential import Decision, SequentialCertificate, anytime_lower, anytime_upper
from .smooth import DEFAULT_BATCH_SIZE, Precision, Smooth, validate_precision
from .stats import (
    binom_pvalue,
    certified_radius,
    clopper_pearson_lower,
    max_certifiable_radius,
    validate_alpha,
    validate_count,
    validate_sigma,
)

__all__ = [
    "DEFAULT_BATCH_SIZE", "Decision", "SequentialCertificate", "anytime_lower", "anytime_upper",
    "Smooth", "Precision", "binom_pvalue", "certified_radius", "clopper_pearson_lower",
    "max_certifiable_radius", "validate_alpha", "validate_count", "validate_precision", "validate_sigma",
]
from . import sound  # noqa: F401,E402  registers the "sound-gaussian" noise
