"""Corruption tables: ACR and certified accuracy at r = 0 per corruption and severity, mACR, mAcc.

The layout of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000): App. H, Table 13 (one row per
model: ACR and accuracy per severity, and their means mACR/mAcc over severities) and Tables
14-23 (one table per severity and metric: a row per corruption, a column per model, the mean
as the last row), for CIFAR-10-C (Hendrycks & Dietterich 2019, arXiv 1903.12261); App. I,
Tables 24-25 (the same without severities) for MNIST-C (Mu & Gilmer 2019, arXiv 1906.02337).

The mean of a severity is over the benchmark corruptions only
(:data:`rsmooth.corruptions.BENCHMARK`); held-out corruptions, ``identity`` and any others are
shown as rows outside the mean.  A model missing a benchmark cell has no mean there ("-"),
never a mean over fewer corruptions.  The paper's numbers (``paper_corruptions.tsv`` in this
package, :func:`paper_numbers`) are printed beside ours when the settings match.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..corruptions import BENCHMARK, HELD_OUT
from ..errors import RsmoothError, check
from ..metrics import acr, certified_accuracy, read_certify_tsv, read_sidecar
from ..metrics.certify_io import is_sequential_file
from .paper import read_package_tsv
from .common import completion, decides, distinct_suffixes, incomplete_note, sigma_from_meta
from .tables import TableFormat, as_percent, check_format, latex_escape, note_lines

PathLike = Union[str, "os.PathLike[str]"]

#: The paper's methods (rsmooth's names) in its column order, with the names it prints.
PAPER_METHODS: Dict[str, str] = {
    "gaussian": "Gaussian", "stability": "Stability", "smoothadv": "SmoothAdv", "macer": "MACER",
    "consistency": "Consistency", "smoothmix": "SmoothMix", "catrs": "CAT-RS",
}
#: ``paper=`` choices of :func:`corruption_tables` (feeds the CLI's ``choices=``).
PAPER_MODES = ("auto", "always", "never")
#: CIFAR-10-C's severities: the mean over severities is over all five.
SEVERITIES = (1, 2, 3, 4, 5)
#: sigma of the paper's tables per dataset (None: the paper does not state it).
PAPER_SIGMA: Dict[str, Optional[float]] = {"cifar10-c": None, "mnist-c": 0.25}
_PAPER_SOURCE = {
    "cifar10-c": "App. H, Tables 13-23 (CIFAR-10-C; sigma not stated)",
    "mnist-c": "App. I, Tables 24-25 (MNIST-C, sigma = 0.25)",
}
_CITATION = ("Jeong, Kim, Shin 2023, Confidence-aware Training of Smoothed Classifiers for "
             "Certified Robustness, arXiv 2212.09000")
_SHARD = re.compile(r"\.shard-\d+-of-\d+$")
_NAMED = re.compile(r"^(?P<name>.+)-s(?P<severity>\d+)$")
_METRICS = {"acr": ("ACR", "mACR", 3), "acc": ("certified accuracy (%) at r = 0", "mAcc", 1)}


class PaperValue(NamedTuple):
    """One number of the paper's corruption tables (``severity`` None: MNIST-C, or Table 13's
    mean over severities; ``corruption`` ``"mean"``: the mACR/mAcc row or column)."""

    table: int
    dataset: str
    corruption: str
    severity: Optional[int]
    method: str
    metric: str
    value: float
    sigma: Optional[float]


@functools.lru_cache(maxsize=1)
def paper_numbers() -> Tuple[PaperValue, ...]:
    """Tables 13-25 of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000, App. H and I), as printed."""
    rows = read_package_tsv("paper_corruptions.tsv")
    return tuple(PaperValue(int(r["table"]), r["dataset"], r["corruption"],
                            int(r["severity"]) if r["severity"] else None, r["method"], r["metric"],
                            float(r["value"]), float(r["sigma"]) if r["sigma"] else None)
                 for r in rows)


@functools.lru_cache(maxsize=1)
def _paper_index() -> Dict[Tuple[str, str, str, str, Optional[int]], float]:
    """(dataset, method, metric, corruption, severity) -> value."""
    return {(v.dataset, v.method, v.metric, v.corruption, v.severity): v.value for v in paper_numbers()}


# ----------------------------------------------------------------------------- reading


@dataclass
class Cell:
    """ACR and certified accuracy at r = 0 (%) of one certify TSV; None where the run did not measure
    them (a ``--sequential`` run decides only its radii: no ACR, and no accuracy at 0 unless 0 is
    one of them); ``mode``, ``complete`` and ``examples_planned`` as its sidecar says."""

    path: str
    num_examples: int
    acr: Optional[float]
    accuracy: Optional[float]
    mode: Optional[str] = None
    complete: Optional[bool] = None
    examples_planned: Optional[int] = None


@dataclass
class ModelResults:
    """One folder: one model's results, keyed ``(corruption, severity)`` (severity None in the
    layout without severities).  ``source`` is ``"published"`` or ``"generated"`` (None: unknown)."""

    folder: str
    label: str
    suite: str
    method: Optional[str] = None
    sigma: Optional[float] = None
    dataset: Optional[str] = None
    source: Optional[str] = None
    cells: Dict[Tuple[str, Optional[int]], Cell] = field(default_factory=dict)

    def value(self, metric: str, name: str, severity: Optional[int]) -> Optional[float]:
        cell = self.cells.get((name, severity))
        return None if cell is None else cell.acr if metric == "acr" else cell.accuracy


@dataclass
class _File:
    path: Path
    name: str
    severity: Optional[int]
    suite: Optional[str]
    meta: dict
    corruption: dict  # the sidecar's "corruption" record ({} if none)
    cell: Cell


def _read_file(path: Path) -> _File:
    meta = read_sidecar(path) or {}
    corr = meta.get("corruption") if isinstance(meta.get("corruption"), dict) else {}
    named = _NAMED.match(path.stem)
    if corr.get("name"):
        name, severity = str(corr["name"]), corr.get("severity")
    elif named:
        name, severity = named["name"], named["severity"]
    else:
        name, severity = path.stem, None
    if severity is not None:
        try:
            severity = int(severity)
        except (TypeError, ValueError):
            raise RsmoothError(f"{path}: severity {severity!r} is not a whole number") from None
    suite = corr.get("suite") if corr.get("suite") in BENCHMARK else _published_suite(meta.get("dataset"))
    res = read_certify_tsv(path)
    check(res.n > 0, f"{path}: no certified examples (header only)")
    acc = float(certified_accuracy(res.radius, res.correct, [0.0])[0])
    mode = meta.get("mode")
    cell = Cell(str(path), res.n, None if mode == "sequential" else acr(res.radius, res.correct),
                as_percent(acc, res.n) if decides(meta, 0.0) else None, mode, *completion(meta))
    return _File(path, name, severity, suite, meta, corr, cell)


def _published_suite(dataset: Optional[str]) -> Optional[str]:
    """The benchmark of a published corrupted dataset (cifar10-c, cifar100-c, mnist-c), else None."""
    from ..data import DATASETS, published_release

    release = published_release(dataset) if isinstance(dataset, str) and dataset in DATASETS else None
    return release.suite if release else None


def _one(values: Sequence, what: str, folder: Path):
    """The one value of ``values`` (None ignored), None if there is none; an error if they differ."""
    distinct = list(dict.fromkeys(v for v in values if v is not None))
    check(len(distinct) <= 1, f"{folder}: its files disagree on {what} "
          f"({', '.join(map(str, distinct))}); put one model's results in each folder")
    return distinct[0] if distinct else None


def _read_folder(folder: Path) -> ModelResults:
    check(folder.is_dir(), f"{folder}: not a folder; give one folder of certify TSVs per model")
    paths = sorted(p for p in folder.glob("*.tsv") if not _SHARD.search(p.stem) and not is_sequential_file(p))
    check(bool(paths), f"{folder}: no certify TSVs (<corruption>-s<S>.tsv or <corruption>.tsv)")
    files = [_read_file(p) for p in paths]
    metas = [f.meta for f in files]
    suite = _one([f.suite for f in files], "the corruption suite", folder)
    if suite is None:  # no sidecar says: CIFAR-10-C style when the file names have severities
        suite = "cifar10-c" if any(_NAMED.match(f.path.stem) for f in files) else "mnist-c"
    dataset = _one([m.get("dataset") for m in metas], "the dataset", folder)
    source = _one([f.corruption.get("source") for f in files], "the corruption source", folder)
    if source is None and _published_suite(dataset):
        source = "published"
    model = ModelResults(
        folder=str(folder), label="", suite=suite, dataset=dataset, source=source,
        method=_one([m.get("method") if isinstance(m.get("method"), str) else None for m in metas],
                    "the training method", folder),
        sigma=_one([sigma_from_meta(m) for m in metas], "sigma", folder))
    with_severity = suite == "cifar10-c"
    for f in files:
        check(not with_severity or f.severity in SEVERITIES,
              f"{f.path}: {'no severity' if f.severity is None else f'severity {f.severity}'} for a "
              f"CIFAR-10-C-style result; name it <corruption>-s<S>.tsv with S in 1-5")
        key = (f.name, f.severity if with_severity else None)
        if key in model.cells:
            at = f" at severity {f.severity}" if with_severity else ""
            raise RsmoothError(f"{folder}: two results for {f.name}{at} "
                               f"({Path(model.cells[key].path).name}, {f.path.name}); keep one")
        model.cells[key] = f.cell
    return model


def _labels(models: List[ModelResults], labels: Optional[Sequence[str]]) -> List[str]:
    """``labels``, else the paper's name of the method, else the method, else the folder name;
    labels that repeat get (a distinct part of) the folder path appended."""
    if labels is not None:
        labels = [str(lab) for lab in labels]
        check(len(labels) == len(models), f"got {len(labels)} labels for {len(models)} folders; "
              f"give one label per folder")
    else:
        labels = [PAPER_METHODS.get(m.method, m.method) if m.method else Path(m.folder).name
                  for m in models]
    out = list(labels)
    for lab in dict.fromkeys(labels):
        same = [i for i, x in enumerate(labels) if x == lab]
        if len(same) > 1:
            parts = distinct_suffixes([Path(models[i].folder).absolute().parts[1:] for i in same])
            for i, part in zip(same, parts):
                out[i] = part if lab == Path(models[i].folder).name else f"{lab} ({part})"
    return out


def read_corruption_results(folders: Sequence[PathLike],
                            labels: Optional[Sequence[str]] = None) -> List[ModelResults]:
    """Read one folder of certify TSVs per model (``<corruption>-s<S>.tsv`` or
    ``<corruption>.tsv``, shard files skipped); the sidecar JSON's ``corruption`` record names
    the corruption, severity and suite, else the file name does."""
    if isinstance(folders, (str, os.PathLike)):
        folders = [folders]
    paths = [Path(f) for f in folders]
    check(bool(paths), "no result folders given")
    seen = [p.resolve() for p in paths]
    check(len(set(seen)) == len(seen), "a folder is given twice; give each model's folder once")
    models = [_read_folder(p) for p in paths]
    suites = list(dict.fromkeys(m.suite for m in models))
    check(len(suites) == 1, f"the folders mix {' and '.join(suites)} results; tabulate them separately")
    for m, lab in zip(models, _labels(models, labels)):
        m.label = lab
    return models


# ----------------------------------------------------------------------------- paper matching


def _settings_match(m: ModelResults, dataset: str) -> bool:
    """The model ran on the published ``dataset`` at the paper's sigma (any sigma where the
    paper states none) with one of the paper's methods."""
    sigma = PAPER_SIGMA[dataset]
    return (m.method in PAPER_METHODS and m.dataset == dataset and m.source == "published"
            and (sigma is None or (m.sigma is not None and math.isclose(m.sigma, sigma))))


