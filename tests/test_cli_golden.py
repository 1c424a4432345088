"""``rsmooth --help`` and ``rsmooth SUB --help`` byte for byte as recorded in ``tests/golden/help``.

The recorded texts are the CLI's contract with its users: a refactoring must print them unchanged.
After a deliberate change to a help text, rewrite them in a commit of its own with
``RSMOOTH_REGEN_GOLDEN=1 python -m pytest tests/test_cli_golden.py``.
"""
import os
from pathlib import Path

import pytest

from rsmooth.cli import catalog, main

GOLDEN = Path(__file__).parent / "golden" / "help"
SUBCOMMANDS = ["train", "certify", "predict", "attack", "audit", "merge", "targets", "pipeline", "analyze", "demo",
               "preview-corruptions", "list", "reproduce", "show-preset"]


def _help(argv, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("sub", [None, *SUBCOMMANDS])
def test_help_is_byte_for_byte_the_recorded_one(sub, capsys, monkeypatch):
    text = _help([] if sub is None else [sub], capsys, monkeypatch)
    path = GOLDEN / f"{sub or 'rsmooth'}.txt"
    if os.environ.get("RSMOOTH_REGEN_GOLDEN"):
        path.write_text(text)
        catalog.write()  # what the parser shows without PyTorch (tests/test_startup.py)
    assert text == path.read_text(), f"rsmooth {sub or ''} --help changed; see this module's docstring"


def test_every_subcommand_has_a_recorded_help(capsys, monkeypatch):
    listed = _help([], capsys, monkeypatch).split("positional arguments:")[1].split("options:")[0]
    names = {line.split()[0] for line in listed.splitlines()
             if line.startswith("    ") and not line.startswith("     ")}
    assert names == set(SUBCOMMANDS)
