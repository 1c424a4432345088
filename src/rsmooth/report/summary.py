"""Summaries of certify TSVs: ACR and certified accuracy per file, JSON, and ``analyze``.

The numbers are the papers' table entries (Jeong et al. 2022, CAT-RS first version, OpenReview
qLqeb9AjD2o, Tables 1-2; Jeong & Shin 2020, Consistency, arXiv 2006.04062, Table 1): ACR and
approximate certified accuracy at radii 0, 0.25, ... over all certified examples
(:mod:`rsmooth.metrics`), and with ``ci`` their confidence bounds (:mod:`rsmooth.metrics.intervals`).
As data: :class:`FileSummary` objects and plain records (:func:`records`); radii a run did not
decide (:func:`decides`) and unfinished runs are marked, never shown as measurements.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from ..errors import RsmoothError
from ..metrics import accuracy_bounds, acr, certified_counts, default_radii, read_certify_tsv, read_sidecar
from ..metrics.certify_io import CertifyResult, is_sequential_file
from ..metrics.intervals import check_probability
from .common import (  # noqa: F401 (parse_radii: importable from here as before)
    FileSummary,
    PathLike,
    Radii,
    adaptive_limit,
    check_labels,
    completion,
    decides,
    distinct_suffixes,
    file_bounds,
    incomplete_note,
    number_from_meta,
    parse_radii,
    resolve_radii,
    sigma_from_meta,
)
from .paper import check_table_id, paper_rows_for
from .plots import plot_certified_accuracy, plot_format
from .tables import check_format, ci_notes, format_table, table_radii


def records(summaries: Sequence[FileSummary]) -> List[dict]:
    """The summaries as plain dicts (:meth:`FileSummary.to_dict`), e.g. for ``pandas.DataFrame`` (``pip install pandas``).

    Args:
        summaries: what :func:`summarize` returns.

    Returns:
        one flat dict per summary: label, path, mode, sigma, n, alpha, examples, complete, acr,
        ``acc@<r>`` (fractions in [0, 1], None where undecided; with ``ci`` also
        ``acc@<r>_lo/_hi/_hp``).

    Example:
        ```python
        pandas.DataFrame(rsmooth.records(rsmooth.summarize(glob.glob("runs/*/certify.tsv"))))   # pip install pandas
        ```
    """
    return [s.to_dict() for s in summaries]


#: file stems that name the kind of run, not the run (``runs/NAME/certify.tsv``)
GENERIC_STEMS = ("certify", "predict")


def _default_labels(paths: Sequence[Path]) -> List[str]:
    """File stems when they differ (a single file: its stem unless generic, ``certify``,
    ``predict``); else the run folders (``runs/fm025/certify.tsv`` -> ``fm025``; more parent
    folders where those collide), and the shortest distinguishing ends of the paths for files of
    one folder."""
    stems = [p.stem if p.suffix else p.name for p in paths]
    if len(set(stems)) == len(stems) and not (len(stems) == 1 and stems[0] in GENERIC_STEMS):
        return stems
    folders = distinct_suffixes([p.absolute().parent.parts[1:] for p in paths])
    if len(set(folders)) == len(folders) and all(folders):
        return folders
    return distinct_suffixes([p.with_suffix("").parts if p.suffix else p.parts for p in paths])


def _is_predict_run(res: CertifyResult, meta: Optional[dict]) -> bool:
    """A ``predict`` run: its sidecar says so, or (no sidecar) correct rows all at radius 0,
    which ``certify`` never writes (it abstains unless the radius is positive)."""
    if meta is not None and "mode" in meta:
        return meta["mode"] == "predict"
    return bool(res.correct.any()) and not bool((res.radius > 0).any())


#: the confidence level that ``ci=True`` means
DEFAULT_CI_LEVEL = 0.95


def _ci_level(ci: Union[bool, float, None]) -> Optional[float]:
    """``ci`` as a confidence level in (0, 1) (True: 0.95), or None for no bounds."""
    if ci is None or ci is False:
        return None
    return DEFAULT_CI_LEVEL if ci is True else check_probability("the confidence level ci (--ci-level)", ci, "0.95")


def _file_alpha(path: Path, meta: Optional[dict], alpha: Optional[float]) -> Optional[float]:
    """The certificates' failure probability: the sidecar's ``alpha``, else the given one (None when
    neither); a given alpha that contradicts the sidecar's is an error."""
    recorded = number_from_meta(meta, "alpha")
    if recorded is not None and alpha is not None and recorded != alpha:
        raise RsmoothError(f"{path}: its sidecar records alpha {recorded:g}, not {alpha:g}; leave alpha "
                           f"(--alpha) out, it is only for files without a sidecar")
    return recorded if recorded is not None else alpha


