"""The reproduced table in the paper's layout: per row our ACR and certified accuracy (mean +- std
over seeds), their 95% intervals over the test examples, the published values, the difference and
whether the published value lies in our interval, under a caption that states the budget; then
what each step cost (:mod:`rsmooth.reproduce.stages`)."""
from __future__ import annotations

import json
import math
from itertools import combinations
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..fileio import atomic_write_text
from .spec import Budget, TableSpec, budget_protocol, target_samples
from .stages import stage_costs, stage_notes


def row_results(spec: TableSpec, out: Path, seeds: Sequence[int]) -> List[Dict[int, Dict[str, Any]]]:
    """Per row, per seed with certified examples: ``{"acr", "accuracy": {radius: %}, "complete",
    "of"}``; a certification still running (or stopped) gives the examples done so far (``of``:
    how many it certifies in all)."""
    from ..engine.shards import certify_so_far
    from ..metrics import acr, certified_accuracy

    results = []
    for row in spec.rows:
        per_seed = {}
        for seed in seeds:
            tsv = out / "runs" / row.dataset / row.key / f"seed{seed}" / "certify.tsv"
            res, meta = certify_so_far(tsv)
            if res is None or res.n == 0:
                continue
            acc = certified_accuracy(res.radius, res.correct, list(spec.radii)) * 100
            per_seed[seed] = {"acr": acr(res.radius, res.correct), "examples": res.n,
                              "acr_se": _standard_error(res.radius * res.correct),
                              "accuracy": {float(r): float(a) for r, a in zip(spec.radii, acc)},
                              "constant": constant_prediction(res.predict, res.label),
                              "complete": bool(meta.get("complete")), "of": meta.get("num_examples"),
                              "two_sided": bool(meta.get("two_sided"))}
        results.append(per_seed)
    return results


def _ours(per_seed: Dict[int, Dict[str, Any]], seeds: Sequence[int]) -> str:
    """The label of our row: ``ours``, ``ours (2 of 5 seeds)``, ``ours, so far (412 of 1,000 examples)``."""
    done = [s for s in per_seed.values() if s["complete"]]
    running = [s for s in per_seed.values() if not s["complete"]]
    if len(seeds) == 1:
        label = "ours"
    else:
        label = f"ours ({len(seeds)} seeds)" if len(done) == len(seeds) else f"ours ({len(per_seed)} of {len(seeds)} seeds)"
    if running:
        of = sum(s["of"] or s["examples"] for s in running)
        label += f", so far ({sum(s['examples'] for s in running):,} of {of:,} examples)"
    if any(s.get("two_sided") for s in per_seed.values()):  # issue 39: not the papers' one-sided radii
        label += ", two-sided"
    return label


#: a model whose smoothed classifier gives one class for at least this share of the test examples
#: has collapsed to a constant (a short budget's failure), unless the labels are that class as often
CONSTANT_SHARE = 0.9


def constant_prediction(predict: np.ndarray, label: np.ndarray) -> Optional[Dict[str, Any]]:
    """``{"class", "share", "label_share"}`` when one class is predicted for (nearly) all examples
    (:data:`CONSTANT_SHARE`) though the labels are that class far less often (at most half); else None."""
    votes = predict[predict >= 0]
    if not len(predict) or not len(votes):
        return None
    top = int(np.bincount(votes).argmax())
    share, label_share = float(np.mean(predict == top)), float(np.mean(label == top))
    if share < CONSTANT_SHARE or label_share > 0.5:
        return None
    return {"class": top, "share": share, "label_share": label_share}


#: the coverage of our intervals in the table (two-sided)
CONFIDENCE = 0.95


