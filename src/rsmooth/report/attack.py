"""Empirical beside certified: one table and one plot of the certified accuracy of a certify file
and the empirical accuracy of an attack file (``rsmooth attack``) on the same images.

Certified accuracy at r (Cohen, Rosenfeld & Kolter 2019, arXiv 1902.02918) is a lower bound, up
to alpha, of the accuracy under any l2 attack of norm < r; the empirical accuracy at eps = r under
SmoothAdv's attack (Salman et al. 2019, arXiv 1906.04584) is an upper bound for that attack.
Empirical below certified at some r is a finding for ``rsmooth audit``, and the table marks it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from ..errors import RsmoothError, check
from ..fileio import atomic_write
from ..metrics import certified_accuracy, read_certify_tsv, read_sidecar
from ..metrics.attack_io import empirical_accuracy, read_attack_tsv
from .common import PathLike
from .plots import RADIUS_LABEL, plot_format


def _match(certify: PathLike, attack: PathLike):
    """(certify rows, attack rows) after checking they are of the same images, labels and noise."""
    cert, att = read_certify_tsv(certify), read_attack_tsv(attack)
    check(cert.n > 0 and att.n > 0, f"{certify if cert.n == 0 else attack} holds no rows")
    ids = set(cert.idx.tolist())
    labels = dict(zip(cert.idx.tolist(), cert.label.tolist()))
    for e in att.radii():
        got = set(att.idx[att.eps == e].tolist())
        if got != ids:
            extra = sorted(got - ids)[:1] or sorted(ids - got)[:1]
            raise RsmoothError(f"--attack {attack} is not of {certify}'s images: at eps {e:g} image {extra[0]} is "
                               f"in one file only ({len(got)} vs {len(ids)} images); attack the certified images "
                               f"(the same --start/--skip/--max) or certify the attacked ones")
    bad = next((i for i, lab in zip(att.idx.tolist(), att.label.tolist()) if labels[i] != lab), None)
    check(bad is None, f"--attack {attack}: image {bad} has another label than in {certify}; they are not of one "
                       f"dataset and split")
    cm, am = read_sidecar(certify) or {}, read_sidecar(attack) or {}
    for key in ("sigma", "noise", "noise_params", "dataset", "split"):
        a, c = am.get(key), cm.get(key, "gaussian" if key == "noise" else None)
        check(a is None or c is None or a == c, f"--attack {attack} has {key} {a!r}, {certify} {c!r}: the "
                                                f"empirical and certified accuracy of different smoothed "
                                                f"classifiers do not compare; attack with the certify file's {key}")
    return cert, att


def empirical_table(certify: PathLike, attack: PathLike, *, fmt: str = "markdown", as_json: bool = False,
                    plot: Optional[PathLike] = None) -> str:
    """Certified and empirical accuracy (%) at each eps of the attack file, one row per eps; with
    ``plot`` also the figure of both curves."""
    cert, att = _match(certify, attack)
    eps = att.radii()
    certified = certified_accuracy(cert.radius, cert.correct, eps)
    empirical = empirical_accuracy(att, eps)
    meta = read_sidecar(attack) or {}
    rows: List[Dict[str, object]] = [
        {"radius": e, "certified": float(c), "empirical": empirical[e], "below": bool(empirical[e] < c - 1e-12)}
        for e, c in zip(eps, certified)]
    if plot is not None:
        plot_empirical(cert, att, plot, attack_name=str(meta.get("attack", "attack")).upper())
    if as_json:
        return json.dumps({"certify": str(certify), "attack": str(attack), "images": cert.n, "rows": rows}, indent=2)
    if fmt == "csv":
        return "\n".join(["radius,certified,empirical"] + [f"{r['radius']:g},{100 * r['certified']:.1f},"
                                                           f"{100 * r['empirical']:.1f}" for r in rows])
    what = f"{str(meta.get('attack', 'attack')).upper()}, T={meta.get('num_steps')}, m={meta.get('num_noise')}"
    if fmt == "latex":
        body = [f"{r['radius']:g} & {100 * r['certified']:.1f} & {100 * r['empirical']:.1f} \\\\" for r in rows]
        return "\n".join(["\\begin{tabular}{rrr}", "radius & certified (\\%) & empirical (\\%) \\\\", "\\hline",
                          *body, "\\end{tabular}"])
    lines = [f"| radius = eps | certified (%) | empirical (%, {what}) |", "|---:|---:|---:|"]
    lines += [f"| {r['radius']:g} | {100 * r['certified']:.1f} | {100 * r['empirical']:.1f}"
              f"{' (below certified: run rsmooth audit)' if r['below'] else ''} |" for r in rows]
    lines.append(f"\n{cert.n} images. Certified: correct with a certified radius >= r (each certificate holds with "
                 f"probability >= 1 - alpha). Empirical: PREDICT correct at the point the attack found with "
                 f"||delta|| <= eps; it bounds robust accuracy from above, certified from below.")
    return "\n".join(lines)


def plot_empirical(cert, att, out: PathLike, attack_name: str = "attack") -> Path:
    """Certified accuracy (step curve over radius) and empirical accuracy (markers at each eps, and
    at 0 the clean smoothed accuracy) in one figure written to ``out`` (.png, .pdf or .svg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    fmt = plot_format(out)
    eps = att.radii()
    r_max = max(max(eps), float(cert.radius.max())) * 1.05
    grid = np.unique(np.concatenate([np.linspace(0, r_max, 500), cert.radius[cert.correct.astype(bool)]]))
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(grid, 100 * certified_accuracy(cert.radius, cert.correct, grid), drawstyle="steps-post",
            label="certified")
    emp = empirical_accuracy(att, eps)
    xs, ys = [0.0, *eps], [100 * float(cert.correct.mean()), *(100 * emp[e] for e in eps)]
    ax.plot(xs, ys, marker="o", label=f"empirical ({attack_name} + PREDICT; 0: clean)")
    ax.set_xlabel(RADIUS_LABEL)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda f: fig.savefig(f, format=fmt, bbox_inches="tight"))
    return out
