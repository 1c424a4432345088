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

A ``--config`` file counts as a file too (config files travel like checkpoints), and so does a run
folder being resumed without ``--arch``.  ``arch_kwargs`` are data for an approved factory
(:func:`check_arch_kwargs`, defined in :mod:`rsmooth.jsondata` below the models that call it), never
a way to name another callable.
"""
from __future__ import annotations

from typing import Any

from .errors import RsmoothError
from .jsondata import check_arch_kwargs

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
