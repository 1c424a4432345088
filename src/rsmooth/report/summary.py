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
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import RsmoothError
from ..metrics import (
    AccuracyBounds,
    accuracy_bounds,
    acr,
    certified_counts,
    default_radii,
    read_certify_tsv,
    read_sidecar,
)
from ..metrics.certify_io import CertifyResult, is_sequential_file
from ..metrics.intervals import check_probability

PathLike = Union[str, "os.PathLike[str]"]
Radii = Union[Sequence[float], np.ndarray, str, None]


@dataclass
class FileSummary:
    """ACR and certified accuracy of one certify TSV.

    ``num_examples`` counts the test examples (rows), not Monte Carlo samples;
    ``certified_accuracy`` maps radius (float) -> fraction in [0, 1];
    ``sigma`` and ``meta`` come from the sidecar JSON when there is one;
    ``result`` holds the rows (used to plot on a fine radius grid);
    ``ci`` maps radius -> :class:`rsmooth.metrics.AccuracyBounds` when summarized with ``ci``.
    A radius the run did not decide (:meth:`decides`: one not in a ``--sequential`` run's radii, or
    beyond what an ``--adaptive`` run can certify) maps to ``None`` and has no bounds.
    ``complete`` is the sidecar's flag (``None`` without one) and ``examples_planned`` the examples
    the run was started for: an unfinished run has ``complete is False`` and ``num_examples <
    examples_planned``.  :meth:`to_dict` gives one flat record (:func:`records` for a list).
    """

    path: str
    label: str
    num_examples: int
    acr: float
    certified_accuracy: Dict[float, float]
    sigma: Optional[float] = None
    meta: Optional[dict] = field(default=None, repr=False)
    result: Optional[CertifyResult] = field(default=None, repr=False, compare=False)
    ci: Optional[Dict[float, AccuracyBounds]] = field(default=None, repr=False)
    complete: Optional[bool] = None
    examples_planned: Optional[int] = None

    @property
    def mode(self) -> Optional[str]:
        """certify, predict, sequential or adaptive, as the sidecar records it (None without one)."""
        return (self.meta or {}).get("mode")

    def decides(self, radius: float) -> bool:
        """Whether the run measured the certified accuracy at ``radius`` (:func:`decides`)."""
        return decides(self.meta, radius)

    def to_dict(self) -> dict:
        """One plain record (``pandas.DataFrame([s.to_dict() for s in summaries])`` works): label,
        path, mode, dataset, method, sigma, n0, n, n_max, alpha (sidecar; None where unknown),
        examples (done), examples_planned, complete, acr, then ``acc@<r>`` (fraction in [0, 1],
        None where the run did not decide r) and, with ``ci``, ``acc@<r>_lo/_hi/_hp``."""
        meta = self.meta or {}
        record = {"label": self.label, "path": self.path, "mode": self.mode,
                  **{k: meta.get(k) for k in ("dataset", "method")}, "sigma": self.sigma,
                  **{k: meta.get(k) for k in ("n0", "n", "n_max", "alpha")},
                  "examples": int(self.num_examples), "examples_planned": self.examples_planned,
                  "complete": self.complete, "acr": float(self.acr)}
        for r, a in self.certified_accuracy.items():
            record[f"acc@{r:g}"] = a
        for r, b in (self.ci or {}).items():
            record.update({f"acc@{r:g}_lo": b.lo, f"acc@{r:g}_hi": b.hi, f"acc@{r:g}_hp": b.hp})
        return record


def records(summaries: Sequence[FileSummary]) -> List[dict]:
    """The summaries as plain dicts (:meth:`FileSummary.to_dict`), e.g. for ``pandas.DataFrame``."""
    return [s.to_dict() for s in summaries]


