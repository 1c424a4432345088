"""``rsmooth reproduce TABLE``: train every row of a paper table from its preset, certify it with
the table's protocol, and print the table beside the published one.

Budgets (:data:`BUDGETS`): ``paper`` is the published protocol; ``small`` and ``smoke`` scale
epochs, training set, consistency-target noises, n and test examples by factors that the table's
caption states.  Every step is an ordinary run folder (:mod:`rsmooth.reproduce.plan`), so the
command can be killed and rerun until it finishes, spread over local processes (``jobs``) or
printed as independent commands for a cluster scheduler.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import RsmoothError, check, setting
from ..fileio import atomic_write_text
from ..paths import check_output_dir
from .plan import Step, commands, plan
from .run import RunStep, run_steps
from .render import render
from .spec import BUDGETS, TABLES, Budget, Row, TableSpec, get_table, parse_budget, select
from . import released  # noqa: F401  (registers the tables of released models)

__all__ = ["BUDGETS", "TABLES", "Budget", "Row", "Step", "TableSpec", "get_table", "list_tables", "parse_budget",
           "plan", "reproduce"]


def list_tables(budget: str = "small") -> str:
    """What ``rsmooth reproduce --list`` prints: each table, what it trains, what it needs, the work
    at the paper budget and the wall time on a CPU at ``budget`` (:mod:`rsmooth.reproduce.cost`)."""
    from .cost import assumption, describe, describe_cpu, estimate
    from .plan import needs_targets

    b = parse_budget(budget)
    out = []
    for table_id in TABLES.names():
        spec = get_table(table_id)
        targets = any(needs_targets(r) for r in spec.rows)
        sigmas = sorted({r.sigma for r in spec.rows})
        seeds = list(range(spec.published_seeds))
        trained = [r for r in spec.rows if not r.released]
        at = f"sigma {', '.join(f'{s:g}' for s in sigmas)}"
        what = (f"trains {len(trained)} models per seed ({len({r.method for r in trained})} methods, {at})" if trained
                else f"certifies {len(spec.rows)} released models at {at} (no training; their files under OUT/weights)")
        out.append(f"{table_id}: {spec.title}\n    {what}"
                   + (" + the sigma0 = 0.25 Gaussian model's consistency targets" if targets else "")
                   + f"; data: {', '.join(spec.datasets)}"
                   + (f"; not reproduced: {len(spec.not_reproduced)} printed rows" if spec.not_reproduced else "")
                   + f"\n    work at the paper budget, {len(seeds)} seed{'s' * (len(seeds) > 1)}: "
                   + describe(estimate(spec, BUDGETS["paper"], seeds))
                   + f"\n    {describe_cpu(estimate(spec, b, seeds), b)}")
    return "\n".join(out + [assumption()])


def _check_folder(out: Path, spec: TableSpec, budget: Budget) -> None:
    """``out/reproduce.json`` ties the folder to one table and budget (seeds may be added).  An
    empty one is taken as absent: earlier versions, killed at its first write (not atomic), left
    it so before any step ran."""
    record = out / "reproduce.json"
    mine = {"table": spec.id, "budget": budget.name}
    if record.exists() and record.stat().st_size > 0:
        try:
            old = json.loads(record.read_text())
        except ValueError:
            old = None
        check(isinstance(old, dict), f"{record} is not a reproduction record (damaged?); restore it or "
              f"delete it to tie {out} to {spec.id} at budget {budget.name}")
        for k, v in mine.items():
            check(old.get(k) == v, f"{out} holds a reproduction of {old.get('table')} at budget {old.get('budget')}, "
                  f"not {spec.id} at {budget.name}; choose another {setting('out')}")
        return
    if record.exists():
        warnings.warn(f"{record} was empty (a run was stopped while writing it, before any step); "
                      f"it now ties {out} to {spec.id} at budget {budget.name}")
    atomic_write_text(record, json.dumps(mine, indent=1) + "\n")


#: the most seeds and parallel steps a reproduction takes (each seed trains every row again)
MAX_SEEDS, MAX_JOBS = 100, 256


def reproduce(table: str, out: str, *, budget: str = "small", seeds: Optional[int] = None, jobs: int = 1,
              methods: Optional[Sequence[str]] = None, sigmas: Optional[Sequence[float]] = None,
              print_commands: bool = False, collect: bool = False, data_dir: Optional[str] = None,
              device: Optional[str] = None, log: Callable[[str], None] = print,
              run_step: Optional[RunStep] = None) -> str:
    """Run (or continue) the reproduction of ``table`` into ``out`` and return the table (markdown;
    with ``print_commands`` the steps' commands instead, running nothing; with ``collect`` the
    table of what is done, running nothing).  ``methods`` and ``sigmas`` keep only those rows;
    ``seeds`` defaults to the number the table's published values are over (5 for tables of means).
    With ``jobs`` 1 each step runs through ``run_step`` (its ``rsmooth`` arguments -> exit status;
    default: a process of its own, :func:`~rsmooth.reproduce.run.run_in_subprocess`)."""
    from .plan import _train_sizes

    spec = get_table(table)
    if methods is not None or sigmas is not None:
        spec = select(spec, None if methods is None else list(methods), None if sigmas is None else list(sigmas))
    b = parse_budget(budget)
    seeds = spec.published_seeds if seeds is None else seeds
    check(isinstance(seeds, int) and 1 <= seeds <= MAX_SEEDS,
          f"--seeds must be 1 to {MAX_SEEDS} (the papers average over 5 at most), got {seeds}")
    check(isinstance(jobs, int) and 1 <= jobs <= MAX_JOBS, f"--jobs must be 1 to {MAX_JOBS} (processes), got {jobs}")
    check(not (print_commands and collect), "--print-commands and --collect exclude each other; pick one")
    if device is not None and not (print_commands or collect):  # printed commands may run elsewhere
        from ..engine.checkpoint import resolve_device

        resolve_device(device)  # here, not at the first step
    from ..engine import distributed

    if distributed.world().size > 1:
        raise RsmoothError("reproduce runs its steps itself; under torchrun, run the steps of "
                           "'rsmooth reproduce ... --print-commands' (each works under torchrun)")
    root = check_output_dir(out)
    seed_list = list(range(seeds))
    if collect and not root.exists():
        log(f"Note: {root} does not exist, so this table is empty and written nowhere; check --out, or start "
            f"the reproduction without --collect")
        return render(spec, b, seed_list, root, _train_sizes(spec, b, data_dir), write=False)
    root.mkdir(parents=True, exist_ok=True)
    _check_folder(root, spec, b)
    steps = plan(spec, b, seed_list, root, data_dir=data_dir, device=device)
    if print_commands:
        return commands(steps, root / "commands")
    if not collect:
        from .cost import describe_cpu, estimate

        log(f"{spec.id}, {len(seed_list)} seed(s): {describe_cpu(estimate(spec, b, seed_list), b)}")
        run_steps(steps, jobs, root / "logs", log, run_step)
    return render(spec, b, seed_list, root, _train_sizes(spec, b, data_dir))
