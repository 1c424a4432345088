"""The certify TSV and its sidecar JSON.

The TSV is the format every public randomized-smoothing codebase reads and writes
(Cohen et al. 2019, arXiv 1902.02918; their ``locuslab/smoothing/code/certify.py``)::

    idx	label	predict	radius	correct	time
    0	3	3	0.7137489326640017	1	0.9312

one row per certified example; ``predict = -1`` (``ABSTAIN``) with ``radius = 0``
and ``correct = 0`` marks an abstention.  rsmooth writes the radius at full
precision (``repr(float)``, the reference rounds to 3 significant digits) and the
time in seconds; :func:`read_certify_tsv` also reads the reference files, whose
time column is ``str(datetime.timedelta)`` (``0:00:01.234567``).  Everything else
about a run (sigma, n0, n, alpha, subset, seed, checkpoint hash, versions) lives in
a sidecar JSON next to the TSV (``out.tsv`` -> ``out.tsv.json``), so the TSV stays
readable by every other codebase.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Set, Tuple, Union

import numpy as np

from ..errors import RsmoothError
from ..fileio import atomic_write_bytes, naming, open_nofollow
from ..smoothing.stats import MAX_COUNT, MAX_COUNT_TEXT, MAX_RADIUS, MAX_SIGMA

PathLike = Union[str, "os.PathLike[str]"]

TSV_COLUMNS = ("idx", "label", "predict", "radius", "correct", "time")
#: The header line of a certify TSV (without the newline).
TSV_HEADER = "\t".join(TSV_COLUMNS)

#: the columns of the per-example file of ``certify --sequential/--adaptive`` (``OUT.seq``)
SEQ_COLUMNS = ("idx", "c_a", "samples", "n", "n_a", "p_lower", "p_upper", "capped", "decisions")
#: those of a two-sided run: also the runner-up's votes and its upper bound
SEQ_COLUMNS_TWO_SIDED = SEQ_COLUMNS + ("n_b", "p_b_upper")


def is_sequential_file(path: PathLike) -> bool:
    """Whether ``path`` is the per-example file of a sequential run (by its header), such as the
    ``OUT.seq.tsv`` of an earlier version that a ``*.tsv`` glob picked up."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n") in ("\t".join(SEQ_COLUMNS), "\t".join(SEQ_COLUMNS_TWO_SIDED))
    except (OSError, UnicodeDecodeError):
        return False


_TIMEDELTA_RE = re.compile(r"^(?:(-?\d+) days?, )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")


@dataclass(eq=False)
class CertifyResult:
    """The rows of a certify TSV as NumPy arrays, all of length ``n``.

    ``idx``, ``label``, ``predict``: int64 (``predict == -1`` is an abstention);
    ``radius``: float64 certified l2 radius in [0,1] pixel units (0 when abstaining);
    ``correct``: bool (``predict == label``); ``time``: float64 seconds per example;
    ``path``: the file read, or ``None`` for an in-memory result.
    """

    idx: np.ndarray
    label: np.ndarray
    predict: np.ndarray
    radius: np.ndarray
    correct: np.ndarray
    time: np.ndarray
    path: Optional[Path] = None

    @property
    def n(self) -> int:
        """Number of certified examples (rows)."""
        return int(self.idx.shape[0])

    def __len__(self) -> int:
        return self.n


# ----------------------------------------------------------------------------- parsing


def _parse_time(text: str) -> float:
    """Seconds from ``"1.2345"`` (rsmooth) or ``str(timedelta)`` (``"0:00:01.234567"``,
    ``"1 day, 2:03:04.5"``; the public codebases)."""
    try:
        return float(text)
    except ValueError:
        pass
    m = _TIMEDELTA_RE.match(text)
    if m is None:
        raise ValueError(f"time {text!r} is neither seconds nor H:MM:SS[.ffffff]")
    days, hours, minutes, seconds = m.groups()
    return (int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60
            + float(seconds))


def _parse_correct(text: str) -> bool:
    if text in ("0", "False", "false"):
        return False
    if text in ("1", "True", "true"):
        return True
    raise ValueError(f"correct {text!r} is not 0 or 1")


