"""The end-to-end demo: train -> certify -> analyze on the built-in ``digits`` data.

Runs in a few minutes on a laptop CPU with no download.  Every step is resumable: rerunning
with the same settings continues where a previous run stopped.  The settings are recorded in
``out/demo.json``; a rerun with other settings is refused unless ``overwrite``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Sequence

from .engine import TrainConfig, run_certification, train
from .errors import RsmoothError
from .report import analyze

SETTINGS_NAME = "demo.json"
PLOT_NAME = "certified_accuracy.png"
TABLE_NAME = "table.md"


def _prepare(root: Path, settings: Dict[str, Any], overwrite: bool) -> None:
    """Refuse to mix settings with an earlier demo in ``root``, or delete its outputs."""
    settings_path = root / SETTINGS_NAME
    ours = sorted(root.glob("gaussian_*")) + [root / n for n in (SETTINGS_NAME, TABLE_NAME, PLOT_NAME)]
    ours = [p for p in ours if p.exists()]
    if ours and not overwrite:
        try:
            old = json.loads(settings_path.read_text())
        except (OSError, ValueError):
            old = None
        if old != settings:
            had = ", ".join(f"{k}={v}" for k, v in old.items()) if isinstance(old, dict) else "unknown settings"
            raise RsmoothError(f"{root} holds a demo run with {had}; pass --overwrite to replace it "
                               f"or choose another --out")
    if overwrite:
        for p in ours:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
    root.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(json.dumps(settings) + "\n")


def run_demo(out: str = "demo_out", sigmas: Sequence[float] = (0.25, 0.5), n: int = 1000,
             epochs: int = 30, seed: int = 0, overwrite: bool = False,
             log: Callable[[str], None] = print) -> str:
    """Train a Gaussian-augmented ``digits_cnn`` per sigma, certify the 360 test digits with
    n0 = 100, n = ``n``, alpha = 0.001, and return the table (also written to
    ``out/table.md``, with the plot in ``out/certified_accuracy.png``).

    ``overwrite`` deletes the outputs of an earlier demo in ``out`` (and nothing else) first;
    without it, an earlier demo with other settings is an error.
    """
    root = Path(out)
    _prepare(root, {"sigmas": [float(s) for s in sigmas], "n": n, "epochs": epochs, "seed": seed}, overwrite)
    results = []
    for sigma in sigmas:
        run = root / f"gaussian_{sigma:.2f}"
        log(f"== training digits_cnn with Gaussian noise, sigma = {sigma} ({epochs} epochs)")
        train(TrainConfig(dataset="digits", method="gaussian", hparams={"sigma": sigma},
                          epochs=epochs, seed=seed), str(run), resume=True, log=log)
        log(f"== certifying the 360 test digits (n0 = 100, n = {n}, alpha = 0.001)")
        results.append(run_certification(str(run), str(run / "certify.tsv"), n0=100, n=n,
                                          alpha=0.001, seed=seed, log=log))
    labels = [f"Gaussian sigma={s}" for s in sigmas]
    plot = root / PLOT_NAME
    table = analyze([str(p) for p in results], labels=labels, plot=str(plot))
    (root / TABLE_NAME).write_text(table + "\n")
    log(f"== plot: {plot}")
    return table
