"""The papers' published ACR and certified accuracy, to print beside ours (``rsmooth analyze --paper``).

``paper_tables.tsv`` in this package holds one row per printed cell (paper, table, dataset, arch,
method, sigma, the paper's row label, column, value, standard deviation over seeds, the row's
hyperparameters) of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000) Tables 3-6 and 12, of its
first version (Jeong, Kim, Shin 2022, OpenReview qLqeb9AjD2o) Table 2, and of Jeong & Shin 2020
(Consistency, arXiv 2006.04062) Tables 1, 2 and appendix Tables 2, 3.  :data:`TABLE_INFO` says
what each table is and how its numbers were certified (:meth:`TableInfo.protocol`).
"""
from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..errors import RsmoothError
from .common import sigma_from_meta

_CATRS = ("Jeong, Kim, Shin 2023, Confidence-aware Training of Smoothed Classifiers for Certified "
          "Robustness, arXiv 2212.09000")
_CATRS_V1 = ("Jeong, Kim, Shin 2022, Confidence-aware Training of Smoothed Classifiers for Certified "
             "Robustness (first version), OpenReview qLqeb9AjD2o")
_CONSISTENCY = ("Jeong & Shin 2020, Consistency Regularization for Certified Robustness of Smoothed "
                "Classifiers, arXiv 2006.04062")
_WHAT = "ACR and certified accuracy (%) of seven training methods"
_CONS_ROWS = "Gaussian and SmoothAdv, each + Consistency, stability training and MACER"

#: CERTIFY's settings in every table (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Sec. 3.2)
CERTIFY = {"n0": 100, "n": 100_000, "alpha": 0.001}
_FULL = {"skip": 1, "max": None}
_IMAGENET_500 = {"skip": 100, "max": 500}  # "500 samples as Cohen et al.": every 100th of the 50,000


@dataclass(frozen=True)
class TableInfo:
    """A published table: where it is, what it shows, how its numbers were certified.

    ``protocols`` maps each dataset of the table to its test examples, CERTIFY's ``skip`` and
    ``max`` (None: every example); ``seeds`` > 1 for tables of mean ± standard deviation over
    seeds; ``acr_only`` for tables without certified-accuracy columns.
    """

    citation: str
    number: str
    description: str
    protocols: Mapping[str, Mapping[str, Any]]
    seeds: int = 1
    acr_only: bool = False

    @property
    def datasets(self) -> Tuple[str, ...]:
        return tuple(self.protocols)

    def protocol(self, dataset: str) -> Dict[str, Any]:
        """CERTIFY's ``n0, n, alpha, skip, max`` for ``dataset`` in this table."""
        if dataset not in self.protocols:
            raise RsmoothError(f"{dataset}: not in Table {self.number} of {self.citation}; it has "
                               f"{', '.join(self.datasets)}")
        return {**CERTIFY, **self.protocols[dataset]}


#: table id -> what the table is and how its numbers were certified
TABLE_INFO: Dict[str, TableInfo] = {
    "catrs:table3": TableInfo(_CATRS, "3", f"MNIST, LeNet, sigma 0.25/0.5/1.0: {_WHAT}", {"mnist": _FULL}),
    "catrs:table4": TableInfo(_CATRS, "4", f"Fashion-MNIST, LeNet, sigma 0.25/0.5/1.0: {_WHAT}",
                              {"fashion-mnist": _FULL}),
    "catrs:table5": TableInfo(_CATRS, "5", f"CIFAR-100, ResNet-110, sigma 0.25/0.5: {_WHAT}", {"cifar100": _FULL}),
    "catrs:table6": TableInfo(_CATRS, "6", "ImageNet, ResNet-50, sigma 1.0, 500 validation images: ACR and "
                              "certified accuracy (%) of five training methods", {"imagenet": _IMAGENET_500}),
    "catrs:table12": TableInfo(_CATRS, "12", "MNIST (LeNet, sigma 0.25/0.5/1.0) and CIFAR-10 (ResNet-110, "
                               "sigma 0.5, 2,000 test images): ACR mean ± std over 5 seeds of seven training "
                               "methods", {"mnist": _FULL, "cifar10": {"skip": 5, "max": 2000}},
                               seeds=5, acr_only=True),  # footnote 9: "size 2000", which ones unstated: every 5th
    "catrs-v1:table2": TableInfo(_CATRS_V1, "2", f"CIFAR-10, ResNet-110, sigma 0.25/0.5/1.0: {_WHAT}",
                                 {"cifar10": _FULL}),
    "consistency:table1": TableInfo(_CONSISTENCY, "1", "CIFAR-10, ResNet-110, sigma 0.25/0.5/1.0: ACR and "
                                    f"certified accuracy (%) of {_CONS_ROWS}", {"cifar10": _FULL}),  # footnote 8
    "consistency:table2": TableInfo(_CONSISTENCY, "2", "ImageNet, ResNet-50, sigma 0.5/1.0, 500 validation "
                                    "images: ACR and certified accuracy (%) of Gaussian, + Consistency and "
                                    "SmoothAdv", {"imagenet": _IMAGENET_500}),  # Sec. 4.3
    "consistency:tableB2": TableInfo(_CONSISTENCY, "2 (appendix)", "MNIST, LeNet, sigma "
                                     f"0.25/0.5/1.0: ACR and certified accuracy (%) of {_CONS_ROWS}",
                                     {"mnist": _FULL}),  # the subset is not stated: the full test set
    "consistency:tableB3": TableInfo(_CONSISTENCY, "3 (appendix)", "MNIST, LeNet, sigma "
                                     f"0.25/0.5/1.0: ACR mean ± std over 5 seeds of {_CONS_ROWS}",
                                     {"mnist": _FULL}, seeds=5, acr_only=True),
}
#: table id -> one-line description (paper, table, dataset, what)
PAPER_TABLES: Dict[str, str] = {k: f"{t.citation}, Table {t.number}: {t.description}" for k, t in TABLE_INFO.items()}