def _paper_methods(models: List[ModelResults], dataset: str, paper: str) -> Tuple[List[str], List[str]]:
    """The paper methods to print, and notes."""
    matched = {m.method for m in models if _settings_match(m, dataset)}
    if paper == "never":
        return [], []
    if paper == "auto":
        methods = [k for k in PAPER_METHODS if k in matched]
    else:
        named = {m.method for m in models}
        methods = [k for k in PAPER_METHODS if k in named] or list(PAPER_METHODS)
    if not methods:
        return [], []
    notes = [f"(paper): {_CITATION}, {_PAPER_SOURCE[dataset]}; bold and underline mark the best "
             f"and runner-up among our models only"]
    if PAPER_SIGMA[dataset] is None:
        notes.append(f"the paper does not state sigma for {dataset}; its numbers are printed "
                     f"whatever our sigma")
    if not set(methods) <= matched:
        unmatched = [m for m in models if not _settings_match(m, dataset)]
        who = "; ".join(f"{m.label}: {_setting(m)}"
                        for m in [m for m in unmatched if m.method in methods] or unmatched)
        sigma = PAPER_SIGMA[dataset]
        notes.append(f"not comparable: the paper's numbers are for published {dataset} at "
                     f"{'an unstated sigma' if sigma is None else f'sigma {sigma:g}'}; ours differ ({who})")
    return methods, notes


