"""The steps of a reproduction: ordinary ``rsmooth train`` / ``targets`` / ``certify`` commands,
each writing its own run folder (so each is skipped when done and resumed when interrupted),
run in this process, over K local processes (``run.py``), or printed for a cluster scheduler.

Layout under ``OUT``: ``runs/<dataset>/<method>_<sigma>[_<hparams>]/seed<k>/`` (checkpoint.pt,
certify.tsv), ``runs/<dataset>/targets_0.25/seed<k>.npy`` (CAT-RS consistency targets of the
sigma0 = 0.25 Gaussian model of that seed, shared by every sigma: Jeong, Kim, Shin 2023, arXiv
2212.09000, App. C.5), ``logs/`` (one log per step run in a subprocess), ``reproduce.json``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..fileio import atomic_write_text
from ..engine.pipeline import SIGMA0
from ..presets import preset_config
from .spec import Budget, Row, TableSpec, budget_protocol, scaled, split_size, target_samples

#: method hyperparameters counted in epochs, scaled with the schedule
EPOCH_HPARAMS = ("warmup", "eps_double_epoch")
STAGES = ("train", "targets", "train (needs targets)", "certify")


@dataclass
class Step:
    """One command: ``argv`` of ``rsmooth``; ``out`` what it writes; ``deps`` the outs it reads;
    ``settings`` what its argv sets, for estimates without parsing it (train: ``config``, the
    ``TrainConfig``; targets: ``num_samples``, ``train_subset``; certify: ``n0``, ``n``, ``skip``,
    ``max``, ``start``)."""

    kind: str  # train | targets | certify
    title: str
    argv: List[str]
    out: Path
    deps: List[Path] = field(default_factory=list)
    stage: int = 0
    settings: Dict[str, Any] = field(default_factory=dict)

    def command(self) -> str:
        import shlex

        return "rsmooth " + " ".join(shlex.quote(a) for a in self.argv)


def needs_targets(row: Row) -> bool:
    """Whether ``row``'s method, with its preset and printed hyperparameters, reads consistency targets."""
    from ..methods import create_method

    if row.released:
        return False
    hp = {**preset_config(row.dataset, row.method, row.sigma)[1].get("hparams", {}), **row.hparams}
    return "targets" in create_method(row.method, **hp).requires


def train_argv(dataset: str, method: str, sigma: float, hparams: Dict[str, Any], budget: Budget, seed: int,
               out: Path, train_size: Optional[int], targets: Optional[Path] = None,
               extra: Sequence[str] = ()) -> List[str]:
    """``rsmooth train`` arguments of a row under ``budget``: the preset, the row's
    hyperparameters, the schedule scaled by ``budget.epochs``, ``train_size`` examples; below the
    paper's schedule (``Budget.trains_as_paper``) the test set is evaluated after the last epoch only (the per-epoch
    evaluation took most of a smoke run's training time, and the table does not use it)."""
    return train_run(dataset, method, sigma, hparams, budget, seed, out, train_size, targets, extra)[0]


def train_run(dataset: str, method: str, sigma: float, hparams: Dict[str, Any], budget: Budget, seed: int,
              out: Path, train_size: Optional[int], targets: Optional[Path] = None,
              extra: Sequence[str] = ()) -> Tuple[List[str], Any]:
    """(:func:`train_argv`, the ``TrainConfig`` it gives, ``extra``'s run-time flags such as
    --data-dir aside): both from the same fields."""
    from ..engine.runconfig import field_flag, hparam_flags
    from ..engine.trainconfig import TrainConfig

    name, fields = preset_config(dataset, method, sigma)
    hp = {**fields.get("hparams", {}), **hparams}
    changed = {k: v for k, v in hparams.items() if fields.get("hparams", {}).get(k) != v}
    schedule = _scaled_schedule(fields, hp, method, budget, changed)
    argv = ["train", "--preset", name] if name else ["train", "--dataset", dataset, "--method", method,
                                                      "--sigma", f"{sigma:g}"]
    for k, v in schedule.items():
        argv += [field_flag(k), *map(str, v if isinstance(v, list) else [v])]
    argv += hparam_flags(method, changed)
    given = {**schedule, "train_subset": train_size, "targets": None if targets is None else str(targets),
             "seed": seed}
    for k in ("train_subset", "targets", "seed"):
        if given[k] is not None:
            argv += [field_flag(k), str(given[k])]
    config = TrainConfig(**{**fields, **{k: v for k, v in given.items() if v is not None},
                            "hparams": {**hp, **changed}}).resolved()
    return argv + [*extra, "--out", str(out), "--resume"], config