def summarize(paths: Sequence[PathLike], radii: Radii = None,
              labels: Optional[Sequence[str]] = None, ci: Union[bool, float, None] = None,
              alpha: Optional[float] = None) -> List[FileSummary]:
    """Read certify TSVs and compute ACR and certified accuracy for each.

    Args:
        paths: one or more certify TSVs (rsmooth's or the public codebases').
        radii: radii for the certified accuracy; default ``0, 0.25, ...`` up to the
            largest radius over all files (:func:`rsmooth.metrics.default_radii`).
        labels: one display label per file; default the file stems, or the run folders
            where stems repeat (``runs/fm025/certify.tsv`` -> ``fm025``; a lone generic
            ``certify.tsv`` too).
        ci: a confidence level (``0.95``; ``True`` means 0.95) to also compute each file's
            :class:`rsmooth.metrics.AccuracyBounds` at each radius: the Clopper-Pearson interval
            over the test sample and, where the certificates' alpha is known, Cohen et al.'s
            high-probability lower bound (:mod:`rsmooth.metrics.intervals` says what each covers).
        alpha: the certificates' failure probability for files whose sidecar records none
            (public codebases' TSVs); default: the sidecar's, and no high-probability bound without.

    Warns (``UserWarning``, one line) when a file is a ``predict`` run: it has no certified
    radii, so its radius-0 column is the smoothed classifier's accuracy and its ACR is 0; and
    when a file is the per-example file of a sequential run (``OUT.seq.tsv`` of an earlier
    version, caught by a ``*.tsv`` glob), which is skipped.  Radii a run did not decide
    (:func:`decides`) get ``None``; without ``radii`` the columns include every radius a
    ``--sequential`` file decided.

    Returns:
        one :class:`FileSummary` per file, in order: ``acr`` (in [0, 1] pixel units),
        ``certified_accuracy`` {radius: fraction in [0, 1] or None}, ``num_examples``, ``meta``.

    Example:
        ```python
        (s,) = rsmooth.summarize(["runs/fm025/certify.tsv"], radii=[0, 0.25, 0.5])
        s.acr, s.certified_accuracy[0.25]
        ```
    """
    paths, labels, skipped = skip_side_files(paths, labels)
    if skipped:
        warnings.warn(side_file_note(skipped), UserWarning, stacklevel=2)
    labels = check_labels(labels, len(paths)) or _default_labels(paths)
    level = _ci_level(ci)
    if alpha is not None:
        alpha = check_probability("alpha", alpha, "0.001")
    results = []
    for p in paths:
        res = read_certify_tsv(p)
        if res.n == 0:
            raise RsmoothError(f"{p}: no certified examples (header only)")
        results.append(res)
    metas = [read_sidecar(p) for p in paths]
    values = resolve_radii(radii)
    if values is None:
        max_radius = max(float(res.radius.max()) for res in results)
        decided = {float(r) for m in metas if (m or {}).get("mode") == "sequential" for r in m.get("radii") or ()}
        values = sorted({float(r) for r in default_radii(max_radius)} | decided)
    summaries = []
    for p, label, res, meta in zip(paths, labels, results, metas):
        counts = certified_counts(res.radius, res.correct, values)
        measured = [decides(meta, r) for r in values]
        bounds = None
        if level is not None:
            file_alpha = _file_alpha(p, meta, alpha)
            bounds = {float(r): accuracy_bounds(int(k), res.n, level, file_alpha)
                      for r, k, ok in zip(values, counts, measured) if ok}
        complete, planned = completion(meta)
        summaries.append(FileSummary(
            path=str(p), label=label, num_examples=res.n, acr=acr(res.radius, res.correct),
            certified_accuracy={float(r): float(k / res.n) if ok else None
                                for r, k, ok in zip(values, counts, measured)},
            sigma=sigma_from_meta(meta), meta=meta, result=res, ci=bounds,
            complete=complete, examples_planned=planned))
    predict = [s.path for s, res in zip(summaries, results) if _is_predict_run(res, s.meta)]
    if predict:
        warnings.warn(f"{', '.join(predict)}: predict run(s) without certified radii in a certified-"
                      f"accuracy table (their 0.00 column is prediction accuracy, their ACR 0); "
                      f"run certify for certified accuracy", UserWarning, stacklevel=2)
    return summaries


