"""The papers' published ACR and certified accuracy, to print beside ours (``rsmooth analyze --paper``).

``paper_tables.tsv`` in this package holds one row per printed cell (paper, table, dataset, arch,
method, sigma, the paper's row label, column, value) of Jeong, Kim, Shin 2023 (CAT-RS, arXiv
2212.09000) Tables 3-5 and of its first version (Jeong, Kim, Shin 2022, OpenReview qLqeb9AjD2o)
Table 2; every value was certified with n0 = 100, n = 100,000, alpha = 0.001 on the full test set.
"""
from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import RsmoothError
from .summary import _sigma_from_meta

_CATRS = ("Jeong, Kim, Shin 2023, Confidence-aware Training of Smoothed Classifiers for Certified "
          "Robustness, arXiv 2212.09000")
_CATRS_V1 = ("Jeong, Kim, Shin 2022, Confidence-aware Training of Smoothed Classifiers for Certified "
             "Robustness (first version), OpenReview qLqeb9AjD2o")
_WHAT = "ACR and certified accuracy (%) of seven training methods"
#: table id -> one-line description (paper, dataset, what).
PAPER_TABLES: Dict[str, str] = {
    "catrs:table3": f"{_CATRS}, Table 3: MNIST, LeNet, sigma 0.25/0.5/1.0: {_WHAT}",
    "catrs:table4": f"{_CATRS}, Table 4: Fashion-MNIST, LeNet, sigma 0.25/0.5/1.0: {_WHAT}",
    "catrs:table5": f"{_CATRS}, Table 5: CIFAR-100, ResNet-110, sigma 0.25/0.5: {_WHAT}",
    "catrs-v1:table2": f"{_CATRS_V1}, Table 2: CIFAR-10, ResNet-110, sigma 0.25/0.5/1.0: {_WHAT}",
}
_CITATIONS = {"catrs": _CATRS, "catrs-v1": _CATRS_V1}
_PROTOCOL = "n0 = 100, n = 100,000, alpha = 0.001, full test set"


def read_package_tsv(name: str) -> List[Dict[str, str]]:
    """The rows of a tab-separated data file of this package (``#`` lines are comments)."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader((ln for ln in text.splitlines() if not ln.startswith("#")), delimiter="\t"))


class PaperCell(NamedTuple):
    """One printed number: ``column`` is ``"acr"`` or a radius as printed (``"0.25"``)."""

    paper: str
    table: str
    dataset: str
    arch: str
    method: str
    sigma: float
    row: str
    column: str
    value: float


@functools.lru_cache(maxsize=1)
def paper_cells() -> Tuple[PaperCell, ...]:
    """Every published cell of :data:`PAPER_TABLES`, in the papers' order."""
    return tuple(PaperCell(r["paper"], r["table"], r["dataset"], r["arch"], r["method"], float(r["sigma"]),
                           r["row"], r["column"], float(r["value"]))
                 for r in read_package_tsv("paper_tables.tsv"))


@dataclass
class PaperRow:
    """One row of a paper table: ACR and certified accuracy in % keyed by radius, as printed."""

    table_id: str
    dataset: str
    arch: str
    method: str
    sigma: float
    row: str
    acr: float
    accuracy: Dict[float, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``"Gaussian sigma=0.25 (paper catrs:table4)"``: the printed name without its citation."""
        name = re.split(r" [\[(]", self.row, maxsplit=1)[0]
        return f"{name} sigma={self.sigma:g} (paper {self.table_id})"

    def accuracy_at(self, radius: float) -> Optional[float]:
        return next((v for r, v in self.accuracy.items() if math.isclose(r, radius, abs_tol=1e-9)), None)


def check_table_id(table_id: str) -> str:
    if table_id not in PAPER_TABLES:
        raise RsmoothError(f"{table_id}: unknown table; choose one of {', '.join(PAPER_TABLES)}")
    return table_id


def paper_table(table_id: str) -> List[PaperRow]:
    """The rows of a table of :data:`PAPER_TABLES` (``"catrs:table4"``), in the paper's order."""
    paper, table = check_table_id(table_id).split(":")
    rows: Dict[Tuple[str, float], PaperRow] = {}
    for c in paper_cells():
        if (c.paper, c.table) != (paper, table):
            continue
        row = rows.setdefault((c.method, c.sigma), PaperRow(table_id, c.dataset, c.arch, c.method, c.sigma,
                                                            c.row, math.nan))
        if c.column == "acr":
            row.acr = c.value
        else:
            row.accuracy[float(c.column)] = c.value
    return list(rows.values())


def paper_rows_for(metas: Sequence[Optional[dict]], table_id: str) -> Tuple[List[PaperRow], List[str]]:
    """The rows of ``table_id`` whose (dataset, sigma, method) match one of the sidecars ``metas``
    (all the table's rows, with a note, when none does), and the notes to print under the table.
    A file certified on a corrupted test set matches no clean table."""
    rows = paper_table(table_id)

    def matches(row: PaperRow, meta: Optional[dict]) -> bool:
        sigma = _sigma_from_meta(meta)
        corrupted = bool(meta) and (meta.get("corruption") or {}).get("name", "identity") != "identity"
        return (bool(meta) and not corrupted and meta.get("dataset") == row.dataset
                and meta.get("method") == row.method and sigma is not None and math.isclose(sigma, row.sigma))

    matched = [r for r in rows if any(matches(r, m) for m in metas)]
    paper, table = table_id.split(":")
    notes = [f"(paper {table_id}): {_CITATIONS[paper]}, Table {table[5:]}; certified with {_PROTOCOL}; "
             f"blank: the paper has no value at that radius"]
    if not matched:
        notes.append("no file matches the paper's settings (dataset, sigma, method): shown for reference")
    return matched or rows, notes


def list_tables() -> str:
    """What ``rsmooth analyze --paper list`` prints."""
    return "\n".join(f"{k}: {v}" for k, v in PAPER_TABLES.items())
