"""The paper presets: the settings behind each baseline row of the papers' tables.

One row per ``dataset x method x sigma`` in :data:`ROWS`; :func:`paper_presets` builds them as
:class:`Preset` records and importing :mod:`rsmooth.presets` registers them all (this module
imports nothing of that one).  Hyperparameters are the method fields (``num_noise`` = m, ``lbd`` =
lambda, ``num_steps`` = T, ``alpha_step`` = SmoothMix's alpha, ``mix_step`` = 1 for SmoothMix's
"one-step adversary"; eps and step sizes in l2 [0,1]-pixel units) and come from Jeong et al.
2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 (MNIST, CIFAR-10) and Jeong et al.
2023 (CAT-RS, arXiv 2212.09000) App. C.5 (MNIST, Fashion-MNIST, CIFAR-10/100), which agree
except where a row's note says otherwise.  ``source`` names the table a preset reproduces, with
the paper's arXiv or OpenReview id, since ``rsmooth show-preset`` shows it on its own.  CAT-RS
presets (:data:`CATRS_ROWS`) use CAT-RS's own schedule on LeNet.

Training schedules (:data:`SCHEDULES`): SGD, momentum 0.9, weight decay 1e-4, batch 256 (MACER
64), no Nesterov (the CAT-RS authors' scripts).  CIFAR-10/100: ResNet-110, lr 0.1, 150 epochs,
x0.1 every 50 (the same scripts); ImageNet: ResNet-50, lr 0.1, 90 epochs, x0.1 every 30.  LeNet
(MNIST, Fashion-MNIST): lr 0.01, **90 epochs, x0.1 every 30** -- the schedule of the models in
the tables, not the 150 / 50 that Jeong et al. 2022 Sec. 4 states (that is CAT-RS's own): the
MNIST baseline rows of Jeong et al. 2023 Table 3 (= Jeong et al. 2022 Table 1) match the 5-seed
means of Jeong et al. 2021 (SmoothMix, arXiv 2111.09277) App. E Tables 4-5, whose models were
trained for 90 epochs with drops at 30 and 60 (Jeong et al. 2021 App. C; every MNIST command of
jh-jeong/smoothmix EXPERIMENTS.MD has ``--lr_step_size 30 --epochs 90``), and the Fashion-MNIST
baseline training logs that the CAT-RS authors released (alinlab/smoothing-catrs
``data/fmnist/*/log.txt``) run 90 epochs with drops after epochs 30 and 60.  Jeong et al. 2021
App. C and Jeong & Shin 2020 (Consistency, arXiv 2006.04062) App. A.1 say Nesterov momentum; the
authors' code (``train_utils.prologue``) uses plain momentum, so the presets do (``--nesterov``
gives the text's).  Pass ``--epochs 150 --lr-step 50`` for the CAT-RS schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Preset:
    """A training recipe: ``TrainConfig`` fields plus the method's hyperparameters."""

    dataset: str
    method: str
    sigma: float
    hparams: Dict[str, Any] = field(default_factory=dict)  # besides sigma
    config: Dict[str, Any] = field(default_factory=dict)  # TrainConfig fields (epochs, lr, ...)
    source: str = ""  # the table it reproduces, e.g. "Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) Table 4"
    note: Optional[str] = None

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.method}/{self.sigma:.2f}"

    def train_config(self) -> Dict[str, Any]:
        """``TrainConfig`` keyword arguments of this preset."""
        return {"dataset": self.dataset, "method": self.method,
                "hparams": {"sigma": self.sigma, **self.hparams}, **self.config}


