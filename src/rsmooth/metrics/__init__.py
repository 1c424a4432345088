"""Certify TSV + sidecar JSON I/O, certified accuracy and ACR (pure functions).

Tables and plots built on these live in :mod:`rsmooth.report`.
"""
from .certified import acr, certified_accuracy, default_radii
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

__all__ = [
    "CertifyWriter",
    "CertifyResult",
    "read_certify_tsv",
    "format_row",
    "sidecar_path",
    "write_sidecar",
    "read_sidecar",
    "certified_accuracy",
    "acr",
    "default_radii",
    "TSV_HEADER",
    "TSV_COLUMNS",
]
