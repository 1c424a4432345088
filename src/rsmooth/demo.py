"""The end-to-end demo: train -> certify -> analyze on the built-in ``digits`` data.

Runs in a few minutes on a laptop CPU with no download.  Every step is resumable: rerunning
with the same settings continues where a previous run stopped.  The settings are recorded in
``out/demo.json``; a rerun with other settings is refused unless ``overwrite``.

Reproducibility: every random draw is seeded, and the demo runs PyTorch on a fixed number of
intra-op threads (:data:`THREADS`, whatever the machine's core count), because the thread count
changes the order of float sums in the convolutions' gradients, and 30 epochs of training amplify
those last-bit differences into other weights.  With the count fixed, the numbers depend only on the
CPU's kernels (its instruction set) and the library versions.
"""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Sequence

import torch

from .engine import TrainConfig, run_certification, train
from .errors import RsmoothError, setting
from .fileio import atomic_write_text
from .paths import check_output_dir
from .report import analyze

SETTINGS_NAME = "demo.json"
PLOT_NAME = "certified_accuracy.png"
TABLE_NAME = "table.md"
#: intra-op threads of the demo, fixed so that the results do not depend on the machine's core
#: count; 2 is as fast as torch's default on a 2-core machine (1 thread took 1.65x as long)
THREADS = 2
ALPHA = 0.001
N0 = 100


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``; the previous count is restored after."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _radius_columns(table: str) -> List[str]:
    """The radius headers (``0.00``, ``0.25``, ...) of a markdown table from ``analyze``."""
    head = [c.strip() for c in table.splitlines()[0].strip().strip("|").split("|")]
    return head[head.index("ACR") + 1:] if "ACR" in head else []


def demo_report(table: str, root: Path, runs: Sequence[Path], alpha: float = ALPHA) -> str:
    """What the demo prints (and writes to ``root/table.md``): ``table`` with what its columns mean
    and where the run folders, the table and the plot are."""
    radii = " ".join(_radius_columns(table))
    return "\n".join([
        f"Certified accuracy (%) of the smoothed classifiers at each l2 radius r (columns {radii}: r in "
        f"[0, 1] pixel units), ACR = average certified radius:",
        "",
        table,
        "",
        f"- cell at r: Cohen et al.'s approximate certified accuracy, the % of the test digits "
        f"classified correctly with a certified radius >= r; each certificate holds with probability >= "
        f"1 - alpha = {1 - alpha:g} (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Sec. 4)",
        "- ACR: the mean over the test digits of the certified radius, counted as 0 where the smoothed "
        "classifier is wrong or abstains",
        f"- run folders (checkpoint.pt, train.log, certify.tsv): {', '.join(str(r) for r in runs)}",
        f"- table: {root / TABLE_NAME}; plot: {root / PLOT_NAME}",
    ])


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
            now = ", ".join(f"{k}={v}" for k, v in settings.items() if not isinstance(old, dict) or old.get(k) != v)
            raise RsmoothError(f"{root} holds a demo run with {had} (now {now}); pass {setting('overwrite', True)} to replace it "
                               f"or choose another {setting('out')}")
    if overwrite:
        for p in ours:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(settings_path, json.dumps(settings) + "\n")


def run_demo(out: str = "demo_out", sigmas: Sequence[float] = (0.25, 0.5), n: int = 1000,
             epochs: int = 30, seed: int = 0, overwrite: bool = False,
             log: Callable[[str], None] = print) -> str:
    """Train a Gaussian-augmented ``digits_cnn`` per sigma, certify the 360 test digits with
    n0 = 100, n = ``n``, alpha = 0.001, and return the table with what it means
    (:func:`demo_report`; also written to ``out/table.md``, with the plot in
    ``out/certified_accuracy.png``).  PyTorch runs on :data:`THREADS` intra-op thread(s) meanwhile.

    ``overwrite`` deletes the outputs of an earlier demo in ``out`` (and nothing else) first;
    without it, an earlier demo with other settings is an error.
    """
    root = check_output_dir(out)
    _prepare(root, {"sigmas": [float(s) for s in sigmas], "n": n, "epochs": epochs, "seed": seed,
                    "threads": THREADS}, overwrite)
    with intra_op_threads(THREADS):
        return _run(root, sigmas, n, epochs, seed, log)


def _run(root: Path, sigmas: Sequence[float], n: int, epochs: int, seed: int,
         log: Callable[[str], None]) -> str:
    results, runs = [], []
    for sigma in sigmas:
        run = root / f"gaussian_{sigma:.2f}"
        log(f"== training digits_cnn with Gaussian noise, sigma = {sigma} ({epochs} epochs)")
        train(TrainConfig(dataset="digits", method="gaussian", hparams={"sigma": sigma},
                          epochs=epochs, seed=seed), str(run), resume=True, log=log)
        log(f"== certifying the 360 test digits (n0 = {N0}, n = {n}, alpha = {ALPHA})")
        results.append(run_certification(str(run), str(run / "certify.tsv"), n0=N0, n=n,
                                          alpha=ALPHA, seed=seed, log=log))
        runs.append(run)
    labels = [f"Gaussian sigma={s}" for s in sigmas]
    plot = root / PLOT_NAME
    report = demo_report(analyze([str(p) for p in results], labels=labels, plot=str(plot)), root, runs)
    atomic_write_text(root / TABLE_NAME, report + "\n")
    log(f"== plot: {plot}")
    return report