#: per dataset: architecture, lr and step schedule (see the module docstring)
SCHEDULES: Dict[str, Dict[str, Any]] = {
    "mnist": dict(arch="lenet", lr=0.01, epochs=90, lr_step=30),
    "fashion-mnist": dict(arch="lenet", lr=0.01, epochs=90, lr_step=30),
    "cifar10": dict(arch="cifar_resnet110", lr=0.1, epochs=150, lr_step=50),
    "cifar100": dict(arch="cifar_resnet110", lr=0.1, epochs=150, lr_step=50),
    "imagenet": dict(arch="resnet50", lr=0.1, epochs=90, lr_step=30),
}
#: the papers whose tables the presets reproduce, as ``source`` names them
_CATRS = "Jeong et al. 2023 (CAT-RS, arXiv 2212.09000)"
_CATRS_V1 = "Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o)"
#: every preset: SGD settings of all the authors' scripts
COMMON: Dict[str, Any] = dict(batch_size=256, momentum=0.9, weight_decay=1e-4, nesterov=False)
#: MACER's scripts default to batch 64 (RuntianZ/macer; alinlab/smoothing-catrs train_macer.py)
BATCH_SIZE: Dict[str, int] = {"macer": 64}

#: the table each dataset's presets reproduce
TABLES: Dict[str, str] = {
    "mnist": f"{_CATRS} Table 3",         # = Jeong et al. 2022 Table 1 (same baseline rows)
    "fashion-mnist": f"{_CATRS} Table 4",
    "cifar10": f"{_CATRS_V1} Table 2",    # the published version's CIFAR-10 table is not in Jeong et al. 2023
    "cifar100": f"{_CATRS} Table 5",      # sigma 0.25 and 0.5 only (footnote 8)
    "imagenet": f"{_CATRS} Table 6",      # sigma 1.0; = Jeong et al. 2021 App. G Table 7
}

# Settings shared by rows below (Jeong et al. 2022 App. B.2 / Jeong et al. 2023 App. C.5 unless
# noted):
_SADV_LENET = dict(num_noise=4, num_steps=10, warmup=10, attack="pgd")  # "we fix T = 10 ... eps = 1.0 and m = 4"
_SADV = dict(num_steps=10, warmup=10, attack="pgd")                     # eps, m per sigma
_MACER = dict(num_noise=16, gamma=8.0, beta=16.0)                       # "k = 16, gamma = 8.0, beta = 16.0"
_SMIX_LENET = dict(eta=5.0, alpha_step=1.0, num_noise=4)                # "eta = 5.0, alpha = 1.0, m = 4"
_SMIX_CIFAR = dict(eta=5.0, num_noise=2, num_steps=4)                   # "eta = 5.0, m = 2, T = 4"
_CONS = dict(num_noise=2, eta=0.5)                                      # m = 2 (Jeong & Shin 2020 Sec. 4.1)
_EPS_255 = 255 / 256  # the reference scripts' --epsilon 255 in 1/256 units, which the papers call 1.0

Row = Tuple[str, str, float, Dict[str, Any]]