def read_package_tsv(name: str) -> List[Dict[str, str]]:
    """The rows of a tab-separated data file of this package (``#`` lines are comments)."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader((ln for ln in text.splitlines() if not ln.startswith("#")), delimiter="\t"))


class PaperCell(NamedTuple):
    """One printed number: ``column`` is ``"acr"`` or a radius as printed (``"0.25"``); ``std`` the
    printed standard deviation over seeds (nan: none); ``hparams`` the row's ``key=value;...``."""

    paper: str
    table: str
    dataset: str
    arch: str
    method: str
    sigma: float
    row: str
    column: str
    value: float
    std: float = math.nan
    hparams: str = ""


@functools.lru_cache(maxsize=1)
def paper_cells() -> Tuple[PaperCell, ...]:
    """Every published cell of :data:`PAPER_TABLES`, in the papers' order."""
    return tuple(PaperCell(r["paper"], r["table"], r["dataset"], r["arch"], r["method"], float(r["sigma"]),
                           r["row"], r["column"], float(r["value"]), float(r["std"] or "nan"), r["hparams"])
                 for r in read_package_tsv("paper_tables.tsv"))


def parse_hparams(text: str) -> Dict[str, Any]:
    """``"lbd=5;eta=0.1"`` -> ``{"lbd": 5, "eta": 0.1}`` (numbers as int or float; ``""`` -> {})."""
    out: Dict[str, Any] = {}
    for item in filter(None, text.split(";")):
        key, sep, value = item.partition("=")
        if not (sep and key.strip() and value.strip()):
            raise RsmoothError(f"hyperparameters {text!r}: write key=value;key=value")
        value = value.strip()
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value
    return out


#: a printed citation in a row label: "[5]", "(Ours)", "(Li et al., 2019)"
_CITE = re.compile(r" \[\d+\]| \((?:Ours|[^()]*\d{4})\)")