def _setting(m: ModelResults) -> str:
    data = m.dataset or "dataset unknown"
    if m.source == "generated":
        data += f" with generated {m.suite} corruptions"
    sigma = "sigma unknown" if m.sigma is None else f"sigma {m.sigma:g}"
    return f"{data}, {sigma}, method {m.method or 'unknown'}"


# ----------------------------------------------------------------------------- tables


@dataclass
class _Table:
    """A table of numbers; marks (best, runner-up) compare our models' entries (kind ``"model"``,
    not ``"paper"``) within each column (``by_column``, rows are models) or each row."""

    title: str
    metric: str
    severity: Optional[int]
    corner: str
    columns: List[str]
    col_kinds: List[str]
    rows: List[str]
    row_kinds: List[str]
    values: List[List[Optional[float]]]
    digits: List[int]  # per column
    by_column: bool
    groups: Optional[List[Tuple[str, List[str]]]] = None  # LaTeX: group title, sub-headers

    def shown(self, i: int, j: int) -> Optional[float]:
        v = self.values[i][j]
        return None if v is None else float(f"{v:.{self.digits[j]}f}")

    def marks(self) -> List[List[str]]:
        """'best' / 'runner-up' / '' per cell."""
        out = [[""] * len(self.columns) for _ in self.rows]
        if self.by_column:
            lines = [[(i, j) for i, k in enumerate(self.row_kinds) if k == "model"]
                     for j in range(len(self.columns))]
        else:
            lines = [[(i, j) for j, k in enumerate(self.col_kinds) if k == "model"]
                     for i in range(len(self.rows))]
        for line in lines:
            for (i, j), mark in zip(line, _marks([self.shown(i, j) for i, j in line])):
                out[i][j] = mark
        return out