#: (dataset, method, sigma, hyperparameters besides sigma)
ROWS: List[Row] = [
    # -- MNIST (LeNet): Jeong et al. 2022 App. B.2 = Jeong et al. 2023 App. C.5 --------------------
    ("mnist", "gaussian", 0.25, {}),
    ("mnist", "gaussian", 0.50, {}),
    ("mnist", "gaussian", 1.00, {}),
    ("mnist", "stability", 0.25, dict(gamma=2.0)),          # "gamma = 2 for MNIST"
    ("mnist", "stability", 0.50, dict(gamma=2.0)),
    ("mnist", "stability", 1.00, dict(gamma=2.0)),
    ("mnist", "smoothadv", 0.25, dict(_SADV_LENET, eps=_EPS_255)),
    ("mnist", "smoothadv", 0.50, dict(_SADV_LENET, eps=_EPS_255)),
    ("mnist", "smoothadv", 1.00, dict(_SADV_LENET, eps=_EPS_255)),
    ("mnist", "macer", 0.25, dict(_MACER, lbd=16.0, deferred=True)),   # "lambda = 16.0 when sigma = 0.25, 0.5"
    ("mnist", "macer", 0.50, dict(_MACER, lbd=16.0, deferred=True)),
    ("mnist", "macer", 1.00, dict(_MACER, lbd=6.0, deferred=True)),    # "When sigma = 1.0 ... lambda = 6.0"
    ("mnist", "consistency", 0.25, dict(_CONS, lbd=10.0)),  # "lambda = 10 for sigma = 0.25 and lambda = 5 for other noises"
    ("mnist", "consistency", 0.50, dict(_CONS, lbd=5.0)),
    ("mnist", "consistency", 1.00, dict(_CONS, lbd=5.0)),
    ("mnist", "smoothmix", 0.25, dict(_SMIX_LENET, num_steps=2)),      # "T = 2, 4, 8 ... sigma = 0.25, 0.5, 1.0"
    ("mnist", "smoothmix", 0.50, dict(_SMIX_LENET, num_steps=4)),
    ("mnist", "smoothmix", 1.00, dict(_SMIX_LENET, num_steps=8)),
    # -- Fashion-MNIST (LeNet): Jeong et al. 2023 App. C.5, "MNIST/Fashion-MNIST" settings ---------
    ("fashion-mnist", "gaussian", 0.25, {}),
    ("fashion-mnist", "gaussian", 0.50, {}),
    ("fashion-mnist", "gaussian", 1.00, {}),
    ("fashion-mnist", "stability", 0.25, dict(gamma=2.0)),
    ("fashion-mnist", "stability", 0.50, dict(gamma=2.0)),
    ("fashion-mnist", "stability", 1.00, dict(gamma=2.0)),
    ("fashion-mnist", "smoothadv", 0.25, dict(_SADV_LENET, eps=1.0)),
    ("fashion-mnist", "smoothadv", 0.50, dict(_SADV_LENET, eps=1.0)),
    ("fashion-mnist", "smoothadv", 1.00, dict(_SADV_LENET, eps=1.0)),
    ("fashion-mnist", "macer", 0.25, dict(_MACER, lbd=16.0, deferred=True)),  # MNIST's lambda ...
    ("fashion-mnist", "macer", 0.50, dict(_MACER, lbd=8.0, deferred=True)),   # "... lambda = 8.0 and lambda = 2.0
    ("fashion-mnist", "macer", 1.00, dict(_MACER, lbd=2.0, deferred=True)),   #  for sigma = 0.5 and sigma = 1.0"
    ("fashion-mnist", "consistency", 0.25, dict(_CONS, lbd=10.0)),
    ("fashion-mnist", "consistency", 0.50, dict(_CONS, lbd=5.0)),
    ("fashion-mnist", "consistency", 1.00, dict(_CONS, lbd=5.0)),
    ("fashion-mnist", "smoothmix", 0.25, dict(_SMIX_LENET, num_steps=2)),
    ("fashion-mnist", "smoothmix", 0.50, dict(_SMIX_LENET, num_steps=4)),
    ("fashion-mnist", "smoothmix", 1.00, dict(_SMIX_LENET, num_steps=8)),
    # -- CIFAR-10 (ResNet-110): Jeong et al. 2022 App. B.2 -----------------------------------------
    ("cifar10", "gaussian", 0.25, {}),
    ("cifar10", "gaussian", 0.50, {}),
    ("cifar10", "gaussian", 1.00, {}),
    ("cifar10", "stability", 0.25, dict(gamma=2.0)),        # "gamma = 2 ... sigma = 0.25, 0.5, and gamma = 1 ... 1.0"
    ("cifar10", "stability", 0.50, dict(gamma=2.0)),
    ("cifar10", "stability", 1.00, dict(gamma=1.0)),
    ("cifar10", "smoothadv", 0.25, dict(_SADV, eps=_EPS_255, num_noise=4)),  # "eps = 1.0 and m = 4 for sigma = 0.25,
    ("cifar10", "smoothadv", 0.50, dict(_SADV, eps=2.0, num_noise=2)),       #  and eps = 2.0 and m = 2 for
    ("cifar10", "smoothadv", 1.00, dict(_SADV, eps=2.0, num_noise=2)),       #  sigma = 0.5, 1.0"
    ("cifar10", "macer", 0.25, dict(_MACER, lbd=12.0)),     # "lambda is set to be 12.0 and 4.0 for sigma = 0.25 and 0.5"
    ("cifar10", "macer", 0.50, dict(_MACER, lbd=4.0)),
    ("cifar10", "macer", 1.00, dict(_MACER, lbd=12.0, deferred=True)),  # "lambda = 0 until the first lr decay, 12.0 thereafter"
    ("cifar10", "consistency", 0.25, dict(_CONS, lbd=20.0)),  # "lambda = 20 for sigma = 0.25 and lambda = 10 for other noises"
    ("cifar10", "consistency", 0.50, dict(_CONS, lbd=10.0)),
    ("cifar10", "consistency", 1.00, dict(_CONS, lbd=10.0)),
    ("cifar10", "smoothmix", 0.25, dict(_SMIX_CIFAR, alpha_step=0.5, mix_step=0)),  # "alpha = 0.5, 1.0, 2.0";
    ("cifar10", "smoothmix", 0.50, dict(_SMIX_CIFAR, alpha_step=1.0, mix_step=1)),  # "one-step adversary is used
    ("cifar10", "smoothmix", 1.00, dict(_SMIX_CIFAR, alpha_step=2.0, mix_step=1)),  #  for sigma = 0.5, 1.0"
    # -- CIFAR-100 (ResNet-110): Jeong et al. 2023 App. C.5, "CIFAR-10/100" settings ---------------
    ("cifar100", "gaussian", 0.25, {}),
    ("cifar100", "gaussian", 0.50, {}),
    ("cifar100", "gaussian", 1.00, {}),
    ("cifar100", "stability", 0.25, dict(gamma=2.0)),
    ("cifar100", "stability", 0.50, dict(gamma=2.0)),
    ("cifar100", "stability", 1.00, dict(gamma=1.0)),
    ("cifar100", "smoothadv", 0.25, dict(_SADV, eps=1.0, num_noise=4)),  # "eps = 1.0 and m = 4 for sigma = 0.25,
    ("cifar100", "smoothadv", 0.50, dict(_SADV, eps=1.0, num_noise=8)),  #  eps = 1.0 and m = 8 for sigma = 0.5,
    ("cifar100", "smoothadv", 1.00, dict(_SADV, eps=2.0, num_noise=2)),  #  and eps = 2.0 and m = 2 for sigma = 1.0"
    ("cifar100", "macer", 0.25, dict(_MACER, lbd=12.0)),
    ("cifar100", "macer", 0.50, dict(_MACER, lbd=4.0)),
    ("cifar100", "macer", 1.00, dict(_MACER, lbd=12.0, deferred=True)),
    ("cifar100", "consistency", 0.25, dict(_CONS, lbd=20.0)),
    ("cifar100", "consistency", 0.50, dict(_CONS, lbd=10.0)),
    ("cifar100", "consistency", 1.00, dict(_CONS, lbd=10.0)),
    ("cifar100", "smoothmix", 0.25, dict(_SMIX_CIFAR, alpha_step=0.5, mix_step=0)),
    ("cifar100", "smoothmix", 0.50, dict(_SMIX_CIFAR, alpha_step=1.0, mix_step=1)),
    ("cifar100", "smoothmix", 1.00, dict(_SMIX_CIFAR, alpha_step=2.0, mix_step=1)),
    # -- ImageNet (ResNet-50), sigma 1.0: Jeong et al. 2023 Table 6 ---------------------------------
    # settings from Jeong et al. 2021 and Jeong & Shin 2020
    ("imagenet", "gaussian", 1.00, {}),
    # Jeong & Shin 2020 Sec. 4.3, Table 2 caption; App. A.3 Table 1
    ("imagenet", "consistency", 1.00, dict(num_noise=2, lbd=5.0, eta=0.1)),
    ("imagenet", "smoothadv", 1.00, dict(eps=2.0, num_noise=1, num_steps=1, warmup=10, attack="pgd")),
    ("imagenet", "smoothmix", 1.00, dict(eta=5.0, num_noise=1, num_steps=1, alpha_step=8.0,
                                         mix_step=1, mix_eps=1.0)),  # Jeong et al. 2021 App. G
    # sigma 0.5: Jeong & Shin 2020 Table 2 (lambda 5, eta 0.5)
    ("imagenet", "gaussian", 0.50, {}),
    ("imagenet", "consistency", 0.50, dict(num_noise=2, lbd=5.0, eta=0.5)),
]