def skip_side_files(paths: Union[PathLike, Sequence[PathLike]], labels: Optional[Sequence[str]] = None
                    ) -> Tuple[List[Path], Optional[List[str]], List[Path]]:
    """(paths, labels, skipped): ``paths`` without the per-example files of sequential runs
    (``OUT.seq.tsv`` of earlier versions, which ``*.tsv`` globs catch), with the labels given
    for them dropped too when there was one per path; one-line errors for no files left."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise RsmoothError("no result files given")
    side = [is_sequential_file(p) for p in paths]
    skipped = [p for p, s in zip(paths, side) if s]
    if not skipped:
        return paths, None if labels is None else list(labels), []
    kept = [p for p, s in zip(paths, side) if not s]
    if not kept:
        raise RsmoothError(f"{skipped[0]} holds the per-example samples and decisions of a sequential run, not "
                           f"certified radii; analyze its certify TSV ({_tsv_of(skipped[0])})")
    if labels is not None and len(labels) == len(paths):
        labels = [lab for lab, s in zip(labels, side) if not s]
    return kept, None if labels is None else list(labels), skipped


def _tsv_of(side_file: Path) -> Path:
    name = side_file.name
    return side_file.with_name(name[:-len(".seq.tsv")]) if name.endswith(".seq.tsv") else side_file


def side_file_note(skipped: Sequence[Path]) -> str:
    """What :func:`skip_side_files` left out, in one sentence."""
    return (f"skipped {', '.join(map(str, skipped))}: the per-example samples and decisions of --sequential/"
            f"--adaptive runs (their results are the certify TSVs beside them; this version names that file "
            f"OUT.seq, which *.tsv does not match)")


def incomplete_notes(summaries: Sequence[FileSummary]) -> List[str]:
    """:func:`incomplete_note` for each file whose sidecar says it is unfinished."""
    return [incomplete_note(s.label, s.num_examples, s.examples_planned) for s in summaries if s.complete is False]


def to_json(summaries: Sequence[FileSummary]) -> dict:
    """``{"files": [{"path", "num_examples", "acr", "certified_accuracy": {"<radius>": fraction},
    "label", "sigma"}]}``; radius keys are ``str(float(r))`` (``"0.5"``), fractions in [0, 1],
    all at full precision, ``null`` at radii the run did not decide (:func:`decides`).
    ``num_examples`` counts test examples (earlier versions called it ``n``, the name the sidecar
    JSON uses for Monte Carlo samples); ``mode``, ``complete`` (the sidecar's flag, null without
    one), ``examples_done`` (= ``num_examples``) and ``examples_planned`` say whether the run is
    finished.  Files summarized with ``ci``
    add ``"ci": {"level", "alpha", "wrong_certificates", "certified_accuracy": {"<radius>":
    {"count", "lo", "hi", "hp", "hp_population"}}}`` (:class:`rsmooth.metrics.AccuracyBounds`;
    ``alpha`` and the last three null where the certificates' alpha is unknown)."""
    files = []
    for s in summaries:
        entry = {
            "path": s.path,
            "num_examples": int(s.num_examples),
            "acr": float(s.acr),
            "certified_accuracy": {str(float(r)): None if a is None else float(a)
                                   for r, a in s.certified_accuracy.items()},
            "label": s.label,
            "sigma": s.sigma,
            "mode": s.mode,
            "complete": s.complete,
            "examples_done": int(s.num_examples),
            "examples_planned": s.examples_planned,
        }
        if s.ci:
            first = file_bounds(s)
            entry["ci"] = {"level": first.level, "alpha": first.alpha,
                           "wrong_certificates": first.wrong_certificates,
                           "certified_accuracy": {str(float(r)): {
                               "count": b.count, "lo": b.lo, "hi": b.hi, "hp": b.hp,
                               "hp_population": b.hp_population} for r, b in s.ci.items()}}
        files.append(entry)
    return {"files": files}


def analyze(paths: Sequence[PathLike], radii: Radii = None, fmt: str = "markdown",
            labels: Optional[Sequence[str]] = None, plot: Optional[PathLike] = None,
            as_json: bool = False, paper: Optional[str] = None, ci: Union[bool, float, None] = None,
            alpha: Optional[float] = None) -> str:
    """What ``rsmooth analyze`` prints: the certified-accuracy table of certify TSVs.

    Args:
        paths: certify TSVs (rsmooth's or the public codebases').
        radii: l2 radii of the columns, in [0, 1] pixel units; default as in :func:`summarize`.
        fmt: ``"markdown"``, ``"latex"`` or ``"csv"``.
        labels: one row label per file; default as in :func:`summarize`.
        plot: a ``.png``, ``.pdf`` or ``.svg`` path to write the certified-accuracy plot to.
        as_json: return the JSON of :func:`to_json` instead of a table.
        paper: a table id of :data:`rsmooth.report.paper.PAPER_TABLES` (``"catrs:table4"``): its
            published rows that match a file's sidecar (dataset, sigma, method) follow ours, at
            our radii (:func:`rsmooth.report.paper.paper_rows_for`); in JSON under ``"paper"``.
        ci: a confidence level (``True`` = 0.95): each certified accuracy with its interval and
            high-probability bound, with notes on what they mean (JSON: under ``"ci"`` and
            ``"notes"``); the plot draws the intervals as error bars at the table's radii.
        alpha: as in :func:`summarize`.

    Returns:
        the text: a table with notes (certified accuracy in %, ACR in [0, 1] pixel units), or
        JSON.

    Example:
        ```python
        print(rsmooth.analyze(["runs/fm025/certify.tsv"], radii=[0, 0.25, 0.5], paper="catrs:table4"))
        ```
    """
    if not as_json:
        check_format(fmt)
    if paper is not None:
        check_table_id(paper)
    if plot is not None:
        plot_format(plot)
    paths, labels, skipped = skip_side_files(paths, labels)
    summaries = summarize(paths, radii=radii, labels=labels, ci=ci, alpha=alpha)
    if plot is not None:
        plot_certified_accuracy(summaries, plot)
    rows, paper_notes = paper_rows_for([s.meta for s in summaries], paper) if paper is not None else ([], [])
    notes = (([side_file_note(skipped)] if skipped else []) + incomplete_notes(summaries) + sequential_notes(summaries)
             + certificate_notes(summaries))
    if as_json:
        out = to_json(summaries)
        with_ci = [s for s in summaries if s.ci]  # a file may have no radius it decided
        if with_ci or notes:
            out["notes"] = (ci_notes(with_ci, "json") if with_ci else []) + notes
        if paper is not None:
            radii = table_radii(summaries, None)
            out["paper"] = {"table": paper, "notes": paper_notes, "rows": [
                {"label": r.label, "method": r.method, "dataset": r.dataset, "sigma": r.sigma, "acr": r.acr,
                 "acr_std": r.acr_std, "hparams": r.hparams,
                 "certified_accuracy_percent": {str(float(x)): r.accuracy_at(x) for x in radii}}
                for r in rows]}
        return json.dumps(out, indent=2)
    return format_table(summaries, fmt=fmt, paper_rows=rows, notes=[*paper_notes, *notes])


def certificate_notes(summaries: Sequence[FileSummary]) -> List[str]:
    """Which certificate a file used where it is not Cohen et al.'s one-sided CERTIFY run to the end
    (issue 39): two-sided radii (p_B bounded too), wrong predictions skipped after n0 samples."""
    notes = []
    for s in summaries:
        meta = s.meta or {}
        if meta.get("two_sided"):
            notes.append(f"{s.label}: two-sided certificates (p_A lower and the runner-up's p_B upper at alpha/2 "
                         f"each, --two-sided): not the papers' one-sided radii.")
        if meta.get("skip_wrong"):
            notes.append(f"{s.label}: --skip-wrong: examples whose n0 samples picked another class than the label "
                         f"stopped there (radius 0, wrong); certified accuracy and ACR are those of a full run, "
                         f"the smoothed accuracy's abstentions are not.")
    return notes


def sequential_notes(summaries: Sequence[FileSummary]) -> List[str]:
    """What the figures of ``certify --sequential`` and ``--adaptive`` files mean: only the radii
    they decided are measured; the others are shown as not decided ('-', blank, null)."""
    notes = []
    for s in summaries:
        undecided = [r for r, a in s.certified_accuracy.items() if a is None]
        shown = f" ('-', csv: blank, json: null; here {', '.join(f'{r:g}' for r in undecided)})" if undecided else ""
        if s.mode == "sequential" and s.meta.get("radii"):
            radii = [float(r) for r in s.meta["radii"]]
            notes.append(
                f"{s.label}: a --sequential run decided only radii {', '.join(f'{r:g}' for r in radii)}: certified "
                f"accuracy is exact there and not measured at other radii{shown}"
                + ("" if any(r == 0 for r in radii) else "; add 0 to --radii for the smoothed classifier's clean "
                   "accuracy")
                + "; ACR is a lower bound (each example counts at the largest radius decided robust; certify or "
                  "--adaptive estimates every radius).")
        limit = adaptive_limit(s.meta)
        if limit is not None and undecided:
            notes.append(f"{s.label}: an --adaptive run with n_max {s.meta['n_max']} and alpha {s.meta['alpha']:g} "
                         f"certifies no radius above {limit:.4g} (its bound when all n_max samples vote for c_A), "
                         f"so it does not decide larger ones{shown}; raise --n-max to reach them.")
    return notes

