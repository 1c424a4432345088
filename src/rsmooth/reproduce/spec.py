"""What ``rsmooth reproduce`` runs: the tables (rows = dataset x method x sigma, the certification
protocol, the published values) and the budgets that scale them down.

Paper tables come from :mod:`rsmooth.report.paper` (published values, protocol per dataset);
every row whose method rsmooth trains is trained from its preset (:mod:`rsmooth.presets`) with
the row's printed hyperparameters, and rows it cannot train as printed (e.g. the released models
of Salman et al. 2019) are listed as not reproduced.  ``rsmooth:digits`` is a table of rsmooth's
own on the built-in data (no published values): what the tests and a first try run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import RsmoothError, check
from ..registry import Registry

#: CERTIFY as in every table of the papers (Cohen, Rosenfeld, Kolter 2019, arXiv 1902.02918, Sec. 3.2)
PAPER_PROTOCOL: Dict[str, Any] = dict(n0=100, n=100_000, alpha=0.001, skip=1, max=None)
#: noises per training image of the CAT-RS consistency targets (Jeong, Kim, Shin 2023, arXiv
#: 2212.09000, App. C.5: N = 10,000; 500 on ImageNet)
TARGET_SAMPLES: Dict[str, int] = {"imagenet": 500}
TARGET_SAMPLES_DEFAULT = 10_000


@dataclass(frozen=True)
class Row:
    """One row of a table: what is trained (``hparams`` on top of the preset) and, when the table
    is a paper's, the published values (:class:`rsmooth.report.paper.PaperRow`)."""

    dataset: str
    method: str
    sigma: float
    label: str  # the row's name as printed ("Gaussian", "Consistency (lambda=20)")
    hparams: Dict[str, Any] = field(default_factory=dict)
    paper: Any = None
    #: a released model certified as it is (no training): its ``rsmooth certify`` flags besides the
    #: protocol's, ``{weights}`` standing for OUT/weights, where the user puts its files
    released: Tuple[str, ...] = ()
    cost_arch: str = ""  # what the cost estimate assumes per forward pass (reproduce/cost.py)

    @property
    def key(self) -> str:
        """The run folder's name: ``consistency_0.25`` (``_lbd20`` etc. for printed hyperparameters)."""
        extra = "".join(f"_{k.replace('_', '')}{_short(v)}" for k, v in sorted(self.hparams.items()))
        return f"{self.method}_{self.sigma:.2f}{extra}"


def _short(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class TableSpec:
    """A table to reproduce: its rows in the printed order, the radii of its accuracy columns,
    and the certification protocol of each dataset (``n0, n, alpha, skip, max``).  ``reference``
    names the table without what it shows (``..., Table 4``), for the title of a selection."""

    id: str
    title: str
    rows: Tuple[Row, ...]
    radii: Tuple[float, ...]
    protocol: Callable[[str], Dict[str, Any]]
    citation: str = ""
    not_reproduced: Tuple[str, ...] = ()  # printed rows rsmooth does not train, with the reason
    published_seeds: int = 1
    acr_only: bool = False
    reference: str = ""

    @property
    def datasets(self) -> List[str]:
        return list(dict.fromkeys(r.dataset for r in self.rows))


TABLES: Registry[Callable[[], TableSpec]] = Registry("table")


def select(spec: TableSpec, methods: Optional[List[str]] = None, sigmas: Optional[List[float]] = None) -> TableSpec:
    """``spec`` with only the rows of ``methods`` and ``sigmas`` (None: all)."""
    def keep(r: Row) -> bool:
        return (methods is None or r.method in methods) and (sigmas is None or any(
            math.isclose(r.sigma, s) for s in sigmas))

    rows = tuple(r for r in spec.rows if keep(r))
    if methods is not None:
        unknown = sorted(set(methods) - {r.method for r in spec.rows})
        check(not unknown, f"{spec.id} has no rows of method {', '.join(unknown)}; its methods: "
              f"{', '.join(dict.fromkeys(r.method for r in spec.rows))}")
    check(rows, f"no row of {spec.id} has one of the methods and sigmas asked for; its sigmas: "
          f"{', '.join(f'{s:g}' for s in sorted({r.sigma for r in spec.rows}))}")
    if len(rows) == len(spec.rows):
        return spec
    return replace(spec, rows=rows, title=_selection_title(spec, rows))


def _selection_title(spec: TableSpec, rows: Tuple[Row, ...]) -> str:
    """``<table>: Gaussian and CAT-RS at sigma 0.25 (fashion-mnist), 2 of its 21 rows (...)``."""
    labels = list(dict.fromkeys(r.label for r in rows))
    named = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
    sigmas = "/".join(f"{s:g}" for s in sorted({r.sigma for r in rows}))
    datasets = ", ".join(dict.fromkeys(r.dataset for r in rows))
    return (f"{spec.reference or spec.id}: {named} at sigma {sigmas} ({datasets}), {len(rows)} of its "
            f"{len(spec.rows)} rows, selected by --methods/--sigmas")


def get_table(table_id: str) -> TableSpec:
    """The :class:`TableSpec` of ``table_id`` (``rsmooth reproduce --list`` shows them)."""
    if table_id not in TABLES:
        raise RsmoothError(f"{table_id}: unknown table; choose one of {', '.join(TABLES.names())} "
                           f"('rsmooth reproduce --list' says what each needs)")
    return TABLES.get(table_id)()


def _paper_spec(table_id: str) -> TableSpec:
    from ..methods import METHODS
    from ..report.paper import PAPER_TABLES, TABLE_INFO, paper_table

    info = TABLE_INFO[table_id]
    rows, skipped = [], []
    for p in paper_table(table_id):
        if p.method in METHODS:
            rows.append(Row(p.dataset, p.method, p.sigma, p.label.split(" sigma=")[0], dict(p.hparams), p))
        else:
            skipped.append(f"{p.row} (sigma {p.sigma:g})")
    radii = sorted({r for p in paper_table(table_id) for r in p.accuracy})
    return TableSpec(table_id, PAPER_TABLES[table_id], tuple(rows), tuple(radii), info.protocol,
                     citation=info.citation, not_reproduced=tuple(skipped), published_seeds=info.seeds,
                     acr_only=info.acr_only, reference=f"{info.citation}, Table {info.number}")


def _register_paper_tables() -> None:
    from ..report.paper import PAPER_TABLES

    for table_id in PAPER_TABLES:
        TABLES.register(table_id)(lambda t=table_id: _paper_spec(t))


@TABLES.register("rsmooth:digits")
def _digits() -> TableSpec:
    """Gaussian, Consistency, SmoothMix and CAT-RS on the built-in digits at sigma 0.25 and 0.5."""
    rows = tuple(Row("digits", m, s, label) for s in (0.25, 0.5) for m, label in (
        ("gaussian", "Gaussian"), ("consistency", "Consistency"), ("smoothmix", "SmoothMix"), ("catrs", "CAT-RS")))
    reference = ("rsmooth's own table on scikit-learn's digits (8x8, 1,437 training and 360 test images; "
                 "no download)")
    return TableSpec("rsmooth:digits", f"{reference}: four training methods at sigma 0.25 and 0.5, no published values",
                     rows, tuple(0.25 * k for k in range(9)), lambda dataset: dict(PAPER_PROTOCOL),
                     reference=reference)


_register_paper_tables()


# ----------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    """Factors on the paper's protocol: ``epochs`` scales every schedule (epochs, lr steps,
    milestones, warm-ups), ``train`` is the fraction of the training set, ``targets`` and ``n``
    scale the consistency-target noises and CERTIFY's n, ``test`` the test examples certified."""

    name: str
    epochs: float = 1.0
    train: float = 1.0
    targets: float = 1.0
    n: float = 1.0
    test: float = 1.0

    @property
    def is_paper(self) -> bool:
        return all(getattr(self, f.name) == 1.0 for f in fields(self) if f.name != "name")

    @property
    def trains_as_paper(self) -> bool:
        """The paper's schedule on the whole training set (other factors aside): its per-epoch
        test log compares with the authors' released logs, so every epoch is evaluated."""
        return self.epochs == 1.0 and self.train == 1.0

    def spec(self) -> str:
        """``small`` or ``small,epochs=0.05``: what ``--budget`` takes to give this budget back."""
        base = BUDGETS.get(self.name.split(",")[0], BUDGETS["paper"])
        diff = [f"{f.name}={_short(getattr(self, f.name))}" for f in fields(self)
                if f.name != "name" and getattr(self, f.name) != getattr(base, f.name)]
        return ",".join([base.name, *diff])