def _scaled_schedule(fields: Dict[str, Any], hp: Dict[str, Any], method: str, budget: Budget,
                     changed: Dict[str, Any]) -> Dict[str, Any]:
    """The schedule fields set under ``budget`` (epochs, milestones or lr_step, eval_every,
    eval_examples); the epoch-counted hyperparameters scaled into ``changed``."""
    from ..engine.trainconfig import TrainConfig
    from ..methods import create_method

    out: Dict[str, Any] = {}
    c = TrainConfig(**{**fields, "hparams": hp}).resolved()
    if budget.epochs < 1:
        out["epochs"] = scaled(c.epochs, budget.epochs)
        if c.milestones:
            out["milestones"] = [scaled(m, budget.epochs) for m in c.milestones]
        else:
            out["lr_step"] = scaled(c.lr_step, budget.epochs)
        resolved = create_method(method, **hp).hparams()  # the method's defaults included
        for k in EPOCH_HPARAMS:
            if resolved.get(k):
                changed[k] = scaled(resolved[k], budget.epochs)
    if not budget.trains_as_paper:
        out["eval_every"] = scaled(c.epochs, budget.epochs) if budget.epochs < 1 else c.epochs
    if budget.test < 1:  # as many test examples as are certified
        out["eval_examples"] = scaled(split_size(c.dataset, "test", c.data_dir), budget.test)
    return out


def _train_sizes(spec: TableSpec, budget: Budget, data_dir: Optional[str]) -> Dict[str, Optional[int]]:
    """``--train-subset`` of each dataset under ``budget`` (None: all), from the published sizes,
    so that printing or collecting a plan needs no data."""
    if budget.train >= 1:
        return {d: None for d in spec.datasets}
    return {d: scaled(split_size(d, "train", data_dir), budget.train) for d in spec.datasets}


