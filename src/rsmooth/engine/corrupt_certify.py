"""Certify a model on every (corruption, severity) of a corruption benchmark, one TSV each.

``certify_corruptions(checkpoint, folder, corruptions="all", severities="all")`` runs one
:class:`~rsmooth.engine.certify.CertifyJob` per corrupted test set, into
``folder/<corruption>-s<severity>.tsv`` (``folder/<corruption>.tsv`` for a corruption without
levels, as MNIST-C's), so the whole folder resumes, shards and merges file by file, and
``rsmooth analyze --corruptions folder`` turns it into the mACR tables of Jeong, Kim, Shin 2023
(CAT-RS, arXiv 2212.09000, App. H-I).

``all`` is the benchmark's set (:data:`rsmooth.corruptions.BENCHMARK`: CIFAR-10-C's 15 or
MNIST-C's 15); ``held-out`` adds CIFAR-10-C's four validation corruptions.  Datasets with a
published corrupted copy (``cifar10-c``, ``cifar100-c``, ``mnist-c``) read it; any other dataset
gets its corruptions generated (:mod:`rsmooth.data.generated`).
"""
from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Union

from ..corruptions import BENCHMARK, HELD_OUT, default_suite, get_suite
from ..errors import RsmoothError, check
from ..paths import check_output_dir
from . import distributed

__all__ = ["PlanItem", "corruption_plan", "certify_corruptions", "preview_corruptions", "parse_corruptions",
           "parse_severities"]

Names = Union[str, Sequence[str]]
Levels = Union[None, str, int, Sequence[int]]


@dataclass(frozen=True)
class PlanItem:
    """One corrupted test set to certify and the file it goes to."""

    corruption: str
    severity: Optional[int]
    file: str