#: source override for rows outside the dataset's table
SOURCES: Dict[Tuple[str, float], str] = {
    ("cifar100", 1.00): f"{_CATRS} App. C.5 (Table 5 omits sigma 1.0, footnote 8)",
    ("imagenet", 0.50): "Jeong & Shin 2020 (Consistency, arXiv 2006.04062) Table 2",
}

#: notes, most specific first: (dataset, method, sigma), (dataset, method), (dataset,), (method,)
NOTES: Dict[tuple, str] = {
    # where the papers disagree with each other or with the code that produced the numbers;
    # each note cites with arXiv / OpenReview ids, as ``rsmooth show-preset`` shows it on its own
    ("cifar10", "smoothadv", 0.50): (
        "papers disagree: Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 "
        "(this table) uses eps 2.0, m 2 at sigma 0.5, as the best released model of Salman et al. 2019 "
        "(SmoothAdv, arXiv 1906.04584; Jeong & Shin 2020, Consistency, arXiv 2006.04062, App. A.3 "
        "Table 1: 512/256, m 2); Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) App. C.5 says eps 1.0, "
        "m 8 for CIFAR-10/100 sigma 0.5 (see cifar100/smoothadv/0.50)"),
    ("cifar100", "smoothadv", 0.50): (
        "papers disagree: Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) App. C.5 uses eps 1.0, m 8 at "
        "sigma 0.5 (alinlab/smoothing-catrs EXPERIMENTS.MD: --epsilon 256 --num-noise-vec 8); Jeong et "
        "al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 uses eps 2.0, m 2 for "
        "CIFAR-10 sigma 0.5 (see cifar10/smoothadv/0.50)"),
    ("cifar10", "smoothadv", 0.25): (
        "eps 255/256: the released model of Salman et al. 2019 (SmoothAdv, arXiv 1906.04584; Jeong & "
        "Shin 2020, Consistency, arXiv 2006.04062, App. A.3 Table 1, --epsilon 255 in 1/256 units); "
        "Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 rounds it to 1.0"),
    ("cifar100", "macer", 0.50): (
        "lambda 4.0 as Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) App. C.5 and the certified "
        "checkpoint's path in alinlab/smoothing-catrs EXPERIMENTS.MD (lbd_4.0); that file's training "
        "command says --lbd 6.0"),
    ("mnist", "smoothadv"): (
        "eps 255/256: jh-jeong/smoothmix EXPERIMENTS.MD trains these with --epsilon 255 (1/256 units); "
        "the papers round it to 1.0"),
    ("mnist", "macer"): (
        "deferred (lambda = 0 until the first lr drop) as the released runs (jh-jeong/smoothmix "
        "EXPERIMENTS.MD --deferred); the papers do not mention it"),
    ("fashion-mnist", "macer"): (
        "deferred: the released training logs (alinlab/smoothing-catrs data/fmnist/*/macer/log.txt) "
        "switch lambda on at the first lr drop; the papers do not mention it"),
    ("fashion-mnist", "smoothadv"): (
        "eps 1.0: Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) App. C.5, as the CAT-RS authors' "
        "CIFAR-100 commands (--epsilon 256); their Fashion-MNIST command is not published"),
    ("mnist",): (
        "schedule 90 epochs, x0.1 every 30 (Jeong et al. 2021, SmoothMix, arXiv 2111.09277, App. C; "
        "jh-jeong/smoothmix EXPERIMENTS.MD), which produced these rows; Jeong et al. 2022 (CAT-RS first "
        "version, OpenReview qLqeb9AjD2o) Sec. 4 states 150 / 50 (CAT-RS's own); Jeong et al. 2021 says "
        "Nesterov, the code plain momentum"),
    ("fashion-mnist",): (
        "schedule 90 epochs, x0.1 every 30 as the released baseline training logs (alinlab/smoothing-catrs "
        "data/fmnist/*/log.txt); Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) does not state it (150 / 50 "
        "is CAT-RS's own)"),
    ("cifar10",): (
        "several rows of this table are the original authors' released models (Cohen et al. 2019, arXiv "
        "1902.02918; the best SmoothAdv model of Salman et al. 2019, arXiv 1906.04584, per Jeong & Shin "
        "2020, Consistency, arXiv 2006.04062, App. A.3; MACER, Zhai et al. 2020, arXiv 2001.02378, per "
        "Jeong et al. 2021, SmoothMix, arXiv 2111.09277, App. C.2) trained with their own schedules; the "
        "preset uses the CAT-RS scripts' 150 epochs / step 50"),
    ("imagenet",): (
        "Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) App. C.5 gives no ImageNet baseline settings: the "
        "rows of Table 6 are Jeong et al. 2021 (SmoothMix, arXiv 2111.09277) App. G Table 7 (sigma 1.0), "
        "settings from Jeong et al. 2021 App. G and Jeong & Shin 2020 (Consistency, arXiv 2006.04062; "
        "its App. A.1 trained ImageNet with batch 200)"),
    ("imagenet", "smoothmix"): (
        "Jeong et al. 2021 (SmoothMix, arXiv 2111.09277) App. G: m 1, T 1, alpha 8.0, one-step adversary "
        "projected to eps 1.0; eta not stated for ImageNet (5.0, the common choice of Jeong et al. 2021 "
        "App. F)"),
    ("imagenet", "consistency"): (
        "Jeong & Shin 2020 (Consistency, arXiv 2006.04062): lambda 5, eta 0.1 instead of 0.5 at sigma 1.0 "
        "(Table 2 caption)"),
    ("consistency",): (
        "Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 and Jeong et al. 2023 "
        "(CAT-RS, arXiv 2212.09000) App. C.5 name the consistency weight eta, then set it as lambda, and "
        "the entropy weight gamma: here lbd = consistency weight, eta = entropy weight 0.5 (Jeong & Shin "
        "2020, Consistency, arXiv 2006.04062, eq. 12)"),
}


