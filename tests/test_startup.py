"""How rsmooth starts (issue 37): ``python -m rsmooth`` and rsmooth's child processes import nothing
from the current folder (item 3); ``import rsmooth`` and the commands that need no tensor do not
import PyTorch (item 19)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV
from rsmooth.imports import drop_cwd_when_run, rsmooth_command

ENV = {k: v for k, v in SUBPROCESS_ENV.items() if k != "PYTHONSAFEPATH"}

# ----------------------------------------------------------------------------- item 3: the current folder

#: what each planted module does when imported: leave a marker, overwrite the victim
MARKER = "open({!r}, 'w').close()\nopen({!r}, 'w').write('overwritten')\n"


def _preloaded(tmp_path: Path) -> set:
    """The top-level modules Python itself imports before a ``python -m`` package's first line runs
    (``site``, ``runpy`` and theirs): nothing rsmooth does can keep them from the current folder."""
    probe = tmp_path / "probe"
    (probe / "i37probe").mkdir(parents=True)
    (probe / "i37probe" / "__init__.py").write_text("import sys\nprint(' '.join(sys.modules))\n")
    (probe / "i37probe" / "__main__.py").write_text("")
    env = {**ENV, "PYTHONPATH": str(probe)}
    done = subprocess.run([sys.executable, "-m", "i37probe"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return {m.partition(".")[0] for m in done.stdout.split()}


@pytest.fixture
def planted(tmp_path):
    """A current folder holding a module for every standard-library name Python has not imported
    by then, and for numpy, torch, scipy, PIL and yaml: each, imported, writes a marker file (in
    ``markers``) and overwrites the victim file."""
    cwd, markers = tmp_path / "cwd", tmp_path / "markers"
    cwd.mkdir(), markers.mkdir()
    names = (set(sys.stdlib_module_names) - _preloaded(tmp_path)) | {"numpy", "torch", "scipy", "PIL", "yaml"}
    victim = tmp_path / "victim.txt"
    victim.write_text("unchanged\n")
    for name in names:
        (cwd / f"{name}.py").write_text(MARKER.format(str(markers / name), str(victim)))
    yield cwd
    assert sorted(p.name for p in markers.iterdir()) == []  # no module of the current folder ran
    assert victim.read_text() == "unchanged\n"


def test_i37_python_m_rsmooth_imports_nothing_from_the_current_folder(planted):
    """The tester's typing.py ran on ``python -m rsmooth --version``: rsmooth/__init__ imported it
    before __main__ dropped the folder."""
    for argv, printed in ((["rsmooth", "--version"], "rsmooth 0.1.0\n"),
                          (["rsmooth.cli", "--version"], "rsmooth 0.1.0\n"),
                          (["rsmooth", "list", "corruptions"], "published cifar10-c (severities 1-5)")):
        done = subprocess.run([sys.executable, "-m", *argv], cwd=planted, env=ENV, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and printed in done.stdout, done.stderr


def test_i37_reproduce_jobs_children_import_nothing_from_the_current_folder(planted, tmp_path, monkeypatch):
    """``reproduce --jobs K`` starts each step as its own ``python -m rsmooth`` process."""
    from rsmooth.reproduce.plan import Step
    from rsmooth.reproduce.run import run_steps

    monkeypatch.chdir(planted)
    monkeypatch.setenv("PYTHONPATH", ENV["PYTHONPATH"])  # the children's: this tree's rsmooth
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    steps = [Step("train", f"step {k}", ["--version"], tmp_path / f"out{k}") for k in range(2)]
    lines = []
    run_steps(steps, 2, tmp_path / "logs", log=lines.append)
    assert sum(line.startswith("   done: step") for line in lines) == 2, lines
    assert [p.read_text() for p in sorted((tmp_path / "logs").iterdir())] == ["rsmooth 0.1.0\n"] * 2


def test_i37_child_command_keeps_the_current_folder_off_the_path():
    cmd = rsmooth_command(["list"])
    assert cmd[0] == sys.executable and cmd[-3:] == ["-m", "rsmooth", "list"]
    assert ("-P" in cmd) == (sys.version_info >= (3, 11))


@pytest.mark.parametrize("orig_argv, dropped", [
    (["python", "-m", "rsmooth", "--version"], True),
    (["python", "-u", "-X", "importtime", "-W", "ignore", "-m", "rsmooth.cli", "list"], True),
    (["python", "-Bmrsmooth"], True),
    (["python", "-m", "mytool", "rsmooth"], False),  # another program importing rsmooth keeps its path
    (["python", "-X", "-m", "-m", "rsmooth_extra"], False),
    (["python", "-c", "import rsmooth", "-m", "rsmooth"], False),
    (["python", "script.py", "-m", "rsmooth"], False),
])
def test_i37_only_python_m_rsmooth_drops_the_current_folder(orig_argv, dropped, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", ["-m"])  # while python -m locates its module
    monkeypatch.setattr(sys, "path", [str(tmp_path), "/a"])
    drop_cwd_when_run()
    assert sys.path == (["/a"] if dropped else [str(tmp_path), "/a"])
    monkeypatch.setattr(sys, "argv", ["/x/rsmooth/__main__.py"])  # once located: never
    monkeypatch.setattr(sys, "path", [str(tmp_path), "/a"])
    drop_cwd_when_run()
    assert sys.path == [str(tmp_path), "/a"]


# ----------------------------------------------------------------------------- item 19: no PyTorch to start

GOLDEN = Path(__file__).parent / "golden" / "help"
NO_TENSOR = [["--version"], ["--help"], *([sub, "--help"] for sub in (
    "train", "certify", "predict", "merge", "targets", "pipeline", "analyze", "demo", "preview-corruptions",
    "list", "reproduce", "show-preset")), ["list"], ["list", "corruptions"], ["list", "presets"]]
PROBE = """
import contextlib, io, json, os, sys
os.environ["COLUMNS"] = "100"
import rsmooth
from rsmooth.cli import main
out = {"dir": dir(rsmooth), "all": rsmooth.__all__}
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as text:
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    out[" ".join(argv)] = [code, text.getvalue()]
out["heavy"] = sorted({m.partition(".")[0] for m in sys.modules} & {"torch", "scipy", "matplotlib", "safetensors"})
print(json.dumps(out))
"""


def test_i37_catalog_is_what_the_registries_give():
    """The parser and ``rsmooth list`` read the registries from catalog.json, PyTorch-free."""
    from rsmooth.cli import catalog

    if os.environ.get("RSMOOTH_REGEN_GOLDEN"):
        catalog.write()
    assert catalog.build() == json.loads(catalog.FILE.read_text()), (
        "a registry changed: RSMOOTH_REGEN_GOLDEN=1 python -m pytest tests/test_cli_golden.py rewrites it")
    from rsmooth.models import ENTRY_POINT_GROUP, arch_names

    assert catalog.ENTRY_POINT_GROUP == ENTRY_POINT_GROUP and catalog.architectures() == [
        n for n in arch_names() if not n.startswith("_")]


def test_i37_commands_that_need_no_tensor_do_not_import_torch(capsys):
    """--version, every --help and list (the tester: 6.3 s and 7.0 s, 3.1 s of it importing torch)
    print what they print with the registries read live, without importing PyTorch."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(NO_TENSOR)], env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out.pop("heavy") == []
    import rsmooth

    assert out.pop("all") == rsmooth.__all__ and set(rsmooth.__all__) <= set(out.pop("dir"))
    assert out.pop("--version") == [0, "rsmooth 0.1.0\n"]
    for argv, (code, text) in out.items():
        assert code == 0, argv
        if argv.endswith("--help"):
            name = argv.split()[0] if argv != "--help" else "rsmooth"
            assert text == (GOLDEN / f"{name}.txt").read_text(), argv
        else:
            from rsmooth.cli import main

            assert main(argv.split()) == 0 and capsys.readouterr().out == text, argv


SPAWNS = """
import multiprocessing, sys
from rsmooth.cli import main

if __name__ == "__main__":
    sys.argv = ["rsmooth", "list", "datasets"]
    assert main() == 0
    child = multiprocessing.get_context("spawn").Process(target=print)  # as a DataLoader worker under spawn
    child.start(), child.join()
    sys.exit(child.exitcode)
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11+")
def test_i37_the_rsmooth_program_starts_python_children_without_the_current_folder(planted, tmp_path):
    """A spawned Python child runs ``python -c``, which puts the current folder first again."""
    script = tmp_path / "program.py"  # not in the current folder: the program's own path has no cwd
    script.write_text(SPAWNS)
    done = subprocess.run([sys.executable, str(script)], cwd=planted, env=ENV, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "cifar10" in done.stdout, done.stderr