def _parse_row(line: str) -> Tuple[int, int, int, float, bool, float]:
    """One data line -> (idx, label, predict, radius, correct, time); ValueError if malformed."""
    fields = line.split("\t")
    if len(fields) != len(TSV_COLUMNS):
        raise ValueError(f"expected {len(TSV_COLUMNS)} tab-separated fields "
                         f"({' '.join(TSV_COLUMNS)}), got {len(fields)}")
    idx_s, label_s, predict_s, radius_s, correct_s, time_s = (f.strip() for f in fields)
    try:
        idx, label, predict = int(idx_s), int(label_s), int(predict_s)
    except ValueError:
        raise ValueError(f"idx/label/predict must be integers, got "
                         f"{idx_s!r}, {label_s!r}, {predict_s!r}") from None
    try:
        radius = float(radius_s)
    except ValueError:
        raise ValueError(f"radius {radius_s!r} is not a number") from None
    wrong = row_problem(idx, label, predict, radius)
    if wrong:
        raise ValueError(wrong)
    correct = _parse_correct(correct_s)
    if correct != (predict == label):  # every public codebase writes int(prediction == label)
        raise ValueError(f"correct {correct_s} contradicts predict {predict} and label {label} "
                         f"(correct is predict == label)")
    seconds = _parse_time(time_s)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"time {time_s!r} must be a finite number of seconds >= 0")
    return idx, label, predict, radius, correct, seconds


def row_problem(idx: int, label: int, predict: int, radius: float) -> str:
    """What makes a row impossible ("" when nothing): an idx or label outside 0..MAX_COUNT, a
    predict outside -1 (``ABSTAIN``)..MAX_COUNT, a radius outside [0, MAX_RADIUS], or an abstention
    with a radius (Cohen et al.'s CERTIFY returns ``(ABSTAIN, 0.0)``)."""
    if not (0 <= idx <= MAX_COUNT and 0 <= label <= MAX_COUNT):
        return f"idx {idx} and label {label} must be >= 0 and at most {MAX_COUNT_TEXT}"
    if not -1 <= predict <= MAX_COUNT:
        return f"predict {predict} must be a class (>= 0) or -1 (abstain), at most {MAX_COUNT_TEXT}"
    if not 0.0 <= radius <= MAX_RADIUS:  # also refuses nan
        return (f"radius {radius!r} must be finite, >= 0 and at most {MAX_RADIUS:g} (sigma <= 10 certifies "
                f"at most 83 in float64)")
    if predict == -1 and radius != 0.0:
        return f"an abstention (predict -1) certifies no radius, got radius {radius!r}"
    return ""


def _split_lines(text: str) -> List[str]:
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _check_header(path: Path, first_line: str) -> None:
    if first_line.rstrip() != TSV_HEADER:
        raise RsmoothError(
            f"{path}: line 1: not a certify TSV: expected header "
            f"{TSV_HEADER.replace(chr(9), ' ')!r} (tab-separated), got {first_line[:80]!r}")


