"""Tables in the papers' layout.

As in Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) Tables 1-2 and Jeong &
Shin 2020 (Consistency, arXiv 2006.04062) Table 1: one row per result file; columns
``model | [sigma] | examples | ACR | 0.00 | 0.25 | ...`` (``examples``: test examples certified,
not Monte Carlo samples): in markdown and LaTeX, ACR with 3 decimals and certified accuracy in %
with one decimal, as the papers print them; in CSV every number at full precision.  The
``sigma`` column appears only when a sidecar JSON gave sigma for at least one file.

Summaries made with ``ci`` (:func:`rsmooth.report.summarize`) show each certified accuracy with
its confidence interval and high-probability lower bound, ``83.2 [80.1, 86.0] ≥ 82.8`` (bounds
rounded outward), or in CSV as extra columns ``acc@<r>_lo``, ``acc@<r>_hi``, ``acc@<r>_hp`` at the
end; notes under the table say what they mean (:func:`ci_notes`).
A radius the run did not decide (:func:`rsmooth.report.common.decides`) is ``-`` (CSV: blank),
and an unfinished run's ``examples`` reads ``2 of 20`` (CSV: 2), each explained by a note.
"""
from __future__ import annotations

import csv
import enum
import io
import math
from typing import List, Optional, Sequence, TYPE_CHECKING


from ..errors import RsmoothError
from ..metrics import AccuracyBounds, accuracy_bounds, certified_accuracy, certified_counts
from .common import FileSummary, Radii, file_bounds, norm_label, norm_note, resolve_radii

if TYPE_CHECKING:
    from .paper import PaperRow


class TableFormat(str, enum.Enum):
    """Output formats of :func:`format_table` (feeds the CLI's ``choices=``)."""

    MARKDOWN = "markdown"
    LATEX = "latex"
    CSV = "csv"


TABLE_FORMATS = tuple(f.value for f in TableFormat)


def check_format(fmt: str) -> TableFormat:
    """``fmt`` as a :class:`TableFormat`; RsmoothError listing the choices otherwise."""
    try:
        return TableFormat(fmt.value if isinstance(fmt, TableFormat) else str(fmt).lower())
    except ValueError:
        raise RsmoothError(f"unknown table format {fmt!r}; choose one of "
                           f"{', '.join(TABLE_FORMATS)}") from None


def _radius_header(r: float) -> str:
    """``0.25`` -> ``"0.25"``, ``1`` -> ``"1.00"``; more digits only where needed."""
    s = f"{r:.2f}"
    return s if float(s) == r else f"{r:g}"


def _accuracy_at(s: FileSummary, radii: Sequence[float]) -> List[Optional[float]]:
    """Certified accuracy of ``s`` at ``radii`` (computed from its rows where it was summarized at
    other radii); None where its run did not decide the radius (:meth:`FileSummary.decides`)."""
    missing = [r for r in radii if float(r) not in s.certified_accuracy]
    if missing and s.result is None:
        raise RsmoothError(f"{s.path}: no certified accuracy at radius {missing[0]} "
                           f"(summarize with these radii)")
    if missing:
        acc = certified_accuracy(s.result.radius, s.result.correct, radii)
        return [float(a) if s.decides(r) else None for r, a in zip(radii, acc)]
    return [s.certified_accuracy[float(r)] for r in radii]


def _bounds_at(s: FileSummary, radii: Sequence[float]) -> List[Optional[AccuracyBounds]]:
    """``s.ci`` at ``radii``, computed from the rows (same level and alpha) where missing; None
    where its run did not decide the radius."""
    radii = [float(r) for r in radii]
    missing = [r for r in radii if r not in s.ci and s.decides(r)]
    if not missing:
        return [s.ci.get(r) for r in radii]
    if s.result is None:
        raise RsmoothError(f"{s.path}: no confidence bounds at radius {missing[0]} "
                           f"(summarize with these radii)")
    first = file_bounds(s)
    counts = certified_counts(s.result.radius, s.result.correct, radii)
    return [accuracy_bounds(int(k), s.num_examples, first.level, first.alpha) if s.decides(r) else None
            for r, k in zip(radii, counts)]


def _ci_cell(percent: float, b: AccuracyBounds, fmt: "TableFormat") -> str:
    """``83.2 [80.1, 86.0] ≥ 82.8``: the lower ends rounded down and the upper end up to 0.1 %
    (the small tolerance keeps an exact 82.0 from printing as 81.9)."""
    def down(fraction: float) -> float:
        return math.floor(1000 * fraction + 1e-7) / 10

    text = f"{percent:.1f} [{down(b.lo):.1f}, {math.ceil(1000 * b.hi - 1e-7) / 10:.1f}]"
    if b.hp is not None:
        text += (" ≥ " if fmt is TableFormat.MARKDOWN else r" $\geq$ ") + f"{down(b.hp):.1f}"
    return text