def _note(dataset: str, method: str, sigma: float) -> Optional[str]:
    keys = [(dataset, method, sigma), (dataset, method), (dataset,), (method,)]
    parts = [NOTES[k] for k in keys if k in NOTES]
    return "; ".join(parts) or None


def build(row: Row) -> Preset:
    """The :class:`Preset` of one row of :data:`ROWS`."""
    dataset, method, sigma, hparams = row
    config = {**COMMON, **SCHEDULES[dataset]}
    config["batch_size"] = BATCH_SIZE.get(method, config["batch_size"])
    return Preset(dataset=dataset, method=method, sigma=sigma, hparams=dict(hparams), config=config,
                  source=SOURCES.get((dataset, sigma), TABLES[dataset]), note=_note(dataset, method, sigma))


# -- CAT-RS (Jeong et al. 2023 App. C.5: published version; Jeong et al. 2022 App. B.2: first version)
#: CAT-RS's own LeNet schedule: 150 epochs, x0.1 every 50 (Jeong et al. 2022 Sec. 4; Jeong et al.
#: 2023 App. C)
CATRS_LENET = dict(arch="lenet", lr=0.01, epochs=150, lr_step=50)
_CAT = dict(num_noise=4, num_steps=4, eps=1.0)  # "we fix M = 4, T = 4, and eps = 1.0"