def _parse_lines(path: Path, lines: List[str], first_lineno: int) -> List[Tuple]:
    """Parse data lines (blank lines skipped); RsmoothError naming the line on any problem."""
    rows: List[Tuple] = []
    seen = {}
    for lineno, line in enumerate(lines, start=first_lineno):
        if not line.strip():
            continue
        try:
            row = _parse_row(line)
        except ValueError as e:
            raise RsmoothError(f"{path}: line {lineno}: malformed row: {e}") from None
        if row[0] in seen:
            raise RsmoothError(f"{path}: line {lineno}: duplicate idx {row[0]} "
                               f"(first at line {seen[row[0]]})")
        seen[row[0]] = lineno
        rows.append(row)
    return rows


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise RsmoothError(f"certify TSV not found: {path}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RsmoothError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None


def read_certify_tsv(path: PathLike, *, growing: bool = False) -> CertifyResult:
    """Read a certify TSV written by rsmooth or by the public codebases.

    Accepts full-precision or 3-significant-digit radii, times in seconds or as
    ``str(datetime.timedelta)``, ``correct`` as 0/1 (or True/False).  A missing file,
    a wrong header, a malformed row or a duplicate ``idx`` raise a one-line
    :class:`RsmoothError` that names the line.  A header-only file gives ``n == 0``.
    ``growing``: the file of a certification still running, whose last line may be cut (being
    written): a last line without its newline is left out.
    """
    path = Path(path)
    text = _read_text(path)
    if growing and "\n" in text and not text.endswith("\n"):
        text = text[:text.rindex("\n") + 1]
    lines = _split_lines(text)
    if not lines[0].strip():
        raise RsmoothError(f"{path}: empty file, expected the certify TSV header "
                           f"{TSV_HEADER.replace(chr(9), ' ')!r}")
    _check_header(path, lines[0])
    rows = _parse_lines(path, lines[1:], first_lineno=2)
    cols = list(zip(*rows)) if rows else [()] * len(TSV_COLUMNS)
    return CertifyResult(
        idx=np.asarray(cols[0], dtype=np.int64),
        label=np.asarray(cols[1], dtype=np.int64),
        predict=np.asarray(cols[2], dtype=np.int64),
        radius=np.asarray(cols[3], dtype=np.float64),
        correct=np.asarray(cols[4], dtype=bool),
        time=np.asarray(cols[5], dtype=np.float64),
        path=path,
    )


# ----------------------------------------------------------------------------- writing


def format_row(idx: int, label: int, predict: int, radius: float, correct: Any,
               time: Union[float, datetime.timedelta]) -> str:
    """One TSV line (without newline): radius as ``repr(float)``, correct 0/1, time in
    seconds with 4 decimals."""
    radius = float(radius)
    wrong = row_problem(int(idx), int(label), int(predict), radius)
    if wrong:
        raise RsmoothError(f"cannot write the row of idx {idx}: {wrong}")
    if isinstance(time, datetime.timedelta):
        time = time.total_seconds()
    return (f"{int(idx)}\t{int(label)}\t{int(predict)}\t{radius!r}\t"
            f"{int(bool(correct))}\t{float(time):.4f}")


class CertifyWriter:
    """Write a certify TSV incrementally: header once, then one flushed row per example.

    ``resume=False`` creates (or truncates) ``path``.  ``resume=True`` on an existing
    file checks its header, drops a trailing partial line (a run killed mid-write;
    the file is rewritten atomically) and fills :attr:`done_indices` with the ``idx``
    already written, so a driver can skip them; a missing or empty file starts fresh.
    Parent folders are created.

    Example::

        with CertifyWriter("out.tsv", resume=True) as w:
            for i in indices:
                if i in w.done_indices:
                    continue
                w.write(i, label, predict, radius, predict == label, seconds)
    """

    def __init__(self, path: PathLike, resume: bool = False) -> None:
        self.path = Path(path)
        #: ``idx`` values already in the file (from a resumed run or this writer).
        self.done_indices: Set[int] = set()
        #: Number of partial trailing bytes dropped when resuming (0 if none).
        self.dropped_bytes = 0
        with naming(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_header = True
            if resume and self.path.exists():
                write_header = not self._prepare_resume()
            self._f = open_nofollow(self.path, "w" if write_header else "a", encoding="utf-8", newline="\n")
            if write_header:
                try:
                    self._f.write(TSV_HEADER + "\n")
                    self._f.flush()
                except BaseException:
                    self._close_quietly()
                    raise

    def _prepare_resume(self) -> bool:
        """Validate the existing file and cut a partial last line; False if it is empty."""
        text = _read_text(self.path)
        keep = text
        if text and not text.endswith("\n"):
            keep = text[: text.rfind("\n") + 1]  # "" if not even the header is complete
        if not keep.strip():
            return False
        lines = _split_lines(keep)
        _check_header(self.path, lines[0])
        rows = _parse_lines(self.path, lines[1:], first_lineno=2)
        if keep != text:
            data = keep.encode("utf-8")
            self.dropped_bytes = len(text.encode("utf-8")) - len(data)
            atomic_write_bytes(self.path, data)
        self.done_indices = {row[0] for row in rows}
        return True

    def write(self, idx: int, label: int, predict: int, radius: float, correct: Any,
              time: Union[float, datetime.timedelta]) -> None:
        """Append and flush one row; ``time`` in seconds (or a ``timedelta``).

        Raises :class:`RsmoothError` if ``idx`` is already in the file.
        """
        if self._f.closed:
            raise RsmoothError(f"{self.path}: CertifyWriter is closed")
        idx = int(idx)
        if idx in self.done_indices:
            raise RsmoothError(f"{self.path}: idx {idx} is already certified in this file")
        line = format_row(idx, label, predict, radius, correct, time) + "\n"
        with naming(self.path):
            self._f.write(line)
            self._f.flush()
        self.done_indices.add(idx)

    def close(self) -> None:
        """Flush, fsync and close the file (idempotent); the file is closed even when the
        flush fails (a full disk), and the error names the file."""
        if self._f.closed:
            return
        with naming(self.path):
            try:
                self._f.flush()
                os.fsync(self._f.fileno())
            finally:
                self._f.close()

    def _close_quietly(self) -> None:
        """Close while another error is on its way out: a failing flush would only repeat it
        (a row whose flush failed has already raised from :meth:`write`)."""
        with contextlib.suppress(OSError):
            self.close()

    def __enter__(self) -> "CertifyWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._close_quietly()

    def __del__(self) -> None:
        if getattr(self, "_f", None) is not None:
            self._close_quietly()


# ----------------------------------------------------------------------------- sidecar


def sidecar_path(tsv_path: PathLike) -> Path:
    """The sidecar JSON of a TSV: ``out.tsv`` -> ``out.tsv.json``."""
    return Path(str(tsv_path) + ".json")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def write_sidecar(tsv_path: PathLike, meta: dict) -> Path:
    """Write ``meta`` (sigma, n0, n, alpha, subset, seed, versions, ...) atomically as the
    sidecar JSON of ``tsv_path``; returns the sidecar's path.

    NumPy scalars/arrays and paths are converted; anything else not JSON-serialisable
    raises :class:`RsmoothError`.
    """
    if not isinstance(meta, dict):
        raise RsmoothError(f"sidecar metadata must be a dict, got {type(meta).__name__}")
    path = sidecar_path(tsv_path)
    try:
        text = json.dumps(meta, indent=2, sort_keys=True, default=_json_default,
                          allow_nan=True)
    except (TypeError, ValueError) as e:
        raise RsmoothError(f"{path}: cannot write sidecar JSON: {e}") from None
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))
    return path


