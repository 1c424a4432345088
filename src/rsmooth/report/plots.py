"""Certified accuracy against radius, the curves of the papers' figures.

Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) Fig. 3-4; Jeong & Shin 2020
(Consistency, arXiv 2006.04062) Fig. 2.

matplotlib is imported lazily, and only its object-oriented API with the Agg canvas
is used: no ``pyplot``, no global backend switch, no display needed.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from ..errors import RsmoothError
from ..fileio import atomic_write
from ..metrics import certified_accuracy
from .common import FileSummary, PathLike, adaptive_limit, check_labels, file_bounds, norm_label, number_from_meta

RADIUS_LABEL = "radius (l2, [0,1] pixel units)"
PLOT_TITLE = "Approximate certified accuracy (Cohen et al. 2019)"


def radius_label(summaries: Sequence[FileSummary]) -> str:
    """The x axis: ``radius (l2, [0,1] pixel units)``, or the files' norm (sidecar ``norm``)."""
    norm = norm_label(summaries)
    return RADIUS_LABEL if norm == "l2" else f"radius ({norm}, [0,1] pixel units)"


def approximate_caption(summaries: Sequence[FileSummary]) -> str:
    """What "approximate" certified accuracy means (Cohen, Rosenfeld, Kolter 2019, arXiv
    1902.02918, Sec. 4), with the files' alpha when their sidecars agree on one."""
    alphas = {number_from_meta(s.meta, "alpha") for s in summaries}
    alpha = next(iter(alphas)) if len(alphas) == 1 else None
    level = "1 \u2212 \u03b1" + (f" = {1 - alpha:g}" if alpha is not None else "")
    return (f"% of test examples classified correctly with certified radius \u2265 r; approximate: each "
            f"certificate, from Monte-Carlo samples, holds with probability \u2265 {level} "
            f"(arXiv 1902.02918, Sec. 4)")


def _radius_grid(radius: np.ndarray, correct: np.ndarray, r_max: float,
                 points: int = 1000) -> np.ndarray:
    """A fine grid on [0, r_max] that contains every radius where the curve drops."""
    drops = radius[correct.astype(bool)]
    return np.unique(np.concatenate([np.linspace(0.0, r_max, points), drops[drops <= r_max]]))


#: the formats a plot can be written in, named by the file's extension
PLOT_FORMATS = ("png", "pdf", "svg")


