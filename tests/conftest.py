"""Suite-wide settings and shared checks.

One intra-op thread: the tests run small convolutions, for which a second OpenMP thread gains
little, and on a shared 2-core machine oversubscribed threads made them ~10x slower.
"""
import os
import signal
from pathlib import Path

import pytest
import torch

import rsmooth

from rsmooth.engine import read_checkpoint, train

torch.set_num_threads(1)

QUIET = dict(progress=False, log=lambda s: None)
#: the environment of the tests' rsmooth subprocesses: this tree's rsmooth, one thread as here,
#: one-line errors (no --debug tracebacks)
# (no empty PYTHONPATH entry: Python reads one as the current folder, which rsmooth must not search)
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "RSMOOTH_DEBUG": "",
                  "PYTHONPATH": os.pathsep.join(p for p in [str(Path(rsmooth.__file__).parents[1]),
                                                            os.environ.get("PYTHONPATH", "")] if p)}


def trained_module(method, model, channels: int):
    """What ``method.loss`` trains when called on ``model``: ``model`` itself, or for a denoiser
    method a small DnCNN (no batch norm) in front of ``model``, which becomes its frozen classifier."""
    if not getattr(method, "denoiser", False):
        return model
    from rsmooth.models.dncnn import DnCNN

    method.classifier = model.eval().requires_grad_(False)
    return DnCNN(channels, depth=2, width=8).to(next(model.parameters()).device)


@pytest.fixture
def check_resume(tmp_path):
    """``check_resume(config, reference=None)``: stop a run after epoch 1, resume it, and assert
    its weights and per-epoch losses equal those of ``reference`` (a finished run's folder with
    the same config; trained here when None).  Returns (reference checkpoint, resumed result)."""

    def run(config, reference=None):
        if reference is None:
            reference = tmp_path / "full"
            train(config, reference, **QUIET)
        train(config, tmp_path / "part", stop_after_epoch=1, **QUIET)
        resumed = train(config, tmp_path / "part", resume=True, **QUIET)
        full = read_checkpoint(reference)
        a, b = full["state_dict"], resumed.model.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k].cpu()) for k in a)
        assert [h["loss"] for h in full["history"]] == [h["loss"] for h in resumed.history]
        return full, resumed

    return run


def assert_keywords_are_fields(fn, job_class) -> None:
    """``fn``'s parameters are exactly ``job_class``'s dataclass fields, in order, with the same
    defaults (``fn(**kw)`` is ``job_class(**kw).run()``)."""
    import dataclasses
    import inspect

    params = inspect.signature(fn).parameters
    fields = {f.name: f.default for f in dataclasses.fields(job_class)}
    assert list(params) == list(fields)
    assert {k: (p.default if p.default is not p.empty else dataclasses.MISSING) for k, p in params.items()} == fields


def pytest_configure(config):
    """Ctrl-C raises KeyboardInterrupt in the tests, as in a terminal, even where the suite was
    started in the background of a shell script (which starts it with SIGINT ignored); the
    preemption tests stop training runs with it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config):
    """The versions this run resolved (CI installs the newest into a new virtual environment)."""
    import numpy
    import scipy

    return f"rsmooth tests: torch {torch.__version__}, numpy {numpy.__version__}, scipy {scipy.__version__}"
