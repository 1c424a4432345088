"""``rsmooth analyze A B --paired``: two certifications compared on the test images both hold
(:func:`rsmooth.metrics.paired.compare_paired`), e.g. yours against a paper's released TSV."""
from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from ..errors import check
from ..metrics import default_radii, read_certify_tsv
from ..metrics.paired import PairedComparison, compare_paired, printed_radii
from .common import PathLike, Radii, check_labels, distinct_suffixes, resolve_radii

#: the output formats of a paired comparison
PAIRED_FORMATS = ("markdown", "csv")


def compare(paths: Sequence[PathLike], radii: Radii = None, labels: Optional[Sequence[str]] = None,
            fmt: str = "markdown", as_json: bool = False, level: float = 0.95, as_printed: bool = False) -> str:
    """What ``rsmooth analyze A B --paired`` prints.

    Args:
        paths: two certify TSVs (rsmooth's or a public codebase's) of the same test set.
        radii: l2 radii in [0, 1] pixel units (default: 0 to the smaller of the two files' largest
            radii, step 0.25).
        labels: names of A and B (default: the file names).
        fmt: ``"markdown"`` or ``"csv"``; ``as_json``: the numbers as JSON instead.
        level: the confidence level of the ACR difference's interval.
        as_printed: round both files' radii to 3 significant digits, as the public codebases'
            certify scripts print them, so a full-precision file compares like with like.
    """
    check(len(paths) == 2, f"--paired compares two certify files, got {len(paths)}")
    check(as_json or fmt in PAIRED_FORMATS, f"--paired prints {' or '.join(PAIRED_FORMATS)} (or --json), not {fmt}")
    names = check_labels(labels, 2) or distinct_suffixes([Path(p).parts for p in paths])
    a, b = (read_certify_tsv(p) for p in paths)
    if as_printed:
        a, b = (dataclasses.replace(r, radius=printed_radii(r.radius)) for r in (a, b))
    if resolve_radii(radii) is None:
        top = min(float(r.radius.max(initial=0.0)) for r in (a, b))
        radii = default_radii(top).tolist()
    result = compare_paired(a, b, resolve_radii(radii), level=level)
    hint = [] if as_printed else [f"{name}'s radii have at most 3 significant digits (a public codebase's file), "
                                  f"the other's more: pass --as-printed to count both as printed"
                                  for name, r, other in ((names[0], a, b), (names[1], b, a))
                                  if _printed(r) and not _printed(other)]
    if as_json:
        return json.dumps({"a": str(paths[0]), "b": str(paths[1]), "as_printed": as_printed,
                           **dataclasses.asdict(result)}, indent=2)
    return _csv(result) if fmt == "csv" else _markdown(result, names, as_printed, hint)


def _printed(res) -> bool:
    """Whether every radius of ``res`` is as a public script prints it (3 significant digits)."""
    return bool(res.n) and bool(np.array_equal(printed_radii(res.radius), res.radius))


def _markdown(c: PairedComparison, names: List[str], as_printed: bool, hint: List[str]) -> str:
    a, b = names
    lines = [f"| radius | {a} | {b} | certified by {a} only | by {b} only | exact McNemar p |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.radius:g} | {100 * r.accuracy_a:.1f} | {100 * r.accuracy_b:.1f} | {r.only_a} | {r.only_b} | "
              f"{r.p_value:.2g} |" for r in c.radii]
    lo, hi = c.acr_interval
    lines.append(f"| ACR | {c.acr_a:.3f} | {c.acr_b:.3f} | difference {c.acr_difference:+.3f} | "
                 f"{100 * c.level:g}% [{lo:+.3f}, {hi:+.3f}] | |")
    notes = [f"{c.images:,} test images in both files ({c.images_a:,} in {a}, {c.images_b:,} in {b}); certified "
             f"accuracy in % on them. The images both certify at a radius cancel: the exact McNemar test (McNemar "
             f"1947) asks whether the images certified by one file only split evenly; the ACR difference's "
             f"interval is normal over the images' paired differences."]
    if as_printed:
        notes.append("Radii rounded to 3 significant digits, as the public codebases' certify scripts print them.")
    return "\n".join(lines + [""] + notes + hint)


def _csv(c: PairedComparison) -> str:
    out = io.StringIO()
    out.write("radius,accuracy_a,accuracy_b,only_a,only_b,mcnemar_p\n")
    for r in c.radii:
        out.write(f"{r.radius:g},{r.accuracy_a!r},{r.accuracy_b!r},{r.only_a},{r.only_b},{r.p_value!r}\n")
    lo, hi = c.acr_interval
    out.write(f"acr,{c.acr_a!r},{c.acr_b!r},,,\nacr_difference,{c.acr_difference!r},{lo!r},{hi!r},,\n")
    return out.getvalue().rstrip("\n")