def plan(spec: TableSpec, budget: Budget, seeds: Sequence[int], out: Path, *, data_dir: Optional[str] = None,
         device: Optional[str] = None) -> List[Step]:
    """Every step of ``spec`` under ``budget`` for ``seeds``, in an order that runs (each step after
    the steps it reads); a run two rows share (the sigma0 Gaussian model) appears once."""
    sizes = _train_sizes(spec, budget, data_dir)
    common = [*(["--data-dir", data_dir] if data_dir else []), *(["--device", device] if device else [])]
    steps: Dict[Path, Step] = {}

    def add(step: Step) -> Path:
        steps.setdefault(step.out, step)
        return step.out

    def train(row: Row, seed: int, targets: Optional[Path] = None) -> Path:
        run = out / "runs" / row.dataset / row.key / f"seed{seed}"
        argv, config = train_run(row.dataset, row.method, row.sigma, row.hparams, budget, seed, run,
                                 sizes[row.dataset], targets, common)
        return add(Step("train", f"train {row.dataset} {row.key} seed {seed}", argv, run / "checkpoint.pt",
                        [targets] if targets else [], 2 if targets else 0, {"config": config}))

    for seed in seeds:
        for row in spec.rows:
            if row.released:
                add(released_certify(row, spec, budget, seed, out, common))
                continue
            targets = None
            if needs_targets(row):
                base = train(Row(row.dataset, "gaussian", SIGMA0, "Gaussian"), seed)
                targets = out / "runs" / row.dataset / f"targets_{SIGMA0:.2f}" / f"seed{seed}.npy"
                argv = ["targets", "--checkpoint", str(base.parent),
                        "--num-samples", str(target_samples(row.dataset, budget)), "--seed", str(seed),
                        *(["--train-subset", str(sizes[row.dataset])] if sizes[row.dataset] else []),
                        *common, "--out", str(targets)]
                add(Step("targets", f"targets {row.dataset} seed {seed}", argv, targets, [base], 1,
                         {"num_samples": target_samples(row.dataset, budget), "train_subset": sizes[row.dataset]}))
            ckpt = train(row, seed, targets)
            p = budget_protocol(spec.protocol(row.dataset), budget)
            tsv = ckpt.parent / "certify.tsv"
            argv = ["certify", "--checkpoint", str(ckpt.parent), "--n0", str(p["n0"]), "--n", str(p["n"]),
                    "--alpha", f"{p['alpha']:g}", "--skip", str(p["skip"]),
                    *(["--max", str(p["max"])] if p.get("max") else []), "--seed", str(seed), *common,
                    "--out", str(tsv)]
            add(Step("certify", f"certify {row.dataset} {row.key} seed {seed}", argv, tsv, [ckpt], 3,
                     {"n0": p["n0"], "n": p["n"], "skip": p["skip"], "max": p.get("max") or None, "start": 0}))
    return sorted(steps.values(), key=lambda s: s.stage)


def released_certify(row: Row, spec: TableSpec, budget: Budget, seed: int, out: Path, common: List[str]) -> Step:
    """The certify step of a released model (``row.released``: no training), its files under OUT/weights."""
    p = budget_protocol(spec.protocol(row.dataset), budget)
    tsv = out / "runs" / row.dataset / row.key / f"seed{seed}" / "certify.tsv"
    flags = [a.replace("{weights}", str(out / "weights")) for a in row.released]
    argv = ["certify", *flags, "--sigma", f"{row.sigma:g}", "--n0", str(p["n0"]), "--n", str(p["n"]),
            "--alpha", f"{p['alpha']:g}", "--skip", str(p["skip"]), *(["--max", str(p["max"])] if p.get("max") else []),
            "--seed", str(seed), *common, "--out", str(tsv)]
    return Step("certify", f"certify {row.dataset} {row.key} seed {seed}", argv, tsv, [], 3,
                {"n0": p["n0"], "n": p["n"], "skip": p["skip"], "max": p.get("max") or None, "start": 0,
                 "dataset": row.dataset, "arch": row.cost_arch})


def done(step: Step) -> bool:
    """Whether ``step``'s output is complete (a finished step run again only checks and returns);
    a damaged checkpoint or sidecar is a one-line error naming it."""
    if not step.out.exists():
        return False
    if step.kind == "train":
        from ..engine.checkpoint import read_checkpoint

        ck = read_checkpoint(step.out)  # its entries' types checked
        epochs = (ck.get("config") or {}).get("epochs")
        return isinstance(epochs, int) and (ck.get("epoch") or 0) >= epochs > 0
    from ..metrics import read_sidecar

    return bool((read_sidecar(step.out) or {}).get("complete"))


def commands(steps: Sequence[Step], folder: Optional[Path] = None) -> str:
    """The steps as shell commands, by stage: the commands of a stage are independent of each
    other and need only the earlier stages (one job each on a cluster scheduler).  With ``folder``,
    also ``folder/stage<k>.txt``, one command per line (line i = array task i)."""
    lines: List[str] = []
    for stage, name in enumerate(STAGES):
        these = [s for s in steps if s.stage == stage]
        if these:
            lines.append(f"# stage {stage + 1} ({name}): {len(these)} independent command(s)")
            lines += [s.command() for s in these]
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write_text(folder / f"stage{stage + 1}.txt", "".join(s.command() + "\n" for s in these))
    return "\n".join(lines)