def _marks(values: Sequence[Optional[float]]) -> List[str]:
    """Best (bold) among two or more values, runner-up (underline: the second-highest distinct
    value) among three or more; ties share the mark, as in the paper."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return [""] * len(values)
    ranked = sorted(set(present), reverse=True)
    runner = ranked[1] if len(present) >= 3 and len(ranked) > 1 else None
    return ["best" if v is not None and v == ranked[0] else
            "runner-up" if v is not None and v == runner else "" for v in values]


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def _severity_mean(m: ModelResults, metric: str, severity: Optional[int]) -> Optional[float]:
    return _mean([m.value(metric, c, severity) for c in BENCHMARK[m.suite]])


def _row_order(suite: str, names: Sequence[str]) -> List[Tuple[str, str]]:
    """(corruption, kind): the benchmark in its order, then held-out ones, then the rest."""
    names = set(names)
    rows = [(c, "benchmark") for c in BENCHMARK[suite] if c in names]
    rows += [(c, "held-out") for c in HELD_OUT[suite] if c in names]
    known = set(BENCHMARK[suite]) | set(HELD_OUT[suite])
    return rows + [(c, "other") for c in sorted(names - known)]


def _corruption_table(models: List[ModelResults], methods: List[str], dataset: str,
                      metric: str, severity: Optional[int], what: str) -> _Table:
    """Tables 14-25: a row per corruption then the mean, a column per model then the paper's."""
    name, mean_name, digits = _METRICS[metric]
    suite = models[0].suite
    names = [c for m in models for (c, s) in m.cells if s == severity]
    if methods:
        names += BENCHMARK[suite]
    rows = _row_order(suite, names)
    paper = _paper_index()
    columns, kinds, cols = [], [], []
    for m in models:
        columns.append(m.label)
        kinds.append("model")
        cols.append([m.value(metric, c, severity) for c, _ in rows] + [_severity_mean(m, metric, severity)])
    for k in methods:
        columns.append(f"{PAPER_METHODS[k]} (paper)")
        kinds.append("paper")
        cols.append([paper.get((dataset, k, metric, c, severity)) for c, _ in rows]
                    + [paper.get((dataset, k, metric, "mean", severity))])
    title = f"{name} on {what}" + ("" if severity is None else f", severity {severity}")
    return _Table(title=title, metric=metric, severity=severity, corner="corruption",
                  columns=columns, col_kinds=kinds, rows=[c for c, _ in rows] + [mean_name],
                  row_kinds=[k for _, k in rows] + ["mean"],
                  values=[list(r) for r in zip(*cols)], digits=[digits] * len(columns),
                  by_column=False)