CATRS_ROWS: List[Tuple[str, str, float, Dict[str, Any], str]] = [
    # (dataset, method, sigma, hyperparameters, table reproduced)
    *[("mnist", "catrs", s, dict(_CAT, lbd=1.0), f"{_CATRS} Table 3") for s in (0.25, 0.50, 1.00)],
    *[("fashion-mnist", "catrs", s, dict(_CAT, lbd=1.0), f"{_CATRS} Table 4") for s in (0.25, 0.50, 1.00)],
    *[("cifar10", "catrs", s, dict(_CAT, lbd=lbd), f"{_CATRS} App. C.5 (its CIFAR-10 table is in the "
       "main text)") for s, lbd in ((0.25, 0.5), (0.50, 1.0), (1.00, 2.0))],
    *[("cifar100", "catrs", s, dict(_CAT, lbd=lbd), f"{_CATRS} Table 5" if s < 1 else
       f"{_CATRS} App. C.5 (Table 5 omits sigma 1.0)")
      for s, lbd in ((0.25, 0.5), (0.50, 1.0), (1.00, 2.0))],
    # ImageNet: lambda 2.0, M 2, T 1, K ~ Bin(M, y_hat_y), eps 2.0 for the last 10 of 90 epochs
    ("imagenet", "catrs", 1.00, dict(num_noise=2, num_steps=1, eps=1.0, lbd=2.0, confidence_mask=True,
                                     eps_double_epoch=80), f"{_CATRS} Table 6"),
    # first version: p0 1/5 and lambda 1.0 (MNIST); lambda 0.5 / 2.0 / 2.0, p0 1/20 / 1/10 / 1/10 (CIFAR-10)
    *[("mnist", "catrs-v1", s, dict(_CAT, lbd=1.0, p0=1 / 5), f"{_CATRS_V1} Table 1")
      for s in (0.25, 0.50, 1.00)],
    *[("cifar10", "catrs-v1", s, dict(_CAT, lbd=lbd, p0=p0), f"{_CATRS_V1} Table 2")
      for s, lbd, p0 in ((0.25, 0.5, 1 / 20), (0.50, 2.0, 1 / 10), (1.00, 2.0, 1 / 10))],
]
#: milestones that, under the default "catrs" lr timing (a milestone m lowers the lr from 0-based
#: epoch m + 1 on), train epochs 0-30 at 0.1, 31-60 at 0.01, 61-84 at 1e-3 and 85-89 at 1e-4
CATRS_IMAGENET_MILESTONES = [30, 60, 84]
NOTES[("imagenet", "catrs")] = (
    "lr 0.1, x0.1 after epochs 30 and 60 and again for the last 5 epochs (0-based 85-89 at 1e-4), as "
    "Jeong, Kim, Shin 2023, Confidence-aware Training of Smoothed Classifiers for Certified Robustness, "
    "arXiv 2212.09000, App. F states; the authors' script drops the lr by hand at epoch 85 but its "
    "scheduler.step(epoch) undoes the drop for epochs 86-89, and their published ImageNet command does "
    "not parse in that script, so the paper's text is followed; eps doubled to 2.0 for the last 10 epochs")