def _standard_error(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan


def intervals(per_seed: Dict[int, Dict[str, Any]], radii: Sequence[float]) -> Tuple[tuple, Dict[float, tuple]]:
    """Our :data:`CONFIDENCE` intervals over the sampling of the m test examples: the ACR's, mean
    +- z standard errors (normal approximation, cut at 0; several seeds: their mean standard error around
    the mean); each certified accuracy's (in %), Clopper-Pearson's exact interval for m examples at
    our (mean) count (:func:`rsmooth.metrics.clopper_pearson_interval`).  NaN without results."""
    from ..metrics import clopper_pearson_interval

    if not per_seed:
        return (math.nan, math.nan), {r: (math.nan, math.nan) for r in radii}
    m = min(s["examples"] for s in per_seed.values())
    mean_acr = float(np.mean([s["acr"] for s in per_seed.values()]))
    half = _z() * float(np.mean([s["acr_se"] for s in per_seed.values()]))
    acc = {}
    for r in radii:
        k = int(round(float(np.mean([s["accuracy"][r] for s in per_seed.values()])) * m / 100))
        acc[r] = tuple(100 * b for b in clopper_pearson_interval(k, m, 1 - CONFIDENCE))
    return (max(0.0, mean_acr - half), mean_acr + half), acc


def _interval_cell(bounds: tuple, digits: int) -> str:
    return "-" if any(math.isnan(b) for b in bounds) else f"[{bounds[0]:.{digits}f}, {bounds[1]:.{digits}f}]"


def _inside(paper: Optional[float], bounds: tuple) -> str:
    """`` (inside)``/`` (outside)``: whether the published value lies in our interval."""
    if paper is None or any(math.isnan(b) for b in bounds):
        return ""
    return " (inside)" if bounds[0] <= paper <= bounds[1] else " (outside)"


def _stats(values: List[float]) -> tuple:
    if not values:
        return math.nan, math.nan
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def _cell(mean: float, std: float, digits: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def _diff(ours: float, paper: Optional[float], digits: int) -> str:
    if paper is None or math.isnan(ours) or math.isnan(paper):
        return ""
    return f"{ours - paper:+.{digits}f}"


def _schedule_note(spec: TableSpec, budget: Budget) -> str:
    from ..engine.trainconfig import TrainConfig
    from ..presets import preset_config
    from .spec import scaled

    epochs = sorted({TrainConfig(**preset_config(r.dataset, r.method, r.sigma)[1]).resolved().epochs
                     for r in spec.rows if not r.released})
    if not epochs:
        return "no training: released models"
    return ", ".join(f"{e} -> {scaled(e, budget.epochs)}" for e in epochs)


def caption(spec: TableSpec, budget: Budget, seeds: Sequence[int], train_sizes: Dict[str, Optional[int]]) -> List[str]:
    """The lines above the table: what it is, the budget (never mistaken for the paper's), the
    protocol and the seeds; the consistency targets only where a row uses them (CAT-RS), the
    published values only where a row has them."""
    from .plan import needs_targets

    lines = [f"{spec.id}: {spec.title}"]
    target_datasets = list(dict.fromkeys(r.dataset for r in spec.rows if needs_targets(r)))
    if budget.is_paper:
        lines.append(f"Budget paper: the published protocol (schedules, full training sets"
                     f"{', consistency targets' if target_datasets else ''}, n).")
    else:
        sizes = "; ".join(f"{d} {n:,} examples" for d, n in train_sizes.items() if n)
        targets = (f"consistency targets x{budget.targets:.3g} "
                   f"({', '.join(f'{d}: {target_samples(d, budget):,} noises' for d in target_datasets)}), "
                   if target_datasets else "")
        lines.append(
            f"Budget {budget.name}, REDUCED, not the paper's protocol: epochs x{budget.epochs:.3g} "
            f"({_schedule_note(spec, budget)}, lr steps and warm-ups alike), training set x{budget.train:.3g} "
            f"({sizes or 'all'}), {targets}CERTIFY n x{budget.n:.3g}, test examples x{budget.test:.3g}"
            + ("." if budget.trains_as_paper else "; the training runs evaluate the test set after their last epoch only."))
    for d in spec.datasets:
        p = budget_protocol(spec.protocol(d), budget)
        which = f"every {p['skip']}th test example" if p["skip"] > 1 else "every test example"
        lines.append(f"Certification ({d}): CERTIFY (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918) n0 = "
                     f"{p['n0']:,}, n = {p['n']:,}, alpha = {p['alpha']:g}, {which}"
                     + (f", at most {p['max']:,}" if p.get("max") else "") + ".")
    ours = (f"mean ± std (ddof 1) over {len(seeds)} seeds ({', '.join(map(str, seeds))})" if len(seeds) > 1
            else f"seed {seeds[0]}")
    runs = f"mean ± std over {spec.published_seeds} seeds" if spec.published_seeds > 1 else "one run"
    paper = f"; paper: {runs}; difference = ours - paper" if any(r.paper is not None for r in spec.rows) else ""
    lines.append(f"Ours: {ours}{paper}; certified accuracy in %.")
    lines.append(f"{CONFIDENCE:.0%} interval: over the sampling of the test examples certified "
                 f"(certified accuracy: Clopper-Pearson, exact; ACR: mean ± {_z():.2f} standard errors)"
                 + (", around the mean at one seed's examples" if len(seeds) > 1 else "")
                 + "; it leaves out the variation between training runs"
                 + (" (the ± std)" if len(seeds) > 1 else "")
                 + (" and the paper's own error. (inside)/(outside): whether the paper's value lies in it."
                    if paper else "."))
    return lines


def _z() -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + CONFIDENCE / 2))


