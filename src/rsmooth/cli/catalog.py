"""What the command line shows before a command runs, without importing PyTorch.

The parser (``choices=``, the method hyperparameter flags, ``--help``) and ``rsmooth list`` need
the registries' names (datasets, architectures, methods, noises), the methods' hyperparameters and two
defaults, whose modules import PyTorch (seconds).  ``catalog.json`` holds them as the built-in
registries give them (private ``_names`` left out); a registry already imported in this process is
read live instead, so one extended in Python is seen whole.  ``tests/test_startup.py`` keeps the
file equal to the registries; ``RSMOOTH_REGEN_GOLDEN=1 python -m pytest tests/test_cli_golden.py``
rewrites it with the golden help files.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

FILE = Path(__file__).with_name("catalog.json")
#: installed packages' architectures (:data:`rsmooth.models.ENTRY_POINT_GROUP`), read without importing them
ENTRY_POINT_GROUP = "rsmooth.models"


def _public(names: List[str]) -> List[str]:
    return [n for n in names if not n.startswith("_")]  # "_name": private (tests)


def _datasets() -> Dict[str, Any]:
    from ..data import DATASETS, DEFAULT_DATASET, published_release

    published = {name: {"severities": list(cls.severities), "corruptions": list(cls.published_corruptions)}
                 for name in _public(DATASETS.names()) if (cls := published_release(name))}
    return {"names": _public(DATASETS.names()), "default": DEFAULT_DATASET, "published": published}


def _methods() -> Dict[str, Any]:
    from ..engine.runconfig import method_flags
    from ..methods import METHODS

    return {"names": _public(METHODS.names()),
            "flags": {flag: _flag(uses) for flag, uses in sorted(method_flags().items())}}


def _architectures() -> Dict[str, Any]:
    from ..models import DENOISERS, MODELS

    return {"names": _public(MODELS.names()), "denoisers": _public(DENOISERS.names())}


def _smoothing() -> Dict[str, Any]:
    from ..smoothing import DEFAULT_BATCH_SIZE
    from ..smoothing.noises import NOISES

    return {"default_batch_size": DEFAULT_BATCH_SIZE, "noises": _public(NOISES.names())}


#: section -> (the module whose import fills it, how it is read from there)
_SECTIONS: Dict[str, Tuple[str, Callable[[], Dict[str, Any]]]] = {
    "datasets": ("rsmooth.data", _datasets), "methods": ("rsmooth.methods", _methods),
    "architectures": ("rsmooth.models", _architectures), "smoothing": ("rsmooth.smoothing", _smoothing)}


def _field_type(f: dataclasses.Field) -> type:
    t = f.type if not isinstance(f.type, str) else {"int": int, "float": float, "bool": bool,
                                                     "str": str}.get(f.type.split("[")[0], str)
    if typing.get_origin(t) is typing.Union:
        t = next(a for a in typing.get_args(t) if a is not type(None))
    return t


def _flag(uses: List[Tuple[str, dataclasses.Field]]) -> Dict[str, Any]:
    """One method hyperparameter flag: its value type, choices, field name, each method's own help
    (``own``) and the help of all, which names each method's own default when they differ."""
    own = {m: f"{f.metadata.get('help', '')} (default: {f.default})" for m, f in uses}
    texts: Dict[str, List[str]] = {}  # one entry per distinct (help, default)
    for m, text in own.items():
        texts.setdefault(text, []).append(m)
    choices = list(dict.fromkeys(c for _, f in uses for c in f.metadata.get("choices", ())))
    return {"type": _field_type(uses[0][1]).__name__, "choices": choices or None, "field": uses[0][1].name,
            "own": own, "help": "; ".join(f"{', '.join(ms)}: {t}" for t, ms in texts.items())}


def build() -> Dict[str, Dict[str, Any]]:
    """The catalogue as the registries give it (imports them: PyTorch)."""
    return {name: read() for name, (_, read) in _SECTIONS.items()}


def write() -> None:
    FILE.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _stored() -> Dict[str, Dict[str, Any]]:
    return json.loads(FILE.read_text(encoding="utf-8"))


def _section(name: str) -> Dict[str, Any]:
    module, read = _SECTIONS[name]
    return read() if module in sys.modules else _stored()[name]


def datasets() -> List[str]:
    return _section("datasets")["names"]


def default_dataset() -> str:
    return _section("datasets")["default"]


def published(name: str) -> Optional[Dict[str, List[Any]]]:
    """A published corrupted dataset's ``severities`` and ``corruptions``; None for other datasets."""
    return _section("datasets")["published"].get(name)


def trainable_datasets() -> List[str]:
    """The datasets one trains on: the published corrupted test sets (cifar10-c, ...) are certified
    on, never trained on."""
    return [n for n in datasets() if not published(n)]


def methods() -> List[str]:
    return _section("methods")["names"]


def method_flags() -> Dict[str, Dict[str, Any]]:
    """``rsmooth train`` flag -> ``type`` (name), ``choices``, ``field``, ``own`` and ``help``
    (:func:`rsmooth.engine.runconfig.method_flags`, as data)."""
    return _section("methods")["flags"]


def architectures() -> List[str]:
    """The built-in architectures and those of installed ``rsmooth.models`` entry points."""
    from importlib.metadata import entry_points

    installed = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(set(_section("architectures")["names"]) | installed)


def denoisers() -> List[str]:
    """The denoiser architectures (``train --arch`` with a denoiser method)."""
    return _section("architectures")["denoisers"]


def default_batch_size() -> int:
    return _section("smoothing")["default_batch_size"]


def noises() -> List[str]:
    """The smoothing noises (``--noise``)."""
    return _section("smoothing")["noises"]
