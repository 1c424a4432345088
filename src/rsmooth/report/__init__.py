"""Tables (markdown/latex/csv/json) and plots of certify results, in the papers' layout.

Built on the pure metrics of :mod:`rsmooth.metrics`; matplotlib is imported only
when a plot is drawn.  ``rsmooth analyze`` prints :func:`analyze`'s text, and
:func:`corruption_tables`'s for folders of corruption results.
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