def build_catrs(row: Tuple[str, str, float, Dict[str, Any], str]) -> Preset:
    """The :class:`Preset` of one row of :data:`CATRS_ROWS` (CAT-RS trains 150 / 50 on LeNet)."""
    dataset, method, sigma, hparams, source = row
    config = {**COMMON, **SCHEDULES[dataset]}
    if config["arch"] == "lenet":
        config.update(CATRS_LENET)
    if dataset == "imagenet":
        config["milestones"] = list(CATRS_IMAGENET_MILESTONES)
    note = "; ".join(filter(None, [NOTES.get((dataset, method)), NOTES.get((method,))])) or None
    return Preset(dataset=dataset, method=method, sigma=sigma, hparams=dict(hparams), config=config,
                  source=source, note=note)


#: What Salman et al. 2020 (arXiv 2003.01908) ran, read from the authors' code
#: (microsoft/denoised-smoothing): ``code/train_denoiser.py`` defaults and the run names in
#: ``code/analyze.py``.  ``init`` is where D starts: fresh weights, or the MSE denoiser of the
#: same sigma ("Stab+MSE" in the paper).  The classifier is frozen throughout.
PAPER_HYPERPARAMETERS: Dict[str, Dict[str, Dict[str, Any]]] = {
    "denoise-mse": {
        # cifar_dncnn, defaults of train_denoiser.py: Adam lr 1e-3, wd 1e-4, batch 256,
        # 90 epochs, lr x0.1 every 30 (run name "dncnn/epochs_90")
        "cifar10": dict(denoiser="dncnn", init="fresh", optimizer="adam", lr=1e-3,
                        weight_decay=1e-4, batch_size=256, epochs=90, lr_step=30, lr_gamma=0.1),
        # run name "imagenet_dncnn_5epoch_lr1e-4"; the rest (fresh start included) assumed
        # from the script's defaults, not confirmed in the paper
        "imagenet": dict(denoiser="dncnn", init="fresh", optimizer="adam", lr=1e-4,
                         weight_decay=1e-4, batch_size=256, epochs=5, lr_step=30, lr_gamma=0.1),
    },
    "denoise-stab": {
        # "Stab+MSE": fine-tune the MSE denoiser, grid {adam, sgd} x lr {1e-4, 1e-5}, 20 epochs,
        # best of the grid reported (run names "finetune_smoothness_obj_{adam,sgd}_{1e-4,1e-5}_20epochs").
        # The paper's "Stab" denoisers trained from scratch (Adam then SGD, five settings in its
        # appendix, not read here) are left out.  Adam 1e-5 is rsmooth's pick from the grid (the
        # code does not say which point won); batch size and weight decay are the defaults.
        "cifar10": dict(denoiser="dncnn", init="denoise-mse", optimizer="adam", lr=1e-5,
                        weight_decay=1e-4, batch_size=256, epochs=20, lr_step=30, lr_gamma=0.1),
        # run name "imagenet_smoothness_obj_adam_1e-5_20epochs", labelled Stab+MSE in the plots
        "imagenet": dict(denoiser="dncnn", init="denoise-mse", optimizer="adam", lr=1e-5,
                         weight_decay=1e-4, batch_size=256, epochs=20, lr_step=30, lr_gamma=0.1),
    },
}

