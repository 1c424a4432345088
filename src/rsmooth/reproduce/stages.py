"""What each step of a reproduction cost, read from its run folder alone: training's wall time (the
sum of ``train.log``'s epoch times: time a run spent stopped between sessions is not counted) and
certification's wall time and samples/s (the sum of the certify TSV's per-example times)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..progress import format_duration
from .spec import TableSpec


def train_cost(run: Path) -> Optional[Dict[str, Any]]:
    """``{"epochs", "seconds", "median_epoch"}`` of the epochs ``run/train.log`` records (the sum counts
    the time an epoch spent on a shared machine or suspended; the median shows the pace), or None."""
    try:
        lines = (run / "train.log").read_text().splitlines()
    except OSError:
        return None
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:  # a line cut by a kill: the epoch is not counted
            continue
    times = [float(r["time"]) for r in records if isinstance(r, dict) and isinstance(r.get("time"), (int, float))]
    return {"epochs": len(times), "seconds": sum(times), "median_epoch": statistics.median(times)} if times else None


def certify_cost(tsv: Path) -> Optional[Dict[str, Any]]:
    """``{"examples", "seconds", "samples", "samples_per_s", "median_example", "pace_samples_per_s"}``
    of a certify TSV, so far if it is still being written (samples: n0 + n per example, CERTIFY's
    fixed cost, None for the modes whose cost varies; the pace: at the median example's time, which
    a suspended job or a busy hour does not move), or None without one."""
    from ..engine.shards import certify_so_far
    from ..errors import RsmoothError

    try:
        res, meta = certify_so_far(tsv)
    except RsmoothError:
        return None
    if res is None or not res.n:
        return None
    seconds, median = float(res.time.sum()), float(statistics.median(res.time.tolist()))
    per = (meta.get("n0") or 0) + meta["n"] if meta.get("mode", "certify") == "certify" and meta.get("n") else None
    samples = None if per is None else per * res.n
    rate = samples / seconds if samples and seconds > 0 else None
    pace = per / median if per and median > 0 else None
    return {"examples": res.n, "seconds": seconds, "samples": samples, "samples_per_s": rate,
            "median_example": median, "pace_samples_per_s": pace}


def stage_costs(spec: TableSpec, out: Path, seeds: Sequence[int]) -> List[Dict[str, Any]]:
    """Per row and seed with a run folder: ``{"label", "sigma", "seed", "train", "certify"}``."""
    found = []
    for row in spec.rows:
        for seed in seeds:
            run = out / "runs" / row.dataset / row.key / f"seed{seed}"
            train, cert = train_cost(run), certify_cost(run / "certify.tsv")
            if train or cert:
                found.append({"label": row.label, "dataset": row.dataset, "sigma": row.sigma, "seed": seed,
                              "train": train, "certify": cert})
    return found


def stage_notes(costs: Sequence[Dict[str, Any]], many_seeds: bool) -> List[str]:
    """One line per run: ``Gaussian sigma 0.25: train 90 epochs in 1h02m (median epoch 41.3 s);
    certify 1,000 examples in 3h50m, 7,250 samples/s (median example 13.6 s: 7,360 samples/s)``."""
    lines = []
    for c in costs:
        parts = []
        t, k = c["train"], c["certify"]
        if t:
            parts.append(f"train {t['epochs']} epochs in {format_duration(t['seconds'])} "
                         f"(median epoch {t['median_epoch']:.1f} s)")
        if k:
            rate = f", {k['samples_per_s']:,.0f} samples/s" if k["samples_per_s"] else ""
            pace = f": {k['pace_samples_per_s']:,.0f} samples/s" if k["pace_samples_per_s"] else ""
            parts.append(f"certify {k['examples']:,} examples in {format_duration(k['seconds'])}{rate} "
                         f"(median example {k['median_example']:.1f} s{pace})")
        seed = f" seed {c['seed']}" if many_seeds else ""
        lines.append(f"{c['label']} sigma {c['sigma']:g}{seed}: " + "; ".join(parts))
    return lines