def _same_radius(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def adaptive_limit(meta: Optional[dict]) -> Optional[float]:
    """The largest radius an ``--adaptive`` run can certify (its n_max samples all votes for c_A;
    :func:`rsmooth.smoothing.sequential.largest_radius`), or None for other runs."""
    values = [_number_from_meta(meta, k) for k in ("n_max", "alpha", "sigma")]
    if (meta or {}).get("mode") != "adaptive" or None in values:
        return None
    from ..smoothing.sequential import largest_radius

    n_max, alpha, sigma = values
    return largest_radius(int(n_max), alpha, sigma)


def decides(meta: Optional[dict], radius: float) -> bool:
    """Whether a run with sidecar ``meta`` measured the certified accuracy at ``radius``: a
    ``--sequential`` run only at its ``radii`` (elsewhere each example counts at the largest radius
    it was decided robust at, a lower bound; at 0 without 0 among them, not the smoothed accuracy),
    an ``--adaptive`` run up to :func:`adaptive_limit` (beyond it nothing can be certified); any
    other run everywhere."""
    meta = meta or {}
    if meta.get("mode") == "sequential" and meta.get("radii"):
        return any(_same_radius(float(radius), float(d)) for d in meta["radii"])
    limit = adaptive_limit(meta)
    return limit is None or float(radius) <= limit + 1e-12


def parse_radii(text: str) -> List[float]:
    """Radii from the command line: ``"0,0.5,1"`` / ``"0 0.5 1"``, or ``"start:stop:step"``
    (``stop`` included when it is a multiple of ``step``)."""
    text = text.strip()
    try:
        if ":" in text:
            parts = [float(p) for p in text.split(":")]
            if len(parts) != 3:
                raise ValueError
            start, stop, step = parts
            if not (step > 0 and stop >= start):
                raise RsmoothError(f"radii {text!r}: need step > 0 and stop >= start")
            k = int(math.floor((stop - start) / step * (1 + 1e-12) + 1e-12))
            return [round(start + i * step, 12) for i in range(k + 1)]
        values = [float(p) for p in text.replace(",", " ").split()]
    except ValueError:
        raise RsmoothError(f"radii {text!r}: expected numbers like '0,0.25,0.5' "
                           f"or 'start:stop:step' like '0:2:0.25'") from None
    if not values:
        raise RsmoothError("radii: empty list")
    return values


def _resolve_radii(radii: Radii) -> Optional[List[float]]:
    if radii is None:
        return None
    if isinstance(radii, str):
        values = parse_radii(radii)
    else:
        values = [float(r) for r in np.atleast_1d(np.asarray(radii, dtype=np.float64))]
    if not values:
        raise RsmoothError("radii: empty list")
    if not all(math.isfinite(r) for r in values):
        raise RsmoothError(f"radii must be finite numbers, got {values}")
    return values


#: file stems that name the kind of run, not the run (``runs/NAME/certify.tsv``)
GENERIC_STEMS = ("certify", "predict")


def _distinct_suffixes(parts: Sequence[Sequence[str]]) -> List[str]:
    """The last part of each path; where they collide, more parts until the labels differ."""
    depth = [1] * len(parts)
    while True:
        labels = ["/".join(pt[-d:]) for pt, d in zip(parts, depth)]
        clash = [i for i, lab in enumerate(labels)
                 if labels.count(lab) > 1 and depth[i] < len(parts[i])]
        if not clash:
            return labels
        for i in clash:
            depth[i] += 1


def _default_labels(paths: Sequence[Path]) -> List[str]:
    """File stems when they differ (a single file: its stem unless generic, ``certify``,
    ``predict``); else the run folders (``runs/fm025/certify.tsv`` -> ``fm025``; more parent
    folders where those collide), and the shortest distinguishing ends of the paths for files of
    one folder."""
    stems = [p.stem if p.suffix else p.name for p in paths]
    if len(set(stems)) == len(stems) and not (len(stems) == 1 and stems[0] in GENERIC_STEMS):
        return stems
    folders = _distinct_suffixes([p.absolute().parent.parts[1:] for p in paths])
    if len(set(folders)) == len(folders) and all(folders):
        return folders
    return _distinct_suffixes([p.with_suffix("").parts if p.suffix else p.parts for p in paths])


def _is_predict_run(res: CertifyResult, meta: Optional[dict]) -> bool:
    """A ``predict`` run: its sidecar says so, or (no sidecar) correct rows all at radius 0,
    which ``certify`` never writes (it abstains unless the radius is positive)."""
    if meta is not None and "mode" in meta:
        return meta["mode"] == "predict"
    return bool(res.correct.any()) and not bool((res.radius > 0).any())


def _check_labels(labels: Optional[Sequence[str]], n_files: int) -> Optional[List[str]]:
    if labels is None:
        return None
    labels = [str(lab) for lab in labels]
    if len(labels) != n_files:
        raise RsmoothError(f"got {len(labels)} labels for {n_files} result files; "
                           f"give one label per file")
    return labels


def _number_from_meta(meta: Optional[dict], key: str) -> Optional[float]:
    """``meta[key]`` (or ``meta["config"][key]``) when it is a number, else None."""
    if not meta:
        return None
    for source in (meta, meta.get("config") if isinstance(meta.get("config"), dict) else {}):
        value = source.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _sigma_from_meta(meta: Optional[dict]) -> Optional[float]:
    return _number_from_meta(meta, "sigma")


#: the confidence level that ``ci=True`` means
DEFAULT_CI_LEVEL = 0.95


def _ci_level(ci: Union[bool, float, None]) -> Optional[float]:
    """``ci`` as a confidence level in (0, 1) (True: 0.95), or None for no bounds."""
    if ci is None or ci is False:
        return None
    return DEFAULT_CI_LEVEL if ci is True else check_probability("the confidence level ci (--ci-level)", ci, "0.95")


def file_bounds(s: FileSummary) -> AccuracyBounds:
    """The bounds of a summary made with ``ci`` at its first radius: its ``level``, ``alpha`` and
    ``wrong_certificates`` (the same at every radius of the file)."""
    return next(iter(s.ci.values()))


def _file_alpha(path: Path, meta: Optional[dict], alpha: Optional[float]) -> Optional[float]:
    """The certificates' failure probability: the sidecar's ``alpha``, else the given one (None when
    neither); a given alpha that contradicts the sidecar's is an error."""
    recorded = _number_from_meta(meta, "alpha")
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
    """
    paths, labels, skipped = skip_side_files(paths, labels)
    if skipped:
        warnings.warn(side_file_note(skipped), UserWarning, stacklevel=2)
    labels = _check_labels(labels, len(paths)) or _default_labels(paths)
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
    values = _resolve_radii(radii)
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
            sigma=_sigma_from_meta(meta), meta=meta, result=res, ci=bounds,
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


def completion(meta: Optional[dict]) -> Tuple[Optional[bool], Optional[int]]:
    """(the sidecar's ``complete`` flag, the examples it plans), None where it does not say."""
    meta = meta or {}
    planned = meta.get("num_examples")
    return (None if "complete" not in meta else bool(meta["complete"]),
            planned if isinstance(planned, int) and not isinstance(planned, bool) else None)


def incomplete_note(label: str, done: int, planned: Optional[int]) -> str:
    """``label: incomplete: 2 of 20 examples ...``: a table's note on a file whose sidecar says it is unfinished."""
    return (f"{label}: incomplete: {done} of {planned if planned is not None else '?'} examples (stopped, or still "
            f"running; rerun its certify command to finish it); its figures are over the examples done")


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
    """What ``rsmooth analyze`` prints: a table (``fmt`` markdown|latex|csv) or, with
    ``as_json``, the JSON of :func:`to_json`; writes the certified-accuracy plot to
    ``plot`` when given, in the format its extension names (.png, .pdf, .svg).

    ``ci`` (a confidence level, ``True`` = 0.95) and ``alpha``: as in :func:`summarize`; the table
    then shows each certified accuracy with its interval and high-probability bound, with notes on
    what they mean (JSON: under ``"ci"`` and ``"notes"``), and the plot draws the intervals as error
    bars at the table's radii.

    ``paper``: a table id of :data:`rsmooth.report.paper.PAPER_TABLES` (``"catrs:table4"``): its
    published rows that match a file's sidecar (dataset, sigma, method) follow ours, at our radii
    (:func:`rsmooth.report.paper.paper_rows_for`); in JSON under ``"paper"``."""
    from .paper import check_table_id, paper_rows_for
    from .plots import plot_certified_accuracy, plot_format
    from .tables import _table_radii, check_format, format_table  # local: avoid an import cycle

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
    notes = ([side_file_note(skipped)] if skipped else []) + incomplete_notes(summaries) + sequential_notes(summaries)
    if as_json:
        out = to_json(summaries)
        with_ci = [s for s in summaries if s.ci]  # a file may have no radius it decided
        if with_ci or notes:
            out["notes"] = (ci_notes(with_ci, "json") if with_ci else []) + notes
        if paper is not None:
            radii = _table_radii(summaries, None)
            out["paper"] = {"table": paper, "notes": paper_notes, "rows": [
                {"label": r.label, "method": r.method, "dataset": r.dataset, "sigma": r.sigma, "acr": r.acr,
                 "acr_std": r.acr_std, "hparams": r.hparams,
                 "certified_accuracy_percent": {str(float(x)): r.accuracy_at(x) for x in radii}}
                for r in rows]}
        return json.dumps(out, indent=2)
    return format_table(summaries, fmt=fmt, paper_rows=rows, notes=[*paper_notes, *notes])


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


def ci_notes(summaries: Sequence[FileSummary], fmt: str) -> List[str]:
    """What the bounds of summaries made with ``ci`` mean, in the words of ``fmt``'s table
    (markdown ``a [lo, hi] ≥ h``, latex with ``$\\geq$``, csv's ``acc@r_*`` columns, json's keys)."""
    cited = "Cohen, Rosenfeld, Kolter 2019, Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918"
    first = file_bounds(summaries[0])
    pct = f"{100 * first.level:g}%"
    interval, hp = {"markdown": ("a [lo, hi]", "≥ h"), "latex": ("a [lo, hi]", "$\\geq$ h"),
                    "csv": ("acc@r_lo, acc@r_hi", "acc@r_hp"),
                    "json": ("lo, hi", "hp")}[fmt]
    notes = [
        f"{interval}: {'the certified accuracy (%) of the m test examples at r and ' if fmt in ('markdown', 'latex') else ''}"
        f"the exact two-sided {pct} Clopper-Pearson interval (Clopper & Pearson 1934) for the "
        f"probability that this certification (same n, alpha) counts a test example drawn from the test "
        f"distribution (correct, radius >= r); it covers the sampling of the test examples, not the "
        f"Monte-Carlo error of each certificate (each wrong with probability <= alpha; {cited}, Sec. 3.2)."]
    known = [(s, file_bounds(s)) for s in summaries if file_bounds(s).alpha is not None]
    if known:
        qs = "; ".join(f"{s.label}: q = {b.wrong_certificates} (m = {s.num_examples}, alpha = {b.alpha:g})"
                       for s, b in known)
        notes.append(
            f"{hp}: with probability >= {pct} over the certification noise, the smoothed classifier truly "
            f"classifies at least this fraction of the m test examples correctly and robustly at r (at every r "
            f"at once): the count minus q, the {pct} quantile of Binomial(m, alpha), a bound on the wrong "
            f"certificates among all m, which fail independently with probability <= alpha each (Cohen et al.'s "
            f"high-probability certified accuracy; {cited}, Sec. 3.2 and 4); {qs}.")
    unknown = [s.label for s in summaries if file_bounds(s).alpha is None]
    if unknown:
        notes.append(f"no high-probability bound for {', '.join(unknown)}: no alpha recorded (no sidecar JSON with one); "
                     f"give the certificates' alpha (--alpha) for one.")
    joint = f"{100 * (2 * first.level - 1):g}%"
    notes.append(("Bounds are rounded outward to 0.1; " if fmt in ("markdown", "latex") else "")
                 + f"each statement holds at {pct} on its own (both together at {joint}, union bound)"
                 + ("; hp_population joins them (beta/2 each) into a lower bound on the smoothed classifier's "
                    "certified accuracy on the test distribution" if fmt == "json" else "")
                 + "; ACR has no interval.")
    return notes