def read_sidecar(tsv_path: PathLike) -> Optional[dict]:
    """The sidecar JSON of ``tsv_path`` as a dict, or ``None`` if there is none.

    Invalid JSON or a top level that is not an object raise :class:`RsmoothError`.

    Args:
        tsv_path: a certify TSV; its sidecar is ``tsv_path + ".json"``.

    Returns:
        what ``certify`` recorded: dataset, arch, method, sigma, mode, n0, n, alpha,
        num_examples, complete, the checkpoint's sha256, versions, ...; None without a sidecar.

    Example:
        ```python
        meta = read_sidecar("runs/digits025/certify.tsv")
        print(meta["sigma"], meta["n"], meta["alpha"], meta["complete"])
        ```
    """
    path = sidecar_path(tsv_path)
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RsmoothError(f"{path}: invalid sidecar JSON: {e}; {_REDO}") from None
    if not isinstance(meta, dict):
        raise RsmoothError(f"{path}: sidecar JSON must be an object, got {type(meta).__name__}; {_REDO}")
    wrong = next((f"{key} {meta[key]!r} {need}" for key, (ok, need) in _SIDECAR_FIELDS.items()
                  if meta.get(key) is not None and not ok(meta[key])), "")
    if wrong:
        raise RsmoothError(f"{path}: damaged sidecar: {wrong}; {_REDO}")
    return meta


_REDO = "rerun the certify command with --overwrite"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_COUNT


#: the sidecar fields rsmooth computes with or extends: (whether a value other than null is sound, what it must be)
_SIDECAR_FIELDS = {
    "sigma": (lambda v: _number(v) and 0 < v <= MAX_SIGMA, f"must be a number > 0, at most {MAX_SIGMA:g}"),
    "alpha": (lambda v: _number(v) and 0 < v < 1, "must be a number in (0, 1)"),
    "n0": (_count, f"must be an integer >= 1, at most {MAX_COUNT_TEXT}"),
    "n": (_count, f"must be an integer >= 1, at most {MAX_COUNT_TEXT}"),
    "n_max": (_count, f"must be an integer >= 1, at most {MAX_COUNT_TEXT}"),
    "num_examples": (lambda v: _count(v) or v == 0, f"must be an integer >= 0, at most {MAX_COUNT_TEXT}"),
    "radii": (lambda v: isinstance(v, list) and all(_number(r) and 0 <= r <= MAX_RADIUS for r in v),
              f"must be a list of numbers >= 0, at most {MAX_RADIUS:g}"),
    "complete": (lambda v: isinstance(v, bool), "must be true or false"),
    "mode": (lambda v: isinstance(v, str), "must be a string"),
    "sessions": (lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v), "must be a list of objects"),
}
