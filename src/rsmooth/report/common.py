"""The bottom of the report layer: the types and small helpers every table, plot and summary uses.

:class:`FileSummary` (one certify TSV's ACR and certified accuracy), the radii a run decided
(:func:`decides`, :func:`adaptive_limit`), radii from the command line (:func:`parse_radii`,
:func:`resolve_radii`), numbers read from a sidecar (:func:`number_from_meta`), labels and
completion notes.  Imports nothing else of :mod:`rsmooth.report`; :mod:`~rsmooth.report.tables`,
:mod:`~rsmooth.report.plots`, :mod:`~rsmooth.report.paper`, :mod:`~rsmooth.report.summary` and
:mod:`~rsmooth.report.corruptions` build on it.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import RsmoothError
from ..metrics import AccuracyBounds
from ..metrics.certify_io import CertifyResult

PathLike = Union[str, "os.PathLike[str]"]
Radii = Union[Sequence[float], np.ndarray, str, None]


@dataclass
class FileSummary:
    """ACR and certified accuracy of one certify TSV.

    A radius the run did not decide (:meth:`decides`: one not in a ``--sequential`` run's radii, or
    beyond what an ``--adaptive`` run can certify) maps to ``None`` and has no bounds.  An
    unfinished run has ``complete is False`` and ``num_examples < examples_planned``.
    :meth:`to_dict` gives one flat record (:func:`rsmooth.report.records` for a list).

    Attributes:
        path: the TSV's path.
        label: its row label in tables.
        num_examples: the test examples (rows), not Monte Carlo samples.
        acr: the average certified radius, in [0, 1] pixel units (0 for wrong or abstained rows).
        certified_accuracy: radius (float) -> fraction in [0, 1] (None where not decided).
        sigma: the smoothing noise from the sidecar JSON (None without one).
        meta: the sidecar JSON (None without one).
        result: the rows (used to plot on a fine radius grid).
        ci: radius -> :class:`rsmooth.metrics.AccuracyBounds` when summarized with ``ci``.
        complete: the sidecar's flag (None without one).
        examples_planned: the examples the run was started for.

    Example:
        ```python
        (s,) = rsmooth.summarize(["runs/fm025/certify.tsv"])
        s.acr, s.certified_accuracy, s.to_dict()
        ```
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

    @property
    def norm(self) -> str:
        """The norm of the radii: the sidecar's ``norm`` ("l1" for uniform or Laplace noise), "l2"
        for a file without one (Gaussian noise)."""
        return str((self.meta or {}).get("norm") or "l2")

    def decides(self, radius: float) -> bool:
        """Whether the run measured the certified accuracy at ``radius`` (:func:`decides`).

        Args:
            radius: an l2 radius in [0, 1] pixel units.

        Returns:
            False for a ``--sequential`` run's radius not among its ``radii`` or an ``--adaptive``
            run's radius beyond what it can certify; True otherwise.
        """
        return decides(self.meta, radius)

    def to_dict(self) -> dict:
        """One plain record (with ``pip install pandas``, ``pandas.DataFrame([s.to_dict() for s in summaries])`` works).

        Returns:
            a flat dict: label, path, mode, dataset, method, sigma, norm (of the radii), n0, n, n_max, alpha (sidecar;
            None where unknown), examples (done), examples_planned, complete, acr, then
            ``acc@<r>`` (fraction in [0, 1], None where the run did not decide r) and, with
            ``ci``, ``acc@<r>_lo/_hi/_hp``.
        """
        meta = self.meta or {}
        record = {"label": self.label, "path": self.path, "mode": self.mode,
                  **{k: meta.get(k) for k in ("dataset", "method")}, "sigma": self.sigma, "norm": self.norm,
                  **{k: meta.get(k) for k in ("n0", "n", "n_max", "alpha")},
                  "examples": int(self.num_examples), "examples_planned": self.examples_planned,
                  "complete": self.complete, "acr": float(self.acr)}
        for r, a in self.certified_accuracy.items():
            record[f"acc@{r:g}"] = a
        for r, b in (self.ci or {}).items():
            record.update({f"acc@{r:g}_lo": b.lo, f"acc@{r:g}_hi": b.hi, f"acc@{r:g}_hp": b.hp})
        return record


def norm_label(summaries: Sequence[FileSummary]) -> str:
    """The norm the summaries' radii share ("l2", "l1"), or "l1 and l2" when they differ."""
    norms = sorted({s.norm for s in summaries})
    return " and ".join(norms) if norms else "l2"


def norm_note(summaries: Sequence[FileSummary]) -> List[str]:
    """A table's note on its radii when they are not all l2: which norm, or which file has which."""
    norms = {s.norm for s in summaries}
    if norms <= {"l2"}:
        return []
    if len(norms) == 1:
        return [f"radii are {norms.pop()} norms of the perturbation ([0,1] pixel units): the columns give the "
                f"certified accuracy (%) at {norm_label(summaries)} radius r, ACR is the average {norm_label(summaries)} radius."]
    by = "; ".join(f"{n}: {', '.join(s.label for s in summaries if s.norm == n)}" for n in sorted(norms))
    return [f"the files' radii are in different norms ({by}): their columns do not compare."]


def _same_radius(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def adaptive_limit(meta: Optional[dict]) -> Optional[float]:
    """The largest radius an ``--adaptive`` run can certify (its n_max samples all votes for c_A;
    :func:`rsmooth.smoothing.sequential.largest_radius`), or None for other runs."""
    values = [number_from_meta(meta, k) for k in ("n_max", "alpha", "sigma")]
    if (meta or {}).get("mode") != "adaptive" or None in values:
        return None
    from ..smoothing.noises import noise_from_spec
    from ..smoothing.sequential import largest_radius

    n_max, alpha, sigma = values
    share = number_from_meta(meta, "alpha_share")
    return largest_radius(int(n_max), alpha, noise_from_spec({**meta, "sigma": sigma}),
                          1.0 if share is None else share, bool(meta.get("two_sided")))


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


def resolve_radii(radii: Radii) -> Optional[List[float]]:
    if radii is None:
        return None
    if isinstance(radii, str):
        values = parse_radii(radii)
    else:
        values = [float(r) for r in np.atleast_1d(np.asarray(radii, dtype=np.float64))]
    if not values:
        raise RsmoothError("radii: empty list")
    if not all(math.isfinite(r) and r >= 0 for r in values):
        raise RsmoothError(f"radii must be finite and >= 0 (l2 radii in [0, 1] pixel units), got {values}")
    return values


def distinct_suffixes(parts: Sequence[Sequence[str]]) -> List[str]:
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


def check_labels(labels: Optional[Sequence[str]], n_files: int) -> Optional[List[str]]:
    if labels is None:
        return None
    labels = [str(lab) for lab in labels]
    if len(labels) != n_files:
        raise RsmoothError(f"got {len(labels)} labels for {n_files} result files; "
                           f"give one label per file")
    return labels


def number_from_meta(meta: Optional[dict], key: str) -> Optional[float]:
    """``meta[key]`` (or ``meta["config"][key]``) when it is a number, else None."""
    if not meta:
        return None
    for source in (meta, meta.get("config") if isinstance(meta.get("config"), dict) else {}):
        value = source.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def sigma_from_meta(meta: Optional[dict]) -> Optional[float]:
    return number_from_meta(meta, "sigma")


def file_bounds(s: FileSummary) -> AccuracyBounds:
    """The bounds of a summary made with ``ci`` at its first radius: its ``level``, ``alpha`` and
    ``wrong_certificates`` (the same at every radius of the file)."""
    return next(iter(s.ci.values()))


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

