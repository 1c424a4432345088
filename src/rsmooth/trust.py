"""Which code a file may make rsmooth run: the one gate every loading path goes through.

A checkpoint, run folder, ``.safetensors`` metadata or denoiser run records the architecture that
rebuilds its model.  Building it runs code, so what a file names is used only when it is code the
user already chose:

- a registered name (built in, or added by ``register_model`` in this process), a name of the
  ``rsmooth.models`` entry points of an installed package, a registered denoiser, or the
  ``module:qualname`` a model registered in this process records: no flag needed;
- any other ``package.module:factory``: refused with one line naming it, unless the user names the
  same architecture (``--arch``, ``arch=``) or trusts the file's code (``--trust-code``,
  ``trust_code=True``), as ``trust_remote_code`` does in Hugging Face's libraries.  Even then a
  recorded module is looked for on ``sys.path`` only (:mod:`rsmooth.imports`).

A ``--config`` file counts as the user's own choice (they wrote or picked it); a run folder being
resumed without ``--arch`` counts as a file.  ``arch_kwargs`` are data for an approved factory
(:func:`check_arch_kwargs`), never a way to name another callable.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .errors import RsmoothError

__all__ = ["UntrustedCode", "check_recorded_arch", "check_arch_kwargs"]


class UntrustedCode(RsmoothError):
    """A file names code (a ``module:factory``) that the user has not opted in to run."""

    def __init__(self, arch: str, where: str, *, by_arch: bool = True, hint: str = "") -> None:
        self.arch = arch
        how = (f"pass --arch {arch}{hint} (arch={arch!r} in Python) or --trust-code (trust_code=True)" if by_arch
               else "pass --trust-code (trust_code=True)")
        super().__init__(f"{where} names its architecture {arch}, code that rsmooth does not run because a "
                         f"file names it; if you trust that module, {how}")


def _registered_ref(arch: str) -> bool:
    """Whether ``arch`` is what a model registered in this process records (its factory's
    ``module:qualname``): code this process already chose to run."""
    from .models import MODELS

    return any(MODELS.get(name).ref == arch for name in MODELS.names())


def check_recorded_arch(arch: Any, where: str, *, trust_code: bool, hint: str = "") -> None:
    """Refuse (:class:`UntrustedCode`) the ``module:factory`` architecture that a file (``where``)
    names, unless ``trust_code`` (the user named it too, or passed ``--trust-code``) or it is a
    registered model's; names without ``:`` only reach registries and installed entry points.
    ``hint`` follows ``--arch NAME`` in the advice (e.g. that it takes ``--arch-kwargs``)."""
    if trust_code or not isinstance(arch, str) or ":" not in arch or _registered_ref(arch):
        return
    raise UntrustedCode(arch, where, hint=hint)


_DATA = (type(None), bool, int, float, str)


def _data_problem(value: Any, at: str) -> Optional[str]:
    """Where ``value`` stops being JSON-like data (None, bool, numbers, str, lists, str-keyed dicts)."""
    if isinstance(value, _DATA):
        return None
    if isinstance(value, (list, tuple)):
        return next((p for i, v in enumerate(value) if (p := _data_problem(v, f"{at}[{i}]"))), None)
    if isinstance(value, Mapping):
        bad = next((k for k in value if not isinstance(k, str)), None)
        if bad is not None:
            return f"{at} has the key {bad!r}, not a string"
        return next((p for k, v in value.items() if (p := _data_problem(v, f"{at}[{k!r}]"))), None)
    return f"{at} is not data but a {type(value).__name__} ({value!r:.40})"


def check_arch_kwargs(kwargs: Any, where: str = "arch_kwargs") -> None:
    """``kwargs`` must be None or a JSON object of data: a dict with str keys whose values are
    None, booleans, numbers, strings, lists or such dicts (what a run records and ``--arch-kwargs``
    parses), so that keyword arguments never carry a callable to a factory."""
    if kwargs is None:
        return
    if not isinstance(kwargs, Mapping):
        raise RsmoothError(f"{where} must be a dict of keyword arguments (a JSON object such as "
                           f"{{\"width\": 64}}), got a {type(kwargs).__name__}: {kwargs!r:.60}")
    problem = _data_problem(kwargs, where)
    if problem is not None:
        raise RsmoothError(f"{problem}; {where} must be JSON-like data (null, true/false, numbers, strings, "
                           f"lists and objects with string keys), never code or other objects")