def render(spec: TableSpec, budget: Budget, seeds: Sequence[int], out: Path,
           train_sizes: Dict[str, Optional[int]], write: bool = True) -> str:
    """The markdown table (also written to ``out/table.md``, numbers to ``out/results.json``, unless
    ``write`` is False)."""
    results = row_results(spec, out, seeds)
    radii = [] if spec.acr_only else list(spec.radii)
    many = len(spec.datasets) > 1  # a dataset column (e.g. Jeong et al. 2023 Table 12: MNIST and CIFAR-10)
    head = [*(["dataset"] if many else []), "sigma", "method", "", "ACR", *[f"{r:.2f}" for r in radii]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (3 + many) + "---:|" * (len(head) - 3 - many)]
    record, prev = [], None
    for row, per_seed in zip(spec.rows, results):
        first = (row.dataset, row.sigma) != prev
        prev = (row.dataset, row.sigma)
        sig = ([row.dataset if first else ""] if many else []) + [f"{row.sigma:.2f}" if first else ""]
        row_lines, row_record = _row(row, per_seed, seeds, radii, sig)
        lines += row_lines
        record.append(row_record)
    costs = stage_costs(spec, out, seeds)
    stages = ["", "What each step cost (wall time, including any time the machine was shared or the job suspended; "
              "training: the sum of its epochs):",
              *[f"- {c}" for c in stage_notes(costs, len(seeds) > 1)]] if costs else []
    text = "\n".join(caption(spec, budget, seeds, train_sizes) + [""] + lines + [""]
                     + [f"Note: {n}" for n in _notes(spec, budget, seeds, results, radii)] + stages)
    if write:
        atomic_write_text(out / "table.md", text + "\n")
        atomic_write_text(out / "results.json", json.dumps({"table": spec.id, "budget": budget.name,
                                                            "seeds": list(seeds), "rows": record, "costs": costs},
                                                           indent=1, default=_json) + "\n")
    return text


def _row(row, per_seed: Dict[int, Dict[str, Any]], seeds: Sequence[int], radii: List[float],
         sig: List[str]) -> Tuple[List[str], Dict[str, Any]]:
    """One row's markdown lines (ours, the interval, the paper's, the difference; ``sig`` its first
    cells) and its record for results.json."""
    acr_m, acr_s = _stats([r["acr"] for r in per_seed.values()])
    acc = {r: _stats([s["accuracy"][r] for s in per_seed.values()]) for r in radii}
    acr_ci, acc_ci = intervals(per_seed, radii)
    p = row.paper
    blank = [""] * (len(sig) + 1)
    ours = _ours(per_seed, seeds)
    if any(s["constant"] for s in per_seed.values()):
        ours += " " + CONSTANT_MARK
    lines = ["| " + " | ".join([*sig, row.label, ours, _cell(acr_m, acr_s, 3),
                                *[_cell(*acc[r], 1) for r in radii]]) + " |"]
    if per_seed:
        lines.append("| " + " | ".join([*blank, f"{CONFIDENCE:.0%} interval", _interval_cell(acr_ci, 3),
                                        *[_interval_cell(acc_ci[r], 1) for r in radii]]) + " |")
    if p is not None:
        paper_acc = [p.accuracy_at(r) for r in radii]
        std = getattr(p, "acr_std", None)
        lines.append("| " + " | ".join([*blank, "paper", _cell(p.acr, math.nan if std is None else std, 4 if std else 3),
                                        *["" if a is None else f"{a:.1f}" for a in paper_acc]]) + " |")
        lines.append("| " + " | ".join([*blank, "difference", _diff(acr_m, p.acr, 3) + _inside(p.acr, acr_ci),
                                        *[_diff(acc[r][0], a, 1) + _inside(a, acc_ci[r])
                                          for r, a in zip(radii, paper_acc)]]) + " |")
    record = {"label": row.label, "dataset": row.dataset, "method": row.method, "sigma": row.sigma,
              "hparams": row.hparams, "run": row.key, "seeds": {str(k): v for k, v in per_seed.items()},
              "acr": {"mean": acr_m, "std": acr_s},
              "accuracy": {f"{r:g}": {"mean": m, "std": s, "interval": list(acc_ci[r])} for r, (m, s) in acc.items()},
              "acr_interval": list(acr_ci), "confidence": CONFIDENCE,
              "paper": None if p is None else {
                  "acr": p.acr, "accuracy": {f"{r:g}": v for r, v in p.accuracy.items()},
                  "inside": {"acr": _inside(p.acr, acr_ci).strip(" ()") or None,
                             **{f"{r:g}": _inside(p.accuracy_at(r), acc_ci[r]).strip(" ()") or None for r in radii}}}}
    return lines, record