def _severity_table(models: List[ModelResults], methods: List[str], what: str) -> _Table:
    """Table 13: a row per model (then the paper's), ACR and accuracy per severity and means."""
    paper = _paper_index()
    columns, kinds, digits, groups = [], [], [], []
    for metric in _METRICS:
        name, mean_name, d = _METRICS[metric]
        subs = [str(s) for s in SEVERITIES] + [mean_name]
        columns += [f"{mean_name[1:]} {s}" for s in SEVERITIES] + [mean_name]
        kinds += [metric] * len(subs)
        digits += [d] * len(subs)
        groups.append((name, subs))
    rows, row_kinds, values = [], [], []
    for m in models:
        row = []
        for metric in _METRICS:
            per = [_severity_mean(m, metric, s) for s in SEVERITIES]
            row += per + [_mean(per)]
        rows.append(m.label)
        row_kinds.append("model")
        values.append(row)
    for k in methods:
        row = []
        for metric in _METRICS:
            row += [paper.get(("cifar10-c", k, metric, "mean", s)) for s in (*SEVERITIES, None)]
        rows.append(f"{PAPER_METHODS[k]} (paper)")
        row_kinds.append("paper")
        values.append(row)
    n = len(BENCHMARK[models[0].suite])
    title = (f"ACR and certified accuracy (%) at r = 0 on {what} per severity; mACR, mAcc: the "
             f"mean over severities 1-5 of the means over the {n} benchmark corruptions")
    return _Table(title=title, metric="acr+acc", severity=None, corner="model", columns=columns,
                  col_kinds=kinds, rows=rows, row_kinds=row_kinds, values=values, digits=digits,
                  by_column=True, groups=groups)


def _missing_notes(models: List[ModelResults], severities: Sequence[Optional[int]]) -> List[str]:
    notes = []
    for m in models:
        bench = BENCHMARK[m.suite]
        gaps = [s for s in severities if s is not None and not any((c, s) in m.cells for c in bench)]
        parts = [f"severity {', '.join(map(str, gaps))} (all)"] if gaps else []
        for c in bench:
            lack = [s for s in severities if s not in gaps and (c, s) not in m.cells]
            if lack:
                parts.append(c if lack == [None] else f"{c} ({', '.join(f's{s}' for s in lack)})")
        if parts:
            notes.append(f"{m.label} has no result for {'; '.join(parts)}: its mACR/mAcc there is "
                         f"'-' (means are over all {len(bench)} benchmark corruptions)")
    return notes


def _run_notes(models: List[ModelResults]) -> List[str]:
    """Notes on unfinished files (their sidecar says ``complete: false``) and ``--sequential`` ones."""
    notes = []
    for m in models:
        cells = sorted(m.cells.values(), key=lambda c: c.path)
        notes += [incomplete_note(f"{m.label} {Path(c.path).name}", c.num_examples, c.examples_planned)
                  for c in cells if c.complete is False]
        seq = [c for c in cells if c.mode == "sequential"]
        if seq:
            names = ", ".join(Path(c.path).name for c in seq[:3])
            names += f", ... ({len(seq)} files)" if len(seq) > 3 else ""
            no_zero = any(c.accuracy is None for c in seq)
            notes.append(f"{m.label}: {names}: --sequential results decide robustness at their --radii only, so they "
                         f"have no ACR ('-')" + (" and no accuracy at r = 0 where 0 is not among their --radii"
                                                 if no_zero else "") + "; certify or --adaptive estimates every radius")
    return notes


def _describe(models: List[ModelResults]) -> str:
    out = []
    for m in models:
        data = m.dataset or f"{m.suite}-style results"
        if m.source == "generated":
            data += f" (generated {m.suite} corruptions)"
        out.append(data)
    return ", ".join(dict.fromkeys(out))


# ----------------------------------------------------------------------------- rendering


def _row_label(name: str, kind: str) -> str:
    return {"held-out": f"{name} (held out)", "other": f"{name} (not in mean)"}.get(kind, name)


