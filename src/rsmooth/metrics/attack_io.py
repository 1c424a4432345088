"""The attack TSV (``rsmooth attack``): one row per image and eps, written row by row.

Columns ``idx label eps predict correct norm time``: the test index, its label, the attack's l2
radius, PREDICT's answer at the attacked point x + delta (-1: abstain), whether it is the label,
||delta||_2 and the seconds the row took.  Metadata goes to the sidecar ``OUT.json`` as for
certify files (:func:`~rsmooth.metrics.certify_io.write_sidecar`).  Pure I/O, no PyTorch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple, Union

import numpy as np

from ..errors import RsmoothError
from ..fileio import atomic_write_bytes, naming, open_nofollow

PathLike = Union[str, Path]
ATTACK_COLUMNS = ("idx", "label", "eps", "predict", "correct", "norm", "time")
ATTACK_HEADER = "\t".join(ATTACK_COLUMNS)


@dataclass
class AttackResult:
    """The columns of an attack TSV as arrays (one entry per row, file order)."""

    idx: np.ndarray
    label: np.ndarray
    eps: np.ndarray
    predict: np.ndarray
    correct: np.ndarray
    norm: np.ndarray
    time: np.ndarray

    @property
    def n(self) -> int:
        return int(self.idx.shape[0])

    def radii(self) -> List[float]:
        """The distinct eps of the file, sorted."""
        return sorted(set(self.eps.tolist()))

    def keys(self) -> Set[Tuple[int, float]]:
        return set(zip(self.idx.tolist(), self.eps.tolist()))


def format_row(idx: int, label: int, eps: float, predict: int, norm: float, seconds: float) -> str:
    return f"{int(idx)}\t{int(label)}\t{float(eps)!r}\t{int(predict)}\t{int(predict == label)}\t{float(norm)!r}\t" \
           f"{seconds:.3f}"


def _parse(path: Path, lines: Sequence[str]) -> List[tuple]:
    rows = []
    for k, line in enumerate(lines, start=2):
        parts = line.split("\t")
        try:
            if len(parts) != len(ATTACK_COLUMNS):
                raise ValueError(f"{len(parts)} fields, not {len(ATTACK_COLUMNS)}")
            row = (int(parts[0]), int(parts[1]), float(parts[2]), int(parts[3]), parts[4] == "1",
                   float(parts[5]), float(parts[6]))
        except ValueError as e:
            raise RsmoothError(f"{path} line {k}: not an attack row ({e}); rerun the attack command with "
                               f"--overwrite") from None
        rows.append(row)
    return rows


def _text(path: Path) -> str:
    with naming(path):
        return path.read_text(encoding="utf-8")


def read_attack_tsv(path: PathLike, *, growing: bool = False) -> AttackResult:
    """Read an attack TSV (``growing``: a last line cut by a kill is left out)."""
    path = Path(path)
    if not path.is_file():
        raise RsmoothError(f"attack file {path} does not exist; run 'rsmooth attack ... --out {path}' first")
    text = _text(path)
    if growing and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0].strip() != ATTACK_HEADER:
        raise RsmoothError(f"{path} is not an attack TSV (its header is not '{' '.join(ATTACK_COLUMNS)}'); "
                           f"give the --out of 'rsmooth attack'")
    rows = _parse(path, lines[1:])
    cols = list(zip(*rows)) if rows else [[] for _ in ATTACK_COLUMNS]
    dtypes = (np.int64, np.int64, np.float64, np.int64, bool, np.float64, np.float64)
    return AttackResult(*(np.asarray(c, dtype=t) for c, t in zip(cols, dtypes)))


class AttackWriter:
    """Append rows to an attack TSV, flushed one by one; ``resume=True`` keeps the rows there (a
    last line cut by a kill is dropped, atomically) and lists them in :attr:`done` as (idx, eps)."""

    def __init__(self, path: PathLike, resume: bool = False) -> None:
        self.path = Path(path)
        self.done: Set[Tuple[int, float]] = set()
        fresh = True
        if resume and self.path.exists() and self.path.stat().st_size > 0:
            text = _text(self.path)
            keep = text[:text.rfind("\n") + 1] if not text.endswith("\n") else text
            if keep.strip():
                if keep != text:
                    atomic_write_bytes(self.path, keep.encode("utf-8"))
                self.done = read_attack_tsv(self.path).keys()
                fresh = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open_nofollow(self.path, "w" if fresh else "a", encoding="utf-8", newline="\n")
        if fresh:
            self._f.write(ATTACK_HEADER + "\n")
            self._f.flush()

    def write(self, idx: int, label: int, eps: float, predict: int, norm: float, seconds: float) -> None:
        key = (int(idx), float(eps))
        if key in self.done:
            raise RsmoothError(f"{self.path}: idx {idx} at eps {eps!r} is already in this file")
        self._f.write(format_row(idx, label, eps, predict, norm, seconds) + "\n")
        self._f.flush()
        self.done.add(key)

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

    def __enter__(self) -> "AttackWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def empirical_accuracy(result: AttackResult, eps: Sequence[float]) -> Dict[float, float]:
    """The fraction of images PREDICT still classifies correctly after the attack at each eps (None where
    the file holds no row of that eps)."""
    out = {}
    for e in eps:
        rows = np.isclose(result.eps, e, rtol=1e-12, atol=0)
        out[float(e)] = float(result.correct[rows].mean()) if rows.any() else None
    return out