def plot_format(path: PathLike) -> str:
    """The format named by ``path``'s extension (case-insensitive): png, pdf or svg; a path
    without an extension gets png.  RsmoothError listing the choices for any other extension."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return "png"
    if suffix not in PLOT_FORMATS:
        raise RsmoothError(f"cannot write a plot as .{suffix} ({path}); name the file with one of the "
                           f"extensions {', '.join('.' + f for f in PLOT_FORMATS)}")
    return suffix


def plot_certified_accuracy(summaries: Sequence[FileSummary], out: PathLike,
                            labels: Optional[Sequence[str]] = None,
                            title: str = PLOT_TITLE, caption: Optional[str] = None) -> Path:
    """Plot certified accuracy (%) against radius as step curves, one per file, to ``out``.

    The curve ``acc(r) = mean(correct & radius >= r)`` is evaluated on a fine grid that
    includes every certified radius, so the steps are exact.  ``labels`` default to
    the summaries' labels.  The format is the one ``out``'s extension names
    (:func:`plot_format`: .png, .pdf or .svg; png without an extension).  Parent folders of
    ``out`` are created; returns its path.  Summaries made with ``ci`` get error bars at their
    radii: the Clopper-Pearson interval of each certified accuracy
    (:func:`rsmooth.metrics.clopper_pearson_interval`).  Points a run did not decide are left
    out (:func:`rsmooth.report.common.decides`): a ``--sequential`` file is drawn as markers at its
    radii only, an ``--adaptive`` curve ends at the largest radius it can certify.  ``caption``
    goes under the plot; None gives :func:`approximate_caption`, "" none.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    fmt = plot_format(out)
    if not summaries:
        raise RsmoothError("no summaries to plot")
    labels = check_labels(labels, len(summaries)) or [s.label for s in summaries]
    missing = [s.path for s in summaries if s.result is None]
    if missing:
        raise RsmoothError(f"{missing[0]}: summary has no rows to plot (use summarize())")
    r_max = max(max([float(s.result.radius.max()), *_decided_radii(s)]) for s in summaries)
    x_max = 1.05 * r_max if r_max > 0 else 1.0

    fig = Figure(figsize=(6.4, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for i, (s, label) in enumerate(zip(summaries, labels)):
        radii = _decided_radii(s)
        if radii:  # decided at these radii only
            points = np.array([r for r in radii if r <= x_max])
            acc = 100.0 * certified_accuracy(s.result.radius, s.result.correct, points)
            (line,) = ax.plot(points, acc, marker="o", linestyle="none", label=label)
        else:
            grid = _radius_grid(s.result.radius, s.result.correct, x_max)
            limit = adaptive_limit(s.meta)
            grid = grid if limit is None else grid[grid <= limit]
            acc = 100.0 * certified_accuracy(s.result.radius, s.result.correct, grid)
            # acc is constant on (grid[i-1], grid[i]] and equals acc(grid[i]) there: "pre"
            (line,) = ax.step(grid, acc, where="pre", label=label, linewidth=1.5)
        if s.ci:
            radii = np.array(list(s.ci))
            point = 100.0 * certified_accuracy(s.result.radius, s.result.correct, radii)
            lo, hi = (100.0 * np.array([getattr(b, end) for b in s.ci.values()]) for end in ("lo", "hi"))
            dodge = 0.006 * x_max * i  # bars of files at the same radius side by side
            ax.errorbar(radii + dodge, point, yerr=[point - lo, hi - point], fmt="none", ecolor=line.get_color(),
                        capsize=3, linewidth=1.0)
    ax.set_xlim(0.0, x_max)
    ax.set_ylim(0.0, 100.0)
    ax.set_xlabel(radius_label(summaries))
    ax.set_ylabel("certified accuracy (%)")
    ax.set_title(title)
    with_ci = [s for s in summaries if s.ci]
    if with_ci:
        level = file_bounds(with_ci[0]).level
        ax.text(0.01, 0.01, f"bars: {100 * level:g}% Clopper-Pearson intervals over the test sample",
                transform=ax.transAxes, fontsize=7, alpha=0.8)
    ax.grid(True, alpha=0.4)
    ax.legend(loc="upper right")
    caption = approximate_caption(summaries) if caption is None else caption
    if caption:
        fig.text(0.5, 0.012, caption, ha="center", va="bottom", fontsize=6.5, wrap=True)
    fig.tight_layout(rect=(0, 0.06 if caption else 0, 1, 1))

    return _save(fig, out, fmt)


def _decided_radii(s: FileSummary) -> List[float]:
    """The radii a ``--sequential`` file decided, sorted; [] for other files."""
    return sorted(float(r) for r in (s.meta or {}).get("radii") or ()) if s.mode == "sequential" else []


def _save(fig, out: Path, fmt: str) -> Path:
    """Write ``fig`` to ``out`` (parents created); one-line error when it cannot be written."""
    try:
        atomic_write(out, lambda f: fig.savefig(f, dpi=150, format=fmt))  # replaces a link, not its target
    except OSError as e:
        if isinstance(e, (FileExistsError, NotADirectoryError)):
            why = f"{next((p for p in out.parents if p.is_file()), e.filename)} is a file, not a folder"
        else:
            why = f"{e.strerror or e}" + (f" ({e.filename})" if e.filename and str(e.filename) != str(out) else "")
        raise RsmoothError(f"cannot write the plot {out}: {why}; "
                           f"choose a plot path in a folder you can write") from None
    return out


def plot_corruptions(columns: Sequence[tuple], out: PathLike, title: str = "") -> Path:
    """A grid of corrupted images: one column per ``(label, images)``, images uint8 or float
    [N, C, H, W] (the same N in every column), one row per image; written to ``out``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    fmt = plot_format(out)
    if not columns:
        raise RsmoothError("no corruptions to show")
    rows = len(columns[0][1])
    fig = Figure(figsize=(0.9 * len(columns) + 0.2, 0.95 * rows + 0.5))
    FigureCanvasAgg(fig)
    for j, (label, images) in enumerate(columns):
        images = np.asarray(images)
        images = images.astype(np.float32) / 255.0 if images.dtype == np.uint8 else images
        for i in range(rows):
            ax = fig.add_subplot(rows, len(columns), i * len(columns) + j + 1)
            img = np.clip(images[i].transpose(1, 2, 0), 0.0, 1.0)
            ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0.0, vmax=1.0,
                      interpolation="nearest")
            ax.set_axis_off()
            if i == 0:
                ax.set_title(label, fontsize=6)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return _save(fig, out, fmt)


def plot_curves(curves: Sequence[tuple], out: PathLike, *, xlabel: str = "epoch", ylabel: str = "",
                title: str = "") -> Path:
    """Lines of ``(label, xs, ys)`` on one axis (a training curve beside the authors' released log);
    written to ``out`` (png, pdf or svg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    fmt = plot_format(out)
    if not curves or any(len(xs) == 0 or len(xs) != len(ys) for _, xs, ys in curves):
        raise RsmoothError("plot_curves needs one or more (label, xs, ys) with as many xs as ys, and some of each")
    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, xs, ys in curves:
        ax.plot(xs, ys, label=label, linewidth=1.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, out, fmt)


__all__ = ["approximate_caption", "plot_certified_accuracy", "plot_corruptions", "plot_curves", "plot_format",
           "PLOT_FORMATS", "RADIUS_LABEL"]