@dataclass
class PaperRow:
    """One row of a paper table: ACR (mean over seeds with ``acr_std`` where the paper prints one)
    and certified accuracy in % keyed by radius, as printed; ``hparams`` as the row states them."""

    table_id: str
    dataset: str
    arch: str
    method: str
    sigma: float
    row: str
    acr: float
    accuracy: Dict[float, float] = field(default_factory=dict)
    acr_std: Optional[float] = None
    hparams: Dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``"Gaussian sigma=0.25 (paper catrs:table4)"``: the printed name without its citations,
        with the dataset where the table has several (unique within a table)."""
        info = TABLE_INFO.get(self.table_id)
        dataset = f" {self.dataset}" if info is not None and len(info.datasets) > 1 else ""
        return f"{_CITE.sub('', self.row)}{dataset} sigma={self.sigma:g} (paper {self.table_id})"

    def accuracy_at(self, radius: float) -> Optional[float]:
        return next((v for r, v in self.accuracy.items() if math.isclose(r, radius, abs_tol=1e-9)), None)


def check_table_id(table_id: str) -> str:
    if table_id not in PAPER_TABLES:
        raise RsmoothError(f"{table_id}: unknown table; choose one of {', '.join(PAPER_TABLES)}")
    return table_id


def paper_table(table_id: str) -> List[PaperRow]:
    """The rows of a table of :data:`PAPER_TABLES` (``"catrs:table4"``), in the paper's order;
    one per (dataset, method, sigma, printed row)."""
    paper, table = check_table_id(table_id).split(":")
    rows: Dict[Tuple[str, str, float, str], PaperRow] = {}
    for c in paper_cells():
        if (c.paper, c.table) != (paper, table):
            continue
        row = rows.setdefault((c.dataset, c.method, c.sigma, c.row), PaperRow(
            table_id, c.dataset, c.arch, c.method, c.sigma, c.row, math.nan, hparams=parse_hparams(c.hparams)))
        if c.column == "acr":
            row.acr = c.value
            row.acr_std = None if math.isnan(c.std) else c.std
        else:
            row.accuracy[float(c.column)] = c.value
    return list(rows.values())


def _hparams_from_meta(meta: dict) -> Mapping[str, Any]:
    """The training hyperparameters a sidecar records (``hparams``, or ``config.hparams``), if any."""
    for source in (meta, meta.get("config") if isinstance(meta.get("config"), dict) else {}):
        if isinstance(source.get("hparams"), dict):
            return source["hparams"]
    return {}


def _same(a: Any, b: Any) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return math.isclose(a, b, rel_tol=1e-9) if numbers else a == b


def _protocol_text(info: TableInfo) -> str:
    """``"n0 = 100, n = 100,000, alpha = 0.001, full test set"``, the test examples per dataset
    where the table's datasets differ in them."""
    def subset(p: Mapping[str, Any]) -> str:
        if p["skip"] == 1 and p["max"] is None:
            return "full test set"
        return f"one test example in {p['skip']}" + (f", {p['max']:,} in all" if p["max"] is not None else "")

    protocols = {d: info.protocol(d) for d in info.datasets}
    first = next(iter(protocols.values()))  # CERTIFY's settings are the same in every table
    subsets = {d: subset(p) for d, p in protocols.items()}
    where = (next(iter(subsets.values())) if len(set(subsets.values())) == 1
             else "; ".join(f"{d}: {t}" for d, t in subsets.items()))
    return f"n0 = {first['n0']}, n = {first['n']:,}, alpha = {first['alpha']:g}, {where}"


def paper_rows_for(metas: Sequence[Optional[dict]], table_id: str) -> Tuple[List[PaperRow], List[str]]:
    """The rows of ``table_id`` whose (dataset, sigma, method) match one of the sidecars ``metas``
    (all the table's rows, with a note, when none does), and the notes to print under the table.
    A row's hyperparameters must also match where the sidecar records them (``hparams`` or
    ``config.hparams``); where it does not, every row of that method and sigma matches.  A file
    certified on a corrupted test set matches no clean table.

    Args:
        metas: the sidecars of certify TSVs (:func:`~rsmooth.metrics.read_sidecar`; None where
            a file has none).
        table_id: a published table, e.g. ``"catrs:table4"`` (``rsmooth analyze --help`` lists them).

    Returns:
        (the matching :class:`PaperRow` s, the notes).

    Example:
        ```python
        rows, notes = paper_rows_for([read_sidecar("certify.tsv")], "catrs:table4")
        print(rows[0].label, rows[0].acr, rows[0].accuracy_at(0.5))
        ```
    """
    rows = paper_table(table_id)
    info = TABLE_INFO[table_id]

    def matches(row: PaperRow, meta: Optional[dict]) -> bool:
        if not meta or (meta.get("corruption") or {}).get("name", "identity") != "identity":
            return False
        sigma, recorded = sigma_from_meta(meta), _hparams_from_meta(meta)
        return (meta.get("dataset") == row.dataset and meta.get("method") == row.method
                and sigma is not None and math.isclose(sigma, row.sigma)
                and all(k not in recorded or _same(recorded[k], v) for k, v in row.hparams.items()))

    matched = [r for r in rows if any(matches(r, m) for m in metas)]
    blank = "the paper prints ACR only" if info.acr_only else "blank: the paper has no value at that radius"
    notes = [f"(paper {table_id}): {info.citation}, Table {info.number}; certified with {_protocol_text(info)}; "
             f"{blank}"]
    shown = matched or rows
    if info.seeds > 1:
        notes.append(f"(paper {table_id}): ACR is the mean over {info.seeds} seeds; mean ± std as printed: "
                     + "; ".join(f"{r.label.rsplit(' (paper', 1)[0]} {r.acr:.4f} ± {r.acr_std:.4f}" for r in shown))
    if not matched:
        notes.append("no file matches the paper's settings (dataset, sigma, method): shown for reference")
    return shown, notes


def list_tables() -> str:
    """What ``rsmooth analyze --paper list`` prints."""
    return "\n".join(f"{k}: {v}" for k, v in PAPER_TABLES.items())
