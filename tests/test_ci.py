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
    extra = re.search(r'^test = \[(.*?)\]$', (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    assert '"pytest-xdist>=3.6"' in extra


def test_ci_builds_the_documentation_strictly_with_the_readmes_command():
    """The README names the one command that builds the site; .ci/run runs it after the tests, in
    strict mode (mkdocs.yml sets strict too), so a broken link or reference fails CI (issue 27)."""
    readme = (ROOT / "README.md").read_text()
    assert '`pip install -e ".[docs]" && mkdocs build --strict`' in readme
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    tests = next(i for i, line in enumerate(ci) if line.endswith("python -m pytest -n auto --dist loadfile"))
    docs = next(i for i, line in enumerate(ci) if "mkdocs build --strict" in line and not line.startswith("#"))
    assert tests < docs and 'pip install -q -e ".[docs]"' in ci[docs]
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^strict: true$", config, re.M)
    for check in ("omitted_files", "absolute_links", "unrecognized_links", "anchors"):
        assert re.search(rf"^  {check}: warn$", config, re.M), check  # warnings fail a strict build
    extra = re.search(r'^docs = \[(.*)\]$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert all(f'"{name}' in extra for name in ("mkdocs>", "mkdocs-material", "mkdocstrings[python]", "mkdocs-jupyter"))


def test_readme_is_short_and_its_links_point_into_the_site():
    """Under 8 KB (issue 27); every relative link it has names a file that exists."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 8192
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert links and all((ROOT / link).is_file() for link in links), [l for l in links if not (ROOT / l).is_file()]
    assert {"docs/index.md", "docs/api.md", "docs/getting-started.md"} <= set(links)


def test_no_docs_line_starts_a_blockquote_by_accident():
    """A wrapped line beginning with '>=' renders as a quotation (it did in the README's demo text)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    hits = [f"{p.name}: {line}" for p in pages for line in re.sub(r"```.*?```", "", p.read_text(), flags=re.S).splitlines()
            if re.match(r"\s*>=", line)]
    assert not hits, hits