def _notes(spec: TableSpec, budget: Budget, seeds: Sequence[int], results, radii: List[float]) -> List[str]:
    """The notes under the table: constant predictors, orderings, radii beyond reach, rows not
    reproduced, runs missing, certifications still running."""
    notes = _constant_notes(spec, results) + _orderings(spec, results) + _reach(spec, budget, radii)
    if spec.not_reproduced:
        notes.append("not reproduced (rsmooth does not train them as printed): " + "; ".join(spec.not_reproduced))
    missing = sum(len(seeds) - len(per_seed) for per_seed in results)
    if missing:
        notes.append(f"-: not certified yet ({missing} of {len(spec.rows) * len(seeds)} runs missing); rerun the "
                     f"command to continue")
    if any(not s["complete"] for per_seed in results for s in per_seed.values()):
        notes.append("so far: a certification still running (or stopped), counted on the examples it has "
                     "certified up to now, with the intervals of that many")
    return notes


CONSTANT_MARK = "(constant †)"


def _constant_notes(spec: TableSpec, results: List[Dict[int, Dict[str, Any]]]) -> List[str]:
    """One note for the rows whose model predicts one class for (nearly) all test examples."""
    found = []
    for row, per_seed in zip(spec.rows, results):
        for seed, r in per_seed.items():
            c = r["constant"]
            if c:
                found.append(f"{row.label} sigma {row.sigma:g}{f' seed {seed}' if len(per_seed) > 1 else ''}: "
                             f"class {c['class']} for {c['share']:.0%} of the examples (labels: {c['label_share']:.0%})")
    if not found:
        return []
    return ["† constant: the model predicts one class for (nearly) all test examples, so its certified accuracy "
            "is that class's share of them (at every radius it certifies), not robustness; typical of a budget too "
            "short for the method (train longer: a larger --budget). " + "; ".join(found)]


def _json(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _reach(spec: TableSpec, budget: Budget, radii: Sequence[float]) -> List[str]:
    """Notes for the radius columns the protocol's n cannot reach (every sample voting c_A)."""
    from ..smoothing import max_certifiable_radius

    notes = []
    for dataset, sigma in dict.fromkeys((r.dataset, r.sigma) for r in spec.rows):
        p = budget_protocol(spec.protocol(dataset), budget)
        top = max_certifiable_radius(p["n"], p["alpha"], sigma)
        if radii and top < max(radii):
            notes.append(f"{dataset} sigma {sigma:g}: n = {p['n']:,} certifies no radius above {top:.3f} "
                         f"(Cohen et al. 2019, Sec. 3.2), so the columns beyond it are 0")
    return notes


def _orderings(spec: TableSpec, results: List[Dict[int, Dict[str, Any]]]) -> List[str]:
    """Per (dataset, sigma): the rows by our mean ACR and how many pairs the paper orders alike."""
    notes = []
    groups: Dict[tuple, List[tuple]] = {}
    for row, per_seed in zip(spec.rows, results):
        if per_seed and row.paper is not None:
            groups.setdefault((row.dataset, row.sigma), []).append(
                (row.label, float(np.mean([r["acr"] for r in per_seed.values()])), row.paper.acr))
    for (dataset, sigma), rows in groups.items():
        if len(rows) < 2:
            continue
        pairs = list(combinations(rows, 2))
        alike = sum((a[1] - b[1]) * (a[2] - b[2]) > 0 for a, b in pairs)
        ours = " < ".join(r[0] for r in sorted(rows, key=lambda r: r[1]))
        paper = " < ".join(r[0] for r in sorted(rows, key=lambda r: r[2]))
        notes.append(f"ACR order, {dataset} sigma {sigma:g}: ours {ours}; paper {paper}; "
                     f"{alike} of {len(pairs)} pairs ordered alike")
    return notes
