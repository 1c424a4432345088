"""``OUT.seq``: what the sequential modes drew and decided per example, beside the TSV.

A tab-separated file named like the other side files of OUT (``OUT.json``, ``OUT.lock``), so that
``*.tsv`` globs (``rsmooth analyze runs/*.tsv``, folders of corruption results) catch only
certify TSVs.  Runs before that wrote ``OUT.seq.tsv`` (:func:`legacy_sequential_path`): resuming or
merging them renames it; :func:`~rsmooth.metrics.certify_io.is_sequential_file` recognises such a
file by its header.

One row per example (:data:`SEQ_COLUMNS`): the class c_A the n0 samples selected, the samples
drawn in all (n0 + n), the estimation samples n and votes n_a for c_A, the bounds on p_A at the
stop (``p_lower`` at level alpha, the certificate; ``p_upper`` at level beta, the futility bound),
whether n_max was reached, and the decision at each radius (``-`` for --adaptive; ``skipped`` for
an example that ``skip_wrong`` stopped after its n0 samples: n 0, bounds 0 and 1).  A two-sided run
adds the runner-up's votes ``n_b`` among the n and its upper bound ``p_b_upper`` (level alpha/2,
capped at 1 - p_lower) (:data:`~rsmooth.metrics.certify_io.SEQ_COLUMNS_TWO_SIDED`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Tuple, Union

from ..errors import check, setting
from ..fileio import atomic_write_bytes, naming, open_nofollow
from ..metrics.certify_io import SEQ_COLUMNS, SEQ_COLUMNS_TWO_SIDED
from ..smoothing.procedures import Skipped
from ..smoothing.sequential import SequentialCertificate

#: the modes that draw samples until the answer is known (Smooth.certify_sequential / certify_adaptive)
SEQUENTIAL_MODES = ("sequential", "adaptive")
_HEADER = "\t".join(SEQ_COLUMNS) + "\n"
_HEADER_TWO_SIDED = "\t".join(SEQ_COLUMNS_TWO_SIDED) + "\n"
#: the decisions of an example stopped after its n0 samples because c_A is not its label (skip_wrong)
SKIPPED = "skipped"


def sequential_path(out: Union[str, Path]) -> Path:
    """The per-example file of a sequential run beside its TSV: ``OUT.seq``."""
    return Path(f"{out}.seq")


def legacy_sequential_path(out: Union[str, Path]) -> Path:
    """Where earlier versions wrote the per-example file: ``OUT.seq.tsv``."""
    return Path(f"{out}.seq.tsv")


def adopt_legacy(out: Union[str, Path]) -> Path:
    """The per-example file of ``out``, after renaming an ``OUT.seq.tsv`` of an earlier version to
    ``OUT.seq`` when that is missing (call it under ``out``'s lock)."""
    new, old = sequential_path(out), legacy_sequential_path(out)
    if not new.exists() and old.is_file():
        with naming(new):
            os.replace(old, new)
    return new


def _idx(row: str) -> Optional[int]:
    first = row.split("\t", 1)[0]
    return int(first) if first.isdigit() else None


def seq_rows(path: Path) -> List[Tuple[int, str]]:
    """(idx, line) of each whole row of ``path`` (a partial last line is left out); one-line
    errors for a missing file or a foreign header."""
    check(path.is_file(), f"{path} (the samples and decisions of the examples in the TSV) is missing; "
                          f"pass {setting('overwrite', True)} to start again")
    text = path.read_text(encoding="utf-8")
    check(text.startswith((_HEADER, _HEADER_TWO_SIDED)),
          f"{path} is not a sequential-certification file (its header is not {' '.join(SEQ_COLUMNS)}[ "
          f"{' '.join(SEQ_COLUMNS_TWO_SIDED[len(SEQ_COLUMNS):])}]); pass {setting('overwrite', True)} to start again")
    return [(i, row + "\n") for row in text.split("\n")[1:-1] if (i := _idx(row)) is not None]


def write_seq_rows(path: Path, rows: List[Tuple[int, str]], two_sided: bool = False) -> None:
    """``path`` with the header (a two-sided run's: with ``n_b`` and ``p_b_upper``) and ``rows`` in
    the order given, written atomically."""
    header = _HEADER_TWO_SIDED if two_sided else _HEADER
    atomic_write_bytes(path, "".join([header, *(line for _, line in rows)]).encode("utf-8"))


class SeqWriter:
    """``OUT.seq.tsv``, one flushed row per example, written before OUT's row.

    On resume it keeps the rows of the examples OUT holds (dropping a partial last line and the
    row of an example killed before OUT's row was written), so both files hold the same examples.
    """

    def __init__(self, path: Path, done: set, two_sided: bool = False) -> None:
        self.path, self.two_sided = path, two_sided
        kept = [(i, row) for i, row in seq_rows(path) if i in done] if done else []
        missing = done - {i for i, _ in kept}
        check(not missing, f"{path} lacks the row of idx {min(missing, default=0)} that the TSV holds; "
                           f"pass {setting('overwrite', True)} to start again")
        write_seq_rows(path, kept, two_sided)
        with naming(path):
            self._f = open_nofollow(path, "a", encoding="utf-8", newline="\n")

    def write(self, idx: int, cert: Union[SequentialCertificate, Skipped]) -> None:
        if isinstance(cert, Skipped):  # stopped after the n0 samples (skip_wrong): no estimation samples
            fields = (idx, cert.c_a, cert.samples, 0, 0, repr(0.0), repr(1.0), 0, SKIPPED)
        else:
            fields = (idx, cert.c_a, cert.samples, cert.n, cert.n_a, repr(cert.p_lower), repr(cert.p_upper),
                      int(cert.capped), ",".join(d.value for d in cert.decisions) or "-")
        if self.two_sided:  # the runner-up's votes and upper bound (none for a skipped example)
            fields += (0, repr(1.0)) if isinstance(cert, Skipped) else (cert.n_b, repr(cert.p_b_upper))
        self._f.write("\t".join(map(str, fields)) + "\n")
        self._f.flush()

    def __enter__(self) -> "SeqWriter":
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()