def parse_corruptions(text: Names) -> List[str]:
    """``"fog,snow"`` / ``["fog", "snow"]`` / ``"all"`` -> a list of tokens (names, ``all``, ``held-out``)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = [str(t).strip() for t in items if str(t).strip()]
    check(bool(out), "--corruption is empty; give a name, a comma-separated list, 'all' or 'held-out'")
    return out


def parse_severities(text: Levels) -> Optional[List[int]]:
    """``None`` or ``"all"`` -> None (the benchmark's levels); ``"3"``, ``"1,2"``, ``3`` -> a list."""
    if text is None or (isinstance(text, str) and text.strip() == "all"):
        return None
    if isinstance(text, int):
        return [text]
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        return [int(str(t).strip()) for t in items]
    except ValueError:
        raise RsmoothError(f"--severity {text!r}: expected a level like 3, a list like 1,3,5, or 'all'") from None


def corruption_plan(dataset: str, corruptions: Names = "all", severities: Levels = "all",
                    suite: Optional[str] = None, log: Callable[[str], None] = print) -> List[PlanItem]:
    """The (corruption, severity, file) list for ``dataset``, in the benchmark's order.

    A published corrupted dataset offers its files (CIFAR-C: severities 1-5; MNIST-C: one level
    each); any other dataset offers the corruptions of ``suite`` (default: MNIST-C's for grey
    images, CIFAR-10-C's for colour ones), whose default level is the benchmark's.  Severities
    asked for apply to the corruptions that have levels; the others get their one file.
    """
    from ..data import DATASETS, published_release

    release = published_release(dataset)
    if release:
        check(suite is None, f"{dataset} is a published corrupted dataset; drop --corruption-suite")
        suite_name, available = release.suite, list(release.published_corruptions)
    else:
        suite_name = suite or default_suite(DATASETS.get(dataset).info.input_shape[0])
        available = get_suite(suite_name).names()

    def files_of(name: str, asked: Optional[List[int]]) -> List[Optional[int]]:
        """The levels certified for ``name``: those asked for when it has levels (MNIST-C's
        loader refuses any), else all of a CIFAR-C benchmark's, else its one (default) level."""
        levels = list(release.severities) if release else list(get_suite(suite_name).get(name).severities)
        if asked is not None and (levels or release):
            bad = [s for s in asked if s not in levels]
            check(not bad, f"corruption {name} ({suite_name}) has " + (
                f"severities {', '.join(map(str, levels))}, not {', '.join(map(str, bad))}; pass --severity among "
                f"them or 'all'" if levels else "one published level; drop --severity"))
            return asked
        return (levels if suite_name == "cifar10-c" else []) or [None]

    names: List[str] = []
    for token in parse_corruptions(corruptions):
        if token == "all":
            group = list(BENCHMARK[suite_name])
        elif token == "held-out":
            group = list(HELD_OUT[suite_name])
            check(bool(group), f"{dataset}: the {suite_name} benchmark has no held-out corruptions")
        else:
            check(token in available, f"unknown corruption {token!r} for {dataset}; choose from: "
                  f"{', '.join(available)}, or 'all' / 'held-out'")
            group = [token]
        missing = [n for n in group if n not in available]
        if missing:  # frost needs the CIFAR-10-C authors' photographs, so it cannot be generated
            log(f"note: {', '.join(missing)} cannot be made for {dataset} (see rsmooth.corruptions); skipped")
        names += [n for n in group if n in available and n not in names]
    check(bool(names), f"{dataset}: none of the corruptions asked for is available")
    asked = parse_severities(severities)
    plan: List[PlanItem] = []
    for name in names:
        for level in files_of(name, asked):
            file = f"{name}.tsv" if level is None else f"{name}-s{level}.tsv"
            plan.append(PlanItem(name, level, file))
    return plan


def certify_corruptions(checkpoint: str, out: Union[str, Path], *, corruptions: Names = "all",
                        severities: Levels = "all", dataset: Optional[str] = None,
                        corruption_suite: Optional[str] = None, device: Optional[str] = None,
                        trust_pickle: bool = False, trust_code: bool = False,
                        model_options: Optional[dict] = None, log: Callable[[str], None] = print,
                        **kwargs: Any) -> Path:
    """Certify every item of :func:`corruption_plan` into the folder ``out``; returns ``out``.

    ``kwargs`` are further :class:`~rsmooth.engine.certify.CertifyJob` settings (the keywords of
    :func:`~rsmooth.engine.certify.run_certification`: n0, n, alpha, skip, max, seed, shard,
    corruption_seed, ...), checked once before anything is written; each file is that job with
    its corruption and file, so it is resumed, sharded and merged as a single certification is.
    Under ``torchrun`` all files run in one process group.  ``trust_pickle``, ``trust_code`` and
    ``model_options`` load the checkpoint as there.
    """
    from .certify import CertifyJob
    from .checkpoint import resolve_device

    folder = check_output_dir(out)
    job = CertifyJob(checkpoint, str(folder), dataset=dataset, corruption_suite=corruption_suite, device=device,
                     trust_pickle=trust_pickle, trust_code=trust_code, model_options=model_options, log=log,
                     **kwargs)
    if job.dataset is None:
        job = dataclasses.replace(job, dataset=job.load().dataset)
    w = distributed.world()
    if not w.main:
        log = distributed.quiet
    plan = corruption_plan(job.dataset, corruptions, severities, corruption_suite, log)
    folder.mkdir(parents=True, exist_ok=True)
    dev = distributed.rank_device(resolve_device(device), w)
    with distributed.process_group(dev, timeout=datetime.timedelta(days=7)):
        for k, item in enumerate(plan, 1):
            level = "" if item.severity is None else f", severity {item.severity}"
            log(f"[{k}/{len(plan)}] {item.corruption}{level} -> {folder / item.file}")
            dataclasses.replace(job, out=str(folder / item.file), corruption=item.corruption,
                                severity=item.severity).run()
    return folder


def preview_corruptions(dataset: str, out: Union[str, Path], *, corruptions: Names = "all",
                        severities: Levels = "all", examples: int = 4, start: int = 0, seed: int = 0,
                        suite: Optional[str] = None, data_dir: Optional[str] = None,
                        log: Callable[[str], None] = print) -> Path:
    """A PNG (or .pdf/.svg) grid: the clean test images ``start..start+examples-1`` and, column
    by column, the same images under each item of :func:`corruption_plan`; returns ``out``."""
    import torch

    from ..data import get_dataset, published_release
    from ..report import plot_corruptions
    from ..smoothing import validate_count

    examples = validate_count("--examples", examples)
    plan = corruption_plan(dataset, corruptions, severities, suite, log)
    # a generated set wraps the clean one, shown first; a published set's clean data may be absent
    sets = [] if published_release(dataset) else [("clean", get_dataset(dataset, "test", data_dir=data_dir))]
    sets += [(p.corruption if p.severity is None else f"{p.corruption} s{p.severity}",
              get_dataset(dataset, "test", data_dir=data_dir, corruption=p.corruption, severity=p.severity,
                          corruption_seed=seed, corruption_suite=suite)) for p in plan]
    n = len(sets[0][1])
    check(start < n, f"--start {start} is past the last test example (index {n - 1})")
    idx = torch.arange(start, min(start + examples, n))
    columns = [(label, data.get_batch(idx)[0].numpy()) for label, data in sets]
    return plot_corruptions(columns, out, title=f"{dataset} test images {start}-{int(idx[-1])}")