def table_radii(summaries: Sequence[FileSummary], radii: Radii) -> List[float]:
    """The table's radii: ``radii`` when given, else every radius of the summaries in first-seen order."""
    values = resolve_radii(radii)
    if values is not None:
        return values
    seen = {}
    for s in summaries:
        for r in s.certified_accuracy:
            seen.setdefault(float(r), None)
    return list(seen)


def as_percent(fraction: float, num_examples: int) -> float:
    """100 * fraction as the float nearest to 100 k / n when fraction is a count k / n."""
    k = round(fraction * num_examples)
    return 100.0 * k / num_examples if abs(fraction * num_examples - k) < 1e-6 else 100.0 * fraction


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    repl = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
            "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
            "^": r"\textasciicircum{}"}
    return "".join(repl.get(ch, ch) for ch in text)


def format_table(summaries: Sequence[FileSummary], radii: Radii = None,
                 fmt: str = "markdown", paper_rows: Sequence["PaperRow"] = (),
                 notes: Sequence[str] = ()) -> str:
    """Render summaries as a markdown, LaTeX (booktabs) or CSV table.

    Rows are the result files (their labels), columns ``examples`` (test examples), ``ACR``
    then certified accuracy (%) at each radius; ``radii`` defaults to the radii the summaries
    were computed at.  Markdown and LaTeX round as the papers do; CSV keeps full precision.
    LaTeX bolds the best value of each ACR/accuracy column (ties all bold; not for a
    single row or a best value of 0).  ``paper_rows`` (:mod:`rsmooth.report.paper`) follow our
    rows, blank where the paper has no value, never bold; ``notes`` follow the table, then, for
    summaries made with ``ci``, what their bounds mean (module docstring).
    """
    fmt = check_format(fmt)
    if not summaries:
        raise RsmoothError("no summaries to tabulate")
    radii = table_radii(summaries, radii)
    with_sigma = any(s.sigma is not None for s in summaries) or bool(paper_rows)
    full = fmt is TableFormat.CSV
    with_ci = [s for s in summaries if s.ci]

    norm = _norm_prefix(summaries)
    head = ["model"] + (["sigma"] if with_sigma else []) + ["examples", "ACR" + (f" ({norm})" if norm else "")]
    head += [norm + " " * bool(norm) + _radius_header(r) for r in radii]
    extra = [f"acc@{_radius_header(r)}_{end}" for r in radii for end in ("lo", "hi", "hp")] if with_ci and full else []
    rows = [_summary_row(s, radii, with_sigma, fmt, bool(extra)) for s in summaries]
    rows += [_paper_row(p, radii, with_sigma, full, len(extra)) for p in paper_rows]

    notes = [*notes, *norm_note(summaries), *(ci_notes(with_ci, fmt.value) if with_ci else [])]
    after = ["", note_lines(notes, fmt)] if notes else []
    if fmt is TableFormat.CSV:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(head + extra)
        writer.writerows(rows)
        return "\n".join([buf.getvalue().rstrip("\n"), *after])
    if fmt is TableFormat.MARKDOWN:
        align = ["---"] + ["---:"] * (len(head) - 1)
        lines = ["| " + " | ".join(r) + " |" for r in (head, align, *rows)]
        return "\n".join(lines + after)
    return _latex(rows, len(summaries), radii, with_sigma, after[1:], norm)


def _norm_prefix(summaries: Sequence[FileSummary]) -> str:
    """The radius columns' norm prefix: none for l2 radii (the papers' tables, unchanged), "l1" when
    every file's radii are l1, none for files of different norms (a note says which is which)."""
    label = norm_label(summaries)
    return "" if label == "l2" or " " in label else label