BUDGETS: Dict[str, Budget] = {
    "paper": Budget("paper"),
    "small": Budget("small", epochs=0.1, train=1 / 6, targets=0.1, n=0.1, test=0.1),
    # every step at its least (1 epoch, 120 Fashion-MNIST images, 10 target noises, n = n0, 20 test
    # images): a whole table in minutes on a 2-core CPU (BENCHMARKS.md, "Costs told before they are paid")
    "smoke": Budget("smoke", epochs=1 / 150, train=0.002, targets=0.001, n=0.001, test=0.002),
}
_FACTORS = [f.name for f in fields(Budget) if f.name != "name"]


def parse_budget(text: str) -> Budget:
    """``paper``, ``small``, ``smoke``, or one of them with factors changed: ``small,epochs=0.05,n=0.02``."""
    name, *changes = [t.strip() for t in text.split(",")]
    check(name in BUDGETS, f"--budget {text}: start with one of {', '.join(BUDGETS)}, e.g. small,epochs=0.05")
    values: Dict[str, float] = {}
    for c in changes:
        key, _, value = c.partition("=")
        check(key in _FACTORS, f"--budget {text}: unknown factor {key!r}; use {', '.join(_FACTORS)} (key=value)")
        try:
            v = float(value)
        except ValueError:
            v = math.nan
        check(0 < v <= 1, f"--budget {text}: {key} must be a factor in (0, 1], got {value!r}")
        values[key] = v
    budget = replace(BUDGETS[name], **values)
    return replace(budget, name=budget.spec())


def scaled(value: int, factor: float) -> int:
    """``value * factor`` rounded, at least 1."""
    return max(1, round(value * factor))


def budget_protocol(protocol: Dict[str, Any], budget: Budget) -> Dict[str, Any]:
    """The certification protocol under ``budget``: n scaled (not below n0), every
    ``1/test``-th of the protocol's test examples."""
    p = dict(protocol)
    p["n"] = max(p["n0"], scaled(p["n"], budget.n))
    if budget.test < 1:
        p["skip"] = p["skip"] * max(1, round(1 / budget.test))
        if p.get("max") is not None:
            p["max"] = scaled(p["max"], budget.test)
    return p


def split_size(dataset: str, split: str, data_dir: Optional[str] = None) -> int:
    """Examples in ``split`` (train or test) of ``dataset``: the published release's
    (:attr:`~rsmooth.data.DatasetInfo.sizes`, no data needed), else the copy on disk's."""
    from ..data import dataset_info, get_dataset

    sizes = dataset_info(dataset).sizes
    if sizes is not None:
        return sizes[0 if split == "train" else 1]
    return len(get_dataset(dataset, split, data_dir=data_dir))


def target_samples(dataset: str, budget: Budget) -> int:
    return scaled(TARGET_SAMPLES.get(dataset, TARGET_SAMPLES_DEFAULT), budget.targets)
