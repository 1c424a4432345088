"""Certify TSV + sidecar JSON I/O, certified accuracy and ACR, and their confidence bounds (pure
functions).

Tables and plots built on these live in :mod:`rsmooth.report`.
"""
from .certified import acr, certified_accuracy, certified_counts, default_radii
from .certify_io import (
    TSV_COLUMNS,
    TSV_HEADER,
    CertifyResult,
    CertifyWriter,
    format_row,
    read_certify_tsv,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)
from .intervals import (
    AccuracyBounds,
    accuracy_bounds,
    clopper_pearson_interval,
    high_probability_count,
    population_lower_bound,
    wrong_certificates_bound,
)

__all__ = [
    "CertifyWriter",
    "CertifyResult",
    "read_certify_tsv",
    "format_row",
    "sidecar_path",
    "write_sidecar",
    "read_sidecar",
    "certified_accuracy",
    "certified_counts",
    "clopper_pearson_interval",
    "wrong_certificates_bound",
    "high_probability_count",
    "population_lower_bound",
    "AccuracyBounds",
    "accuracy_bounds",
    "acr",
    "default_radii",
    "TSV_HEADER",
    "TSV_COLUMNS",
]