def _summary_row(s: FileSummary, radii: List[float], with_sigma: bool, fmt: TableFormat, extra: bool) -> List[str]:
    """A result file's cells: label, [sigma], examples, ACR, accuracy at each radius (with its bounds
    for a ``ci`` summary: in the cell, or in CSV as ``extra`` lo/hi/hp columns)."""
    full = fmt is TableFormat.CSV
    row = [s.label]
    if with_sigma:
        row.append("" if s.sigma is None else repr(s.sigma) if full else f"{s.sigma:.2f}")
    row += [_examples_cell(s, full), repr(float(s.acr)) if full else f"{s.acr:.3f}"]
    acc = [None if a is None else as_percent(a, s.num_examples) for a in _accuracy_at(s, radii)]
    bounds = _bounds_at(s, radii) if s.ci else None
    undecided = "" if full else UNDECIDED
    if bounds is not None and not full:
        row += [undecided if a is None else _ci_cell(a, b, fmt) for a, b in zip(acc, bounds)]
    else:
        row += [undecided if a is None else repr(a) if full else f"{a:.1f}" for a in acc]
    if extra:
        row += ([("" if b is None or x is None else repr(100.0 * x)) for b in bounds
                 for x in ((None,) * 3 if b is None else (b.lo, b.hi, b.hp))]
                if bounds else [""] * (3 * len(radii)))
    return row


def _paper_row(p: "PaperRow", radii: List[float], with_sigma: bool, full: bool, n_extra: int) -> List[str]:
    """A published row's cells (no examples; blank where the paper has no value)."""
    acc = [p.accuracy_at(r) for r in radii]
    return ([p.label] + ([repr(p.sigma) if full else f"{p.sigma:.2f}"] if with_sigma else [])
            + ["", repr(p.acr) if full else f"{p.acr:.3f}"]
            + ["" if a is None else repr(a) if full else f"{a:.1f}" for a in acc]
            + [""] * n_extra)


def _latex(rows: List[List[str]], ours: int, radii: List[float], with_sigma: bool, after: List[str],
           norm: str = "") -> str:
    """A booktabs tabular; the best (displayed) value of each metric column among our ``ours``
    first rows in bold."""
    n_fixed = 3 if with_sigma else 2  # columns before ACR: model, [sigma], examples
    body = [[latex_escape(row[0])] + row[1:] for row in rows]
    if ours > 1:
        for col in range(n_fixed, len(rows[0])):
            values = [_cell_value(row[col]) for row in rows[:ours]]
            best = max((v for v in values if v is not None), default=0.0)
            if best > 0 and not math.isnan(best):
                for row, v in zip(body, values):
                    if v == best:
                        row[col] = rf"\textbf{{{row[col]}}}"
    n_acc = len(radii)
    first_acc = n_fixed + 2  # 1-based LaTeX column of the first radius
    head = ["model"] + (["$\\sigma$"] if with_sigma else []) + ["examples", "ACR"] + [_radius_header(r) for r in radii]
    lines = [
        rf"\begin{{tabular}}{{{'l' + 'r' * (len(head) - 1)}}}",
        r"\toprule",
        " & " * (n_fixed + 1)
        + rf"\multicolumn{{{n_acc}}}{{c}}{{certified accuracy (\%) at {_latex_norm(norm)}$r$}} \\",
        rf"\cmidrule(lr){{{first_acc}-{first_acc + n_acc - 1}}}",
        " & ".join(head) + r" \\",
        r"\midrule",
        *(" & ".join(row) + r" \\" for row in body),
        r"\bottomrule",
        r"\end{tabular}",
        *after,
    ]
    return "\n".join(lines)


def _latex_norm(norm: str) -> str:
    """The LaTeX words for an l1 table's radius (l-one in math), none for the papers' l2 tables."""
    return rf"$\ell_{{{norm[1:]}}}$ radius " if norm else ""


#: the cell of a radius the run did not decide (markdown and LaTeX; blank in CSV)
UNDECIDED = "-"


def _examples_cell(s: FileSummary, full: bool) -> str:
    """Test examples certified; ``2 of 20`` (markdown, LaTeX) for an unfinished run."""
    if s.complete is False and s.examples_planned is not None and not full:
        return f"{int(s.num_examples)} of {s.examples_planned}"
    return str(int(s.num_examples))


def _cell_value(cell: str) -> Optional[float]:
    """The number a cell starts with (a ci cell: its value), None for a cell without one."""
    try:
        return float(cell.split()[0])
    except (IndexError, ValueError):
        return None


def note_lines(notes: Sequence[str], fmt: TableFormat) -> str:
    """The notes under a table: ``Note: ...`` lines (markdown), ``% note: ...`` (LaTeX), or CSV
    rows ``note: ...`` (quoted as CSV needs)."""
    if fmt is TableFormat.CSV:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([f"note: {n}"] for n in notes)
        return buf.getvalue().rstrip("\n")
    prefix = "Note: " if fmt is TableFormat.MARKDOWN else "% note: "
    return "\n".join(prefix + n for n in notes)


__all__ = ["TableFormat", "TABLE_FORMATS", "check_format", "format_table"]


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
