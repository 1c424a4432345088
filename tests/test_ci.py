"""CI runs what the README tells a new user to run, in a new virtual environment (issue 20, item 1)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readmes_test_command_in_a_new_virtual_environment():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"Run the tests.*?```bash\n(.*?)\n```", readme, re.S).group(1)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci and command.rstrip().endswith("python -m pytest -n auto --dist loadfile")
    made = next(i for i, line in enumerate(ci) if "-m venv" in line)
    assert made < ci.index(command) and any('. "$venv/bin/activate"' in line for line in ci[made:ci.index(command)])
    assert any("mktemp -d" in line for line in ci) and any("trap 'rm -rf" in line for line in ci)


def test_the_test_extra_installs_the_parallel_runner():
    """The test command's -n/--dist need pytest-xdist >= 3.6 (tests run in each worker's main
    thread there, where the preemption tests' signal handlers can be set)."""
    extra = re.search(r'^test = \[(.*)\]$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert '"pytest-xdist>=3.6"' in extra
