"""Paper presets: the hyperparameters each paper used, by ``dataset/method/sigma``.

``rsmooth train --preset fashion-mnist/smoothmix/0.50`` starts from a preset; flags given on
the command line override it.  Each preset names the paper table it reproduces (``source``);
where Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) App. B.2 and Jeong et al.
2023 (CAT-RS, arXiv 2212.09000) App. C.5 disagree, a preset follows the paper whose table it
reproduces and says so in its ``note``.  The presets themselves (one row per dataset x method x
sigma, with their training schedules) and the :class:`Preset` record are in
:mod:`rsmooth.presets_table`, which imports nothing of this module; this module registers them
when it is imported.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .errors import RsmoothError, did_you_mean
from .presets_table import Preset, paper_presets
from .registry import Registry

PRESETS: Registry = Registry("preset")


def add_preset(preset: Preset) -> Preset:
    """Register ``preset`` under its name ``dataset/method/sigma``."""
    PRESETS.register(preset.name)(preset)
    return preset


def preset_name(name: str) -> str:
    """``name`` in the registry's spelling: lower case, sigma with two decimals
    (``Fashion-MNIST/catrs/0.5`` -> ``fashion-mnist/catrs/0.50``); other names unchanged."""
    parts = name.strip().lower().split("/")
    if len(parts) == 3:
        try:
            parts[2] = f"{float(parts[2]):.2f}"
        except ValueError:
            pass
    return "/".join(parts)


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (e.g. ``"mnist/gaussian/0.25"``, or ``0.5`` for ``0.50``); an
    unknown name is an error naming the closest presets (the sigmas of the same dataset and method
    when it has presets)."""
    key = preset_name(name)
    if key in PRESETS:
        return PRESETS.get(key)
    prefix = key.rsplit("/", 1)[0] + "/"
    same = [n for n in PRESETS.names() if n.startswith(prefix)] if key.count("/") == 2 else []
    hint = (f" ({prefix[:-1]} has sigma {', '.join(n.rsplit('/', 1)[1] for n in same)})" if same
            else did_you_mean(key, PRESETS.names()))
    raise RsmoothError(f"unknown preset {name!r}{hint}; 'rsmooth list presets' lists all {len(PRESETS)}")


def preset_config(dataset: str, method: str, sigma: float) -> Tuple[Optional[str], Dict[str, Any]]:
    """(the preset's name, its ``TrainConfig`` fields) for ``dataset/method/sigma``; (None, the
    dataset's defaults) when no paper preset exists (e.g. the built-in digits)."""
    name = f"{dataset}/{method}/{sigma:.2f}"
    if name in PRESETS:
        return name, get_preset(name).train_config()
    return None, {"dataset": dataset, "method": method, "hparams": {"sigma": sigma}}


for _preset in paper_presets():
    add_preset(_preset)