def _text(table: _Table, i: int, j: int, full: bool) -> str:
    v = table.values[i][j]
    if v is None:
        return "" if full else "-"
    return repr(float(v)) if full else f"{v:.{table.digits[j]}f}"


def _markdown(table: _Table) -> str:
    marks = table.marks()
    wrap = {"best": "**{}**", "runner-up": "<u>{}</u>", "": "{}"}
    head = [table.corner] + table.columns
    lines = [table.title, "", "| " + " | ".join(head) + " |",
             "| " + " | ".join(["---"] + ["---:"] * len(table.columns)) + " |"]
    for i, (name, kind) in enumerate(zip(table.rows, table.row_kinds)):
        cells = [wrap[marks[i][j]].format(_text(table, i, j, False)) for j in range(len(table.columns))]
        lines.append("| " + " | ".join([_row_label(name, kind)] + cells) + " |")
    return "\n".join(lines)


def _latex(table: _Table) -> str:
    marks = table.marks()
    wrap = {"best": r"\textbf{{{}}}", "runner-up": r"\underline{{{}}}", "": "{}"}
    lines = [f"% {table.title}", rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}", r"\toprule"]
    if table.groups:
        spans, rules, start = [], [], 2
        for title, subs in table.groups:
            spans.append(rf"\multicolumn{{{len(subs)}}}{{c}}{{{latex_escape(title)}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + len(subs) - 1}}}")
            start += len(subs)
        lines += [" & ".join([""] + spans) + r" \\", " ".join(rules)]
        head = [table.corner] + [s for _, subs in table.groups for s in subs]
    else:
        head = [table.corner] + table.columns
    lines += [" & ".join(latex_escape(h) for h in head) + r" \\", r"\midrule"]
    for i, (name, kind) in enumerate(zip(table.rows, table.row_kinds)):
        if i and kind in ("mean", "paper") and table.row_kinds[i - 1] not in ("mean", "paper"):
            lines.append(r"\midrule")
        cells = [wrap[marks[i][j]].format(_text(table, i, j, False)) for j in range(len(table.columns))]
        lines.append(" & ".join([latex_escape(_row_label(name, kind))] + cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def _csv_rows(table: _Table) -> List[List[str]]:
    rows = [[table.title], [table.corner] + table.columns]
    for i, (name, kind) in enumerate(zip(table.rows, table.row_kinds)):
        rows.append([_row_label(name, kind)] + [_text(table, i, j, True) for j in range(len(table.columns))])
    return rows


def _json_table(table: _Table) -> dict:
    marks = table.marks()
    return {
        "title": table.title, "metric": table.metric, "severity": table.severity,
        "corner": table.corner,
        "columns": [{"label": c, "kind": k} for c, k in zip(table.columns, table.col_kinds)],
        "rows": [{"label": name, "kind": kind,
                  "cells": [{"value": table.values[i][j], "best": marks[i][j] == "best",
                             "runner_up": marks[i][j] == "runner-up"}
                            for j in range(len(table.columns))]}
                 for i, (name, kind) in enumerate(zip(table.rows, table.row_kinds))],
    }


def _render(tables: List[_Table], notes: List[str], fmt: TableFormat) -> str:
    if fmt is TableFormat.CSV:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for k, table in enumerate(tables):
            if k:
                writer.writerow([])
            writer.writerows(_csv_rows(table))
        blocks = [buf.getvalue().rstrip("\n")]
    else:
        blocks = [_markdown(t) if fmt is TableFormat.MARKDOWN else _latex(t) for t in tables]
    return "\n\n".join(blocks + ([note_lines(notes, fmt)] if notes else []))


def _check_severity(severity, models: List[ModelResults]) -> Optional[int]:
    if severity is None or severity == "all":
        return None
    check(models[0].suite == "cifar10-c", "--severity applies to CIFAR-10-C-style results "
          "(<corruption>-s<S>.tsv); these have no severities")
    try:
        severity = int(severity)
    except (TypeError, ValueError):
        raise RsmoothError(f"severity {severity!r}: expected one of 1, 2, 3, 4, 5") from None
    check(severity in SEVERITIES, f"severity {severity}: expected one of 1, 2, 3, 4, 5")
    have = sorted({s for m in models for (_, s) in m.cells})
    check(severity in have, f"no result at severity {severity}; the folders have severities "
          f"{', '.join(map(str, have))}")
    return severity


def corruption_tables(folders: Sequence[PathLike], labels: Optional[Sequence[str]] = None,
                      fmt: str = "markdown", severity: Optional[int] = None, as_json: bool = False,
                      paper: str = "auto") -> str:
    """What ``rsmooth analyze --corruptions`` prints: the corruption tables of one folder of
    certify TSVs per model, in the layout of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000).

    With severities (CIFAR-10-C style, ``<corruption>-s<S>.tsv``): Table 13 (a row per model;
    ACR and certified accuracy (%) at r = 0 at severities 1-5, mACR and mAcc: the mean over
    severities of the per-severity means), then per severity an ACR and an accuracy table (a
    row per corruption, a column per model, mACR/mAcc last, as Tables 14-23); ``severity``
    prints only that severity's two tables.  Without severities (MNIST-C style,
    ``<corruption>.tsv``): Tables 24-25.  Per-severity means are over the benchmark corruptions
    (:data:`rsmooth.corruptions.BENCHMARK`) and "-" for a model missing one; held-out and other
    corruptions are rows outside the mean.  A file whose sidecar says ``complete: false`` is noted
    (its figures are over the examples done); a ``--sequential`` file has no ACR, and no accuracy at
    r = 0 unless 0 is among its radii ("-", with a note).  Bold marks the best and underline the runner-up of
    each column (Table 13) or row (the others) among our models, on the printed values.

    Args:
        folders: one folder per model.
        labels: one per folder; default the paper's name of the sidecars' method, else the
            method, else the folder name (repeats get the folder appended).
        fmt: markdown | latex | csv (ACR 3 and accuracy 1 decimal; CSV full precision).
        severity: 1-5, or None (or ``"all"``) for all.
        as_json: JSON instead: ``{"layout", "suite", "severity", "models", "tables": [{"title",
            "metric", "severity", "corner", "columns": [{"label", "kind"}], "rows": [{"label",
            "kind", "cells": [{"value", "best", "runner_up"}]}]}], "notes"}`` (full precision,
            accuracy in %).
        paper: ``auto`` prints the paper's numbers beside ours where the settings match
            (published CIFAR-10-C or MNIST-C, the paper's sigma, one of its methods);
            ``always`` prints them anyway, with a note when they are not comparable;
            ``never`` omits them.
    """
    if not as_json:
        fmt = check_format(fmt)
    check(paper in PAPER_MODES, f"unknown paper mode {paper!r}; choose one of {', '.join(PAPER_MODES)}")
    models = read_corruption_results(folders, labels)
    severity = _check_severity(severity, models)
    with_severities = models[0].suite == "cifar10-c"
    dataset = "cifar10-c" if with_severities else "mnist-c"
    methods, notes = _paper_methods(models, dataset, paper)
    what = _describe(models)
    if not with_severities:
        tables = [_corruption_table(models, methods, dataset, metric, None, what) for metric in _METRICS]
        needed: List[Optional[int]] = [None]
    else:
        shown = [severity] if severity is not None else \
            sorted({s for m in models for (_, s) in m.cells})
        tables = [] if severity is not None else [_severity_table(models, methods, what)]
        tables += [_corruption_table(models, methods, dataset, metric, s, what)
                   for s in shown for metric in _METRICS]
        needed = [severity] if severity is not None else list(SEVERITIES)
    kinds = {k for t in tables for k in t.row_kinds}
    if kinds & {"held-out", "other"}:
        notes.append("rows marked (held out) or (not in mean) are outside mACR/mAcc")
    notes = _missing_notes(models, needed) + _run_notes(models) + notes
    if as_json:
        return json.dumps({
            "layout": "severities" if with_severities else "corruptions",
            "suite": models[0].suite, "severity": severity,
            "models": [{"label": m.label, "folder": m.folder, "method": m.method, "sigma": m.sigma,
                        "dataset": m.dataset, "source": m.source, "files": len(m.cells)}
                       for m in models],
            "tables": [_json_table(t) for t in tables], "notes": notes}, indent=2)
    return _render(tables, notes, fmt)


__all__ = ["corruption_tables", "read_corruption_results", "paper_numbers", "PaperValue",
           "ModelResults", "Cell", "PAPER_METHODS", "PAPER_MODES", "PAPER_SIGMA", "SEVERITIES"]
