"""Tables (markdown/latex/csv/json) and plots of certify results, in the papers' layout.

Owns what turns certify TSVs into what a paper prints: the per-file summaries (:func:`summarize`,
:class:`FileSummary`, :func:`records`, :func:`to_json`), tables (:func:`format_table`), plots,
the published tables to compare with (:data:`PAPER_TABLES`, :func:`paper_table`) and the
corruption tables (:func:`corruption_tables`).  Built on the pure metrics of
:mod:`rsmooth.metrics`; matplotlib is imported only when a plot is drawn.  ``rsmooth analyze``
prints :func:`analyze`'s text, and :func:`corruption_tables`'s for folders of corruption results.
Layers: :mod:`~rsmooth.report.common` (shared types and helpers) at the bottom; ``paper``,
``plots`` and ``tables`` on it; ``corruptions`` on those; ``summary`` (with :func:`analyze`) on top.
"""
from .corruptions import corruption_tables
from .paper import PAPER_TABLES, TABLE_INFO, paper_table
from .plots import plot_certified_accuracy, plot_corruptions
from .summary import FileSummary, analyze, parse_radii, records, summarize, to_json
from .tables import TABLE_FORMATS, TableFormat, format_table

__all__ = [
    "FileSummary",
    "summarize",
    "records",
    "format_table",
    "to_json",
    "plot_certified_accuracy",
    "plot_corruptions",
    "analyze",
    "corruption_tables",
    "PAPER_TABLES",
    "TABLE_INFO",
    "paper_table",
    "parse_radii",
    "TableFormat",
    "TABLE_FORMATS",
]