#: the noise levels of every table and figure of Salman et al. 2020 (arXiv 2003.01908)
PAPER_SIGMAS = (0.12, 0.25, 0.5, 1.0)

#: denoised smoothing (Salman et al. 2020, arXiv 2003.01908), read from the authors' code (see
#: PAPER_HYPERPARAMETERS): DnCNN trained with Adam in front of a frozen classifier given with
#: --classifier; Stab+MSE fine-tunes the MSE denoiser (--init)
_DENOISE_SOURCE = "Salman et al. 2020 (Denoised Smoothing, arXiv 2003.01908)"


def _denoise_presets() -> List[Preset]:
    presets = []
    for method, per_data in PAPER_HYPERPARAMETERS.items():
        for dataset, hp in per_data.items():
            config = {k: v for k, v in hp.items() if k not in ("denoiser", "init")}
            config.update(arch=hp["denoiser"])
            what = "CIFAR-10 experiments" if dataset == "cifar10" else "ImageNet experiments"
            note = ("needs --classifier CKPT_OR_RUN (the frozen classifier)"
                    + ("; the paper's Stab+MSE starts from the MSE denoiser of the same sigma: "
                       "--init RUN" if hp["init"] == "denoise-mse" else "")
                    + "; settings read from the authors' code (microsoft/denoised-smoothing)")
            for sigma in PAPER_SIGMAS:
                presets.append(Preset(dataset=dataset, method=method, sigma=sigma, hparams={}, config=dict(config),
                                      source=f"{_DENOISE_SOURCE} {what}", note=note))
    return presets


def paper_presets() -> List[Preset]:
    """Every paper preset, in the order :mod:`rsmooth.presets` registers them: :data:`ROWS`, then
    :data:`CATRS_ROWS`, then denoised smoothing's."""
    return [build(row) for row in ROWS] + [build_catrs(row) for row in CATRS_ROWS] + _denoise_presets()
