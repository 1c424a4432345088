"""rsmooth's command line: parse -> config -> API call; every command is a thin call of the API.

The package owns the command line and nothing below it: one module per subcommand, each with
``add_parser(subparsers)`` (its flags) and ``run(args)`` (the API call), the flag groups they share
(:mod:`.flags`), and how a command ends (:mod:`.exits`: one line per error, exit statuses).
:func:`main` only builds the parser from :data:`SUBCOMMANDS`, dispatches, and turns errors and
signals into one line.  A new subcommand is one module plus one entry in :data:`SUBCOMMANDS`
(whose order is that of ``rsmooth --help``).  Building the parser imports no PyTorch: what it
shows of the registries comes from :mod:`.catalog`, and a subcommand imports the rest in ``run``.

Units: sigma and radii are l2 distances in [0, 1] pixel units (images scaled to [0, 1] before
normalisation), as in every randomized-smoothing paper.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from typing import Any, List, Optional

from ..version import __version__
from ..errors import command_line
from ..imports import keep_cwd_off_child_paths
from . import analyze, attack, certify, demo, listing, merge, pipeline, preview, reproduce, show_preset, targets, train
from .exits import explain, flushed_at_exit, show_warning, silence_closed_stdout, stopped
from .flags import UNITS, Parser
from .train import train_config_from_args

__all__ = ["SUBCOMMANDS", "build_parser", "main", "train_config_from_args"]

#: the subcommand modules, in the order ``rsmooth --help`` lists them (certify adds certify and predict)
SUBCOMMANDS = (train, certify, attack, merge, targets, pipeline, analyze, demo, preview, listing, reproduce, show_preset)


def build_parser() -> argparse.ArgumentParser:
    """The ``rsmooth`` parser: the global flags, then each of :data:`SUBCOMMANDS`' parsers."""
    parser = Parser(
        prog="rsmooth", description="Certified robustness by randomized smoothing: train base "
        "classifiers, certify smoothed classifiers (Cohen et al. 2019, arXiv 1902.02918), report ACR "
        "and certified accuracy. " + UNITS)
    parser.add_argument("--version", action="version", version=f"rsmooth {__version__}")
    parser.add_argument("--debug", action="store_true", help="on an error, show the Python traceback "
                        "instead of one line (also RSMOOTH_DEBUG=1); may be given anywhere")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    parser.set_defaults(main=main)  # handed to reproduce, which runs its steps through it (--jobs 1)
    return parser


def _last_line_follows(handle_signals: bool) -> None:
    """The command has stopped and says so in one line: a SIGTERM from now on (torchrun stopping
    the other ranks once one fails, or a second signal) is ignored, so that it cannot cut it."""
    if handle_signals:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


#: main() calls running in this process (``reproduce --jobs 1`` runs each step through main)
_depth = 0


def main(argv: Optional[List[str]] = None) -> int:
    """Run one command and return its exit status.

    0: done (also 141, quietly, when stdout is a pipe closed early, as in ``rsmooth list | head``).
    2: a problem the user fixes (bad input, a full or read-only disk, out of memory),
    told in one line ``rsmooth: error: ...``.  1: an internal error (a bug), also one line;
    ``--debug`` (anywhere in the arguments) or ``RSMOOTH_DEBUG=1`` shows its traceback instead.
    130 (Ctrl-C) and 143 (SIGTERM, what schedulers send before killing a job): the run stops as
    if killed between two units of work (training saves the step in progress, certification keeps
    its whole rows); its line says how to continue (the subcommand's ``rerun_hint``).  A main
    called inside another (a step of ``reproduce``) leaves signals to the outer one, which says
    so once.  Without ``argv`` (the ``rsmooth`` program) the Python processes it starts never put
    the current folder on ``sys.path`` (:func:`rsmooth.imports.keep_cwd_off_child_paths`).
    """
    global _depth
    if argv is None:
        keep_cwd_off_child_paths()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("RSMOOTH_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    from ..progress import line_buffered_stdout

    line_buffered_stdout()  # a SLURM log shows each line when it is printed
    terminated: List[int] = []
    parsed: List[argparse.Namespace] = []  # the arguments, once parsed: how to continue after a stop

    def on_sigterm(signum: int, frame: Any) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt  # unwind exactly as Ctrl-C does

    # before anything imports torch (seconds), so a stop during start-up is handled too
    nested = _depth > 0
    handle_signals = not nested and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_sigterm) if handle_signals else None
    _depth += 1
    try:
        _dispatch(argv, parsed)
    except SystemExit:  # --help, --version and usage errors: their text may meet a closed pipe too
        if flushed_at_exit():
            return 141
        raise
    except KeyboardInterrupt:
        if nested:  # the outer main knows whether it was SIGTERM, and prints the one line
            raise
        _last_line_follows(handle_signals)
        return stopped(bool(terminated), getattr(parsed[0], "rerun_hint", "") if parsed else "")
    except Exception as e:
        if isinstance(e, BrokenPipeError) and silence_closed_stdout():
            return 141  # quietly, as a tool that SIGPIPE ends (128 + 13): 'rsmooth list | head' is no error
        if debug:
            raise
        code, message = explain(e)
        _last_line_follows(handle_signals)
        sys.stderr.write(message + "\n")  # one write: whole under torchrun, before its report
        sys.stderr.flush()
        return code
    finally:
        _depth -= 1
        if handle_signals:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    return 0


def _dispatch(argv: List[str], parsed: List[argparse.Namespace]) -> None:
    """Parse ``argv`` (into ``parsed``) and run its subcommand, warnings shown as one line and
    messages naming flags (:func:`~rsmooth.errors.command_line`)."""
    with warnings.catch_warnings(), command_line():  # restores the default display afterwards
        warnings.showwarning = show_warning
        args = build_parser().parse_args(argv)
        parsed.append(args)
        args.func(args)
        sys.stdout.flush()  # here, so a closed pipe is handled below, not at the interpreter's exit
